//! The dev stack's front: what a client reaches at the published function URLs
//! (`.dev/stack.json`'s `ephemeral_key_url` and `transfer_url`, `.dev/env`, and the page's
//! `/api` through `web/dev/server.cjs`), forwarding each request to `cargo lambda watch`.
//!
//! It exists for one reason: a request must reach the functions locally as API Gateway's
//! payload 2.0 (a function URL, an HTTP API) presents it, so that a local answer is the
//! deployed answer. AWS joins the values of a repeated header field with commas into one
//! field; `cargo lambda watch` keeps only the first field and drops the rest. Two
//! `Idempotency-Key` fields were therefore one key locally (201, money moved) and a list on AWS
//! (400, nothing moved). The front joins every repeated field ([`join_repeated`]) before
//! cargo-lambda sees the request, and changes nothing else: method, path, query, body and the
//! answer pass through as they are.
//!
//! What it keeps as `cargo lambda watch` has it: every request still comes from 127.0.0.1 (the
//! front connects from there, and cargo-lambda puts that in `requestContext.http.sourceIp`
//! whoever connects), and CORS is still only the functions' own (`--disable-cors`; preflights
//! pass through like any request).
//!
//! Blocking, on threads (a thread per request), with `tiny_http` as the server and the `ureq`
//! xtask already has as the client: no async runtime in xtask (see its `Cargo.toml`).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ureq::config::AutoHeaderValue;

use crate::util::{anyhow, Context, Result};

/// How long one forwarded request may take: Lambda's own longest invocation (15 minutes), so
/// the front never gives up before the function does (cargo-lambda answers its own timeouts).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(900);

/// Fields that describe one hop's connection, not the request: never forwarded (the next hop
/// writes its own). `content-length` is the body's, which the client sets again; `expect` was
/// answered by the front's server already.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "expect",
];

/// The running front. Dropping it stops accepting requests; requests in flight finish.
pub struct Front {
    addr: SocketAddr,
    server: Arc<tiny_http::Server>,
    accept: Option<JoinHandle<()>>,
}

impl Front {
    /// Listens on 127.0.0.1:`port` (0: a free port) and forwards every request to `upstream`
    /// (`http://127.0.0.1:<cargo lambda watch's port>`), path and query unchanged.
    pub fn start(port: u16, upstream: &str) -> Result<Front> {
        let server = tiny_http::Server::http((Ipv4Addr::LOCALHOST, port));
        let server = server.map_err(|e| anyhow!("the front cannot listen on port {port}: {e}"))?;
        let addr = server.server_addr().to_ip();
        let addr = addr.context("the front listens on no IP address")?;
        let server = Arc::new(server);
        let (agent, upstream) = (agent(), upstream.trim_end_matches('/').to_string());
        let requests = server.clone();
        // Ends when `unblock` is called (on drop).
        let accept = Some(std::thread::spawn(move || {
            for request in requests.incoming_requests() {
                let (agent, upstream) = (agent.clone(), upstream.clone());
                std::thread::spawn(move || forward(&agent, &upstream, request));
            }
        }));
        Ok(Front {
            addr,
            server,
            accept,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// The client towards cargo-lambda: every status is an answer to pass on, redirects are the
/// client's to follow, and nothing is added that the client did not send (no `User-Agent`, no
/// `Accept`). No pooled connections: one that cargo-lambda closed while idle is never reused.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(AutoHeaderValue::None)
        .accept(AutoHeaderValue::None)
        .allow_non_standard_methods(true)
        .max_idle_connections(0)
        .max_idle_connections_per_host(0)
        .timeout_global(Some(FORWARD_TIMEOUT))
        .build()
        .into()
}

/// The header fields as payload 2.0 hands them to a function: one field per name (names in
/// lower case, in the order each name first appeared), the values of a repeated field joined
/// with `,` in the order they came. `cookie` is the exception: payload 2.0 moves cookies into
/// the event's `cookies` list, which `lambda_http` joins back into one `cookie` field with `;`.
pub fn join_repeated<'a>(
    fields: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<(String, String)> {
    let mut joined: Vec<(String, String)> = Vec::new();
    for (name, value) in fields {
        let name = name.to_ascii_lowercase();
        match joined.iter_mut().find(|(n, _)| *n == name) {
            Some((_, values)) => {
                values.push_str(if name == "cookie" { "; " } else { "," });
                values.push_str(value);
            }
            None => joined.push((name, value.to_string())),
        }
    }
    joined
}

/// Forwards one request and answers it with cargo-lambda's answer: 502 when cargo-lambda
/// cannot be reached, 504 when it does not answer in time, as API Gateway answers.
fn forward(agent: &ureq::Agent, upstream: &str, mut request: tiny_http::Request) {
    let response = match send(agent, upstream, &mut request) {
        Ok(response) => response,
        Err(ureq::Error::Timeout(_)) => plain(504, r#"{"message":"Endpoint request timed out"}"#),
        Err(_) => plain(502, r#"{"message":"Internal Server Error"}"#),
    };
    // The client may have gone; there is no one left to tell.
    let _ = request.respond(response);
}

type Answer = tiny_http::Response<std::io::Cursor<Vec<u8>>>;

fn send(
    agent: &ureq::Agent,
    upstream: &str,
    request: &mut tiny_http::Request,
) -> std::result::Result<Answer, ureq::Error> {
    let mut body = Vec::new();
    request.as_reader().read_to_end(&mut body)?;
    let fields = request.headers().iter();
    let fields = fields.map(|h| (h.field.as_str().as_str(), h.value.as_str()));
    let builder = ureq::http::Request::builder().method(request.method().as_str());
    let mut builder = builder.uri(format!("{upstream}{}", request.url()));
    for (name, value) in join_repeated(fields) {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            builder = builder.header(name, value);
        }
    }
    let answer = match body.is_empty() {
        true => agent.run(builder.body(())?)?,
        false => agent.run(builder.body(body)?)?,
    };
    let (head, mut body) = answer.into_parts();
    let body = body.with_config().limit(u64::MAX).read_to_vec()?;
    let mut response = tiny_http::Response::from_data(body);
    for (name, value) in &head.headers {
        // tiny_http holds ASCII headers only; a function's headers are.
        let header = tiny_http::Header::from_bytes(name.as_str(), value.as_bytes());
        match header {
            Ok(header) if !HOP_BY_HOP.contains(&name.as_str()) => response.add_header(header),
            _ => {}
        }
    }
    Ok(response.with_status_code(head.status.as_u16()))
}

fn plain(status: u16, body: &str) -> Answer {
    let json = tiny_http::Header::from_bytes("content-type", "application/json");
    let response = tiny_http::Response::from_data(body.as_bytes().to_vec());
    response
        .with_status_code(status)
        .with_header(json.expect("an ASCII header"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Through a real front to a stand-in for cargo-lambda that answers with the header fields
    /// it received, one line each: repeated fields arrive as payload 2.0 joins them (lower
    /// case, in first-seen order, `,` or `; ` for cookies), and the answer (status, repeated
    /// `set-cookie`, body) comes back as it was.
    #[test]
    fn the_front_forwards_joined_fields_and_passes_the_answer_back() {
        let upstream = tiny_http::Server::http((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let upstream_url = format!("http://{}", upstream.server_addr().to_ip().unwrap());
        let echo = std::thread::spawn(move || {
            let mut request = upstream.recv().unwrap();
            let mut body = String::new();
            request.as_reader().read_to_string(&mut body).unwrap();
            let field = |h: &tiny_http::Header| format!("{}: {}", h.field, h.value);
            let mut seen: Vec<String> = request.headers().iter().map(field).collect();
            seen.push(format!("{} {} {body}", request.method(), request.url()));
            let cookie = |v: &str| tiny_http::Header::from_bytes("set-cookie", v).unwrap();
            let response = tiny_http::Response::from_data(seen.join("\n"));
            let response = response
                .with_header(cookie("a=1"))
                .with_header(cookie("b=2"));
            request.respond(response.with_status_code(400)).unwrap();
        });
        let front = Front::start(0, &upstream_url).unwrap();
        let url = format!("{}/lambda-url/transfer/transfers?x=1", front.url());
        let fields = [
            ("Idempotency-Key", "k1"),
            ("Cookie", "a=1"),
            ("idempotency-key", "k2"),
            ("cookie", "b=2"),
            ("X-One", "1"),
        ];
        let mut request = ureq::http::Request::post(url);
        for (name, value) in fields {
            request = request.header(name, value);
        }
        let answer = agent().run(request.body("{}").unwrap()).unwrap();
        let (head, mut body) = answer.into_parts();
        let seen = body.read_to_string().unwrap();
        echo.join().unwrap();
        assert_eq!(head.status, 400);
        let cookies: Vec<_> = head.headers.get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        let lines: Vec<_> = seen.lines().map(str::to_ascii_lowercase).collect();
        // What the client's connection adds (`host`, `content-length`) is not the test's.
        let hop = |l: &&String| l.starts_with("host:") || l.starts_with("content-length:");
        let fields: Vec<_> = lines.iter().filter(|l| !hop(l)).collect();
        let expected = [
            "idempotency-key: k1,k2",
            "cookie: a=1; b=2",
            "x-one: 1",
            "post /lambda-url/transfer/transfers?x=1 {}",
        ];
        assert_eq!(fields, expected, "{seen}");
    }

    #[test]
    fn an_unreachable_upstream_is_a_502() {
        let port = crate::util::free_port().unwrap();
        let front = Front::start(0, &format!("http://127.0.0.1:{port}")).unwrap();
        let answer = crate::util::request("GET", &front.url(), &[], None, FORWARD_TIMEOUT);
        let answer = answer.unwrap();
        assert_eq!(answer.status, 502);
        assert_eq!(answer.content_type, "application/json");
    }
}
