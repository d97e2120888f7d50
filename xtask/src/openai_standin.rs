//! A local stand-in for OpenAI's `POST /v1/realtime/client_secrets`, for `cargo xtask bench`'s
//! runtime-API part only (moving to `stress/`): the dev stack and the tests use the one in
//! `web/dev/server.cjs`.
//!
//! It answers like the real endpoint in shape only: a `value` of
//! `ek_local_<n>_<random>` (starts with `ek_` as real secrets do, and says
//! plainly that it is local), an `expires_at` of now plus the requested
//! `expires_after.seconds` (600 when absent), and the requested `session`
//! echoed back. Such a secret opens no Realtime session anywhere: it only
//! lets the ephemeral-key function's whole path (limits, idempotency,
//! upstream call, response) be exercised locally.
//!
//! Plain std: one thread blocked in `accept` (so a request is answered at
//! once, which `cargo xtask bench` relies on when it times `POST /session`),
//! woken by a connection of its own when [`StandIn`] stops it; one request
//! per connection (`Connection: close`; hyper's client handles that).

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::http::{content_length, header, read_body, read_headers};
use crate::json::{self, Value};
use crate::util::{self, info, Result};

/// The path the ephemeral-key function calls.
const PATH: &str = "/v1/realtime/client_secrets";
/// Lifetime when the request does not say.
const DEFAULT_EXPIRES_AFTER: u64 = 600;
/// Largest request body read (the real requests are a few hundred bytes).
const MAX_BODY: usize = 64 * 1024;

/// A running stand-in; dropping it stops the server thread.
#[derive(Debug)]
pub struct StandIn {
    /// `http://127.0.0.1:<port>`, the value for `OPENAI_BASE_URL`.
    pub base_url: String,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Starts the stand-in on a free port of 127.0.0.1. With `verbose`, each
/// minted secret is logged (the dev command; tests stay quiet).
pub fn start(verbose: bool) -> Result<StandIn> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let addr = listener.local_addr()?;
    let base_url = format!("http://{addr}");
    let stop = Arc::new(AtomicBool::new(false));
    let minted = Arc::new(AtomicU64::new(0));
    let thread = {
        let stop = stop.clone();
        thread::Builder::new()
            .name("openai-stand-in".into())
            .spawn(move || serve(listener, &stop, &minted, verbose))?
    };
    Ok(StandIn {
        base_url,
        addr,
        stop,
        thread: Some(thread),
    })
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the blocked `accept`; if the connection fails the thread is not waiting there.
        let woke = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1)).is_ok();
        if let Some(thread) = self.thread.take() {
            if woke {
                let _ = thread.join();
            }
        }
    }
}

fn serve(listener: TcpListener, stop: &AtomicBool, minted: &AtomicU64, verbose: bool) {
    loop {
        let accepted = listener.accept();
        if stop.load(Ordering::SeqCst) {
            return;
        }
        match accepted {
            Ok((stream, _)) => {
                if let Err(e) = handle(stream, minted, verbose) {
                    info(format!("openai stand-in: bad request: {e}"));
                }
            }
            Err(_) => thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn handle(stream: TcpStream, minted: &AtomicU64, verbose: bool) -> Result {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let headers = read_headers(&mut reader)?;
    if content_length(&headers).unwrap_or(0) > MAX_BODY {
        return respond(stream, 413, &error_body("request body too large"));
    }
    let body = read_body(&mut reader, &headers, MAX_BODY)?.unwrap_or_default();

    let path = path.split('?').next().unwrap_or("");
    if path != PATH {
        return respond(stream, 404, &error_body("unknown path (local stand-in)"));
    }
    if method != "POST" {
        return respond(stream, 405, &error_body("method not allowed"));
    }
    let has_key = header(&headers, "authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|key| !key.trim().is_empty());
    if !has_key {
        return respond(stream, 401, &error_body("missing API key"));
    }
    let request = json::parse(&String::from_utf8_lossy(&body)).unwrap_or(Value::Null);
    let seconds = request
        .get("expires_after")
        .and_then(|e| e.get("seconds"))
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_EXPIRES_AFTER);
    let n = minted.fetch_add(1, Ordering::SeqCst) + 1;
    let secret = format!("ek_local_{n}_{}", util::random_hex(8)?);
    let answer = json::object([
        ("value", json::string(&secret)),
        (
            "expires_at",
            Value::Number((util::unix_now() + seconds).to_string()),
        ),
        (
            "session",
            request
                .get("session")
                .cloned()
                .unwrap_or_else(|| json::object([])),
        ),
    ]);
    if verbose {
        info(format!(
            "openai stand-in: minted a FAKE client secret ({secret}, {seconds}s)"
        ));
    }
    respond(stream, 200, &json::compact(&answer))
}

/// An error shaped like OpenAI's.
fn error_body(message: &str) -> String {
    json::compact(&json::object([(
        "error",
        json::object([
            ("message", json::string(message)),
            ("type", json::string("invalid_request_error")),
        ]),
    )]))
}

fn respond(mut stream: TcpStream, status: u16, body: &str) -> Result {
    let reason = match status {
        200 => "OK",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        _ => "Error",
    };
    write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mints_fake_secrets_with_the_requested_lifetime() {
        let standin = start(false).unwrap();
        let url = format!("{}{PATH}", standin.base_url);
        let t = Duration::from_secs(5);
        let body = r#"{"expires_after":{"anchor":"created_at","seconds":120},"session":{"type":"realtime","model":"gpt-realtime"}}"#;
        let auth = [("Authorization", "Bearer sk-x")];
        let r = util::request("POST", &url, &auth, Some(body), t).unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        let v = json::parse(&r.body).unwrap();
        assert!(v.str_field("value").unwrap().starts_with("ek_local_1_"));
        let expires = v.get("expires_at").and_then(Value::as_u64).unwrap();
        assert!(expires.abs_diff(util::unix_now() + 120) <= 2);
        assert_eq!(
            v.get("session").and_then(|s| s.str_field("model")),
            Some("gpt-realtime")
        );

        let r = util::request("POST", &url, &[], Some("{}"), t).unwrap();
        assert_eq!(r.status, 401);
        let models = format!("{}/v1/models", standin.base_url);
        let r = util::request("GET", &models, &[], None, t).unwrap();
        assert_eq!(r.status, 404);
    }
}
