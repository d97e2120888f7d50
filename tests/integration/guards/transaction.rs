//! `IdempotencyStore::commit` on its own, with a toy effect and no function of this project: a
//! counter incremented under a ceiling, on two bare tables of DynamoDB Local. What the library
//! promises any caller: one commit per key, the stored response replayed, 422 for another body,
//! an explained refusal stored and replayed, a rebuilt attempt, and its own lost commit told
//! apart from a duplicate's.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;
use aws_sdk_dynamodb::types::{AttributeValue, CancellationReason, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;
use lambda_http::{Body, Response};
use tollgate::idempotency::{
    Explained, IdempotencyKey, IdempotencyStore, Outcome, Scope, TransactionEffect,
    TransactionError, REPLAYED_HEADER,
};
use tollgate_tests::counting::RequestCounter;
use tollgate_tests::dynamo::{self, create_pk_table, unique_prefix};
use tollgate_tests::fault_proxy::{DynamoError, Fault, FaultProxy};
use tollgate_tests::manual_clock;

const TWI: &str = "TransactWriteItems";
const COUNTER: &str = "visits";

/// Adds one to the counter, expecting it to hold `expected` (a guess `explain` may correct)
/// and to stay at most `max`.
struct Increment {
    table: String,
    expected: u64,
    max: u64,
    /// How often `items` and `explain` were called, and the reasons `explain` saw.
    builds: usize,
    explained: Vec<Vec<CancellationReason>>,
}

impl Increment {
    fn new(table: &str, expected: u64, max: u64) -> Self {
        Self {
            table: table.into(),
            expected,
            max,
            builds: 0,
            explained: Vec::new(),
        }
    }
}

impl TransactionEffect for Increment {
    fn items(&mut self) -> Vec<TransactWriteItem> {
        self.builds += 1;
        let update = Update::builder()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(COUNTER.into()))
            .update_expression("SET #n = #n + :one")
            .condition_expression("#n = :expected AND #n < :max")
            .expression_attribute_names("#n", "n")
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":expected", AttributeValue::N(self.expected.to_string()))
            .expression_attribute_values(":max", AttributeValue::N(self.max.to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .unwrap();
        vec![TransactWriteItem::builder().update(update).build()]
    }

    fn explain(&mut self, reasons: &[CancellationReason]) -> Explained {
        self.explained.push(reasons.to_vec());
        let n = reasons
            .first()
            .and_then(|r| r.item())
            .and_then(|item| item.get("n")?.as_n().ok()?.parse::<u64>().ok());
        match n {
            Some(n) if n >= self.max => Explained::Refused(response(422, "full")),
            Some(n) if n != self.expected => {
                self.expected = n;
                Explained::Rebuild
            }
            _ => Explained::Raced,
        }
    }
}

fn response(status: u16, body: &str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain")
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn body(resp: &Response<Body>) -> &[u8] {
    resp.body().as_ref()
}

struct Setup {
    ddb: Client,
    counter: RequestCounter,
    store: IdempotencyStore,
    counters: String,
    records: String,
}

impl Setup {
    /// Two bare tables (a counter at 0, the records), a store with `cache` replayed responses
    /// in process, its client at `endpoint`.
    async fn at(endpoint: &str, cache: usize) -> Self {
        let (direct, _) = dynamo::client();
        let prefix = unique_prefix();
        let (counters, records) = (format!("{prefix}-counters"), format!("{prefix}-records"));
        create_pk_table(&direct, &counters).await;
        create_pk_table(&direct, &records).await;
        direct
            .put_item()
            .table_name(&counters)
            .item("pk", AttributeValue::S(COUNTER.into()))
            .item("n", AttributeValue::N("0".into()))
            .send()
            .await
            .unwrap();
        let (ddb, counter) = dynamo::client_at(endpoint);
        let (_, clock) = manual_clock();
        let store = IdempotencyStore::new(ddb, &records, clock, Duration::from_secs(86_400))
            .with_replay_cache(cache);
        Self {
            ddb: direct,
            counter,
            store,
            counters,
            records,
        }
    }

    async fn new(cache: usize) -> Self {
        Self::at(&dynamo::endpoint(), cache).await
    }

    async fn count(&self) -> u64 {
        let out = self
            .ddb
            .get_item()
            .table_name(&self.counters)
            .key("pk", AttributeValue::S(COUNTER.into()))
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        out.item().unwrap()["n"].as_n().unwrap().parse().unwrap()
    }

    async fn set_count(&self, n: u64) {
        self.ddb
            .put_item()
            .table_name(&self.counters)
            .item("pk", AttributeValue::S(COUNTER.into()))
            .item("n", AttributeValue::N(n.to_string()))
            .send()
            .await
            .unwrap();
    }

    async fn records(&self) -> Vec<HashMap<String, AttributeValue>> {
        dynamo::scan_all(&self.ddb, &self.records).await
    }

    async fn commit(
        &self,
        key: &str,
        fingerprint: &str,
        effect: &mut Increment,
    ) -> Result<Outcome, TransactionError> {
        let scope = Scope::new(
            "caller",
            "POST /count",
            &IdempotencyKey::parse(Some(key.as_bytes())).unwrap(),
        );
        self.store
            .commit(&scope, fingerprint, response(201, "counted"), effect)
            .await
    }
}

/// Committed once; the same key and body again is the stored response, replayed, with no second
/// effect, even though the response bytes are the same as the retry's own (the call tells its
/// record from another's by its marker, not by the bytes); another body is 422.
#[tokio::test]
async fn one_commit_per_key_then_replays_and_422_for_another_body() {
    let s = Setup::new(0).await;
    let mut first = Increment::new(&s.counters, 0, 10);
    let done = s.commit("k-1", "fp-a", &mut first).await.unwrap();
    let Outcome::Committed(resp) = done else {
        panic!("{done:?}")
    };
    assert_eq!(resp.status(), 201);
    assert!(resp.headers().get(REPLAYED_HEADER).is_none());
    assert_eq!(s.count().await, 1);
    assert_eq!(
        s.records().await.len(),
        1,
        "the key's record, in the same transaction"
    );
    assert_eq!((first.builds, first.explained.len()), (1, 0));

    // Its guess is stale (the counter is at 1 now), but the key's record fails first.
    let mut retry = Increment::new(&s.counters, 0, 10);
    let again = s.commit("k-1", "fp-a", &mut retry).await.unwrap();
    let Outcome::Replayed(resp) = again else {
        panic!("a duplicate with the same bytes is a replay, not ours: {again:?}")
    };
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()[REPLAYED_HEADER], "true");
    assert_eq!(body(&resp), b"counted");
    assert!(
        retry.explained.is_empty(),
        "the key answered it: {:?}",
        retry.explained
    );
    assert_eq!(s.count().await, 1, "no second effect");

    let other = s
        .commit("k-1", "fp-b", &mut Increment::new(&s.counters, 1, 10))
        .await;
    assert_eq!(other.unwrap_err(), TransactionError::KeyReused);
    assert_eq!(s.count().await, 1);

    // Another key is another request.
    let next = s
        .commit("k-2", "fp-a", &mut Increment::new(&s.counters, 1, 10))
        .await
        .unwrap();
    assert!(matches!(next, Outcome::Committed(_)), "{next:?}");
    assert_eq!(s.count().await, 2);
}

/// With a replay cache, a duplicate this process saw completed costs no DynamoDB request, and
/// another body is still 422.
#[tokio::test]
async fn the_replay_cache_answers_a_duplicate_without_a_request() {
    let s = Setup::new(100).await;
    s.commit("k-cached", "fp-a", &mut Increment::new(&s.counters, 0, 10))
        .await
        .unwrap();
    s.counter.reset();
    let mut retry = Increment::new(&s.counters, 1, 10);
    let again = s.commit("k-cached", "fp-a", &mut retry).await.unwrap();
    assert!(
        matches!(&again, Outcome::Replayed(r) if r.headers()[REPLAYED_HEADER] == "true"),
        "{again:?}"
    );
    assert_eq!(retry.builds, 0, "no transaction built");
    let other = s
        .commit("k-cached", "fp-b", &mut Increment::new(&s.counters, 1, 10))
        .await;
    assert_eq!(other.unwrap_err(), TransactionError::KeyReused);
    assert_eq!(s.counter.total(), 0, "{:?}", s.counter.snapshot());
    assert_eq!(s.count().await, 1);
}

/// The effect's condition fails for good: `explain` sees the reasons of its own items only
/// (index 0 is the counter, with its old item), its refusal is stored under the key and
/// answered, nothing else is written; the same key then gets the refusal replayed, without
/// `explain`.
#[tokio::test]
async fn an_explained_refusal_is_stored_and_replayed() {
    let s = Setup::new(0).await;
    s.set_count(3).await;
    let mut full = Increment::new(&s.counters, 3, 3);
    let refused = s.commit("k-full", "fp-a", &mut full).await.unwrap();
    let Outcome::Refused(resp) = refused else {
        panic!("{refused:?}")
    };
    assert_eq!(resp.status(), 422);
    assert_eq!(body(&resp), b"full");
    assert!(resp.headers().get(REPLAYED_HEADER).is_none());
    assert_eq!(full.explained.len(), 1);
    let reasons = &full.explained[0];
    assert_eq!(
        reasons.len(),
        1,
        "the effect's one item, not the key's: {reasons:?}"
    );
    assert_eq!(reasons[0].code(), Some("ConditionalCheckFailed"));
    assert_eq!(reasons[0].item().unwrap()["pk"].as_s().unwrap(), COUNTER);
    assert_eq!(s.count().await, 3);
    let records = s.records().await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["status"].as_n().unwrap(), "422");

    let mut retry = Increment::new(&s.counters, 3, 3);
    let again = s.commit("k-full", "fp-a", &mut retry).await.unwrap();
    let Outcome::Replayed(resp) = again else {
        panic!("{again:?}")
    };
    assert_eq!(resp.status(), 422);
    assert_eq!(body(&resp), b"full");
    assert_eq!(resp.headers()[REPLAYED_HEADER], "true");
    assert!(retry.explained.is_empty());
    assert_eq!(s.count().await, 3);
}

/// A wrong guess corrected by the cancellation: `Rebuild` gets the items built again, sent
/// under a new token, and committed once.
#[tokio::test]
async fn a_rebuilt_effect_is_sent_again_under_a_new_token() {
    let proxy = FaultProxy::start(&dynamo::endpoint()).await;
    let s = Setup::at(&proxy.endpoint(), 0).await;
    proxy.record(TWI);
    s.set_count(5).await;
    let mut guess = Increment::new(&s.counters, 0, 10);
    let done = s.commit("k-guess", "fp-a", &mut guess).await.unwrap();
    assert!(matches!(done, Outcome::Committed(_)), "{done:?}");
    assert_eq!((guess.builds, guess.explained.len()), (2, 1));
    assert_eq!(s.count().await, 6);
    let tokens = tokens(&proxy);
    assert_eq!(tokens.len(), 2);
    assert_ne!(tokens[0], tokens[1]);
}

/// The commit's answer is lost, its resend meets `IdempotentParameterMismatch`, and the new
/// token is cancelled on the key: the record found is this call's own, so the answer is
/// `Committed`, not a replay, and the effect happened once.
#[tokio::test]
async fn a_lost_commit_found_under_a_new_token_is_ours() {
    let proxy = FaultProxy::start(&dynamo::endpoint()).await;
    let s = Setup::at(&proxy.endpoint(), 0).await;
    proxy.record(TWI);
    proxy.arm(TWI, Fault::DropResponseAfterCommit);
    proxy.arm(TWI, Fault::Error(DynamoError::IdempotentParameterMismatch));
    let mut effect = Increment::new(&s.counters, 0, 10);
    let done = s.commit("k-lost", "fp-a", &mut effect).await.unwrap();
    let Outcome::Committed(resp) = done else {
        panic!("{done:?}")
    };
    assert!(resp.headers().get(REPLAYED_HEADER).is_none());
    assert_eq!(s.count().await, 1);
    let tokens = tokens(&proxy);
    assert_eq!(tokens.len(), 3, "{tokens:?}");
    assert_eq!(tokens[0], tokens[1]);
    assert_ne!(tokens[1], tokens[2]);
    assert!(effect.explained.is_empty());
}

/// Throttled on every attempt: nothing committed, the key free (a retry commits); a 500 on
/// every attempt and no record to find: the outcome is unknown.
#[tokio::test]
async fn refused_every_time_is_not_committed_and_500s_are_unknown() {
    let proxy = FaultProxy::start(&dynamo::endpoint()).await;
    let s = Setup::at(&proxy.endpoint(), 0).await;
    proxy.arm_always(TWI, Fault::Error(DynamoError::Throttling));
    let refused = s
        .commit("k-refused", "fp-a", &mut Increment::new(&s.counters, 0, 10))
        .await;
    assert!(
        matches!(refused, Err(TransactionError::NotCommitted { .. })),
        "{refused:?}"
    );
    proxy.disarm(TWI);
    proxy.arm_always(TWI, Fault::ServerError);
    let unknown = s
        .commit("k-unknown", "fp-a", &mut Increment::new(&s.counters, 0, 10))
        .await;
    assert!(
        matches!(unknown, Err(TransactionError::OutcomeUnknown { .. })),
        "{unknown:?}"
    );
    proxy.disarm(TWI);
    let retry = s
        .commit("k-refused", "fp-a", &mut Increment::new(&s.counters, 0, 10))
        .await
        .unwrap();
    assert!(matches!(retry, Outcome::Committed(_)), "{retry:?}");
    assert_eq!(s.count().await, 1);
}

/// The `ClientRequestToken` of each transaction the proxy saw, in order.
fn tokens(proxy: &FaultProxy) -> Vec<String> {
    proxy
        .bodies(TWI)
        .iter()
        .map(|b| {
            let v: serde_json::Value = serde_json::from_slice(b).unwrap();
            v["ClientRequestToken"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// The transaction's SDK request is boxed inside the commit: every future above it (the
/// handler's, its route's) is made and moved once per request and would hold the SDK's
/// kilobytes inline. (Before: 6.5 KB.)
#[tokio::test]
async fn the_commits_future_holds_its_sdk_request_boxed() {
    let s = Setup::new(0).await;
    let mut effect = Increment::new(&s.counters, 0, 10);
    let scope = Scope::new(
        "caller",
        "POST /count",
        &IdempotencyKey::parse(Some(b"k-size")).unwrap(),
    );
    let commit = s
        .store
        .commit(&scope, "fp-a", response(201, "counted"), &mut effect);
    let size = std::mem::size_of_val(&commit);
    assert!(size <= 2048, "the commit's future is {size} bytes");
    drop(commit);
    assert_eq!(s.count().await, 0, "a future not polled does nothing");
}
