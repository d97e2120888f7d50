//! A GET endpoint behind a kill switch, a per-address limit and a global limit.
//!
//! `GET /hello` answers `{"hello": "<your address>"}`. In front of it, top to bottom:
//!
//! 1. [`RespondLayer`](tollgate::layers::RespondLayer): every answer, refusals included,
//!    carries `X-Request-Id` and the `RateLimit` fields of the tightest limit passed;
//! 2. routes: 404 off `/hello`, 405 for anything but `GET` (costing no DynamoDB request);
//! 3. the kill switch: 403 `service_disabled` while an operator has it on;
//! 4. the client address (the API Gateway or function URL peer address, IPv6 per /64);
//! 5. the limits: `ip` per address, then `global` over everyone, from `RATE_LIMITS`.
//!
//! [`service`] builds the whole stack from the environment; `main` only runs it, so the tests
//! send their requests to exactly what Lambda runs.

use http::StatusCode;
use lambda_http::{Body, Request, Response};
use tollgate::clock::SharedClock;
use tollgate::config::{ConfigError, Env, GuardSettings};
use tollgate::gate::Gate;
use tollgate::http::json_response;
use tollgate::layers::{handler_fn, Caller, ClientAddress, Global, Methods, ResponseFuture};
use tollgate::ratelimit::Layer;
use tollgate::ApiError;
use tower::{Service, ServiceBuilder};

/// The function's name: its kill switch's key and its counters' scope.
pub const FUNCTION: &str = "rate-limited";
/// The variable holding the limits, in Tollgate's syntax.
pub const LIMITS_VAR: &str = "RATE_LIMITS";
/// The limits when `RATE_LIMITS` is unset: 5 a minute per address, 1000 a minute in all.
pub const DEFAULT_LIMITS: &str = "ip=5/1m,global=1000/1m";

/// The methods each path serves: `GET /hello`, nothing else.
fn methods(path: &str) -> Option<&'static str> {
    (path == "/hello").then_some("GET")
}

/// The guards and the handler, built from `env` (`RATE_LIMIT_TABLE`, `CONTROL_TABLE`,
/// `RATE_LIMITS`, ...) over a DynamoDB client and a clock.
pub fn service(
    env: &Env,
    ddb: aws_sdk_dynamodb::Client,
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
    // No SSM client: this example reads no secret.
    let gate = Gate::new(settings, ddb, clock);
    Ok(ServiceBuilder::new()
        .layer(gate.respond_layer())
        .layer(gate.routes_layer(Methods(methods)))
        .layer(gate.kill_switch_layer())
        .layer(gate.client_address_layer())
        .layer(
            gate.rate_limit_layer()
                .limit(gate.rate_limit(Layer::Ip), ClientAddress)
                .limit(gate.rate_limit(Layer::Global), Global),
        )
        .service(handler_fn(hello)))
}

/// The endpoint itself: only requests every guard admitted get here.
async fn hello(req: Request) -> Result<Response<Body>, ApiError> {
    // The address layer put the caller in the extensions; without it the stack is misbuilt.
    let caller = req.extensions().get::<Caller>().ok_or(ApiError::Internal)?;
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({ "hello": caller.addr.to_string() }),
    ))
}
