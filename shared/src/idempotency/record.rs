//! What is stored under a key, and how it comes back.

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use http::header::{HeaderName, HeaderValue};
use http::StatusCode;
use lambda_http::{Body, Response};

use crate::clock::{retry_after_secs, UnixMillis};

/// Header added to every replayed response.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// Headers worth storing with a response: the ones a client acts on.
const STORED_HEADERS: &[&str] = &["cache-control", "content-type", "location"];

pub(crate) const STATE: &str = "state";
pub(crate) const FINGERPRINT: &str = "fingerprint";
pub(crate) const STATUS: &str = "status";
pub(crate) const HEADERS: &str = "headers";
pub(crate) const BODY: &str = "body";
pub(crate) const OWNER: &str = "owner";
pub(crate) const LEASE_UNTIL_MS: &str = "lease_until_ms";
/// The call of [`super::IdempotencyStore::commit`] that wrote a completed record.
pub(crate) const WRITTEN_BY: &str = "written_by";

pub(crate) const COMPLETED: &str = "COMPLETED";
pub(crate) const IN_PROGRESS: &str = "IN_PROGRESS";

pub use crate::table::Attributes;

/// Where a key lives: one client, one method and route, one key. Two clients may use the same
/// key; one client may use the same key on two routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope(String);

impl Scope {
    /// `caller` is a verified client id (or, for a public route, the client address);
    /// `route` the method and route template, e.g. `POST /orders`.
    pub fn new(caller: &str, route: &str, key: &super::IdempotencyKey) -> Self {
        Self(format!("{caller}#{route}#{}", key.as_str()))
    }

    /// The record's partition key.
    pub fn pk(&self) -> &str {
        &self.0
    }
}

/// A response as stored: status, the headers that matter, and the body byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// The status code sent the first time.
    pub status: u16,
    /// The headers worth replaying (`cache-control`, `content-type`, `location`), lower-case;
    /// per-request ones (request id, rate-limit fields) are the replay's own.
    pub headers: Vec<(String, String)>,
    /// The body byte for byte, so a replay is indistinguishable from the first answer.
    pub body: Vec<u8>,
}

impl StoredResponse {
    /// Captures what is worth storing of `response`.
    pub fn capture(response: &Response<Body>) -> Self {
        let headers = STORED_HEADERS
            .iter()
            .filter_map(|name| {
                response
                    .headers()
                    .get(*name)
                    .and_then(|v| v.to_str().ok())
                    .map(|v| (name.to_string(), v.to_string()))
            })
            .collect();
        Self {
            status: response.status().as_u16(),
            headers,
            body: response.body().as_ref().to_vec(),
        }
    }

    /// The stored response again, marked `Idempotent-Replayed: true`.
    pub fn replay(&self) -> Response<Body> {
        let mut response = self.to_response();
        response
            .headers_mut()
            .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
        response
    }

    /// The stored response as it was first sent.
    pub fn to_response(&self) -> Response<Body> {
        let mut response = Response::new(Body::Binary(self.body.clone()));
        *response.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        for (name, value) in &self.headers {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                response.headers_mut().insert(n, v);
            }
        }
        response
    }

    pub(crate) fn to_attributes(&self, item: &mut HashMap<String, AttributeValue>) {
        item.insert(STATUS.into(), AttributeValue::N(self.status.to_string()));
        item.insert(
            HEADERS.into(),
            AttributeValue::M(
                self.headers
                    .iter()
                    .map(|(k, v)| (k.clone(), AttributeValue::S(v.clone())))
                    .collect(),
            ),
        );
        item.insert(BODY.into(), AttributeValue::B(Blob::new(self.body.clone())));
    }

    fn from_item(item: &HashMap<String, AttributeValue>) -> Option<Self> {
        let status = item.get(STATUS)?.as_n().ok()?.parse().ok()?;
        let body = item.get(BODY)?.as_b().ok()?.as_ref().to_vec();
        let mut headers: Vec<(String, String)> = item
            .get(HEADERS)
            .and_then(|h| h.as_m().ok())
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_s().ok()?.clone())))
                    .collect()
            })
            .unwrap_or_default();
        headers.sort();
        Some(Self {
            status,
            headers,
            body,
        })
    }
}

/// A random marker naming one call of [`super::IdempotencyStore::commit`] in the records it
/// writes, so that the call recognises its own record when an answer was lost, even when
/// another request with the same body stored the same bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WrittenBy(String);

impl WrittenBy {
    /// 128 random bits as 32 hex digits: room for a token generation within DynamoDB's
    /// 36-character `ClientRequestToken`.
    pub(crate) fn new() -> Self {
        Self(crate::ids::random_hex(16))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// A record as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The SHA-256 (hex) of the canonical body that claimed the key: another body under the same
    /// key is a 422, not a replay.
    pub fingerprint: String,
    /// Whether the first request finished, and with what.
    pub state: RecordState,
    /// Seconds since the epoch after which the record counts as absent.
    pub expires_at: u64,
    /// The [`WrittenBy`] marker of the call that wrote it, if one did.
    written_by: Option<String>,
}

/// Where a record stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordState {
    /// The first request finished: this is its answer, to replay.
    Completed(StoredResponse),
    /// Claimed and not finished: by `owner` (a random token, so only the claimant can
    /// complete or release it) until `lease_until_ms`.
    InProgress {
        /// The claimant's token.
        owner: String,
        /// When the lease lapses and the key may be claimed again.
        lease_until_ms: UnixMillis,
    },
}

impl Record {
    /// Parses an item; `None` for an item that is not a well-formed record.
    pub fn from_item(item: &HashMap<String, AttributeValue>) -> Option<Self> {
        Self::from_item_with(item, crate::table::EXPIRES_AT)
    }

    /// As [`Self::from_item`], for a table whose TTL attribute is `expires_at`.
    pub fn from_item_with(
        item: &HashMap<String, AttributeValue>,
        expires_at: &str,
    ) -> Option<Self> {
        let fingerprint = item.get(FINGERPRINT)?.as_s().ok()?.clone();
        let expires_at = item.get(expires_at)?.as_n().ok()?.parse().ok()?;
        let state = match item.get(STATE)?.as_s().ok()?.as_str() {
            COMPLETED => RecordState::Completed(StoredResponse::from_item(item)?),
            IN_PROGRESS => RecordState::InProgress {
                owner: item.get(OWNER)?.as_s().ok()?.clone(),
                lease_until_ms: item.get(LEASE_UNTIL_MS)?.as_n().ok()?.parse().ok()?,
            },
            _ => return None,
        };
        let written_by = item.get(WRITTEN_BY).and_then(|v| v.as_s().ok()).cloned();
        Some(Self {
            fingerprint,
            state,
            expires_at,
            written_by,
        })
    }

    /// Whether `call` wrote this record.
    pub(crate) fn is_written_by(&self, call: &WrittenBy) -> bool {
        self.written_by.as_deref() == Some(call.as_str())
    }

    /// An expired record counts as absent, even before DynamoDB's TTL deletes it.
    pub fn is_live(&self, now_ms: UnixMillis) -> bool {
        self.expires_at * 1000 > now_ms
    }

    /// Whether this record is `lease`'s request completed with `response`: what a resend of
    /// [`super::IdempotencyStore::complete`] finds after its first send committed.
    pub(crate) fn is_completion_of(&self, lease: &super::Lease, response: &StoredResponse) -> bool {
        let mut ours = response.clone();
        ours.headers.sort();
        self.fingerprint == lease.fingerprint && self.state == RecordState::Completed(ours)
    }

    /// What a request with `fingerprint` finds under this key.
    pub fn verdict(&self, fingerprint: &str, now_ms: UnixMillis) -> Existing {
        if self.fingerprint != fingerprint {
            return Existing::KeyReused;
        }
        match &self.state {
            RecordState::Completed(response) => Existing::Replay(response.clone()),
            RecordState::InProgress { lease_until_ms, .. } => Existing::InProgress {
                retry_after: retry_after_secs(now_ms, *lease_until_ms),
            },
        }
    }
}

/// What a request finds when its key is already taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Existing {
    /// Same body, finished: send the stored response again.
    Replay(StoredResponse),
    /// Same key, different canonical body: 422 `idempotency_key_reused`.
    KeyReused,
    /// Same body, still being processed: 409 `request_in_progress` with `Retry-After`.
    InProgress {
        /// Seconds until the lease lapses: when a retry may find the outcome.
        retry_after: u64,
    },
}

impl Existing {
    /// The answer to a request that found its key taken: the stored response again (marked
    /// replayed), 422 for a reused key, or 409 while the first request is still running; in
    /// the caller's error type (a function's own enum, or [`crate::ApiError`] itself).
    pub fn into_result<E: From<crate::ApiError>>(self) -> Result<Response<Body>, E> {
        match self {
            Existing::Replay(stored) => Ok(stored.replay()),
            Existing::KeyReused => Err(crate::ApiError::IdempotencyKeyReused.into()),
            Existing::InProgress { retry_after } => {
                Err(crate::ApiError::RequestInProgress { retry_after }.into())
            }
        }
    }
}
