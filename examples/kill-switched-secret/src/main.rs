//! The Lambda entry point: the stack is [`example_kill_switched_secret::service`].

use std::sync::Arc;

use tollgate::clock::SystemClock;
use tollgate::config::Env;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    tollgate::telemetry::init();
    let env = Env::from_process();
    let config = tollgate::aws::load_config().await;
    // `DYNAMODB_ENDPOINT` / `SSM_ENDPOINT` point them elsewhere when set.
    let ddb = tollgate::aws::dynamodb(&config, &env);
    let ssm = tollgate::aws::ssm(&config, &env);
    let service =
        example_kill_switched_secret::service(&env, ddb, Some(ssm), Arc::new(SystemClock))?;
    lambda_http::run(service).await
}
