//! Same key, same body: one transfer and the same bytes back.

use std::time::Duration;

use tollgate_tests::json_body;
use tollgate_tests::transfer::TransferHarness;

#[tokio::test]
async fn same_key_and_body_twice_moves_money_once_and_replays_the_same_bytes() {
    let h = TransferHarness::new().await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 10_000, "JPY").await;
    let b = h.account(&alice, 0, "JPY").await;
    let body = format!(r#"{{"from":"{a}","to":"{b}","amount":2500,"memo":"rent"}}"#);

    let first = h.send(h.post(&alice, "key-1", &body)).await;
    assert_eq!(first.status(), 201);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let created = json_body(&first);
    let id = created["transfer_id"].as_str().unwrap();
    assert_eq!(
        first.headers()["location"],
        format!("/transfers/{id}").as_str()
    );
    assert_eq!(created["amount"], 2500);
    assert_eq!(created["memo"], "rent");

    let second = h.send(h.post(&alice, "key-1", &body)).await;
    assert_eq!(second.status(), 201);
    assert_eq!(second.headers()["idempotent-replayed"], "true");
    assert_eq!(
        second.body().as_ref(),
        first.body().as_ref(),
        "byte for byte"
    );
    assert_eq!(second.headers()["location"], first.headers()["location"]);
    assert_ne!(second.headers()["x-request-id"], "");

    // Field order and white space do not make another request.
    let reordered = format!(
        "{{ \"memo\" : \"rent\",\n  \"amount\": 2500, \"to\":\"{b}\", \"from\": \"{a}\" }}"
    );
    let third = h.send(h.post(&alice, "\"key-1\"", &reordered)).await;
    assert_eq!(third.status(), 201);
    assert_eq!(third.headers()["idempotent-replayed"], "true");
    assert_eq!(third.body().as_ref(), first.body().as_ref());

    assert_eq!(h.balance(&a).await, 7_500);
    assert_eq!(h.balance(&b).await, 2_500);
    assert_eq!(h.count(&h.tables.transfers).await, 1);
}

#[tokio::test]
async fn same_key_with_another_amount_is_refused_and_moves_nothing() {
    let h = TransferHarness::new().await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 1_000, "JPY").await;
    let b = h.account(&alice, 0, "JPY").await;
    assert_eq!(
        h.send(h.post(&alice, "k", &TransferHarness::body(&a, &b, 100)))
            .await
            .status(),
        201
    );
    let reused = h
        .send(h.post(&alice, "k", &TransferHarness::body(&a, &b, 300)))
        .await;
    assert_eq!(reused.status(), 422);
    assert_eq!(json_body(&reused)["code"], "idempotency_key_reused");
    assert!(reused.headers().get("idempotent-replayed").is_none());
    assert_eq!((h.balance(&a).await, h.balance(&b).await), (900, 100));
    // Not stored: the original is still what the key replays.
    let again = h
        .send(h.post(&alice, "k", &TransferHarness::body(&a, &b, 100)))
        .await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
}

#[tokio::test]
async fn two_clients_may_use_the_same_key() {
    let h = TransferHarness::new().await;
    let alice = h.client("alice").await;
    let bob = h.client("bob").await;
    let a1 = h.account(&alice, 1_000, "JPY").await;
    let a2 = h.account(&alice, 0, "JPY").await;
    let b1 = h.account(&bob, 1_000, "JPY").await;
    let b2 = h.account(&bob, 0, "JPY").await;
    let ra = h
        .send(h.post(&alice, "shared-key", &TransferHarness::body(&a1, &a2, 10)))
        .await;
    let rb = h
        .send(h.post(&bob, "shared-key", &TransferHarness::body(&b1, &b2, 20)))
        .await;
    assert_eq!((ra.status().as_u16(), rb.status().as_u16()), (201, 201));
    assert!(rb.headers().get("idempotent-replayed").is_none());
    assert_eq!((h.balance(&a2).await, h.balance(&b2).await), (10, 20));
}

/// A record past its expiry counts as absent even though DynamoDB's TTL has not deleted it.
#[tokio::test]
async fn an_expired_key_is_a_new_request() {
    let h = TransferHarness::with_env(&[("IDEMPOTENCY_TTL_SECONDS", "3600")]).await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 1_000, "JPY").await;
    let b = h.account(&alice, 0, "JPY").await;
    let body = TransferHarness::body(&a, &b, 100);
    assert_eq!(h.send(h.post(&alice, "old-key", &body)).await.status(), 201);
    h.clock.advance(Duration::from_secs(3599));
    let replay = h.send(h.post(&alice, "old-key", &body)).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    h.clock.advance(Duration::from_secs(2));
    assert_eq!(h.count(&h.tables.idempotency).await, 1, "still stored");
    let fresh = h.send(h.post(&alice, "old-key", &body)).await;
    assert_eq!(fresh.status(), 201);
    assert!(fresh.headers().get("idempotent-replayed").is_none());
    assert_eq!(h.balance(&b).await, 200, "a second transfer after expiry");
    assert_eq!(h.count(&h.tables.transfers).await, 2);
}
