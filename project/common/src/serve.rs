//! The Lambda entry point both functions share: read configuration, build clients once, publish
//! the limits for the operator's CLI ([`tollgate::published_limits`]), serve;
//! and the service stack each assembles from the guard crate's layers ([`GuardedFunction::service`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lambda_http::{Body, Error, Request, Response};
use tower::util::BoxCloneSyncService;
use tower::ServiceExt;

use tollgate::clock::{SharedClock, SystemClock};
use tollgate::config::{ConfigError, Env};
use tollgate::gate::Gate;
use tollgate::idempotency::{IdempotencyStore, DEFAULT_REPLAY_CACHE_SIZE};
use tollgate::problem::{ApiError, ClientError};

use crate::catalog;

/// A function's whole request path: its guards and its routes, as one service.
pub type ServiceStack = BoxCloneSyncService<Request, Response<Body>, Error>;

/// A function: built once per process from its environment, then asked to handle requests.
pub trait GuardedFunction: Send + Sync + Sized + 'static {
    /// Its names in the catalog: the logical name (kill-switch key, rate-limit scope, metrics
    /// dimension) and its limits variable with their default.
    const FUNCTION: &'static catalog::Function;

    /// Builds the function over its guards, already built: only what is its own (settings,
    /// stores, upstreams, its service stack) is written here.
    fn build(parts: Parts<'_>) -> Result<Self, ConfigError>;

    /// Reads the shared guard settings the same way for every function (its limits through
    /// [`GuardedFunction::FUNCTION`]), builds the [`Gate`] over the clients, then [`GuardedFunction::build`].
    fn from_env(
        env: &Env,
        ddb: aws_sdk_dynamodb::Client,
        ssm: Option<aws_sdk_ssm::Client>,
        clock: SharedClock,
    ) -> Result<Self, ConfigError> {
        let guard = crate::guard_settings(env, Self::FUNCTION)?;
        let mut gate = Gate::new(guard, ddb.clone(), clock.clone());
        if let Some(ssm) = ssm {
            gate = gate.with_ssm(ssm);
        }
        Self::build(Parts {
            env,
            gate,
            ddb,
            clock,
        })
    }

    /// The function's guards (and settings: base path, CORS origins).
    fn gate(&self) -> &Gate;

    /// The function's request path, guards first: one `ServiceBuilder`, built in
    /// [`GuardedFunction::build`].
    fn service(&self) -> ServiceStack;

    /// Answers one request through [`GuardedFunction::service`]; never fails (errors are
    /// problem+json responses).
    fn handle(&self, req: Request) -> impl Future<Output = Response<Body>> + Send {
        let service = self.service();
        async move {
            match service.oneshot(req).await {
                Ok(response) => response,
                Err(e) => {
                    // The stack's outermost layer answers every error itself.
                    tracing::error!(error = %e, "service stack failed");
                    ApiError::Internal.to_response("unknown")
                }
            }
        }
    }
}

/// Completed responses kept per process by each function's idempotency store.
pub const REPLAY_CACHE_SIZE_VAR: &str = "IDEMPOTENCY_CACHE_SIZE";

/// What [`GuardedFunction::from_env`] hands a function's [`GuardedFunction::build`]: its environment, its
/// gate, and the client and clock its own stores use (the ones the gate runs on).
pub struct Parts<'a> {
    pub env: &'a Env,
    pub gate: Gate,
    pub ddb: aws_sdk_dynamodb::Client,
    pub clock: SharedClock,
}

impl Parts<'_> {
    /// The function's idempotency store over `table`, keeping a record `ttl` at most, and up to
    /// `IDEMPOTENCY_CACHE_SIZE` completed responses in process (0: none).
    pub fn idempotency(&self, table: &str, ttl: Duration) -> Result<IdempotencyStore, ConfigError> {
        let cached = self
            .env
            .parse_or(REPLAY_CACHE_SIZE_VAR, DEFAULT_REPLAY_CACHE_SIZE)?;
        Ok(
            IdempotencyStore::new(self.ddb.clone(), table, self.clock.clone(), ttl)
                .with_replay_cache(cached),
        )
    }
}

/// Runs `F` on the Lambda runtime. A bad configuration fails the cold start with a message
/// naming the variable.
pub async fn run<F: GuardedFunction>() -> Result<(), Error> {
    tollgate::telemetry::init();
    let env = Env::from_process();
    let sdk = tollgate::aws::load_config().await;
    let app = F::from_env(
        &env,
        tollgate::aws::dynamodb(&sdk, &env),
        Some(tollgate::aws::ssm(&sdk, &env)),
        Arc::new(SystemClock),
    )
    .inspect_err(|e| tracing::error!(error = %e, "bad configuration"))?;
    // The limits this process counts under, for the operator's CLI: once, off the request path,
    // after the first answer has gone, so the write reuses the connection that answer opened
    // instead of opening a second one beside it at cold start (a cold process's peak memory).
    let app = Arc::new(app);
    let published = Arc::new(std::sync::Once::new());
    let service = app.service().map_response({
        let app = app.clone();
        move |response| {
            published.call_once(|| {
                let app = app.clone();
                tokio::spawn(async move { app.gate().publish_limits().await });
            });
            response
        }
    });
    lambda_http::run(service).await
}
