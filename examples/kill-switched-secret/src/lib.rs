//! A kill-switched endpoint that reads an SSM secret through Tollgate's secret store.
//!
//! `GET /key-version` answers which version of the upstream API key this function holds
//! (the first 12 hex digits of its SHA-256, never the key itself): what an operator checks
//! after rotating the key. Behind it, top to bottom: request ids, routes, the kill switch, the
//! client address and the `ip` limit; the secret is read only by a request every guard
//! admitted, so a flipped switch or a flood costs no SSM call.
//!
//! The secret comes from `UPSTREAM_KEY_PARAM` (an SSM SecureString's name) or, for a local run,
//! `UPSTREAM_KEY` (the value itself); setting both is refused at start. Through the store
//! ([`tollgate::secrets::SecretStore`], the gate's, so the guards' own secrets share it):
//!
//! - the value is cached for `SECRETS_TTL_SECONDS` (300), one fetch for concurrent requests;
//! - when a refresh fails, the cached value keeps serving;
//! - with no value at all, `503 temporarily_unavailable` with `Retry-After`, and SSM is left
//!   alone for `SECRETS_COOLDOWN_SECONDS` (5): no retry storm against a failing SSM;
//! - a missing parameter or denied access is `500`, logged with the parameter's name for the
//!   operator, and never named to the client.

use std::sync::Arc;

use http::StatusCode;
use lambda_http::{Body, Request, Response};
use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use tollgate::clock::SharedClock;
use tollgate::config::{ConfigError, Env, GuardSettings, SecretSource};
use tollgate::gate::Gate;
use tollgate::http::json_response;
use tollgate::layers::{handler_fn, ClientAddress, Methods, ResponseFuture};
use tollgate::ratelimit::Layer;
use tollgate::ApiError;
use tower::{Service, ServiceBuilder};

/// The function's name: its kill switch's key and its counters' scope.
pub const FUNCTION: &str = "key-version";
/// The variable holding the limits.
pub const LIMITS_VAR: &str = "RATE_LIMITS";
/// 60 requests a minute per address when `RATE_LIMITS` is unset.
pub const DEFAULT_LIMITS: &str = "ip=60/1m";
/// The secret's name: `UPSTREAM_KEY_PARAM` names its SSM parameter, `UPSTREAM_KEY` holds it.
pub const SECRET: &str = "UPSTREAM_KEY";

/// The guards and the handler, built from `env` over a DynamoDB client, an SSM client (`None`
/// when every secret is a plain variable) and a clock.
pub fn service(
    env: &Env,
    ddb: aws_sdk_dynamodb::Client,
    ssm: Option<aws_sdk_ssm::Client>,
    clock: SharedClock,
) -> Result<
    impl Service<
            Request,
            Response = Response<Body>,
            Error = lambda_http::Error,
            Future = ResponseFuture,
        > + Clone
        + Send
        + 'static,
    ConfigError,
> {
    let settings = GuardSettings::from_env(env, FUNCTION, LIMITS_VAR, DEFAULT_LIMITS)?;
    let secret = env
        .secret_source(SECRET)?
        .ok_or_else(|| ConfigError::new("UPSTREAM_KEY_PARAM", "must be set"))?;
    let mut gate = Gate::new(settings, ddb, clock);
    if let Some(ssm) = ssm {
        gate = gate.with_ssm(ssm);
    }
    let gate = Arc::new(gate);
    let secrets = gate.clone();
    Ok(ServiceBuilder::new()
        .layer(gate.respond_layer())
        .layer(gate.routes_layer(Methods(|path: &str| {
            (path == "/key-version").then_some("GET")
        })))
        .layer(gate.kill_switch_layer())
        .layer(gate.client_address_layer())
        .layer(
            gate.rate_limit_layer()
                .limit(gate.rate_limit(Layer::Ip), ClientAddress),
        )
        .service(handler_fn(move |_req: Request| {
            let (gate, secret) = (secrets.clone(), secret.clone());
            async move { key_version(&gate, &secret).await }
        })))
}

/// The endpoint: the key's version, from the cached secret.
async fn key_version(gate: &Gate, secret: &SecretSource) -> Result<Response<Body>, ApiError> {
    // 503 + Retry-After while SSM fails with nothing cached, 500 when misconfigured.
    let key = gate.secrets().get(secret).await?;
    let digest = hex::encode(Sha256::digest(key.expose_secret().as_bytes()));
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({ "key_version": &digest[..12] }),
    ))
}
