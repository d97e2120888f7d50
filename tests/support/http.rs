//! A blocking HTTP client for tests that talk to a running process (the e2e stack, an example
//! under `cargo lambda watch`): a thin layer over `ureq`'s blocking agent, plain HTTP to local
//! ports only. Blocking keeps the tests free of an async runtime, and lets a `Drop` guard
//! make a request (turning a kill switch back off after a failed assertion).
//!
//! What it adds to `ureq`: every status is an answer, not an error (the tests assert on 4xx), a
//! transport failure panics with the method and URL (which is what a test wants), and the body is
//! read whole so a [`Response`] can be looked at as often as a test likes.

use std::sync::OnceLock;
use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, Method};

/// How long a request may take. The first request to a function may wait for cargo-lambda to
/// start it.
const TIMEOUT: Duration = Duration::from_secs(60);

/// One agent for the test binary. No connection is pooled: each request gets a fresh one, so a
/// connection that `cargo lambda watch` closed while a test slept is never reused.
fn agent() -> &'static ureq::Agent {
    static AGENT: OnceLock<ureq::Agent> = OnceLock::new();
    AGENT.get_or_init(|| {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(TIMEOUT))
            .max_idle_connections(0)
            .max_idle_connections_per_host(0)
            .build()
            .into()
    })
}

/// An answer, read whole.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Response {
    /// The header's value (names are case-insensitive); `None` if absent or not text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "HTTP {} body is not JSON ({e}): {}",
                self.status,
                self.text()
            )
        })
    }
}

/// A request being built.
pub struct Request {
    request: http::request::Builder,
    body: Option<Vec<u8>>,
}

pub fn get(url: impl Into<String>) -> Request {
    Request::new(Method::GET, url)
}

pub fn post(url: impl Into<String>) -> Request {
    Request::new(Method::POST, url)
}

pub fn put(url: impl Into<String>) -> Request {
    Request::new(Method::PUT, url)
}

impl Request {
    fn new(method: Method, url: impl Into<String>) -> Self {
        Self {
            request: http::Request::builder().method(method).uri(url.into()),
            body: None,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.request = self.request.header(name, value);
        self
    }

    /// `body` as it is, with no `Content-Type` of its own (what `curl -d` sends is up to the
    /// caller's headers).
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = Some(body.into());
        self
    }

    pub fn json(mut self, body: &serde_json::Value) -> Self {
        self.body = Some(serde_json::to_vec(body).expect("a JSON value serialises"));
        self.request = self.request.header(CONTENT_TYPE, "application/json");
        self
    }

    /// Sends it; any transport failure panics with the URL, which is what a test wants.
    pub fn send(self) -> Response {
        let (method, url) = match (self.request.method_ref(), self.request.uri_ref()) {
            (Some(method), Some(url)) => (method.clone(), url.to_string()),
            _ => (Method::GET, "(no URL)".to_string()),
        };
        self.try_send()
            .unwrap_or_else(|e| panic!("{method} {url} failed: {e} (is the stack running?)"))
    }

    fn try_send(self) -> Result<Response, ureq::Error> {
        let answer = match self.body {
            Some(body) => agent().run(self.request.body(body)?)?,
            None => agent().run(self.request.body(())?)?,
        };
        let (head, mut body) = answer.into_parts();
        Ok(Response {
            status: head.status.as_u16(),
            headers: head.headers,
            body: body.read_to_vec()?,
        })
    }
}
