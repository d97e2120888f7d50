//! The Lambda entry point both functions share: read configuration, build clients once, publish
//! the limits for the operator's CLI ([`tollgate::published_limits`]), serve;
//! and the one request lifecycle both follow ([`Function::handle`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lambda_http::{service_fn, Body, Error, Request, Response};
use tracing::Instrument;

use tollgate::clock::{SharedClock, SystemClock};
use tollgate::config::{ConfigError, Env};
use tollgate::gate::Gate;
use tollgate::http::{finish, request_id, respond, route_path};
use tollgate::idempotency::{IdempotencyStore, DEFAULT_REPLAY_CACHE_SIZE};
use tollgate::problem::{ApiError, ClientError};
use tollgate::ratelimit::Admission;

use crate::catalog;

/// A function: built once per process from its environment, then asked to handle requests.
pub trait Function: Send + Sync + Sized + 'static {
    /// Its names in the catalog: the logical name (kill-switch key, rate-limit scope, metrics
    /// dimension) and its limits variable with their default.
    const FUNCTION: &'static catalog::Function;

    /// What its routes may answer: the shared [`ApiError`]s and its own.
    type Error: ClientError + From<ApiError> + Send;

    /// Builds the function over its guards, already built: only what is its own (settings,
    /// stores, upstreams) is written here.
    fn build(parts: Parts<'_>) -> Result<Self, ConfigError>;

    /// Reads the shared guard settings the same way for every function (its limits through
    /// [`Function::FUNCTION`]), builds the [`Gate`] over the clients, then [`Function::build`].
    fn from_env(
        env: &Env,
        ddb: aws_sdk_dynamodb::Client,
        ssm: Option<aws_sdk_ssm::Client>,
        clock: SharedClock,
    ) -> Result<Self, ConfigError> {
        let guard = crate::guard_settings(env, Self::FUNCTION)?;
        let gate = Gate::new(guard, ddb.clone(), ssm, clock.clone());
        Self::build(Parts {
            env,
            gate,
            ddb,
            clock,
        })
    }

    /// The function's guards (and settings: base path, CORS origins).
    fn gate(&self) -> &Gate;

    /// The methods the route at `path` (after `BASE_PATH`) serves, as its 405's `Allow` lists
    /// them; `None` when no route matches. A CORS preflight is answered from this alone.
    fn methods(path: &str) -> Option<&'static str>;

    /// Runs the guards and the route's work for one request that is not an answered preflight.
    fn route(
        &self,
        req: &Request,
        request_id: &str,
        admission: &mut Admission,
    ) -> impl Future<Output = Result<Response<Body>, Self::Error>> + Send;

    /// Answers one request; never fails (errors are problem+json responses). Written once for
    /// both functions so CORS, `X-Request-Id`, the `RateLimit` fields and metrics cannot differ
    /// between them: a preflight from a listed origin is answered before [`Function::route`]
    /// (so before any guard: it reads nothing and counts in no layer), and every other answer
    /// gets its CORS headers after it, errors and replays included.
    fn handle(&self, req: Request) -> impl Future<Output = Response<Body>> + Send {
        async move {
            let request_id = request_id(&req);
            let settings = self.gate().settings();
            let origin = settings.cors.listed_origin(req.headers());
            if let Some(origin) = &origin {
                let methods = route_path(&req, &settings.base_path).and_then(Self::methods);
                if let (true, Some(methods)) = (tollgate::cors::is_preflight(&req), methods) {
                    let preflight = settings.cors.preflight(origin.clone(), methods);
                    return finish(preflight, &request_id, None);
                }
            }
            let span = tracing::info_span!("request", request_id = %request_id, function = Self::FUNCTION.name);
            let mut admission = Admission::default();
            let result = self
                .route(&req, &request_id, &mut admission)
                .instrument(span)
                .await;
            self.gate().metrics().record(&result);
            let mut response = respond(result, &request_id, Some(&admission));
            settings.cors.decorate(origin, &mut response);
            response
        }
    }
}

/// Completed responses kept per process by each function's idempotency store.
pub const REPLAY_CACHE_SIZE_VAR: &str = "IDEMPOTENCY_CACHE_SIZE";

/// What [`Function::from_env`] hands a function's [`Function::build`]: its environment, its
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
pub async fn run<F: Function>() -> Result<(), Error> {
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
    let app = Arc::new(app);
    // The limits this process counts under, for the operator's CLI: once, off the request path.
    let publisher = app.clone();
    tokio::spawn(async move { publisher.gate().publish_limits().await });
    lambda_http::run(service_fn(move |req: Request| {
        let app = app.clone();
        async move { Ok::<_, Error>(app.handle(req).await) }
    }))
    .await
}
