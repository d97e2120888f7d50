//! The `transfer` function: money transfers that a retry can never repeat.
//!
//! The routes (`POST /transfers`, `GET /transfers/{id}`, `GET /accounts/{id}`) are added by the
//! transfer issue; until then every path is unknown (404, problem+json).

use lambda_http::{Body, Request, Response};
use tollgate::clock::SharedClock;
use tollgate::config::{ConfigError, Env, GuardSettings};
use tollgate::gate::Gate;
use tollgate::http::{request_id, respond, route_path};
use tollgate::ApiError;

/// The function's name: its kill-switch key and rate-limit scope.
pub const FUNCTION: &str = "transfer";
/// Variable holding this function's limits.
pub const LIMITS_VAR: &str = "TRANSFER_RATE_LIMITS";
/// Limits when `TRANSFER_RATE_LIMITS` is unset.
pub const DEFAULT_LIMITS: &str = "ip=300/1m,client=60/1m";

/// Everything a request needs, built once per process.
#[derive(Debug)]
pub struct App {
    pub gate: Gate,
}

impl App {
    pub fn from_env(
        env: &Env,
        ddb: aws_sdk_dynamodb::Client,
        ssm: Option<aws_sdk_ssm::Client>,
        clock: SharedClock,
    ) -> Result<Self, ConfigError> {
        let settings = GuardSettings::from_env(env, FUNCTION, LIMITS_VAR, DEFAULT_LIMITS)?;
        Ok(Self {
            gate: Gate::new(settings, ddb, ssm, clock),
        })
    }

    /// Serves one request. Never fails: every error is a problem+json response.
    pub async fn handle(&self, req: Request) -> Response<Body> {
        let request_id = request_id(&req);
        let result = self.route(&req).await;
        respond(result, &request_id, None)
    }

    async fn route(&self, req: &Request) -> Result<Response<Body>, ApiError> {
        let _path = route_path(req, &self.gate.settings.base_path).ok_or(ApiError::NotFound)?;
        Err(ApiError::NotFound)
    }
}
