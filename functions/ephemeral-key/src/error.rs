//! What only the ephemeral-key function answers, beside the shared [`ApiError`]s.
//!
//! Its own failure is the provider's: OpenAI failing, refusing our API key, or one of the
//! cooldowns after either still running. The client sees the ordinary 503 (it cannot tell the
//! provider from our tables, and need not), so the words are the shared ones; the variant
//! exists so the code says which cause it is. Everything renders through [`ClientError`]: the
//! problem+json shape is `tollgate::problem`'s alone.

use tollgate::problem::Answer;
use tollgate::{ApiError, ClientError};

/// An error of the ephemeral-key routes, as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// One of the errors every function may answer.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The provider is failing or refusing our API key, or a cooldown after that runs: no
    /// upstream call is made until `retry_after` has passed.
    #[error("upstream unavailable")]
    Upstream { retry_after: u64 },
}

impl ClientError for SessionError {
    fn as_api_error(&self) -> Option<&ApiError> {
        match self {
            SessionError::Api(e) => Some(e),
            SessionError::Upstream { .. } => None,
        }
    }

    fn answer(&self) -> Answer {
        match self {
            SessionError::Api(e) => e.answer(),
            SessionError::Upstream { retry_after } => ApiError::Unavailable {
                retry_after: *retry_after,
            }
            .answer(),
        }
    }
}

tollgate::lift_api_errors!(SessionError:
    tollgate::secrets::SecretError,
    tollgate::idempotency::KeyError,
    tollgate::idempotency::IdempotencyError,
    tollgate::json::BodyError,
);
