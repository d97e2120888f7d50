//! A committed transaction whose response is lost on the wire (a fault proxy between the SDK
//! and DynamoDB Local drops it): still exactly one transfer and a correct reply.

use tollgate_tests::dynamo;
use tollgate_tests::fault_proxy::{Fault, FaultProxy};
use tollgate_tests::json_body;
use tollgate_tests::transfer::TransferHarness;

async fn through_proxy() -> (TransferHarness, FaultProxy) {
    let proxy = FaultProxy::start(&dynamo::endpoint()).await;
    let (ddb, counter) = dynamo::client_at(&proxy.endpoint());
    (TransferHarness::build(ddb, counter, &[]).await, proxy)
}

#[tokio::test]
async fn a_lost_response_after_commit_is_still_one_transfer_and_a_201() {
    for drops in [1, 3] {
        // One drop or three: the ledger resends the same attempt (same token, same bytes) until
        // DynamoDB answers it, as done.
        let (h, proxy) = through_proxy().await;
        let alice = h.client("alice").await;
        let a = h.account(&alice, 1_000, "JPY").await;
        let b = h.account(&alice, 0, "JPY").await;
        for _ in 0..drops {
            proxy.arm("TransactWriteItems", Fault::DropResponseAfterCommit);
        }
        let resp = h
            .send(h.post(&alice, "lost", &TransferHarness::body(&a, &b, 300)))
            .await;
        assert_eq!(resp.status(), 201, "{drops} drops: {:?}", json_body(&resp));
        assert!(
            resp.headers().get("idempotent-replayed").is_none(),
            "the first answer, not a replay"
        );
        assert_eq!(proxy.fired(), drops);
        assert!(
            proxy.seen("TransactWriteItems") > drops,
            "the attempt was sent again"
        );
        assert_eq!(
            (h.balance(&a).await, h.balance(&b).await),
            (700, 300),
            "{drops} drops"
        );
        assert_eq!(h.count(&h.tables.transfers).await, 1);

        // The client, which may not have seen the 201 either, retries: the same bytes back.
        let retry = h
            .send(h.post(&alice, "lost", &TransferHarness::body(&a, &b, 300)))
            .await;
        assert_eq!(retry.headers()["idempotent-replayed"], "true");
        assert_eq!(retry.body().as_ref(), resp.body().as_ref());
    }
}

#[tokio::test]
async fn a_request_dropped_before_dynamodb_saw_it_commits_once_on_the_retry() {
    let (h, proxy) = through_proxy().await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 1_000, "JPY").await;
    let b = h.account(&alice, 0, "JPY").await;
    proxy.arm("TransactWriteItems", Fault::DropRequest);
    proxy.arm("TransactWriteItems", Fault::ServerError);
    let resp = h
        .send(h.post(&alice, "k", &TransferHarness::body(&a, &b, 1)))
        .await;
    assert_eq!(resp.status(), 201);
    assert_eq!((h.balance(&a).await, h.balance(&b).await), (999, 1));
    assert_eq!(h.count(&h.tables.transfers).await, 1);
}

/// A store failure is a 5xx, stores nothing, and the key's retry runs anew. (A 500 may hide a
/// commit, so the 503 says the outcome is unknown: `failures.rs`.)
#[tokio::test]
async fn a_failing_store_gives_503_and_leaves_the_key_free() {
    let (h, proxy) = through_proxy().await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 1_000, "JPY").await;
    let b = h.account(&alice, 0, "JPY").await;
    // A 500 on every attempt: the request fails as a whole (the ledger's read of the key's
    // record finds nothing, which proves nothing: outcome unknown).
    proxy.arm_always("TransactWriteItems", Fault::ServerError);
    let body = TransferHarness::body(&a, &b, 40);
    let failed = h.send(h.post(&alice, "k-5xx", &body)).await;
    assert_eq!(failed.status(), 503, "{:?}", json_body(&failed));
    assert!(failed.headers().contains_key("retry-after"));
    assert_eq!(proxy.fired(), 6, "the ledger's six attempts");
    proxy.disarm("TransactWriteItems");
    assert_eq!(
        h.count(&h.tables.idempotency).await,
        0,
        "nothing stored under the key"
    );
    assert_eq!((h.balance(&a).await, h.balance(&b).await), (1_000, 0));

    let retried = h.send(h.post(&alice, "k-5xx", &body)).await;
    assert_eq!(retried.status(), 201);
    assert!(retried.headers().get("idempotent-replayed").is_none());
    assert_eq!((h.balance(&a).await, h.balance(&b).await), (960, 40));
}

/// A stored refusal whose write answer is lost: its resend finds our own record, and the
/// client still gets a first answer, not a replay.
#[tokio::test]
async fn a_lost_answer_to_storing_a_refusal_is_still_a_first_answer() {
    let (h, proxy) = through_proxy().await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 10, "JPY").await;
    let b = h.account(&alice, 0, "JPY").await;
    proxy.arm("PutItem", Fault::DropResponseAfterCommit);
    let body = TransferHarness::body(&a, &b, 500);
    let first = h.send(h.post(&alice, "k-402-lost", &body)).await;
    assert_eq!(first.status(), 402);
    assert_eq!(proxy.fired(), 1);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let again = h.send(h.post(&alice, "k-402-lost", &body)).await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.body().as_ref(), first.body().as_ref());
}
