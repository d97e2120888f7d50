//! Lambda HTTP events, built as JSON and parsed by `lambda_http` itself, so tests go through the
//! same request-context parsing as a deployed function.
//!
//! The one event builder of the workspace: the integration tests hand [`HttpEvent::request`] to a
//! handler in process, and the stress harness (`tollgate-stress`) sends [`HttpEvent::to_json`] to
//! function processes through its Lambda runtime API emulator ([`HttpEvent::from_http`] turns an
//! HTTP request into an event, as API Gateway does).

use base64::Engine as _;
use lambda_http::Request;
use serde_json::{json, Map, Value};

/// An HTTP API (payload v2) / function URL event.
#[derive(Debug, Clone)]
pub struct HttpEvent {
    method: String,
    path: String,
    query: String,
    source_ip: String,
    headers: Map<String, Value>,
    body: Option<String>,
    /// `body` is base64 (the request's body was not UTF-8), as API Gateway marks it.
    base64: bool,
    request_id: String,
}

impl HttpEvent {
    pub fn new(method: &str, path: &str) -> Self {
        Self {
            method: method.to_string(),
            path: path.to_string(),
            query: String::new(),
            source_ip: "203.0.113.10".to_string(),
            headers: Map::new(),
            body: None,
            base64: false,
            request_id: "req-test".to_string(),
        }
    }

    /// The event API Gateway would make of `req` arriving from `source_ip`: method, path,
    /// query, every header field and the body (base64 when it is not UTF-8). A repeated field
    /// becomes one, its values joined with `,`, as payload 2.0 joins them (so a function sees
    /// two `Idempotency-Key` fields as one key list, as it does on AWS); `cookie` fields with
    /// `; `, as `lambda_http` joins payload 2.0's `cookies`.
    pub fn from_http<B: AsRef<[u8]>>(req: &http::Request<B>, source_ip: &str) -> Self {
        let mut event = Self::new(req.method().as_str(), req.uri().path())
            .query(req.uri().query().unwrap_or(""))
            .from_ip(source_ip);
        for name in req.headers().keys() {
            let values: Vec<_> = req
                .headers()
                .get_all(name)
                .iter()
                .map(|v| String::from_utf8_lossy(v.as_bytes()))
                .collect();
            let separator = if name == http::header::COOKIE {
                "; "
            } else {
                ","
            };
            event = event.header(name.as_str(), &values.join(separator));
        }
        let body = req.body().as_ref();
        if !body.is_empty() {
            event = match std::str::from_utf8(body) {
                Ok(text) => event.body(text),
                Err(_) => {
                    let mut event =
                        event.body(base64::engine::general_purpose::STANDARD.encode(body));
                    event.base64 = true;
                    event
                }
            };
        }
        event
    }

    /// The request id in the request context (API Gateway's own id for the request).
    pub fn request_id(mut self, id: &str) -> Self {
        self.request_id = id.to_string();
        self
    }

    pub fn get(path: &str) -> Self {
        Self::new("GET", path)
    }

    pub fn post(path: &str) -> Self {
        Self::new("POST", path)
    }

    pub fn put(path: &str) -> Self {
        Self::new("PUT", path)
    }

    /// The peer address the request context reports.
    pub fn from_ip(mut self, ip: &str) -> Self {
        self.source_ip = ip.to_string();
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .insert(name.to_ascii_lowercase(), Value::String(value.to_string()));
        self
    }

    /// Adds one more field `name` (the header sent twice): the event's headers then carry a
    /// list for it, which `lambda_http` turns into two values of one header, as a proxy that
    /// keeps repeated fields apart would hand them over.
    pub fn append_header(mut self, name: &str, value: &str) -> Self {
        let value = Value::String(value.to_string());
        match self.headers.get_mut(&name.to_ascii_lowercase()) {
            Some(Value::Array(values)) => values.push(value),
            Some(first) => *first = Value::Array(vec![first.take(), value]),
            None => {
                self.headers
                    .insert(name.to_ascii_lowercase(), Value::Array(vec![value]));
            }
        }
        self
    }

    pub fn query(mut self, query: &str) -> Self {
        self.query = query.to_string();
        self
    }

    pub fn body(mut self, body: impl Into<String>) -> Self {
        self.body = Some(body.into());
        self
    }

    pub fn json(self, value: &Value) -> Self {
        self.header("content-type", "application/json")
            .body(value.to_string())
    }

    /// The event as API Gateway HTTP API (v2) would send it.
    pub fn to_json(&self) -> Value {
        let mut headers = self.headers.clone();
        headers
            .entry("host")
            .or_insert_with(|| Value::String("abc123.lambda-url.us-east-1.on.aws".into()));
        json!({
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": self.path,
            "rawQueryString": self.query,
            "headers": headers,
            "requestContext": {
                "accountId": "123456789012",
                "apiId": "abc123",
                "domainName": "abc123.lambda-url.us-east-1.on.aws",
                "domainPrefix": "abc123",
                "http": {
                    "method": self.method,
                    "path": self.path,
                    "protocol": "HTTP/1.1",
                    "sourceIp": self.source_ip,
                    "userAgent": "tollgate-tests"
                },
                "requestId": self.request_id,
                "routeKey": "$default",
                "stage": "$default",
                "time": "01/Jan/2026:00:00:01 +0000",
                "timeEpoch": 1767225601000u64
            },
            "body": self.body,
            "isBase64Encoded": self.base64
        })
    }

    /// The parsed request.
    pub fn request(&self) -> Request {
        lambda_http::request::from_str(&self.to_json().to_string()).expect("valid v2 event")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_http::RequestExt;

    /// What API Gateway hands over survives the trip through `lambda_http`'s parser: method,
    /// path, query, a header sent twice as one field holding both values (payload 2.0 joins
    /// them), and a body that is not UTF-8.
    #[test]
    fn from_http_joins_repeated_headers_and_keeps_binary_bodies() {
        let req = http::Request::post("/transfers?dry=1")
            .header("x-forwarded-for", "198.51.100.1")
            .header("x-forwarded-for", "198.51.100.2")
            .header("idempotency-key", "k1")
            .body(vec![0xff, 0x00, 0x41])
            .unwrap();
        let parsed = HttpEvent::from_http(&req, "192.0.2.7").request();
        assert_eq!(parsed.method(), "POST");
        assert_eq!(parsed.uri().path(), "/transfers");
        assert_eq!(parsed.query_string_parameters().first("dry"), Some("1"));
        let xff: Vec<_> = parsed.headers().get_all("x-forwarded-for").iter().collect();
        assert_eq!(xff, ["198.51.100.1,198.51.100.2"]);
        assert_eq!(parsed.headers()["idempotency-key"], "k1");
        assert_eq!(parsed.body().as_ref(), &[0xff, 0x00, 0x41]);
        let json = HttpEvent::from_http(&req, "192.0.2.7").to_json();
        assert_eq!(json["requestContext"]["http"]["sourceIp"], "192.0.2.7");
    }
}
