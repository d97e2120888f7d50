//! `examples/sqs-idempotent`: its README's invocations (`cargo lambda invoke --data-file
//! events/batch.json`), fed to the handler `main` runs.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use example_sqs_idempotent::sqs::{SqsBatchResponse, SqsEvent};
use example_sqs_idempotent::{Consumer, Fulfil, FulfilError, Order, Shipper, LEASE};
use lambda_http::lambda_runtime::{Context, LambdaEvent};
use tollgate::clock::SharedClock;
use tollgate::idempotency::{Claim, IdempotencyKey, IdempotencyStore, Scope};
use tollgate_tests::{dynamo, manual_clock};

use super::ExampleTables;

const EXAMPLE: &str = "sqs-idempotent";
const FIRST: &str = "059f36b4-87a3-44ab-83d2-661975830a7d";
const SECOND: &str = "2e1424d4-f796-459a-8184-9c92662be6da";
const UNREADABLE: &str = "7b3c1f0e-5d2a-4c8b-9e6f-1a2b3c4d5e6f";

/// The README's event file, as `cargo lambda invoke --data-file` sends it.
fn batch() -> SqsEvent {
    let path = super::example_dir(EXAMPLE).join("events/batch.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("an SQS event")
}

async fn invoke<F: Fulfil>(consumer: &Consumer<F>) -> serde_json::Value {
    let response: SqsBatchResponse = consumer
        .handle(LambdaEvent::new(batch(), Context::default()))
        .await
        .expect("the handler answers");
    // What `cargo lambda invoke` prints: the response as the runtime serialises it.
    serde_json::to_value(response).unwrap()
}

fn failures(ids: &[&str]) -> serde_json::Value {
    let items: Vec<_> = ids
        .iter()
        .map(|id| serde_json::json!({ "itemIdentifier": id }))
        .collect();
    serde_json::json!({ "batchItemFailures": items })
}

pub(super) async fn shipped(
    ddb: &aws_sdk_dynamodb::Client,
    tables: &ExampleTables,
    order: &str,
) -> u64 {
    let out = ddb
        .get_item()
        .table_name(tables.name("ShipmentsTable"))
        .key("pk", AttributeValue::S(format!("order#{order}")))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    out.item()
        .and_then(|i| i.get("shipped"))
        .map(|n| n.as_n().unwrap().parse().unwrap())
        .unwrap_or(0)
}

struct Setup {
    ddb: aws_sdk_dynamodb::Client,
    tables: ExampleTables,
    clock: tollgate::clock::ManualClock,
    shared: SharedClock,
    env: tollgate::config::Env,
}

async fn setup() -> Setup {
    let (ddb, _counter) = dynamo::client();
    let tables = ExampleTables::create(&ddb, EXAMPLE).await;
    let (clock, shared) = manual_clock();
    let env = tables.function_env(EXAMPLE, &[]);
    Setup {
        ddb,
        tables,
        clock,
        shared,
        env,
    }
}

impl Setup {
    /// The consumer as `main` builds it, over `fulfil`.
    fn consumer<F: Fulfil>(&self, fulfil: F) -> Consumer<F> {
        Consumer::new(&self.env, self.ddb.clone(), self.shared.clone(), fulfil).unwrap()
    }

    fn shipper(&self) -> Shipper {
        Shipper::from_env(&self.env, self.ddb.clone()).unwrap()
    }
}

#[tokio::test]
async fn each_order_ships_once_and_only_the_unreadable_record_is_reported() {
    let s = setup().await;
    let consumer = s.consumer(s.shipper());
    // 1. The batch: two orders shipped, the unreadable record reported.
    assert_eq!(invoke(&consumer).await, failures(&[UNREADABLE]));
    assert_eq!(shipped(&s.ddb, &s.tables, "o-1001").await, 1);
    assert_eq!(shipped(&s.ddb, &s.tables, "o-1002").await, 1);
    // 2. The same batch again (SQS redelivers it), to another instance: nothing ships twice.
    let cold = s.consumer(s.shipper());
    assert_eq!(invoke(&cold).await, failures(&[UNREADABLE]));
    assert_eq!(shipped(&s.ddb, &s.tables, "o-1001").await, 1);
    assert_eq!(shipped(&s.ddb, &s.tables, "o-1002").await, 1);
}

/// Fails each listed order once, then ships it: a provider's passing outage.
#[derive(Clone)]
struct FailsOnce {
    inner: Shipper,
    pending: Arc<Mutex<HashSet<String>>>,
}

impl Fulfil for FailsOnce {
    async fn fulfil(&self, order: &Order) -> Result<String, FulfilError> {
        if self.pending.lock().unwrap().remove(&order.order_id) {
            return Err(FulfilError("provider unavailable".into()));
        }
        self.inner.fulfil(order).await
    }
}

#[tokio::test]
async fn a_failed_record_is_reported_and_released_so_its_redelivery_runs_it() {
    let s = setup().await;
    let consumer = s.consumer(FailsOnce {
        inner: s.shipper(),
        pending: Arc::new(Mutex::new(HashSet::from(["o-1002".to_string()]))),
    });
    // 3. o-1002's effect fails: reported, and its claim released.
    assert_eq!(invoke(&consumer).await, failures(&[SECOND, UNREADABLE]));
    assert_eq!(shipped(&s.ddb, &s.tables, "o-1002").await, 0);
    let records = dynamo::scan_all(&s.ddb, s.tables.name("IdempotencyTable")).await;
    assert_eq!(
        records.len(),
        1,
        "only o-1001's record: o-1002's claim was released"
    );
    // The redelivery runs it at once, with no wait for a lease; o-1001 is not shipped again.
    assert_eq!(invoke(&consumer).await, failures(&[UNREADABLE]));
    assert_eq!(shipped(&s.ddb, &s.tables, "o-1002").await, 1);
    assert_eq!(shipped(&s.ddb, &s.tables, "o-1001").await, 1);
}

#[tokio::test]
async fn a_record_another_consumer_holds_is_reported_until_its_lease_lapses() {
    let s = setup().await;
    // Another consumer claimed the first message and has not finished.
    let other = IdempotencyStore::new(
        s.ddb.clone(),
        s.tables.name("IdempotencyTable"),
        s.shared.clone(),
        Duration::from_secs(86_400),
    );
    let key = IdempotencyKey::parse(Some(FIRST.as_bytes())).unwrap();
    let scope = Scope::new(
        example_sqs_idempotent::CONSUMER,
        example_sqs_idempotent::ROUTE,
        &key,
    );
    let body = serde_json::json!({"order_id": "o-1001", "quantity": 2});
    let claim = other
        .claim(&scope, &tollgate::idempotency::fingerprint(&body), LEASE)
        .await
        .unwrap();
    assert!(matches!(claim, Claim::Acquired(_)));

    let consumer = s.consumer(s.shipper());
    assert_eq!(invoke(&consumer).await, failures(&[FIRST, UNREADABLE]));
    assert_eq!(shipped(&s.ddb, &s.tables, "o-1001").await, 0);
    // That consumer died: once its lease lapses, the redelivery takes the record over.
    s.clock.advance(LEASE + Duration::from_secs(1));
    assert_eq!(invoke(&consumer).await, failures(&[UNREADABLE]));
    assert_eq!(shipped(&s.ddb, &s.tables, "o-1001").await, 1);
}
