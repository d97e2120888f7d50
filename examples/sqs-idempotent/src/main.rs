//! The Lambda entry point: [`example_sqs_idempotent::Consumer`] over the [`Shipper`] effect.

use std::sync::Arc;

use example_sqs_idempotent::{Consumer, Shipper};
use lambda_http::lambda_runtime::{self, service_fn, LambdaEvent};
use tollgate::clock::SystemClock;
use tollgate::config::Env;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    tollgate::telemetry::init();
    let env = Env::from_process();
    let config = tollgate::aws::load_config().await;
    // `DYNAMODB_ENDPOINT` points it at DynamoDB Local when set.
    let ddb = tollgate::aws::dynamodb(&config, &env);
    let shipper = Shipper::from_env(&env, ddb.clone())?;
    let consumer = Consumer::new(&env, ddb, Arc::new(SystemClock), shipper)?;
    let consumer = &consumer;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| async move {
        consumer.handle(event).await
    }))
    .await
}
