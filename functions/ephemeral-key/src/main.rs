//! Lambda entry point: read configuration, build clients once, serve.

use std::sync::Arc;

use ephemeral_key::App;
use lambda_http::{service_fn, Error, Request};
use tollgate::clock::SystemClock;
use tollgate::config::Env;

#[tokio::main]
async fn main() -> Result<(), Error> {
    tollgate::telemetry::init();
    let env = Env::from_process();
    let sdk = tollgate::aws::load_config().await;
    let app = App::from_env(
        &env,
        tollgate::aws::dynamodb(&sdk, &env),
        Some(tollgate::aws::ssm(&sdk, &env)),
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
