//! A minimal Lambda runtime API (the `2018-06-01` interface a custom runtime polls), enough to
//! run a function's release binary as Lambda would and time it from outside.
//!
//! Lambda starts the bootstrap process with `AWS_LAMBDA_RUNTIME_API=host:port`; the runtime
//! (here the `lambda_runtime` crate under `lambda_http`) initialises, then loops on
//! `GET /runtime/invocation/next`, which blocks until there is an event, and answers each with
//! `POST /runtime/invocation/{id}/response` (or `/error`). A failed initialisation is reported
//! with `POST /runtime/init/error`.
//!
//! Here every connection gets a thread that parses requests and hands them to the benchmark
//! through a channel ([`RuntimeApi::next`]); a poll waits until the benchmark gives it an event
//! ([`Poll::deliver`]). The instants are taken by those threads as soon as a request is read,
//! so a measured interval holds the function's work, loopback I/O and one thread hand-off, not
//! the benchmark's bookkeeping. Plain std, like the rest of xtask.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::http::{read_body, read_headers};
use crate::util::Result;

const PREFIX: &str = "/2018-06-01/runtime";
/// Largest request body read: a Lambda response payload is at most 6 MB.
const MAX_BODY: usize = 6 * 1024 * 1024;

/// What the function sent.
pub enum Call {
    /// `GET …/invocation/next`: the function waits for an event.
    Poll(Poll),
    /// `POST …/invocation/{id}/response`.
    Response { id: String, body: Vec<u8> },
    /// `POST …/invocation/{id}/error` or `…/init/error` (`id` empty).
    Error { id: String, body: Vec<u8> },
}

/// A waiting `GET …/invocation/next`.
pub struct Poll {
    event: Sender<Vec<u8>>,
    delivered: Receiver<Instant>,
}

impl Poll {
    /// Answers the poll with `event` under `request_id`; returns when the bytes were written.
    pub fn deliver(self, request_id: &str, event: &str) -> Result<Instant> {
        let deadline_ms = crate::util::unix_now() * 1000 + 30_000;
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
             Lambda-Runtime-Aws-Request-Id: {request_id}\r\n\
             Lambda-Runtime-Deadline-Ms: {deadline_ms}\r\n\
             Lambda-Runtime-Invoked-Function-Arn: arn:aws:lambda:us-east-1:123456789012:function:bench\r\n\
             Lambda-Runtime-Trace-Id: Root=1-00000000-000000000000000000000000;Sampled=0\r\n\
             Content-Length: {}\r\n\r\n{event}",
            event.len()
        );
        self.event
            .send(response.into_bytes())
            .map_err(|_| "the function's poll connection is gone")?;
        self.delivered
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| "the event could not be written to the function".into())
    }
}

/// The server; dropping it stops accepting (connection threads end with their connections).
pub struct RuntimeApi {
    /// `127.0.0.1:<port>`, the value for `AWS_LAMBDA_RUNTIME_API`.
    pub address: String,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    calls: Receiver<(Instant, Call)>,
}

impl RuntimeApi {
    pub fn start() -> Result<RuntimeApi> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, calls) = mpsc::channel();
        {
            let stop = stop.clone();
            thread::Builder::new()
                .name("runtime-api".into())
                .spawn(move || {
                    for stream in listener.incoming() {
                        if stop.load(Ordering::SeqCst) {
                            return;
                        }
                        let Ok(stream) = stream else { continue };
                        let tx = tx.clone();
                        let _ = thread::Builder::new()
                            .name("runtime-api-conn".into())
                            .spawn(move || {
                                let _ = serve(stream, &tx);
                            });
                    }
                })?;
        }
        Ok(RuntimeApi {
            address: addr.to_string(),
            addr,
            stop,
            calls,
        })
    }

    /// The next call, with the instant its request was fully read.
    pub fn next(&self, timeout: Duration) -> Result<(Instant, Call)> {
        self.calls.recv_timeout(timeout).map_err(|e| match e {
            RecvTimeoutError::Timeout => format!(
                "the function sent nothing to the runtime API for {}s",
                timeout.as_secs()
            )
            .into(),
            RecvTimeoutError::Disconnected => "the runtime API stopped".into(),
        })
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the blocked `accept`, which then sees `stop`.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

/// Serves one keep-alive connection until the function closes it.
fn serve(stream: TcpStream, tx: &Sender<(Instant, Call)>) -> Result {
    stream.set_nodelay(true)?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        let mut parts = request_line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let headers = read_headers(&mut reader)?;
        let body = read_body(&mut reader, &headers, MAX_BODY)?.unwrap_or_default();
        let read_at = Instant::now();
        let route = path.strip_prefix(PREFIX).unwrap_or("");
        match (method.as_str(), route) {
            ("GET", "/invocation/next") => {
                let (event_tx, event_rx) = mpsc::channel();
                let (delivered_tx, delivered) = mpsc::channel();
                let poll = Poll {
                    event: event_tx,
                    delivered,
                };
                tx.send((read_at, Call::Poll(poll)))
                    .map_err(|_| "the benchmark stopped listening")?;
                // Blocks, as Lambda does, until there is an event.
                let response = event_rx
                    .recv()
                    .map_err(|_| "the benchmark dropped a poll")?;
                writer.write_all(&response)?;
                writer.flush()?;
                let _ = delivered_tx.send(Instant::now());
            }
            ("POST", "/init/error") => {
                tx.send((
                    read_at,
                    Call::Error {
                        id: String::new(),
                        body,
                    },
                ))
                .map_err(|_| "the benchmark stopped listening")?;
                accepted(&mut writer)?;
            }
            ("POST", route) if route.starts_with("/invocation/") => {
                let rest = &route["/invocation/".len()..];
                let (id, kind) = rest.split_once('/').unwrap_or((rest, ""));
                let id = id.to_string();
                let call = match kind {
                    "response" => Call::Response { id, body },
                    "error" => Call::Error { id, body },
                    _ => return not_found(&mut writer),
                };
                tx.send((read_at, call))
                    .map_err(|_| "the benchmark stopped listening")?;
                accepted(&mut writer)?;
            }
            _ => return not_found(&mut writer),
        }
    }
}

fn accepted(writer: &mut TcpStream) -> Result {
    writer.write_all(
        b"HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{\"status\":\"OK\"}\n",
    )?;
    writer.flush()?;
    Ok(())
}

fn not_found(writer: &mut TcpStream) -> Result {
    writer
        .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
    Err("the function called an unknown runtime API route".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// Reads one HTTP response with a `Content-Length` body; returns (head, body).
    fn read_answer(reader: &mut BufReader<TcpStream>) -> (String, String) {
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        let headers = read_headers(reader).unwrap();
        let len: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map(|(_, v)| v.parse().unwrap())
            .unwrap();
        let mut body = vec![0; len];
        reader.read_exact(&mut body).unwrap();
        let head = std::iter::once(status.trim().to_string())
            .chain(headers.iter().map(|(n, v)| format!("{n}: {v}")))
            .collect::<Vec<_>>()
            .join("\n");
        (head, String::from_utf8(body).unwrap())
    }

    /// Plays a runtime on one keep-alive connection: poll, answer, poll again, report an error
    /// with a chunked body; the emulator must hand each step over in order.
    #[test]
    fn serves_a_poll_a_response_and_an_error() {
        let api = RuntimeApi::start().unwrap();
        let address = api.address.clone();
        let runtime = thread::spawn(move || {
            let stream = TcpStream::connect(&address).unwrap();
            let mut writer = stream.try_clone().unwrap();
            let mut reader = BufReader::new(stream);
            let next = "GET /2018-06-01/runtime/invocation/next HTTP/1.1\r\nHost: x\r\n\r\n";
            writer.write_all(next.as_bytes()).unwrap();
            let (head, event) = read_answer(&mut reader);
            let body = format!("{{\"echo\":{event}}}");
            write!(
                writer,
                "POST /2018-06-01/runtime/invocation/req-1/response HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            let (accepted, _) = read_answer(&mut reader);
            writer.write_all(next.as_bytes()).unwrap();
            let (_, second) = read_answer(&mut reader);
            writer
                .write_all(
                    b"POST /2018-06-01/runtime/invocation/req-2/error HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nboom\r\n0\r\n\r\n",
                )
                .unwrap();
            read_answer(&mut reader);
            (head, accepted, second)
        });

        let timeout = Duration::from_secs(10);
        let Ok((_, Call::Poll(poll))) = api.next(timeout) else {
            panic!("expected a poll first");
        };
        poll.deliver("req-1", r#"{"n":1}"#).unwrap();
        match api.next(timeout).unwrap().1 {
            Call::Response { id, body } => {
                assert_eq!(
                    (id.as_str(), body.as_slice()),
                    ("req-1", &br#"{"echo":{"n":1}}"#[..])
                )
            }
            _ => panic!("expected the response"),
        }
        let Ok((_, Call::Poll(poll))) = api.next(timeout) else {
            panic!("expected a second poll");
        };
        poll.deliver("req-2", r#"{"n":2}"#).unwrap();
        match api.next(timeout).unwrap().1 {
            Call::Error { id, body } => {
                assert_eq!((id.as_str(), body.as_slice()), ("req-2", &b"boom"[..]))
            }
            _ => panic!("expected the error"),
        }
        let (head, accepted, second) = runtime.join().unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(
            head.contains("lambda-runtime-aws-request-id: req-1"),
            "{head}"
        );
        assert!(head.contains("lambda-runtime-deadline-ms: "), "{head}");
        assert!(accepted.starts_with("HTTP/1.1 202"), "{accepted}");
        assert_eq!(second, r#"{"n":2}"#);
    }
}
