//! The `ephemeral-key` function: short-lived OpenAI Realtime client secrets for a public voice
//! app, and the operator's kill-switch routes.
//!
//! Routes (after `BASE_PATH` is stripped):
//! - `POST /session` — see [`session`].
//! - `GET|PUT /internal/kill-switch` — operator view and flip; `X-Internal-Token` required.
//!
//! A CORS preflight from a listed origin gets its 204 before any guard
//! (`tollgate_functions::serve::Function::handle`).
//!
//! Its names (function, limits variable, idempotency route, table) are the catalog's
//! ([`tollgate_functions::catalog::EPHEMERAL_KEY`]); the provider's 503s are [`SessionError`], rendered by
//! the shared `ClientError`.

pub mod config;
pub mod error;
mod internal_routes;
pub mod session;
pub mod upstream;

use lambda_http::{Body, Request, Response};
use tollgate::config::ConfigError;
use tollgate::cooldown::Cooldown;
use tollgate::gate::Gate;
use tollgate::idempotency::AbsentKeys;
use tollgate::ratelimit::{Admission, Layer};
use tollgate::ApiError;
use tollgate_functions::catalog;
use tollgate_functions::serve::Parts;

pub use crate::error::SessionError;

use crate::config::SessionSettings;
use crate::session::Sessions;
use crate::upstream::Upstream;

/// The function's names: kill-switch key, rate-limit scope, limits variable, idempotency route.
pub const FUNCTION: &catalog::Function = &catalog::EPHEMERAL_KEY;
/// What `/session` serves.
const SESSION_METHODS: &str = "POST";

/// Everything a request needs, built once per process.
#[derive(Debug)]
pub struct App {
    pub gate: Gate,
    pub sessions: Sessions,
}

impl tollgate_functions::serve::Function for App {
    const FUNCTION: &'static catalog::Function = FUNCTION;
    type Error = SessionError;

    fn build(parts: Parts<'_>) -> Result<Self, ConfigError> {
        // The `global` layer is the spend cap. Leaving it out of the list must not quietly
        // remove it: only `global=off` runs without one.
        let limits = &parts.gate.settings().rate_limits;
        if limits.get(Layer::Global).is_none() && !limits.is_off(Layer::Global) {
            return Err(ConfigError::new(
                FUNCTION.limits_variable,
                format!(
                    "no global layer ({limits}): it caps the sessions minted, and so OpenAI spend; add one such as global=2000/1d, or write global=off to run without a cap on purpose",
                ),
            ));
        }
        let settings = SessionSettings::from_env(parts.env)?;
        let upstream =
            Upstream::new(&settings.base_url, settings.upstream_timeout).map_err(|e| {
                ConfigError::new(
                    "OPENAI_BASE_URL",
                    format!("cannot build the HTTPS client: {e}"),
                )
            })?;
        let idempotency =
            parts.idempotency(&settings.idempotency_table, settings.idempotency_ttl)?;
        Ok(Self {
            sessions: Sessions {
                settings,
                upstream,
                idempotency,
                absent: AbsentKeys::new(parts.gate.settings().block_cache_capacity),
                cooldown: Cooldown::new(parts.clock),
            },
            gate: parts.gate,
        })
    }

    fn gate(&self) -> &Gate {
        &self.gate
    }

    fn methods(path: &str) -> Option<&'static str> {
        match path {
            "/session" => Some(SESSION_METHODS),
            "/internal/kill-switch" => Some(internal_routes::METHODS),
            _ => None,
        }
    }

    async fn route(
        &self,
        req: &Request,
        _request_id: &str,
        admission: &mut Admission,
    ) -> Result<Response<Body>, SessionError> {
        let path = self.gate.route_path(req).ok_or(ApiError::NotFound)?;
        if Self::methods(path).is_some() {
            self.gate.body(req)?;
        }
        match path {
            "/session" if req.method() == http::Method::POST => {
                self.sessions.post(&self.gate, req, admission).await
            }
            "/session" => Err(ApiError::MethodNotAllowed {
                allow: SESSION_METHODS,
            }
            .into()),
            "/internal/kill-switch" => {
                Ok(internal_routes::kill_switch(&self.gate, req, admission).await?)
            }
            _ => Err(ApiError::NotFound.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tollgate::clock::ManualClock;
    use tollgate::config::Env;
    use tollgate_functions::serve::Function;

    use super::*;

    fn from_env(limits: &str) -> Result<App, ConfigError> {
        let env = Env::from_pairs([
            (FUNCTION.limits_variable, limits),
            ("OPENAI_API_KEY", "sk-unused"),
        ]);
        // Building a client sends nothing; no request is made here.
        let ddb = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::Config::builder()
                .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
                .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
                .build(),
        );
        App::from_env(&env, ddb, None, Arc::new(ManualClock::at(0)))
    }

    #[test]
    fn a_configuration_without_the_spend_cap_is_refused() {
        for limits in ["ip=10/1h", "ip=10/1h,client=5/1m", "ip=off"] {
            let err = from_env(limits).map(|_| ()).unwrap_err();
            assert_eq!(err.var, FUNCTION.limits_variable, "{limits}");
            assert!(err.to_string().contains("global=off"), "{err}");
        }
    }

    #[test]
    fn the_spend_cap_may_be_turned_off_on_purpose() {
        assert!(from_env("ip=10/1h,global=off").is_ok());
        assert!(from_env("global=off").is_ok());
        assert!(from_env(FUNCTION.default_limits).is_ok());
    }
}
