//! The `ephemeral-key` function: short-lived OpenAI Realtime client secrets for a public voice
//! app, and the operator's kill-switch routes.
//!
//! Routes (after `BASE_PATH` is stripped):
//! - `GET|PUT /internal/kill-switch`: operator view and flip; `X-Internal-Token` required.
//!
//! `POST /session` is added by the session issue; until then it is an unknown path (404).

mod internal_routes;

use lambda_http::{Body, Request, Response};
use tollgate::clock::SharedClock;
use tollgate::config::{ConfigError, Env, GuardSettings};
use tollgate::gate::Gate;
use tollgate::http::{request_id, respond, route_path};
use tollgate::ratelimit::Admission;
use tollgate::ApiError;
use tracing::Instrument;

/// The function's name: its kill-switch key and rate-limit scope.
pub const FUNCTION: &str = "ephemeral-key";
/// Variable holding this function's limits.
pub const LIMITS_VAR: &str = "SESSION_RATE_LIMITS";
/// Limits when `SESSION_RATE_LIMITS` is unset.
pub const DEFAULT_LIMITS: &str = "ip=10/1h,global=2000/1d";

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
        let span = tracing::info_span!("request", request_id = %request_id, function = FUNCTION);
        let mut admission = Admission::default();
        let result = self.route(&req, &mut admission).instrument(span).await;
        respond(result, &request_id, Some(&admission))
    }

    async fn route(
        &self,
        req: &Request,
        admission: &mut Admission,
    ) -> Result<Response<Body>, ApiError> {
        let path = route_path(req, &self.gate.settings.base_path).ok_or(ApiError::NotFound)?;
        match path {
            "/internal/kill-switch" => {
                internal_routes::kill_switch(&self.gate, req, admission).await
            }
            _ => Err(ApiError::NotFound),
        }
    }
}
