//! The Lambda entry point: the stack is [`example_idempotent_transaction::service`].

use std::sync::Arc;

use tollgate::clock::SystemClock;
use tollgate::config::Env;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    tollgate::telemetry::init();
    let env = Env::from_process();
    let config = tollgate::aws::load_config().await;
    // `DYNAMODB_ENDPOINT` points it at DynamoDB Local when set.
    let ddb = tollgate::aws::dynamodb(&config, &env);
    let service = example_idempotent_transaction::service(&env, ddb, Arc::new(SystemClock))?;
    lambda_http::run(service).await
}
