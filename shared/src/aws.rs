//! AWS SDK clients, built once per process.
//!
//! `DYNAMODB_ENDPOINT` and `SSM_ENDPOINT` point the clients elsewhere (DynamoDB Local, a test
//! stand-in); in AWS they are unset and the regional endpoints are used.

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};

use crate::config::Env;

/// Loads region and credentials the standard way (environment, then the Lambda role).
pub async fn load_config() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(2))
                .operation_attempt_timeout(Duration::from_secs(3))
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
/// is the retry policy, and SDK back-off inside a Lambda invocation only adds latency.
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
/// would take another caller's unit) and for reads that have a fallback and a cooldown of their
/// own (the kill switch), where the SDK's back-off would only make each request slow while the
/// store is failing.
pub fn dynamodb_one_attempt() -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::config::Builder::default()
        .retry_config(RetryConfig::standard().with_max_attempts(1))
}
