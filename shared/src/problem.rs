//! How every error a client can see becomes a response, written once.
//!
//! Each boundary has its own error type (the limiter, the secret store, the kill switch, the
//! client address) and converts into [`ApiError`], the errors any function may answer. Each
//! function adds its own enum for what only it answers (a payments function's
//! `insufficient_funds`, say). All of them implement [`ClientError`]: they say *what* the client
//! is told (an [`Answer`]: status, code, title, detail, `Retry-After`), and
//! [`ClientError::to_response`] here writes *how* (the contract's `application/problem+json`
//! body, RFC 9457, and its headers), so the shape cannot differ between functions.
//!
//! No error's `Display` text ever reaches a response: titles and details are fixed strings
//! chosen in [`ClientError::answer`], or text written for people (the operator's kill-switch
//! message, a validation detail built from our own words). Causes are logged where they are
//! converted, never sent.
//!
//! Each boundary's conversion comes with the feature of its boundary; [`ApiError`] itself is the
//! same whatever the features (cargo unifies features across a build, so a variant that came
//! with a feature would break another crate's exhaustive `match` when a third turned it on).

use http::header::{HeaderName, HeaderValue, ALLOW, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use http::StatusCode;
use lambda_http::{Body, Response};
use serde::Serialize;

use crate::client_addr::ClientAddrError;
#[cfg(feature = "kill-switch")]
use crate::kill_switch::KillSwitchError;
use crate::ratelimit::Decision;
#[cfg(feature = "ratelimit")]
use crate::ratelimit::LimiterError;
use crate::secrets::SecretError;

/// Header with the Lambda request id, on every response.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers-10).
pub const RATELIMIT_POLICY_HEADER: &str = "ratelimit-policy";
/// `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10).
pub const RATELIMIT_HEADER: &str = "ratelimit";

/// The errors any function may answer: the guards' refusals and failures, and the generic
/// ones (bad request, not found, internal).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed; `detail` says how, in our words.
    #[error("bad request: {detail}")]
    BadRequest {
        /// Our description of what is wrong, shown to the client.
        detail: String,
    },
    /// 401 with `WWW-Authenticate: Bearer`: no token, or not a valid one. Which of the two is not
    /// said, so guessing learns nothing.
    #[error("unauthorized")]
    Unauthorized,
    /// 403: the request is not allowed whoever sends it (one that did not come through the CDN
    /// the origin secret vouches for).
    #[error("forbidden")]
    Forbidden,
    /// Kill switch on; `message` is the operator's.
    #[error("service disabled")]
    ServiceDisabled {
        /// The operator's message, shown as `detail`.
        message: String,
    },
    /// 404: no route here; answered before any guard spends a request on it.
    #[error("not found")]
    NotFound,
    /// `allow` lists the methods the path accepts, e.g. `GET, PUT`.
    #[error("method not allowed")]
    MethodNotAllowed {
        /// The `Allow` header's value.
        allow: &'static str,
    },
    /// 413: the body is over the configured limit; refused before it is parsed.
    #[error("payload too large")]
    PayloadTooLarge {
        /// The limit in bytes, told to the client so it can split or shrink.
        limit: usize,
    },
    /// 429: the full layer's decision, for `Retry-After` and the `RateLimit*` headers.
    #[error("rate limited")]
    RateLimited(Decision),
    /// 503: a dependency (DynamoDB, SSM, the kill switch) failed and nothing was done; a
    /// retry after `retry_after` seconds may succeed.
    #[error("temporarily unavailable")]
    Unavailable {
        /// Seconds for `Retry-After`.
        retry_after: u64,
    },
    /// 503 too, but a write may or may not have been applied: the client must retry with the
    /// same idempotency key (which gets it the outcome), never a new one, so the detail says so.
    #[error("outcome unknown")]
    OutcomeUnknown {
        /// Seconds for `Retry-After`.
        retry_after: u64,
    },
    /// The idempotency key was used before with a different canonical body.
    #[error("idempotency key reused")]
    IdempotencyKeyReused,
    /// A request with the same key and body is still being processed.
    #[error("request in progress")]
    RequestInProgress {
        /// Seconds until the other request's lease lapses.
        retry_after: u64,
    },
    /// 500: our own failure. The client learns nothing of its cause; the log does.
    #[error("internal error")]
    Internal,
}

/// The RFC 9457 body.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Problem {
    /// `urn:tollgate:problem:{code}`: the stable identifier clients branch on (`type` in JSON).
    #[serde(rename = "type")]
    pub kind: String,
    /// A short summary, the same for every occurrence of the problem.
    pub title: &'static str,
    /// The HTTP status, repeated in the body for clients that log bodies only.
    pub status: u16,
    /// Text for people, written by us (never an error's `Display`).
    pub detail: String,
    /// The stable snake_case code, for clients that prefer it to the URI.
    pub code: &'static str,
    /// The request's id, also in `X-Request-Id`, so a report can be matched to the logs.
    pub request_id: String,
    /// The `Retry-After` seconds, in the body too for clients that cannot read headers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

/// What a client is told about an error; [`ClientError::to_response`] writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The response's status.
    pub status: StatusCode,
    /// The stable snake_case code; the problem's `type` is `urn:tollgate:problem:{code}`.
    pub code: &'static str,
    /// The problem's `title`: fixed per code.
    pub title: &'static str,
    /// Text for people, written by us.
    pub detail: String,
    /// Seconds for `Retry-After` (and the body's `retry_after`), where one is sent.
    pub retry_after: Option<u64>,
    /// A header some answers need besides those every problem carries.
    pub header: Option<AnswerHeader>,
}

/// Headers only some answers carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerHeader {
    /// 405: the methods the path accepts, e.g. `GET, PUT`.
    Allow(&'static str),
    /// 401: `WWW-Authenticate: Bearer`.
    Bearer,
    /// 429: `RateLimit-Policy` and `RateLimit` of the full layer.
    RateLimit(Decision),
}

impl Answer {
    /// An answer with no `Retry-After` and no extra header.
    pub fn new(
        status: StatusCode,
        code: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            status,
            code,
            title,
            detail: detail.into(),
            retry_after: None,
            header: None,
        }
    }

    /// With `Retry-After`: a whole number of seconds, at least 1.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs.max(1));
        self
    }

    fn with_header(mut self, header: AnswerHeader) -> Self {
        self.header = Some(header);
        self
    }
}

/// An error a client may see: [`ApiError`], and each function's own error enum.
///
/// Implementors only choose the [`Answer`]; the provided methods turn it into the response and
/// are the only code that writes a problem+json body or its headers.
pub trait ClientError {
    /// What the client is told. Never built from the error's `Display` text.
    fn answer(&self) -> Answer;

    /// The shared error this is, if it is one: what the metrics count (a full layer, a kill
    /// switch that is on) is only ever one of those.
    fn as_api_error(&self) -> Option<&ApiError>;

    /// The HTTP status the answer carries.
    fn status(&self) -> StatusCode {
        self.answer().status
    }

    /// The stable snake_case code.
    fn code(&self) -> &'static str {
        self.answer().code
    }

    /// The problem body for `request_id`.
    fn problem(&self, request_id: &str) -> Problem {
        Problem::new(&self.answer(), request_id)
    }

    /// The full response: problem+json body, `X-Request-Id`, and `Retry-After`, `Allow`,
    /// `WWW-Authenticate` and `RateLimit*` where they apply. (`Access-Control-Expose-Headers`
    /// for these is the `cors` module's, added to every answer alike.)
    fn to_response(&self, request_id: &str) -> Response<Body> {
        render(&self.answer(), request_id)
    }
}

impl Problem {
    fn new(answer: &Answer, request_id: &str) -> Self {
        Problem {
            kind: format!("urn:tollgate:problem:{}", answer.code),
            title: answer.title,
            status: answer.status.as_u16(),
            detail: answer.detail.clone(),
            code: answer.code,
            request_id: request_id.to_string(),
            retry_after: answer.retry_after,
        }
    }
}

fn render(answer: &Answer, request_id: &str) -> Response<Body> {
    let problem = Problem::new(answer, request_id);
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    let mut response = Response::new(Body::Binary(body));
    *response.status_mut() = answer.status;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    set_header(headers, REQUEST_ID_HEADER, request_id);
    if let Some(secs) = problem.retry_after {
        headers.insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    match &answer.header {
        Some(AnswerHeader::Allow(allow)) => {
            headers.insert(ALLOW, HeaderValue::from_static(allow));
        }
        Some(AnswerHeader::Bearer) => {
            headers.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        Some(AnswerHeader::RateLimit(d)) => set_ratelimit_headers(headers, d),
        None => {}
    }
    response
}

impl ClientError for ApiError {
    fn as_api_error(&self) -> Option<&ApiError> {
        Some(self)
    }

    fn answer(&self) -> Answer {
        let (status, code, title, detail) = match self {
            ApiError::BadRequest { detail } => (
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "Invalid request",
                detail.clone(),
            ),
            ApiError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "Unauthorized",
                "A valid token is required.".into(),
            ),
            ApiError::Forbidden => (
                StatusCode::FORBIDDEN,
                "forbidden",
                "Forbidden",
                "This request is not allowed.".into(),
            ),
            ApiError::ServiceDisabled { message } => (
                StatusCode::FORBIDDEN,
                "service_disabled",
                "Service disabled",
                message.clone(),
            ),
            ApiError::NotFound => (
                StatusCode::NOT_FOUND,
                "not_found",
                "Not found",
                "No such route.".into(),
            ),
            ApiError::MethodNotAllowed { allow } => (
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "Method not allowed",
                format!("This route accepts {allow}."),
            ),
            ApiError::PayloadTooLarge { limit } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "Payload too large",
                format!("The request body must be at most {limit} bytes."),
            ),
            ApiError::RateLimited(d) => (
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "Too many requests",
                format!(
                    "The {} limit of {} requests per {} seconds is reached. Wait {} seconds; retrying sooner will not help.",
                    d.limit.layer(),
                    d.limit.limit(),
                    d.limit.window_secs(),
                    d.retry_after_secs()
                ),
            ),
            ApiError::Unavailable { retry_after } => (
                StatusCode::SERVICE_UNAVAILABLE,
                "temporarily_unavailable",
                "Temporarily unavailable",
                format!("The service is temporarily unavailable. Retry after {retry_after} seconds."),
            ),
            ApiError::OutcomeUnknown { retry_after } => (
                StatusCode::SERVICE_UNAVAILABLE,
                "temporarily_unavailable",
                "Temporarily unavailable",
                format!("The outcome of this request is unknown: it may or may not have been applied. Retry after {retry_after} seconds with the same Idempotency-Key, never a new one: the retry gets the outcome."),
            ),
            ApiError::IdempotencyKeyReused => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                "Idempotency key reused",
                "This Idempotency-Key was already used with a different request body. Use a new key for a new request.".into(),
            ),
            ApiError::RequestInProgress { retry_after } => (
                StatusCode::CONFLICT,
                "request_in_progress",
                "Request in progress",
                format!("A request with this Idempotency-Key is still being processed. Retry after {retry_after} seconds to get its response."),
            ),
            ApiError::Internal => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "Internal error",
                "Something went wrong on our side. Retry later.".into(),
            ),
        };
        let answer = Answer::new(status, code, title, detail);
        match self {
            ApiError::RateLimited(d) => answer
                .retry_after(d.retry_after_secs())
                .with_header(AnswerHeader::RateLimit(*d)),
            ApiError::Unavailable { retry_after }
            | ApiError::OutcomeUnknown { retry_after }
            | ApiError::RequestInProgress { retry_after } => answer.retry_after(*retry_after),
            ApiError::MethodNotAllowed { allow } => answer.with_header(AnswerHeader::Allow(allow)),
            ApiError::Unauthorized => answer.with_header(AnswerHeader::Bearer),
            _ => answer,
        }
    }
}

/// `impl From<E> for Target` through [`ApiError`] for each `E`, so `?` lifts the library's
/// errors into a function's own error enum (which must be `From<ApiError>`) in one step:
/// `tollgate::lift_api_errors!(OrderError: KeyError, SecretError);`.
#[macro_export]
macro_rules! lift_api_errors {
    ($target:ty: $($error:ty),* $(,)?) => {$(
        impl From<$error> for $target {
            fn from(e: $error) -> Self {
                <$target>::from($crate::ApiError::from(e))
            }
        }
    )*};
}

/// Adds a header, skipping values that are not valid header text.
pub fn set_header(headers: &mut http::HeaderMap, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(HeaderName::from_static(name), v);
    }
}

/// Adds the draft-10 `RateLimit-Policy` and `RateLimit` fields for `decision`.
pub fn set_ratelimit_headers(headers: &mut http::HeaderMap, decision: &Decision) {
    set_header(headers, RATELIMIT_POLICY_HEADER, &decision.policy_header());
    set_header(headers, RATELIMIT_HEADER, &decision.ratelimit_header());
}

impl From<ClientAddrError> for ApiError {
    fn from(e: ClientAddrError) -> Self {
        match e {
            ClientAddrError::UntrustedOrigin => ApiError::Forbidden,
            ClientAddrError::MalformedViewerAddress => ApiError::BadRequest {
                detail: "The client address header is missing or malformed.".into(),
            },
            ClientAddrError::NoPeerAddress => {
                tracing::error!(error = %e, "cannot establish the client address; check CLIENT_IP_SOURCE for this deployment");
                ApiError::Internal
            }
        }
    }
}

#[cfg(feature = "idempotency")]
impl From<crate::idempotency::KeyError> for ApiError {
    fn from(e: crate::idempotency::KeyError) -> Self {
        ApiError::BadRequest {
            detail: e.detail().into(),
        }
    }
}

impl From<crate::json::BodyError> for ApiError {
    fn from(e: crate::json::BodyError) -> Self {
        ApiError::BadRequest {
            detail: e.detail().into(),
        }
    }
}

#[cfg(feature = "kill-switch")]
impl From<KillSwitchError> for ApiError {
    fn from(e: KillSwitchError) -> Self {
        match e {
            KillSwitchError::Disabled { message } => ApiError::ServiceDisabled { message },
            KillSwitchError::Unavailable { retry_after } => ApiError::Unavailable { retry_after },
        }
    }
}

impl From<SecretError> for ApiError {
    fn from(e: SecretError) -> Self {
        match e {
            SecretError::Unavailable { retry_after } => ApiError::Unavailable { retry_after },
            SecretError::Misconfigured => ApiError::Internal,
        }
    }
}

#[cfg(feature = "idempotency")]
impl From<crate::idempotency::IdempotencyError> for ApiError {
    fn from(e: crate::idempotency::IdempotencyError) -> Self {
        tracing::error!(error = %e, source = ?std::error::Error::source(&e), "idempotency store failed");
        ApiError::Unavailable { retry_after: 1 }
    }
}

#[cfg(feature = "idempotency")]
impl From<crate::idempotency::TransactionError> for ApiError {
    fn from(e: crate::idempotency::TransactionError) -> Self {
        use crate::idempotency::TransactionError as E;
        // Logged where it was decided, with its cause.
        match e {
            E::InProgress { retry_after } => ApiError::RequestInProgress { retry_after },
            E::KeyReused => ApiError::IdempotencyKeyReused,
            E::NotCommitted { retry_after } => ApiError::Unavailable { retry_after },
            E::OutcomeUnknown { retry_after } => ApiError::OutcomeUnknown { retry_after },
            E::NotSent => ApiError::Internal,
        }
    }
}

#[cfg(feature = "ratelimit")]
impl From<LimiterError> for ApiError {
    fn from(e: LimiterError) -> Self {
        tracing::error!(error = %e, source = ?std::error::Error::source(&e), "rate-limit store failed; refusing the request");
        ApiError::Unavailable { retry_after: 1 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(resp: &Response<Body>) -> serde_json::Value {
        serde_json::from_slice(resp.body().as_ref()).unwrap()
    }

    #[test]
    fn problem_body_has_every_contract_field() {
        let resp = ApiError::Unavailable { retry_after: 7 }.to_response("req-1");
        assert_eq!(resp.status(), 503);
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
        assert_eq!(resp.headers()["retry-after"], "7");
        assert_eq!(resp.headers()["x-request-id"], "req-1");
        let b = body(&resp);
        assert_eq!(b["code"], "temporarily_unavailable");
        assert_eq!(b["status"], 503);
        assert_eq!(b["retry_after"], 7);
        assert_eq!(b["request_id"], "req-1");
        assert!(b["type"]
            .as_str()
            .unwrap()
            .ends_with("temporarily_unavailable"));
        assert!(b["title"].is_string() && b["detail"].is_string());
    }

    #[test]
    fn retry_after_is_never_zero() {
        let resp = ApiError::Unavailable { retry_after: 0 }.to_response("r");
        assert_eq!(resp.headers()["retry-after"], "1");
    }

    #[test]
    fn method_not_allowed_names_the_methods() {
        let resp = ApiError::MethodNotAllowed { allow: "GET, PUT" }.to_response("r");
        assert_eq!(resp.status(), 405);
        assert_eq!(resp.headers()["allow"], "GET, PUT");
    }
}
