//! Small HTTP helpers shared by the functions: paths, bodies, request ids, JSON responses.

use std::sync::atomic::{AtomicU64, Ordering};

use http::header::{HeaderValue, CONTENT_TYPE};
use http::StatusCode;
use lambda_http::{Body, Request, RequestExt, Response};
use serde::Serialize;

use crate::problem::{set_header, set_ratelimit_headers, ApiError, ClientError, REQUEST_ID_HEADER};
use crate::ratelimit::Admission;

/// The Lambda request id, or a process-unique id when there is no Lambda context (unit tests).
pub fn request_id(req: &Request) -> String {
    static LOCAL: AtomicU64 = AtomicU64::new(0);
    match req.lambda_context_ref() {
        Some(ctx) if !ctx.request_id.is_empty() => ctx.request_id.clone(),
        _ => format!("local-{}", LOCAL.fetch_add(1, Ordering::Relaxed)),
    }
}

/// The path to route on: the raw request path with `base_path` (e.g. `/api`) removed. `None`
/// when the path is outside the base path (a 404).
pub fn route_path<'a>(req: &'a Request, base_path: &str) -> Option<&'a str> {
    let raw = req.raw_http_path();
    let raw = if raw.is_empty() {
        req.uri().path()
    } else {
        raw
    };
    if base_path.is_empty() {
        return Some(raw);
    }
    match raw.strip_prefix(base_path) {
        Some("") => Some("/"),
        Some(rest) if rest.starts_with('/') => Some(rest),
        _ => None,
    }
}

/// The body, refused with 413 when over `limit` bytes.
pub fn body_bytes(req: &Request, limit: usize) -> Result<&[u8], ApiError> {
    let bytes: &[u8] = req.body().as_ref();
    if bytes.len() > limit {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    Ok(bytes)
}

/// A JSON response.
pub fn json_response<T: Serialize>(status: StatusCode, value: &T) -> Response<Body> {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut response = Response::new(Body::Binary(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// Adds what every response carries: `X-Request-Id`, and the `RateLimit` fields of the tightest
/// layer the request passed (an error response that set its own keeps them).
pub fn finish(
    mut response: Response<Body>,
    request_id: &str,
    admission: Option<&Admission>,
) -> Response<Body> {
    let headers = response.headers_mut();
    set_header(headers, REQUEST_ID_HEADER, request_id);
    if let Some(decision) = admission.and_then(Admission::tightest) {
        if !headers.contains_key(crate::problem::RATELIMIT_HEADER) {
            set_ratelimit_headers(headers, decision);
        }
    }
    response
}

/// The response for a result: the value, or the error as problem+json.
pub fn respond<E: ClientError>(
    result: Result<Response<Body>, E>,
    request_id: &str,
    admission: Option<&Admission>,
) -> Response<Body> {
    let response = match result {
        Ok(r) => r,
        Err(e) => e.to_response(request_id),
    };
    finish(response, request_id, admission)
}
