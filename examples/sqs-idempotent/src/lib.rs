//! Idempotent processing of SQS records, with partial batch failures.
//!
//! SQS delivers a message at least once: after a consumer's timeout, a crash, or a batch that
//! failed as a whole, the same message comes again. Each record here is claimed in Tollgate's
//! idempotency table before its effect runs (two-phase mode: [`IdempotencyStore::claim`],
//! [`complete`](IdempotencyStore::complete), [`release`](IdempotencyStore::release)), keyed by
//! its SQS message id and fingerprinted by its body:
//!
//! | the claim finds | the record is | reported |
//! |---|---|---|
//! | nothing: acquired | processed, then completed | done |
//! | acquired, and the effect fails | released, so the redelivery runs it anew | a batch item failure |
//! | a completed record (a redelivery) | skipped: its effect happened once already | done |
//! | a live claim (another consumer is on it now) | left alone | a batch item failure: SQS redelivers it after the visibility timeout |
//! | an unreadable body | not claimed | a batch item failure (after `maxReceiveCount` receipts, the dead-letter queue) |
//!
//! Only the records that failed are reported ([`SqsBatchResponse`]'s `batchItemFailures`, with
//! `ReportBatchItemFailures` on the event source mapping), so SQS redelivers those alone and
//! not the whole batch: the records that succeeded are deleted.
//!
//! The effect is [`Fulfil`]: here [`Shipper`], which counts a shipment per order in a table, as
//! a stand-in for what two-phase mode is for, an effect outside DynamoDB (a payment provider,
//! an email). Were the effect a DynamoDB write, it should commit with the claim in one
//! transaction instead ([`IdempotencyStore::commit`]: see the idempotent-transaction example).

use std::future::Future;
use std::time::Duration;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_http::lambda_runtime::LambdaEvent;
use serde::Deserialize;
use tollgate::clock::SharedClock;
use tollgate::config::{ConfigError, Env};
use tollgate::idempotency::{fingerprint, IdempotencyKey, IdempotencyStore, Once, Scope};

/// The SQS event and response types, as `aws_lambda_events` has them.
pub use aws_lambda_events::event::sqs;

/// The scope every record's key lives in: the queue's consumer, by name.
pub const CONSUMER: &str = "orders-consumer";
/// The "route" part of the scope.
pub const ROUTE: &str = "sqs";
/// How long a claim holds a record: shorter than the queue's visibility timeout (60 s in
/// `template.yaml`), so when a consumer dies holding it, the claim has lapsed by the time SQS
/// redelivers the message.
pub const LEASE: Duration = Duration::from_secs(30);

/// An order, as the producer sends it in a message body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Order {
    pub order_id: String,
    pub quantity: u32,
}

/// The effect of one record, run between its claim and its completion.
pub trait Fulfil: Clone + Send + Sync + 'static {
    /// Does the order's work; the `String` is what is kept under the key (a receipt).
    fn fulfil(&self, order: &Order) -> impl Future<Output = Result<String, FulfilError>> + Send;
}

/// The effect failed: the record is released and reported, so SQS redelivers it.
#[derive(Debug, thiserror::Error)]
#[error("fulfilment failed")]
pub struct FulfilError(#[source] pub Box<dyn std::error::Error + Send + Sync>);

/// The stand-in effect: adds one to `shipped` of the order's item in `SHIPMENTS_TABLE`, so a
/// second run of one order shows (`shipped = 2`). Not idempotent on its own, on purpose.
#[derive(Debug, Clone)]
pub struct Shipper {
    ddb: aws_sdk_dynamodb::Client,
    table: String,
}

impl Shipper {
    pub fn from_env(env: &Env, ddb: aws_sdk_dynamodb::Client) -> Result<Self, ConfigError> {
        Ok(Self {
            ddb,
            table: env.required("SHIPMENTS_TABLE")?,
        })
    }
}

impl Fulfil for Shipper {
    async fn fulfil(&self, order: &Order) -> Result<String, FulfilError> {
        self.ddb
            .update_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(format!("order#{}", order.order_id)))
            .update_expression("ADD shipped :one SET quantity = :q")
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":q", AttributeValue::N(order.quantity.to_string()))
            .send()
            .await
            .map_err(|e| FulfilError(Box::new(e)))?;
        Ok(format!("shipped {} x {}", order.quantity, order.order_id))
    }
}

/// The consumer: the idempotency store and the effect, built once per process.
#[derive(Debug, Clone)]
pub struct Consumer<F> {
    idempotency: IdempotencyStore,
    fulfil: F,
}

/// How one record came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Processed {
    Done,
    Failed,
}

impl<F: Fulfil> Consumer<F> {
    /// The consumer over `IDEMPOTENCY_TABLE` (records kept `IDEMPOTENCY_TTL_SECONDS`, default
    /// a day: longer than SQS keeps a message, 4 days by default, is not needed for
    /// redeliveries, which come within the retention period; match the two if a producer may
    /// resend late).
    pub fn new(
        env: &Env,
        ddb: aws_sdk_dynamodb::Client,
        clock: SharedClock,
        fulfil: F,
    ) -> Result<Self, ConfigError> {
        let ttl = env.seconds_or("IDEMPOTENCY_TTL_SECONDS", 86_400, 60)?;
        Ok(Self {
            idempotency: IdempotencyStore::new(ddb, env.required("IDEMPOTENCY_TABLE")?, clock, ttl)
                .with_replay_cache(1_000),
            fulfil,
        })
    }

    /// The Lambda handler: every record of the batch, in order; the failed ones reported.
    pub async fn handle(
        &self,
        event: LambdaEvent<SqsEvent>,
    ) -> Result<SqsBatchResponse, lambda_http::Error> {
        let mut response = SqsBatchResponse::default();
        for record in &event.payload.records {
            if self.process(record).await == Processed::Failed {
                // A record without a message id cannot be reported; SQS always sets one.
                if let Some(id) = &record.message_id {
                    let mut failure = BatchItemFailure::default();
                    failure.item_identifier = id.clone();
                    response.batch_item_failures.push(failure);
                }
            }
        }
        Ok(response)
    }

    async fn process(&self, record: &SqsMessage) -> Processed {
        let id = record.message_id.as_deref().unwrap_or_default();
        let Ok(key) = IdempotencyKey::new(id) else {
            tracing::error!("a record without a usable message id");
            return Processed::Failed;
        };
        let body = record.body.as_deref().unwrap_or_default();
        let (Ok(value), Ok(order)) = (
            serde_json::from_str::<serde_json::Value>(body),
            serde_json::from_str::<Order>(body),
        ) else {
            // Will not heal: after maxReceiveCount receipts SQS moves it to the dead-letter queue.
            tracing::error!(message_id = id, "unreadable order; reported as failed");
            return Processed::Failed;
        };
        let scope = Scope::new(CONSUMER, ROUTE, &key);
        // Claimed, run, stored; or released when the fulfilment fails.
        let ran = self
            .idempotency
            .once(&scope, &fingerprint(&value), LEASE, || async {
                self.fulfil.fulfil(&order).await.map(String::into_bytes)
            })
            .await;
        match ran {
            // Done now or before. A record that could not be completed is still done: the
            // effect happened, and reporting it would run it again on redelivery (logged).
            Ok(Once::Ran { .. } | Once::Replayed(_)) => Processed::Done,
            Ok(Once::InProgress { .. }) => {
                tracing::info!(
                    message_id = id,
                    "being processed elsewhere; SQS redelivers it"
                );
                Processed::Failed
            }
            Ok(Once::KeyReused) => {
                tracing::error!(
                    message_id = id,
                    "a message id seen before with another body"
                );
                Processed::Failed
            }
            Ok(Once::Failed(e)) => {
                tracing::warn!(message_id = id, error = %e, source = ?std::error::Error::source(&e), "fulfilment failed; released for a retry");
                Processed::Failed
            }
            Err(e) => {
                tracing::error!(message_id = id, error = %e, "idempotency store failed");
                Processed::Failed
            }
        }
    }
}
