//! AWS SDK clients, built once per process, and how a conditional write is sent when the
//! answer matters more than the SDK's retries let on.
//!
//! `DYNAMODB_ENDPOINT` and `SSM_ENDPOINT` (feature `ssm`) point the clients elsewhere (DynamoDB Local, a test
//! stand-in); in AWS they are unset and the regional endpoints are used.
//!
//! ## Writes that must know whether they were applied
//!
//! The SDK's retries hide what each attempt said: a write whose first attempt committed and
//! whose answer was lost, then throttled twice, comes back as "throttled", which reads as
//! "nothing written". [`send_write`] makes the attempts itself, one SDK attempt each, and remembers
//! whether any of them had an unknown outcome ([`Failure::Unknown`]: a timeout, a lost or
//! unreadable answer, a 5xx). It sends again only what is safe to send again:
//!
//! - after [`Failure::Throttled`] always: DynamoDB refused the request before applying it;
//! - after [`Failure::Unknown`] only with [`Resend::AlsoUnknown`], for a write whose resend
//!   cannot apply twice (a conditional put or update whose condition, or its `ALL_OLD` item,
//!   shows the first one's effect). A non-idempotent write (`ADD 1`) says [`Resend::NotApplied`]
//!   and stops at the first unknown outcome, so the caller can say so instead of guessing.

use std::future::Future;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::http::Response as HttpResponse;

use crate::config::Env;

/// The longest one attempt of an AWS request may take, connecting included: a Lambda
/// invocation has seconds, not the SDK's unbounded default.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Loads region and credentials the standard way (environment, then the Lambda role).
pub async fn load_config() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .operation_attempt_timeout(ATTEMPT_TIMEOUT)
                .build(),
        )
        .load()
        .await
}

/// A DynamoDB client, at `DYNAMODB_ENDPOINT` when set.
pub fn dynamodb(config: &SdkConfig, env: &Env) -> aws_sdk_dynamodb::Client {
    let mut builder = aws_sdk_dynamodb::config::Builder::from(config);
    if let Some(endpoint) = env.get("DYNAMODB_ENDPOINT") {
        builder = builder.endpoint_url(endpoint);
    }
    aws_sdk_dynamodb::Client::from_conf(builder.build())
}

/// An SSM client, at `SSM_ENDPOINT` when set. Two attempts at most: the secret store's cooldown
/// is the retry policy, and SDK back-off inside a Lambda invocation only adds latency. Feature
/// `ssm`.
#[cfg(feature = "ssm")]
#[cfg_attr(docsrs, doc(cfg(feature = "ssm")))]
pub fn ssm(config: &SdkConfig, env: &Env) -> aws_sdk_ssm::Client {
    let mut builder = aws_sdk_ssm::config::Builder::from(config)
        .retry_config(RetryConfig::standard().with_max_attempts(2));
    if let Some(endpoint) = env.get("SSM_ENDPOINT") {
        builder = builder.endpoint_url(endpoint);
    }
    aws_sdk_ssm::Client::from_conf(builder.build())
}

/// A per-operation override that allows a single attempt, for `.customize().config_override(..)`.
///
/// For writes that must not be resent (a refund's decrement: if its answer was lost, a resend
/// would take another caller's unit), for writes whose sends [`send_write`] makes itself, and
/// for reads that have a fallback and a cooldown of their own (the kill switch), where the
/// SDK's back-off would only make each request slow while the store is failing.
pub fn dynamodb_one_attempt() -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::config::Builder::default()
        .retry_config(RetryConfig::standard().with_max_attempts(1))
}

/// [`dynamodb_one_attempt`], and the attempt may take at most `limit` (and never more than
/// [`ATTEMPT_TIMEOUT`]): for a request that must be answered before a deadline of its own. The
/// other timeouts stay the client's (the SDK merges an override's timeouts into the client's).
pub fn dynamodb_one_attempt_within(limit: Duration) -> aws_sdk_dynamodb::config::Builder {
    dynamodb_one_attempt().timeout_config(
        TimeoutConfig::builder()
            .operation_attempt_timeout(limit.min(ATTEMPT_TIMEOUT))
            .build(),
    )
}

/// What a failed request proves about the write it carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Refused before it was applied, and the same request may pass a moment later:
    /// throttling, `ProvisionedThroughputExceeded`, `RequestLimitExceeded`.
    Throttled,
    /// Not applied, and sending it again would get the same answer: a failed condition, a
    /// validation error, a missing table, denied access; or it was never sent.
    Refused,
    /// Perhaps applied: a timeout, a dispatch failure (the request may have left), a lost or
    /// unreadable answer, a 5xx (DynamoDB's 500 says the request may have succeeded).
    Unknown,
}

/// Reads a failed request: [`Failure`].
pub fn failure<E: ProvideErrorMetadata>(e: &SdkError<E, HttpResponse>) -> Failure {
    match e {
        // Never left the process.
        SdkError::ConstructionFailure(_) => Failure::Refused,
        SdkError::ServiceError(se) if se.raw().status().is_server_error() => Failure::Unknown,
        SdkError::ServiceError(se) if is_throttling(se.err().code()) => Failure::Throttled,
        SdkError::ServiceError(_) => Failure::Refused,
        // Timeout, dispatch failure, response error, and whatever a later SDK adds.
        _ => Failure::Unknown,
    }
}

/// DynamoDB's error codes for a request refused for throughput before it was applied.
pub fn is_throttling(code: Option<&str>) -> bool {
    code.is_some_and(|c| {
        matches!(
            c,
            "ProvisionedThroughputExceededException" | "RequestLimitExceeded"
        ) || c.contains("Throttl")
    })
}

/// When [`send_write`] may send a write again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resend {
    /// Only after an answer that proves it was not applied (throttling): for a write that
    /// must not be applied twice and whose resend could not tell (`ADD 1`).
    NotApplied,
    /// Also after an unknown outcome: for a write whose resend cannot apply twice and whose
    /// answer shows what the first one did (a conditional write carrying an owner token, or
    /// writing an item whose condition fails once it is there).
    AlsoUnknown,
}

/// Sends of one write at most, [`send_write`]'s own (each one SDK attempt): the SDK's default.
pub const WRITE_ATTEMPTS: u32 = 3;

/// A write [`send_write`] gave up on: the last answer, and whether any attempt had an unknown
/// outcome (so the write may have been applied, whatever the last answer says).
#[derive(Debug)]
pub struct WriteError<E> {
    /// The last send's answer, for logs and for telling a throttle from a refusal.
    pub error: SdkError<E, HttpResponse>,
    /// Whether any send timed out or lost its answer: then the write may be in the table whatever
    /// `error` says, and a caller must not tell its client that nothing was written.
    pub unknown: bool,
}

/// Sends a write with `send` (which must make one SDK attempt: build it with
/// `.customize().config_override(dynamodb_one_attempt())`) up to [`WRITE_ATTEMPTS`] times,
/// sending again only as `resend` allows, and tells the caller whether any attempt's outcome
/// was unknown. A success is the write applied by the attempt that answered.
pub async fn send_write<T, E, F, Fut>(resend: Resend, mut send: F) -> Result<T, WriteError<E>>
where
    E: ProvideErrorMetadata,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
{
    let mut unknown = false;
    let mut attempt = 1;
    loop {
        let error = match send().await {
            Ok(out) => return Ok(out),
            Err(e) => e,
        };
        let failed = failure(&error);
        unknown |= failed == Failure::Unknown;
        let again = match failed {
            Failure::Throttled => true,
            Failure::Unknown => resend == Resend::AlsoUnknown,
            Failure::Refused => false,
        };
        if !again || attempt == WRITE_ATTEMPTS {
            return Err(WriteError { error, unknown });
        }
        tracing::warn!(
            attempt,
            failure = ?failed,
            error_code = error.code(),
            "DynamoDB write not answered as done; sending it again"
        );
        backoff(attempt).await;
        attempt += 1;
    }
}

/// 25, 50, 100 ms … and up to 25 ms of jitter, so that writers throttled together do not come
/// back together.
async fn backoff(attempt: u32) {
    let jitter = crate::ids::random_u64() % 25;
    tokio::time::sleep(Duration::from_millis(
        (25 << attempt.min(5).saturating_sub(1)) + jitter,
    ))
    .await;
}
