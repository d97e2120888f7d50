//! The `ephemeral-key` function: short-lived OpenAI Realtime client secrets for a public voice
//! app, and the operator's kill-switch routes.
//!
//! Routes (after `BASE_PATH` is stripped):
//! - `POST /session` — see [`session`].
//! - `GET|PUT /internal/kill-switch` — operator view and flip; `X-Internal-Token` required.
//!
//! A CORS preflight from a listed origin gets its 204 before any guard (see `stack`).
//!
//! Its names (function, limits variable, idempotency route, table) are the catalog's
//! ([`tollgate_functions::catalog::EPHEMERAL_KEY`]); the provider's 503s are [`SessionError`], rendered by
//! the shared `ClientError`.

pub mod config;
pub mod error;
mod internal_routes;
pub mod session;
pub mod upstream;

use std::sync::Arc;

use lambda_http::Request;
use tollgate::config::ConfigError;
use tollgate::cooldown::Cooldown;
use tollgate::gate::Gate;
use tollgate::idempotency::AbsentKeys;
use tollgate::layers::{
    handler_fn, CheckLayer, ClientAddress, IdempotencyLayer, Methods, RoutePath,
};
use tollgate::ratelimit::Layer;
use tollgate_functions::catalog;
use tollgate_functions::serve::{Parts, ServiceStack};
use tower::util::MapRequestLayer;
use tower::{ServiceBuilder, ServiceExt};

pub use crate::error::SessionError;

use crate::config::SessionSettings;
use crate::session::{SessionKey, Sessions, ValidOnly};
use crate::upstream::Upstream;

/// The function's names: kill-switch key, rate-limit scope, limits variable, idempotency route.
pub const FUNCTION: &catalog::Function = &catalog::EPHEMERAL_KEY;
/// What `/session` serves.
const SESSION_METHODS: &str = "POST";
/// The session route.
const SESSION: &str = "/session";

/// Everything a request needs, built once per process.
#[derive(Debug)]
pub struct App {
    pub gate: Arc<Gate>,
    pub sessions: Arc<Sessions>,
    service: ServiceStack,
}

impl tollgate_functions::serve::GuardedFunction for App {
    const FUNCTION: &'static catalog::Function = FUNCTION;

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
        let sessions = Arc::new(Sessions {
            settings,
            upstream,
            idempotency,
            absent: Arc::new(AbsentKeys::new(parts.gate.settings().block_cache_capacity)),
            cooldown: Cooldown::new(parts.clock),
        });
        let gate = Arc::new(parts.gate);
        let service = stack(&gate, &sessions);
        Ok(Self {
            gate,
            sessions,
            service,
        })
    }

    fn gate(&self) -> &Gate {
        &self.gate
    }

    fn service(&self) -> ServiceStack {
        self.service.clone()
    }
}

/// The methods the route at `path` serves.
fn methods(path: &str) -> Option<&'static str> {
    match path {
        SESSION => Some(SESSION_METHODS),
        "/internal/kill-switch" => Some(internal_routes::METHODS),
        _ => None,
    }
}

/// The two routes' guards, read top to bottom. Both answer a preflight, a request for no route,
/// a wrong method and an oversized body before any guard. `POST /session` then runs the kill
/// switch and the client address, and its own steps ([`session`]: the replay cache, cooldowns,
/// limits, the claim). The operator's kill-switch routes ignore the kill switch (an operator
/// must be able to turn it off again) and the spend cap, and count every caller without the
/// internal token in `ip` before refusing it, so guessing the token is limited too.
fn stack(gate: &Arc<Gate>, sessions: &Arc<Sessions>) -> ServiceStack {
    let session = {
        let (on_gate, on_sessions) = (gate.clone(), sessions.clone());
        let (cooling_gate, cooling) = (gate.clone(), sessions.clone());
        let parsing = sessions.clone();
        let store = &sessions.idempotency;
        ServiceStack::new(
            ServiceBuilder::new()
                .layer(gate.kill_switch_layer())
                .layer(gate.client_address_layer())
                .layer(MapRequestLayer::new(move |mut req: Request| {
                    let parsed = parsing.parse(&req);
                    req.extensions_mut().insert(parsed);
                    req
                }))
                .layer(IdempotencyLayer::replays(
                    store.clone(),
                    SessionKey,
                    sessions.absent.clone(),
                    gate.settings().block_cache_max_age,
                ))
                .layer(CheckLayer::new(move |_: &Request| {
                    cooling.cooling_down(&cooling_gate)
                }))
                .layer(
                    gate.rate_limit_layer()
                        .limit(gate.rate_limit(Layer::Ip), ClientAddress)
                        .limit(gate.rate_limit(Layer::Global), ValidOnly)
                        .refund_server_errors(),
                )
                .layer(IdempotencyLayer::claims(
                    store.clone(),
                    SessionKey,
                    sessions.lease(),
                    &[Layer::Global],
                ))
                .service(handler_fn(move |req: Request| {
                    let (gate, sessions) = (on_gate.clone(), on_sessions.clone());
                    async move { sessions.post(&gate, &req).await }
                })),
        )
    };
    let internal = {
        let gate2 = gate.clone();
        ServiceStack::new(
            ServiceBuilder::new()
                .layer(gate.client_address_layer())
                .layer(
                    gate.rate_limit_layer()
                        .limit(gate.rate_limit(Layer::Ip), ClientAddress),
                )
                .service(handler_fn(move |req: Request| {
                    let gate = gate2.clone();
                    async move { internal_routes::kill_switch(&gate, &req).await }
                })),
        )
    };
    ServiceStack::new(
        ServiceBuilder::new()
            .layer(gate.respond_layer())
            .layer(gate.cors_layer(Methods(methods)))
            .layer(gate.routes_layer(Methods(methods)))
            .service(tower::service_fn(move |req: Request| {
                let on_session = req
                    .extensions()
                    .get::<RoutePath>()
                    .is_some_and(|RoutePath(p)| p == SESSION);
                let route = if on_session { &session } else { &internal };
                route.clone().oneshot(req)
            })),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tollgate::clock::ManualClock;
    use tollgate::config::Env;
    use tollgate_functions::serve::GuardedFunction;

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
