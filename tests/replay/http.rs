//! A small async HTTP/1.1 client: one request per connection (`Connection: close`), plain HTTP
//! to the local stack only. A transport failure or a timeout is an outcome of its own
//! ([`Sent::Lost`]): to the simulated bank client it is a lost response.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// An answer, header names lower-cased.
#[derive(Debug, Clone)]
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

    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// What became of one request.
#[derive(Debug, Clone)]
pub enum Sent {
    Answered(Response),
    /// No (complete) answer: connection refused or dropped, timeout, or the client hung up on
    /// purpose.
    Lost(String),
}

/// How a request is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Wait for the answer (up to the timeout).
    Normal,
    /// Write the request, then hang up after a few milliseconds without reading the answer:
    /// a response lost on the way back, for real.
    HangUp(u64),
}

pub struct Request<'a> {
    pub method: &'a str,
    pub url: &'a str,
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
}

pub async fn send(req: &Request<'_>, mode: Mode, limit: Duration) -> Sent {
    match timeout(limit, send_inner(req, mode)).await {
        Ok(Ok(Some(resp))) => Sent::Answered(resp),
        Ok(Ok(None)) => Sent::Lost("hung up on purpose".into()),
        Ok(Err(e)) => Sent::Lost(e.to_string()),
        Err(_) => Sent::Lost(format!("no answer within {limit:?}")),
    }
}

async fn send_inner(req: &Request<'_>, mode: Mode) -> std::io::Result<Option<Response>> {
    let rest = req
        .url
        .strip_prefix("http://")
        .ok_or_else(|| std::io::Error::other("only http:// URLs"))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut stream = TcpStream::connect(authority).await?;
    let mut head = format!(
        "{} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nContent-Length: {}\r\n",
        req.method,
        req.body.len()
    );
    for (name, value) in req.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut raw = head.into_bytes();
    raw.extend_from_slice(req.body);
    stream.write_all(&raw).await?;
    if let Mode::HangUp(ms) = mode {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        return Ok(None);
    }
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).await?;
    parse(&buf).map(Some)
}

fn parse(buf: &[u8]) -> std::io::Result<Response> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let head_end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("connection closed before a complete response head"))?;
    let head = String::from_utf8_lossy(&buf[..head_end]);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("not an HTTP response"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &buf[head_end + 4..];
    let find = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v);
    let body = if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut body = Vec::new();
        let mut pos = 0;
        loop {
            let line_end = rest[pos..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or_else(|| bad("truncated chunk"))?
                + pos;
            let size = std::str::from_utf8(&rest[pos..line_end])
                .ok()
                .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok())
                .ok_or_else(|| bad("bad chunk size"))?;
            pos = line_end + 2;
            if size == 0 {
                break body;
            }
            body.extend_from_slice(
                rest.get(pos..pos + size)
                    .ok_or_else(|| bad("truncated chunk"))?,
            );
            pos += size + 2;
        }
    } else if let Some(len) = find("content-length").and_then(|v| v.parse::<usize>().ok()) {
        rest.get(..len)
            .ok_or_else(|| bad("connection closed before the whole body"))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Response {
        status,
        headers,
        body,
    })
}
