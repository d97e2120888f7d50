//! CORS, answered by the functions themselves, so a page on another origin sees the same thing
//! behind a function URL, an HTTP API or `cargo lambda watch --disable-cors` (none of which
//! adds CORS of its own here). Behind CloudFront the page and the API share one origin and none
//! of this is used.
//!
//! - A preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) from a listed
//!   origin, to a path a route serves, is answered 204 before any guard: no kill-switch read, no
//!   limit layer, no DynamoDB request. A preflight carries no credentials, so it could not be
//!   counted against a client anyway, and it spends nothing. The answer names the route's
//!   methods whatever method was asked for: the browser, not us, refuses one not listed.
//! - Every other response to a request from a listed origin carries
//!   `Access-Control-Allow-Origin: <that origin>` (never `*`) and `Access-Control-Expose-Headers`
//!   for the headers a client acts on (`Retry-After`, `RateLimit`, …): a page must be able to
//!   read the 429's `Retry-After` and the 403's body, not only the 200's.
//! - An origin not listed gets no CORS header at all, and its preflight is routed like any
//!   other `OPTIONS`: 405 with `Allow` (before any guard, so it spends nothing either). The
//!   browser then blocks the page's request.
//! - With CORS configured, every response carries `Vary: Origin`, since whether it carries
//!   `Access-Control-Allow-Origin` depends on the request's `Origin`: a cache must not hand one
//!   origin's answer to another.
//!
//! No `Access-Control-Allow-Credentials`: the API authenticates with `Authorization: Bearer`,
//! which a page sends explicitly, not with cookies, so a page never needs `credentials:
//! 'include'`. Allowed request headers are `Content-Type`, `Idempotency-Key` and
//! `Authorization`; `X-Internal-Token` is not among them on purpose: it belongs to our own
//! services, server to server, and a browser that held it would leak it.
//!
//! Origins are compared exactly, ASCII case-insensitively (scheme and host are; a port is
//! digits): configured entries are normalised at start (lower case, the default port dropped),
//! and a browser sends its origin in that same serialised form.

use http::header::{
    HeaderValue, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE,
    ACCESS_CONTROL_REQUEST_METHOD, ORIGIN, VARY,
};
use http::{HeaderMap, Method, StatusCode};
use lambda_http::{Body, Request, Response};

/// The variable holding the allowed origins.
pub const ORIGINS_VAR: &str = "CORS_ALLOWED_ORIGINS";
/// Request headers a page may send.
pub const ALLOWED_HEADERS: &str = "Content-Type, Idempotency-Key, Authorization";
/// Response headers a page may read beyond the CORS-safelisted ones.
pub const EXPOSED_HEADERS: &str =
    "Retry-After, RateLimit, RateLimit-Policy, Idempotent-Replayed, X-Request-Id";
/// How long a browser may reuse a preflight's answer (10 minutes: short enough that a change
/// of `CORS_ALLOWED_ORIGINS` reaches pages soon, long enough that a page preflights rarely).
pub const MAX_AGE_SECONDS: u32 = 600;

/// The origins allowed to call the API from a browser; empty (the default) turns CORS off.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cors {
    /// Normalised: lower case, without a default port.
    origins: Vec<String>,
}

impl Cors {
    /// Parses `CORS_ALLOWED_ORIGINS`: comma-separated origins (`scheme://host[:port]`, http or
    /// https); empty entries are skipped. The error is the reason, for a `ConfigError`.
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut origins = Vec::new();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let origin = normalise(entry).map_err(|reason| {
                format!("{entry:?} {reason}; expected comma-separated origins such as https://app.example.com")
            })?;
            if !origins.contains(&origin) {
                origins.push(origin);
            }
        }
        Ok(Self { origins })
    }

    /// Whether any origin is listed.
    pub fn is_enabled(&self) -> bool {
        !self.origins.is_empty()
    }

    /// The normalised origins (for logs and tests).
    pub fn origins(&self) -> &[String] {
        &self.origins
    }

    /// The request's `Origin` when it is listed (exactly one `Origin` field), as sent.
    pub fn listed_origin(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        let mut values = headers.get_all(ORIGIN).iter();
        let (value, None) = (values.next()?, values.next()) else {
            return None;
        };
        let text = value.to_str().ok()?;
        self.origins
            .iter()
            .any(|o| o.eq_ignore_ascii_case(text))
            .then(|| value.clone())
    }

    /// The 204 answer to a preflight from the listed `origin` for a route serving `methods`.
    pub fn preflight(&self, origin: HeaderValue, methods: &'static str) -> Response<Body> {
        let mut response = Response::new(Body::Empty);
        *response.status_mut() = StatusCode::NO_CONTENT;
        let headers = response.headers_mut();
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(
            ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(methods),
        );
        headers.insert(
            ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOWED_HEADERS),
        );
        headers.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from(MAX_AGE_SECONDS));
        headers.append(VARY, HeaderValue::from_static("Origin"));
        response
    }

    /// Adds the CORS headers to an ordinary answer: `Vary: Origin` whenever CORS is on, and the
    /// allow and expose headers when the request's origin (`listed`) is listed.
    pub fn decorate(&self, listed: Option<HeaderValue>, response: &mut Response<Body>) {
        if !self.is_enabled() {
            return;
        }
        let headers = response.headers_mut();
        headers.append(VARY, HeaderValue::from_static("Origin"));
        if let Some(origin) = listed {
            headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            headers.insert(
                ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static(EXPOSED_HEADERS),
            );
        }
    }
}

/// Whether `req` is a CORS preflight (`OPTIONS` with `Access-Control-Request-Method`; the
/// `Origin` is checked by [`Cors::listed_origin`]).
pub fn is_preflight(req: &Request) -> bool {
    req.method() == Method::OPTIONS && req.headers().contains_key(ACCESS_CONTROL_REQUEST_METHOD)
}

/// One configured origin in the form a browser serialises it, or why it is not an origin.
fn normalise(entry: &str) -> Result<String, &'static str> {
    if entry.contains('*') {
        return Err("is a wildcard: the API takes credentials (Authorization), so list each origin; `*` is never allowed");
    }
    let (scheme, authority) = entry
        .split_once("://")
        .ok_or("is not an origin (scheme://host[:port])")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "https" => "443",
        "http" => "80",
        _ => return Err("has a scheme other than http or https"),
    };
    if authority.contains(['/', '?', '#']) {
        return Err("has a path, query or fragment (an origin has none, not even a trailing /)");
    }
    if authority.contains('@') {
        return Err("has user information (an origin has none)");
    }
    let authority = authority.to_ascii_lowercase();
    // An IPv6 literal is bracketed; anywhere else a ':' starts the port.
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => {
            let (inside, after) = rest.split_once(']').ok_or("has an unclosed [")?;
            if inside.is_empty() || !inside.bytes().all(|b| b.is_ascii_hexdigit() || b == b':') {
                return Err("has a malformed IPv6 address");
            }
            let port = match after {
                "" => None,
                _ => Some(
                    after
                        .strip_prefix(':')
                        .ok_or("has text after the IPv6 address")?,
                ),
            };
            (&authority[..inside.len() + 2], port)
        }
        None => match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority.as_str(), None),
        },
    };
    let label_ok =
        |l: &str| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !host.starts_with('[') && !host.split('.').all(label_ok) {
        return Err("has a malformed host (letters, digits, - and dots; IDNs in their xn-- form)");
    }
    match port {
        None => Ok(format!("{scheme}://{host}")),
        Some(p) if p == default_port => Ok(format!("{scheme}://{host}")),
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            match p.parse::<u16>() {
                Ok(n) if n > 0 => Ok(format!("{scheme}://{host}:{n}")),
                _ => Err("has a port outside 1-65535"),
            }
        }
        Some(_) => Err("has a malformed port"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_normalised_as_browsers_send_them() {
        let cors = Cors::parse(
            " https://App.Example.com , http://localhost:5173,,https://a.example:443,http://[::1]:8080,http://127.0.0.1:80",
        )
        .unwrap();
        assert_eq!(
            cors.origins(),
            [
                "https://app.example.com",
                "http://localhost:5173",
                "https://a.example",
                "http://[::1]:8080",
                "http://127.0.0.1",
            ]
        );
        assert!(!Cors::parse("").unwrap().is_enabled());
        assert!(!Cors::parse(" , ").unwrap().is_enabled());
    }

    #[test]
    fn anything_but_an_exact_origin_is_refused() {
        for bad in [
            "*",
            "https://*.example.com",
            "https://app.example.com/",
            "https://app.example.com/path",
            "https://app.example.com?x",
            "app.example.com",
            "ftp://app.example.com",
            "null",
            "https://",
            "https://user@app.example.com",
            "https://app..example.com",
            "https://app.example.com:",
            "https://app.example.com:0",
            "https://app.example.com:65536",
            "https://app.example.com:12ab",
            "http://[::1",
            "http://[zz]",
            "http://[::1]x",
            "https://exämple.com",
            "https://a.example, garbage",
        ] {
            let err = Cors::parse(bad).unwrap_err();
            assert!(err.contains("such as https://"), "{bad}: {err}");
        }
        assert!(Cors::parse("*").unwrap_err().contains("never allowed"));
    }

    #[test]
    fn a_listed_origin_matches_case_insensitively_and_is_echoed_as_sent() {
        let cors = Cors::parse("https://app.example.com").unwrap();
        let mut headers = HeaderMap::new();
        assert_eq!(cors.listed_origin(&headers), None);
        headers.insert(ORIGIN, HeaderValue::from_static("https://APP.example.com"));
        assert_eq!(
            cors.listed_origin(&headers).unwrap(),
            "https://APP.example.com"
        );
        for other in [
            "https://app.example.com.evil.test",
            "http://app.example.com",
            "https://app.example.com:8443",
            "null",
        ] {
            headers.insert(ORIGIN, HeaderValue::from_static(other));
            assert_eq!(cors.listed_origin(&headers), None, "{other}");
        }
        // Two Origin fields: not a browser; not listed.
        headers.insert(ORIGIN, HeaderValue::from_static("https://app.example.com"));
        headers.append(ORIGIN, HeaderValue::from_static("https://app.example.com"));
        assert_eq!(cors.listed_origin(&headers), None);
    }

    #[test]
    fn without_origins_nothing_is_added() {
        let mut response = Response::new(Body::Empty);
        Cors::default().decorate(None, &mut response);
        assert!(response.headers().is_empty());
    }
}
