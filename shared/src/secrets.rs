//! Secrets from SSM Parameter Store, cached, with a pause after failures.
//!
//! SSM needs the `ssm` feature (and a client: [`SecretStore::with_ssm`]); without it a secret is
//! a plain value ([`SecretSource::Value`]) and this store hands it back as it is.
//!
//! - A value is cached for `SECRETS_TTL_SECONDS`; concurrent callers in one process wait for a
//!   single fetch instead of each asking SSM.
//! - When a refresh fails, the cached value keeps serving (and the failure is logged): a brief
//!   SSM problem must not take the API down.
//! - With no value at all the caller gets [`SecretError::Unavailable`] (503 + `Retry-After`) and
//!   SSM is left alone for that secret until the cooldown (`SECRETS_COOLDOWN_SECONDS`) ends
//!   (lesson 003: no retry storm).
//! - When a provider refuses a value (a rotated API key), [`SecretStore::refetch_refused`]
//!   reads it anew once for all the requests it refused, and at most once per period.
//! - Failures are classified. Throttling, 5xx, network and timeouts are temporary; a missing
//!   parameter, denied access or a validation error will not heal by retrying and surface as
//!   [`SecretError::Misconfigured`] (500), logged with the parameter name for the operator, and
//!   cooled down too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[cfg(feature = "ssm")]
use aws_sdk_ssm::error::{ProvideErrorMetadata, SdkError};
#[cfg(feature = "ssm")]
use aws_sdk_ssm::operation::get_parameter::GetParameterError;
use secrecy::{ExposeSecret, SecretString};

use crate::clock::{SharedClock, UnixMillis};
use crate::config::SecretSource;
use crate::cooldown::Cooldown;

/// A secret could not be had. Display is for logs; responses come from [`crate::problem`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The secret store is failing; try again after `retry_after` seconds.
    #[error("secret store temporarily unavailable (retry in {retry_after}s)")]
    Unavailable {
        /// Seconds until the cooldown ends and the store is asked again.
        retry_after: u64,
    },
    /// The parameter is missing, not readable, or no SSM client is configured (or the crate was
    /// built without its `ssm` feature).
    #[error("secret parameter cannot be read (configuration)")]
    Misconfigured,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    // Only an SSM read can fail for a while.
    #[cfg_attr(not(feature = "ssm"), allow(dead_code))]
    Temporary,
    Terminal,
}

#[derive(Debug, Default)]
struct Entry {
    value: Option<SecretString>,
    fetched_at_ms: UnixMillis,
    last_failure: Option<Failure>,
    /// When SSM was last asked because a provider refused the value
    /// ([`SecretStore::refetch_refused`]).
    refused_read_ms: Option<UnixMillis>,
}

/// How [`SecretStore::load`] may use the cache.
#[derive(Debug, Clone, Copy)]
enum Read<'a> {
    /// The cached value while fresh.
    Cached,
    /// Always ask SSM (cooldowns permitting).
    Fresh,
    /// A provider refused `refused`: ask SSM unless another request already did.
    Refused {
        refused: &'a SecretString,
        period: Duration,
    },
}

/// Cached access to SSM parameters.
#[derive(Debug)]
pub struct SecretStore {
    #[cfg(feature = "ssm")]
    ssm: Option<aws_sdk_ssm::Client>,
    clock: SharedClock,
    ttl: Duration,
    pause: Duration,
    cooldown: Cooldown,
    entries: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Entry>>>>,
}

impl SecretStore {
    /// A store of plain values only, until [`SecretStore::with_ssm`] gives it an SSM client:
    /// every secret comes from plain variables (local runs), and an SSM parameter is
    /// [`SecretError::Misconfigured`]. `ttl`: how long a value read from SSM is served from
    /// memory; `pause`: the cooldown after a failed read.
    pub fn new(clock: SharedClock, ttl: Duration, pause: Duration) -> Self {
        Self {
            #[cfg(feature = "ssm")]
            ssm: None,
            cooldown: Cooldown::new(clock.clone()),
            clock,
            ttl,
            pause,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// Reads [`SecretSource::Ssm`] parameters with `ssm` (built with [`crate::aws::ssm`]).
    #[cfg(feature = "ssm")]
    #[cfg_attr(docsrs, doc(cfg(feature = "ssm")))]
    pub fn with_ssm(mut self, ssm: aws_sdk_ssm::Client) -> Self {
        self.ssm = Some(ssm);
        self
    }

    /// The secret's value, from cache while fresh.
    pub async fn get(&self, source: &SecretSource) -> Result<SecretString, SecretError> {
        self.load(source, Read::Cached).await
    }

    /// The secret's value fetched anew (it may have been rotated). Still honours a running
    /// cooldown.
    pub async fn refetch(&self, source: &SecretSource) -> Result<SecretString, SecretError> {
        self.load(source, Read::Fresh).await
    }

    /// The secret's value read anew because a provider refused `refused`, the value this store
    /// handed out: it may have been rotated. Single flight and bounded in time (lesson 003):
    ///
    /// - when the cached value is no longer `refused`, another request has read a new one
    ///   already, and it is returned without asking SSM;
    /// - SSM is asked for this reason at most once per `period` per parameter; within it the
    ///   cached value comes back as it is, so a key the provider keeps refusing costs one read
    ///   per period per process, however many requests it refuses, concurrent or not.
    ///
    /// The caller compares the answer with `refused`: the same value means SSM holds the very
    /// key the provider refused. A running fetch cooldown is honoured; a plain value (no SSM)
    /// comes back unchanged.
    pub async fn refetch_refused(
        &self,
        source: &SecretSource,
        refused: &SecretString,
        period: Duration,
    ) -> Result<SecretString, SecretError> {
        self.load(source, Read::Refused { refused, period }).await
    }

    async fn load(
        &self,
        source: &SecretSource,
        read: Read<'_>,
    ) -> Result<SecretString, SecretError> {
        let name = match source {
            SecretSource::Value(v) => return Ok(v.clone()),
            SecretSource::Ssm { name } => name,
        };
        let slot = self
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.clone())
            .or_default()
            .clone();
        // One fetch per parameter at a time: the others wait here and then find it cached.
        let mut entry = slot.lock().await;
        let now = self.clock.now_ms();
        match (read, &entry.value) {
            (Read::Cached, Some(value))
                if now.saturating_sub(entry.fetched_at_ms) < self.ttl.as_millis() as u64 =>
            {
                return Ok(value.clone());
            }
            (Read::Refused { refused, period }, Some(value)) => {
                let read_lately = entry
                    .refused_read_ms
                    .is_some_and(|at| now.saturating_sub(at) < period.as_millis() as u64);
                let same = crate::internal::secrets_equal(
                    value.expose_secret().as_bytes(),
                    refused.expose_secret().as_bytes(),
                );
                if !same || read_lately {
                    return Ok(value.clone());
                }
                entry.refused_read_ms = Some(now);
            }
            _ => {}
        }
        if let Some(retry_after) = self.cooldown.remaining(name) {
            return self.stale_or(&entry, retry_after);
        }
        // Boxed: the fetch (an SDK call, kilobytes of future) is rare, and inline it would make
        // every caller's future that large, cached reads included (see `crate::layers`).
        match Box::pin(self.fetch(name)).await {
            Ok(value) => {
                self.cooldown.clear(name);
                entry.value = Some(value.clone());
                entry.fetched_at_ms = self.clock.now_ms();
                entry.last_failure = None;
                Ok(value)
            }
            Err(failure) => {
                let retry_after = self.cooldown.start(name, self.pause);
                entry.last_failure = Some(failure);
                self.stale_or(&entry, retry_after)
            }
        }
    }

    fn stale_or(&self, entry: &Entry, retry_after: u64) -> Result<SecretString, SecretError> {
        match (&entry.value, entry.last_failure) {
            (Some(stale), _) => Ok(stale.clone()),
            (None, Some(Failure::Terminal)) => Err(SecretError::Misconfigured),
            (None, _) => Err(SecretError::Unavailable { retry_after }),
        }
    }

    #[cfg(not(feature = "ssm"))]
    async fn fetch(&self, name: &str) -> Result<SecretString, Failure> {
        tracing::error!(
            parameter = name,
            "an SSM parameter, but tollgate was built without its `ssm` feature"
        );
        Err(Failure::Terminal)
    }

    #[cfg(feature = "ssm")]
    async fn fetch(&self, name: &str) -> Result<SecretString, Failure> {
        let Some(ssm) = &self.ssm else {
            tracing::error!(
                parameter = name,
                "no SSM client configured for a *_PARAM secret"
            );
            return Err(Failure::Terminal);
        };
        let result = ssm
            .get_parameter()
            .name(name)
            .with_decryption(true)
            .send()
            .await;
        match result {
            Ok(out) => match out.parameter().and_then(|p| p.value()) {
                Some(v) if !v.is_empty() => Ok(SecretString::from(v.to_string())),
                _ => {
                    tracing::error!(parameter = name, "SSM parameter has no value");
                    Err(Failure::Terminal)
                }
            },
            Err(e) => {
                let failure = classify(&e);
                let code = e.code().unwrap_or("none").to_string();
                match failure {
                    Failure::Terminal => tracing::error!(
                        parameter = name,
                        error_code = %code,
                        "SSM parameter cannot be read: check that it exists, is a SecureString, and that the function's role may read and decrypt it"
                    ),
                    Failure::Temporary => tracing::warn!(
                        parameter = name,
                        error_code = %code,
                        error_kind = error_kind(&e),
                        "SSM fetch failed; cooling down"
                    ),
                }
                Err(failure)
            }
        }
    }
}

#[cfg(feature = "ssm")]
fn error_kind<R>(e: &SdkError<GetParameterError, R>) -> &'static str {
    match e {
        SdkError::ConstructionFailure(_) => "construction",
        SdkError::TimeoutError(_) => "timeout",
        SdkError::DispatchFailure(_) => "network",
        SdkError::ResponseError(_) => "response",
        SdkError::ServiceError(_) => "service",
        _ => "other",
    }
}

#[cfg(feature = "ssm")]
fn classify(e: &SdkError<GetParameterError, aws_sdk_ssm::config::http::HttpResponse>) -> Failure {
    match e {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            Failure::Temporary
        }
        SdkError::ServiceError(se) => match se.err() {
            GetParameterError::ParameterNotFound(_)
            | GetParameterError::ParameterVersionNotFound(_)
            | GetParameterError::InvalidKeyId(_) => Failure::Terminal,
            GetParameterError::InternalServerError(_) => Failure::Temporary,
            other => {
                let code = other.code().unwrap_or_default();
                let status = se.raw().status().as_u16();
                if status >= 500
                    || status == 429
                    || code.contains("Throttl")
                    || code == "TooManyUpdates"
                    || code == "RequestLimitExceeded"
                {
                    Failure::Temporary
                } else {
                    Failure::Terminal
                }
            }
        },
        _ => Failure::Terminal,
    }
}
