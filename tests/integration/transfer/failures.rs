//! Every way DynamoDB can answer the transfer transaction, driven through the fault proxy:
//! what the client is told, what is stored under the key, and that money moves at most once.
//!
//! DynamoDB Local never conflicts, throttles or fails, so the proxy answers with DynamoDB's own
//! error bodies; the real SDK parses them and the ledger's real branches run.

use std::collections::HashMap;

use serde_json::Value;
use tollgate_functions::catalog;
use tollgate_tests::fault_proxy::{DynamoError, Fault, FaultProxy};
use tollgate_tests::transfer::{TestClient, TransferHarness};
use tollgate_tests::{dynamo, json_body, manual_clock, TickingClock};

const TWI: &str = "TransactWriteItems";

/// A harness whose function talks to DynamoDB through a fault proxy; two accounts of alice's.
struct Setup {
    h: TransferHarness,
    proxy: FaultProxy,
    alice: TestClient,
    a: String,
    b: String,
}

impl Setup {
    async fn new() -> Self {
        Self::with(None).await
    }

    /// `tick_ms`: the function's clock moves on by this much every time it is read.
    async fn with(tick_ms: Option<u64>) -> Self {
        let proxy = FaultProxy::start(&dynamo::endpoint()).await;
        let (ddb, counter) = dynamo::client_at(&proxy.endpoint());
        let (clock, shared) = manual_clock();
        let shared = match tick_ms {
            Some(step) => std::sync::Arc::new(TickingClock::new(clock.clone(), step)),
            None => shared,
        };
        let h = TransferHarness::build_with_clock(ddb, counter, &[], clock, shared).await;
        let alice = h.client("alice").await;
        let a = h.account(&alice, 1_000, "JPY").await;
        let b = h.account(&alice, 0, "JPY").await;
        proxy.record(TWI);
        proxy.record("GetItem");
        Self {
            h,
            proxy,
            alice,
            a,
            b,
        }
    }

    async fn post(&self, key: &str, amount: u64) -> lambda_http::Response<lambda_http::Body> {
        let body = TransferHarness::body(&self.a, &self.b, amount);
        self.h.send(self.h.post(&self.alice, key, &body)).await
    }

    async fn balances(&self) -> (u64, u64) {
        (self.h.balance(&self.a).await, self.h.balance(&self.b).await)
    }

    /// The `ClientRequestToken` of each transaction the proxy saw, in order.
    fn tokens(&self) -> Vec<String> {
        self.proxy
            .bodies(TWI)
            .iter()
            .map(|b| {
                let v: Value = serde_json::from_slice(b).expect("a JSON body");
                v["ClientRequestToken"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }

    /// Reads of the key's record (the ledger resolving an unknown outcome).
    fn key_reads(&self) -> usize {
        let table = format!("\"{}\"", self.h.tables.idempotency);
        self.proxy
            .bodies("GetItem")
            .iter()
            .filter(|b| String::from_utf8_lossy(b).contains(&table))
            .count()
    }

    async fn records(&self) -> usize {
        self.h.count(&self.h.tables.idempotency).await
    }
}

fn detail(resp: &lambda_http::Response<lambda_http::Body>) -> String {
    json_body(resp)["detail"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Lesson 004's worst case: the commit's answer is lost, and every later attempt fails another
/// way. The money moved, so the client must hear 201, not a 503 it may answer with a new key.
#[tokio::test]
async fn a_lost_commit_followed_by_throttling_is_answered_as_committed() {
    let s = Setup::new().await;
    s.proxy.arm(TWI, Fault::DropResponseAfterCommit);
    s.proxy
        .arm_always(TWI, Fault::Error(DynamoError::Throttling));
    let resp = s.post("k-lost-then-throttled", 300).await;
    assert_eq!(resp.status(), 201, "{:?}", json_body(&resp));
    assert!(resp.headers().get("idempotent-replayed").is_none());
    assert_eq!(s.balances().await, (700, 300));
    assert_eq!(s.h.count(&s.h.tables.transfers).await, 1);

    s.proxy.disarm(TWI);
    let retry = s.post("k-lost-then-throttled", 300).await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.body().as_ref(), resp.body().as_ref());
    assert_eq!(s.balances().await, (700, 300));
}

/// The same, and the key's record cannot be read either: the outcome is unknown and the client
/// is told so, with the only safe instruction: the same key again.
#[tokio::test]
async fn an_unknown_outcome_that_cannot_be_resolved_says_retry_with_the_same_key() {
    let s = Setup::new().await;
    s.proxy.arm(TWI, Fault::DropResponseAfterCommit);
    s.proxy.arm_always(
        TWI,
        Fault::Error(DynamoError::ProvisionedThroughputExceeded),
    );
    // Only the key's record is unreadable (the kill switch and the token lookup still work).
    let table = s.h.tables.idempotency.clone();
    s.proxy
        .arm_always_when("GetItem", &table, Fault::ServerError);
    let resp = s.post("k-unknown", 300).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(json_body(&resp)["code"], "temporarily_unavailable");
    assert!(resp.headers().contains_key("retry-after"));
    let d = detail(&resp);
    assert!(
        d.contains("unknown") && d.contains("same Idempotency-Key"),
        "{d}"
    );

    s.proxy.disarm(TWI);
    s.proxy.disarm("GetItem");
    let retry = s.post("k-unknown", 300).await;
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(s.balances().await, (700, 300), "moved once");
}

/// Throttled on every attempt: nothing was applied, the key is free, and the ledger made
/// exactly its own attempts (the SDK does not multiply them).
#[tokio::test]
async fn throttled_every_time_is_503_with_nothing_committed_and_the_key_free() {
    for error in [
        DynamoError::Throttling,
        DynamoError::ProvisionedThroughputExceeded,
    ] {
        let s = Setup::new().await;
        s.proxy.arm_always(TWI, Fault::Error(error.clone()));
        let resp = s.post("k-throttled", 40).await;
        assert_eq!(resp.status(), 503, "{error:?}");
        assert!(
            !detail(&resp).contains("unknown"),
            "{error:?}: {}",
            detail(&resp)
        );
        let tokens = s.tokens();
        assert_eq!(tokens.len(), 6, "{error:?}: six attempts, one request each");
        assert_eq!(s.key_reads(), 0, "nothing to resolve");
        assert!(tokens.iter().all(|t| t == &tokens[0]), "{tokens:?}");
        assert_eq!(s.records().await, 0);

        s.proxy.disarm(TWI);
        let retry = s.post("k-throttled", 40).await;
        assert_eq!(retry.status(), 201, "{error:?}");
        assert!(retry.headers().get("idempotent-replayed").is_none());
        assert_eq!(s.balances().await, (960, 40));
    }
}

/// A 500 may hide a commit: every attempt is a resend of the same token, none is answered
/// definitely, and the key's record, read once at the end, is absent, which proves nothing (a
/// transaction DynamoDB is still applying commits after the read): the outcome is unknown, and
/// the 503 says so, never "nothing committed".
#[tokio::test]
async fn a_500_every_time_is_an_unknown_outcome() {
    let s = Setup::new().await;
    s.proxy.arm_always(TWI, Fault::ServerError);
    let resp = s.post("k-500", 40).await;
    assert_eq!(resp.status(), 503);
    let d = detail(&resp);
    assert!(
        d.contains("unknown") && d.contains("same Idempotency-Key"),
        "{d}"
    );
    assert_eq!(
        s.key_reads(),
        1,
        "one read, which could only have found a commit"
    );
    let tokens = s.tokens();
    assert_eq!(tokens.len(), 6);
    assert!(tokens.iter().all(|t| t == &tokens[0]), "{tokens:?}");
    s.proxy.disarm(TWI);
    let retry = s.post("k-500", 40).await;
    assert_eq!(retry.status(), 201);
    assert!(
        retry.headers().get("idempotent-replayed").is_none(),
        "nothing had committed: the retry ran it"
    );
    assert_eq!(s.balances().await, (960, 40));
}

/// The first send is still being applied when the ledger gives up: the proxy keeps it back (the
/// function sees a lost answer) and every resend of its token meets `fault`: DynamoDB's "this
/// token is in progress", throttling (which refuses the resend, and says nothing of the first
/// send), or a 500. No record yet, and none of those answers says nothing committed, so the
/// client hears the outcome-unknown 503, never "nothing committed, the key is free". Then the
/// transaction lands: the same key gets its 201 (replayed) and the money moved once, where a
/// client who had believed "nothing committed" and sent a new key would have moved it twice.
#[tokio::test]
async fn a_transaction_still_in_flight_when_the_attempts_end_is_an_unknown_outcome() {
    for fault in [
        Fault::Error(DynamoError::TransactionInProgress),
        Fault::Error(DynamoError::Throttling),
        Fault::ServerError,
    ] {
        let s = Setup::new().await;
        let landing = s.proxy.land_later_when(TWI, "");
        s.proxy.arm_always(TWI, fault.clone());
        let resp = s.post("k-in-flight", 300).await;
        assert_eq!(resp.status(), 503, "{fault:?}: {:?}", json_body(&resp));
        assert_eq!(json_body(&resp)["code"], "temporarily_unavailable");
        assert!(resp.headers().contains_key("retry-after"), "{fault:?}");
        let d = detail(&resp);
        assert!(
            d.contains("unknown") && d.contains("same Idempotency-Key"),
            "{fault:?}: {d}"
        );
        let tokens = s.tokens();
        assert_eq!(tokens.len(), 6, "{fault:?}");
        assert!(
            tokens.iter().all(|t| t == &tokens[0]),
            "{fault:?}: the same token until DynamoDB answers it: {tokens:?}"
        );
        assert_eq!(s.key_reads(), 1, "{fault:?}");
        assert_eq!(s.balances().await, (1_000, 0), "{fault:?}: not yet");

        // DynamoDB finishes applying it.
        landing.open();
        assert_eq!(landing.landed().await, [200], "{fault:?}");
        assert_eq!(s.balances().await, (700, 300), "{fault:?}");
        s.proxy.disarm(TWI);
        let retry = s.post("k-in-flight", 300).await;
        assert_eq!(retry.status(), 201, "{fault:?}: {:?}", json_body(&retry));
        assert_eq!(retry.headers()["idempotent-replayed"], "true", "{fault:?}");
        assert_eq!(s.balances().await, (700, 300), "{fault:?}: moved once");
        assert_eq!(s.h.count(&s.h.tables.transfers).await, 1, "{fault:?}");
    }
}

/// A cancellation answers a token definitely (while an earlier send of it is in flight DynamoDB
/// says "in progress"; had it committed, "done"). Here the first send is lost on the way (it
/// never reached DynamoDB), its resend is cancelled by a conflict on an account, and the new
/// token is throttled until the attempts end: DynamoDB refused every token, so the answer is the
/// plain 503 (nothing committed, the key free), with no read of the key needed.
#[tokio::test]
async fn a_cancellation_settles_a_token_whose_first_send_was_lost() {
    let s = Setup::new().await;
    s.proxy.arm(TWI, Fault::DropRequest);
    s.proxy.arm(
        TWI,
        Fault::Error(DynamoError::TransactionConflict { item: s.b.clone() }),
    );
    s.proxy
        .arm_always(TWI, Fault::Error(DynamoError::Throttling));
    let resp = s.post("k-settled", 40).await;
    assert_eq!(resp.status(), 503, "{:?}", json_body(&resp));
    assert!(!detail(&resp).contains("unknown"), "{}", detail(&resp));
    assert_eq!(s.key_reads(), 0, "nothing to resolve");
    let tokens = s.tokens();
    assert_eq!(tokens.len(), 6);
    assert_eq!(tokens[0], tokens[1]);
    assert_ne!(tokens[1], tokens[2]);
    assert!(tokens[2..].iter().all(|t| t == &tokens[2]), "{tokens:?}");
    s.proxy.disarm(TWI);
    let retry = s.post("k-settled", 40).await;
    assert_eq!(retry.status(), 201);
    assert!(retry.headers().get("idempotent-replayed").is_none());
    assert_eq!(s.balances().await, (960, 40));
}

/// A token given up on while its outcome is unknown stays unknown: the first send is kept back,
/// its resend meets `IdempotentParameterMismatch` (so a new token), and the new token is
/// throttled until the attempts end. The answer is the outcome-unknown 503, and the kept-back
/// send then commits; the key's claim lets only one of the tokens move the money.
#[tokio::test]
async fn a_token_given_up_on_while_unknown_stays_unknown() {
    let s = Setup::new().await;
    let landing = s.proxy.land_later_when(TWI, "");
    s.proxy
        .arm(TWI, Fault::Error(DynamoError::IdempotentParameterMismatch));
    s.proxy
        .arm_always(TWI, Fault::Error(DynamoError::Throttling));
    let resp = s.post("k-given-up", 300).await;
    assert_eq!(resp.status(), 503, "{:?}", json_body(&resp));
    assert!(detail(&resp).contains("unknown"), "{}", detail(&resp));
    let tokens = s.tokens();
    assert_eq!(tokens[0], tokens[1]);
    assert_ne!(tokens[1], tokens[2]);
    landing.open();
    assert_eq!(landing.landed().await, [200]);
    s.proxy.disarm(TWI);
    let retry = s.post("k-given-up", 300).await;
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(s.balances().await, (700, 300), "moved once");
}

/// A refusal (402) is stored under the key, and the store's first send commits but its answer
/// is lost, then its resends are throttled. The last answer ("throttled") does not prove the key
/// free: the refusal may be stored, so the 503 says the outcome is unknown, and the same key
/// then gets the stored 402.
#[tokio::test]
async fn a_refusal_whose_store_outcome_is_unknown_says_so() {
    let s = Setup::new().await;
    s.proxy.arm("PutItem", Fault::DropResponseAfterCommit);
    for _ in 0..2 {
        s.proxy
            .arm("PutItem", Fault::Error(DynamoError::Throttling));
    }
    let resp = s.post("k-refusal-unknown", 5_000).await;
    assert_eq!(resp.status(), 503, "{:?}", json_body(&resp));
    let d = detail(&resp);
    assert!(
        d.contains("unknown") && d.contains("same Idempotency-Key"),
        "{d}"
    );
    assert_eq!(s.proxy.fired(), 3);
    let retry = s.post("k-refusal-unknown", 5_000).await;
    assert_eq!(retry.status(), 402, "{:?}", json_body(&retry));
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(s.balances().await, (1_000, 0));
}

/// `TransactionConflict` on the key's item: a duplicate is committing right now. 409 with
/// `Retry-After`; nothing of ours committed.
#[tokio::test]
async fn a_conflict_on_the_key_is_409_in_progress() {
    let s = Setup::new().await;
    s.proxy.arm(
        TWI,
        Fault::Error(DynamoError::TransactionConflict {
            item: "k-key-conflict".into(),
        }),
    );
    let resp = s.post("k-key-conflict", 40).await;
    assert_eq!(resp.status(), 409, "{:?}", json_body(&resp));
    assert_eq!(json_body(&resp)["code"], "request_in_progress");
    assert!(resp.headers().contains_key("retry-after"));
    assert_eq!(s.balances().await, (1_000, 0));
    assert_eq!(s.records().await, 0);
    assert_eq!(s.post("k-key-conflict", 40).await.status(), 201);
}

/// `TransactionConflict` on an account (another transfer holds it), or one item's partition
/// throttled: the transaction was cancelled and nothing applied. Sent again with a new token (a
/// cancelled transaction's is spent) and committed once.
#[tokio::test]
async fn a_cancelled_transaction_is_sent_again_and_commits_once() {
    for on_b in [true, false] {
        let s = Setup::new().await;
        let error = match on_b {
            true => DynamoError::TransactionConflict { item: s.b.clone() },
            false => DynamoError::ItemThrottled { item: s.a.clone() },
        };
        s.proxy.arm(TWI, Fault::Error(error.clone()));
        let resp = s.post("k-cancelled", 40).await;
        assert_eq!(resp.status(), 201, "{error:?}: {:?}", json_body(&resp));
        let tokens = s.tokens();
        assert_eq!(tokens.len(), 2, "{error:?}");
        assert_ne!(tokens[0], tokens[1], "{error:?}");
        assert_eq!(s.balances().await, (960, 40), "{error:?}");
        assert_eq!(s.h.count(&s.h.tables.transfers).await, 1, "{error:?}");
    }
}

/// `TransactionInProgress`: the same token is being applied. Asked again with the same token
/// and the same bytes; `IdempotentParameterMismatch`: a new token.
#[tokio::test]
async fn in_progress_keeps_the_token_and_a_mismatch_takes_a_new_one() {
    for (error, same) in [
        (DynamoError::TransactionInProgress, true),
        (DynamoError::IdempotentParameterMismatch, false),
    ] {
        let s = Setup::new().await;
        s.proxy.arm(TWI, Fault::Error(error.clone()));
        let resp = s.post("k-token", 40).await;
        assert_eq!(resp.status(), 201, "{error:?}: {:?}", json_body(&resp));
        let bodies = s.proxy.bodies(TWI);
        assert_eq!(bodies.len(), 2, "{error:?}");
        assert_eq!(bodies[0] == bodies[1], same, "{error:?}");
        assert_eq!(s.balances().await, (960, 40), "{error:?}");
    }
}

/// A resend under the same token is the same request: items are built once per token, so
/// DynamoDB answers a resend after a lost commit as done, even when time has moved on (here
/// every read of the clock moves it on by a second).
#[tokio::test]
async fn a_resend_after_a_lost_answer_is_the_same_request_byte_for_byte() {
    let s = Setup::with(Some(1_000)).await;
    for _ in 0..3 {
        s.proxy.arm(TWI, Fault::DropResponseAfterCommit);
    }
    let resp = s.post("k-bytes", 300).await;
    assert_eq!(resp.status(), 201, "{:?}", json_body(&resp));
    assert!(resp.headers().get("idempotent-replayed").is_none());
    let mut by_token: HashMap<String, Vec<Vec<u8>>> = HashMap::new();
    for (token, body) in s.tokens().into_iter().zip(s.proxy.bodies(TWI)) {
        by_token.entry(token).or_default().push(body);
    }
    for (token, bodies) in &by_token {
        assert!(
            bodies.iter().all(|b| b == &bodies[0]),
            "token {token}: {} different bodies",
            bodies.len()
        );
    }
    assert_eq!(
        by_token.len(),
        1,
        "one token: no mismatch, no new generation"
    );
    assert_eq!(
        s.proxy.bodies(TWI).len(),
        4,
        "three lost, the fourth answered as done"
    );
    assert_eq!(s.balances().await, (700, 300));
}

/// A deposit whose answer was lost is resent (by the SDK) and applied once; so is an operator's
/// rerun with the same token. (Armed for both operations a deposit could use.)
#[tokio::test]
async fn a_deposit_whose_answer_was_lost_is_applied_once() {
    let s = Setup::new().await;
    s.proxy.arm(TWI, Fault::DropResponseAfterCommit);
    s.proxy.arm("UpdateItem", Fault::DropResponseAfterCommit);
    // Tokens are account-wide in DynamoDB (not per table): unique per run.
    let (first, second) = (tollgate::ids::new_id("dep"), tollgate::ids::new_id("dep"));
    let account = s.h.app.ledger.deposit(&s.b, 100, &first).await.unwrap();
    assert_eq!(account.balance, 100);
    assert_eq!(s.proxy.fired(), 1);
    s.h.app.ledger.deposit(&s.b, 100, &first).await.unwrap();
    assert_eq!(
        s.h.balance(&s.b).await,
        100,
        "the same token again: no change"
    );
    s.h.app.ledger.deposit(&s.b, 100, &second).await.unwrap();
    assert_eq!(s.h.balance(&s.b).await, 200);
}

/// Any other refusal (here a transfers table that does not exist): not sent again, 503 like
/// every failure of our tables, nothing moved, nothing stored, the key free.
#[tokio::test]
async fn a_refused_transaction_is_503_and_commits_nothing() {
    let h = TransferHarness::with_env(&[(
        catalog::TRANSFERS.function_variable,
        "tollgate-no-such-table",
    )])
    .await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 1_000, "JPY").await;
    let b = h.account(&alice, 0, "JPY").await;
    let resp = h
        .send(h.post(
            &alice,
            "k-misconfigured",
            &TransferHarness::body(&a, &b, 10),
        ))
        .await;
    assert_eq!(resp.status(), 503, "{:?}", json_body(&resp));
    assert_eq!(json_body(&resp)["code"], "temporarily_unavailable");
    assert!(!detail(&resp).contains("unknown"), "{}", detail(&resp));
    assert_eq!((h.balance(&a).await, h.balance(&b).await), (1_000, 0));
    assert_eq!(h.count(&h.tables.idempotency).await, 0);
}
