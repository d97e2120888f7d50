//! Every error a client can see, and the one place that turns it into a response.
//!
//! Each boundary has its own error type (the limiter, the secret store, the kill switch, the
//! client address). They convert into [`ApiError`], and [`ApiError::to_response`] renders the
//! contract's `application/problem+json` body (RFC 9457). No error's `Display` text ever reaches
//! a response: titles and details are fixed strings chosen here, or text written for people (the
//! operator's kill-switch message, a validation detail built from our own words). Causes are
//! logged where they are converted, never sent.

use http::header::{HeaderName, HeaderValue, ALLOW, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use http::StatusCode;
use lambda_http::{Body, Response};
use serde::Serialize;

use crate::client_addr::ClientAddrError;
use crate::kill_switch::KillSwitchError;
use crate::ratelimit::{Decision, LimiterError};
use crate::secrets::SecretError;

/// Header with the Lambda request id, on every response.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers-10).
pub const RATELIMIT_POLICY_HEADER: &str = "ratelimit-policy";
/// `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10).
pub const RATELIMIT_HEADER: &str = "ratelimit";

/// An error as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed; `detail` says how, in our words.
    #[error("bad request: {detail}")]
    BadRequest { detail: String },
    #[error("unauthorized")]
    Unauthorized,
    #[error("forbidden")]
    Forbidden,
    /// Kill switch on; `message` is the operator's.
    #[error("service disabled")]
    ServiceDisabled { message: String },
    #[error("not found")]
    NotFound,
    /// `allow` lists the methods the path accepts, e.g. `GET, PUT`.
    #[error("method not allowed")]
    MethodNotAllowed { allow: &'static str },
    #[error("payload too large")]
    PayloadTooLarge { limit: usize },
    #[error("rate limited")]
    RateLimited(Decision),
    #[error("temporarily unavailable")]
    Unavailable { retry_after: u64 },
    /// A write may or may not have been applied and the store cannot say which: the client must
    /// retry with the same idempotency key (which gets it the outcome), never a new one.
    #[error("outcome unknown")]
    OutcomeUnknown { retry_after: u64 },
    #[error("account not found")]
    AccountNotFound,
    #[error("transfer not found")]
    TransferNotFound,
    #[error("insufficient funds")]
    InsufficientFunds,
    #[error("currency mismatch")]
    CurrencyMismatch,
    /// The credit would take the receiving account past the largest balance it may hold.
    #[error("balance limit exceeded")]
    BalanceLimitExceeded,
    /// The idempotency key was used before with a different canonical body.
    #[error("idempotency key reused")]
    IdempotencyKeyReused,
    /// A request with the same key and body is still being processed.
    #[error("request in progress")]
    RequestInProgress { retry_after: u64 },
    #[error("internal error")]
    Internal,
}

/// The RFC 9457 body.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Problem {
    #[serde(rename = "type")]
    pub kind: String,
    pub title: &'static str,
    pub status: u16,
    pub detail: String,
    pub code: &'static str,
    pub request_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// Status, stable code, title and the detail a person may read.
    fn parts(&self) -> (StatusCode, &'static str, &'static str, String) {
        match self {
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
            ApiError::AccountNotFound => (
                StatusCode::NOT_FOUND,
                "account_not_found",
                "Account not found",
                "No such account.".into(),
            ),
            ApiError::TransferNotFound => (
                StatusCode::NOT_FOUND,
                "transfer_not_found",
                "Transfer not found",
                "No such transfer.".into(),
            ),
            ApiError::InsufficientFunds => (
                StatusCode::PAYMENT_REQUIRED,
                "insufficient_funds",
                "Insufficient funds",
                "The balance of the from account is too low for this amount.".into(),
            ),
            ApiError::CurrencyMismatch => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "currency_mismatch",
                "Currency mismatch",
                "The two accounts hold different currencies.".into(),
            ),
            ApiError::BalanceLimitExceeded => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "balance_limit_exceeded",
                "Balance limit exceeded",
                "The transfer would take the to account past the largest balance an account may hold.".into(),
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
        }
    }

    /// Seconds for `Retry-After`, where one is sent.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::RateLimited(d) => Some(d.retry_after_secs()),
            ApiError::Unavailable { retry_after }
            | ApiError::OutcomeUnknown { retry_after }
            | ApiError::RequestInProgress { retry_after } => Some((*retry_after).max(1)),
            _ => None,
        }
    }

    pub fn status(&self) -> StatusCode {
        self.parts().0
    }

    /// The stable snake_case code.
    pub fn code(&self) -> &'static str {
        self.parts().1
    }

    /// The problem body for `request_id`.
    pub fn problem(&self, request_id: &str) -> Problem {
        let (status, code, title, detail) = self.parts();
        Problem {
            kind: format!("urn:tollgate:problem:{code}"),
            title,
            status: status.as_u16(),
            detail,
            code,
            request_id: request_id.to_string(),
            retry_after: self.retry_after(),
        }
    }

    /// The full response: problem+json body, `X-Request-Id`, and `Retry-After`, `Allow` and
    /// `RateLimit*` where they apply.
    pub fn to_response(&self, request_id: &str) -> Response<Body> {
        let problem = self.problem(request_id);
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut response = Response::new(Body::Binary(body));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        set_header(headers, REQUEST_ID_HEADER, request_id);
        if let Some(secs) = problem.retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        match self {
            ApiError::MethodNotAllowed { allow } => {
                headers.insert(ALLOW, HeaderValue::from_static(allow));
            }
            ApiError::Unauthorized => {
                headers.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::RateLimited(d) => set_ratelimit_headers(headers, d),
            _ => {}
        }
        response
    }
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

impl From<crate::idempotency::IdempotencyError> for ApiError {
    fn from(e: crate::idempotency::IdempotencyError) -> Self {
        tracing::error!(error = %e, source = ?std::error::Error::source(&e), "idempotency store failed");
        ApiError::Unavailable { retry_after: 1 }
    }
}

impl From<crate::clients::ClientStoreError> for ApiError {
    fn from(e: crate::clients::ClientStoreError) -> Self {
        tracing::error!(error = %e, source = ?std::error::Error::source(&e), "clients table failed");
        ApiError::Unavailable { retry_after: 1 }
    }
}

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
