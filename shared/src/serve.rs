//! The Lambda entry point both functions share: read configuration, build clients once, serve.

use std::future::Future;
use std::sync::Arc;

use lambda_http::{service_fn, Body, Error, Request, Response};

use crate::clock::{SharedClock, SystemClock};
use crate::config::{ConfigError, Env};

/// A function: built once per process from its environment, then asked to handle requests.
pub trait Function: Send + Sync + Sized + 'static {
    fn from_env(
        env: &Env,
        ddb: aws_sdk_dynamodb::Client,
        ssm: Option<aws_sdk_ssm::Client>,
        clock: SharedClock,
    ) -> Result<Self, ConfigError>;

    /// Answers one request; never fails (errors are problem+json responses).
    fn handle(&self, req: Request) -> impl Future<Output = Response<Body>> + Send;
}

/// Runs `F` on the Lambda runtime. A bad configuration fails the cold start with a message
/// naming the variable.
pub async fn run<F: Function>() -> Result<(), Error> {
    crate::telemetry::init();
    let env = Env::from_process();
    let sdk = crate::aws::load_config().await;
    let app = F::from_env(
        &env,
        crate::aws::dynamodb(&sdk, &env),
        Some(crate::aws::ssm(&sdk, &env)),
        Arc::new(SystemClock),
    )
    .inspect_err(|e| tracing::error!(error = %e, "bad configuration"))?;
    let app = Arc::new(app);
    lambda_http::run(service_fn(move |req: Request| {
        let app = app.clone();
        async move { Ok::<_, Error>(app.handle(req).await) }
    }))
    .await
}
