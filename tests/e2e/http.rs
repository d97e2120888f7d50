//! A tiny blocking HTTP/1.1 client over std `TcpStream`: one request per connection, plain HTTP
//! to the local stack only. Blocking keeps the tests free of an async runtime, and lets a `Drop`
//! guard make a request (turning a kill switch back off after a failed assertion).

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// How long a request may take. The first request to a function may wait for cargo-lambda to
/// start it.
const TIMEOUT: Duration = Duration::from_secs(60);

/// An answer, headers lower-cased.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
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
    method: &'static str,
    url: String,
    headers: Vec<(String, String)>,
    body: String,
}

pub fn get(url: impl Into<String>) -> Request {
    Request::new("GET", url)
}

pub fn post(url: impl Into<String>) -> Request {
    Request::new("POST", url)
}

pub fn put(url: impl Into<String>) -> Request {
    Request::new("PUT", url)
}

impl Request {
    fn new(method: &'static str, url: impl Into<String>) -> Self {
        Self {
            method,
            url: url.into(),
            headers: Vec::new(),
            body: String::new(),
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn json(mut self, body: &serde_json::Value) -> Self {
        self.body = body.to_string();
        self.header("Content-Type", "application/json")
    }

    /// Sends it; any transport failure panics with the URL, which is what a test wants.
    pub fn send(self) -> Response {
        let url = self.url.clone();
        let method = self.method;
        self.try_send()
            .unwrap_or_else(|e| panic!("{method} {url} failed: {e} (is the stack running?)"))
    }

    fn try_send(self) -> std::io::Result<Response> {
        let rest = self.url.strip_prefix("http://").ok_or_else(|| {
            std::io::Error::other(format!("only http:// URLs are supported: {}", self.url))
        })?;
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let path = if path.is_empty() { "/" } else { path };
        let addr = authority
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other(format!("cannot resolve {authority}")))?;
        let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT)?;
        stream.set_read_timeout(Some(TIMEOUT))?;
        stream.set_write_timeout(Some(TIMEOUT))?;
        let mut head = format!(
            "{} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.method,
            self.body.len()
        );
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes())?;
        stream.write_all(self.body.as_bytes())?;
        read_response(BufReader::new(stream))
    }
}

fn read_response(mut reader: impl BufRead) -> std::io::Result<Response> {
    let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let mut status_line = String::new();
    reader.read_line(&mut status_line)?;
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(format!("not an HTTP response: {status_line:?}")))?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err(bad("connection closed inside the header".into()));
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let mut body = Vec::new();
    if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| bad(format!("bad chunk size {size:?}")))?;
            if size == 0 {
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            reader.read_exact(&mut body[start..])?;
            let mut crlf = [0u8; 2];
            reader.read_exact(&mut crlf)?;
        }
    } else if let Some(len) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(len, 0);
        reader.read_exact(&mut body)?;
    } else {
        reader.read_to_end(&mut body)?;
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}
