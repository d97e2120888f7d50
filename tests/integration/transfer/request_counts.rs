//! DynamoDB requests per transfer, counted by an SDK interceptor.

use tollgate::catalog;
use tollgate_tests::transfer::TransferHarness;

#[tokio::test]
async fn a_new_transfer_costs_one_transaction_and_a_replay_at_most_one_request() {
    let h = TransferHarness::with_env(&[(
        catalog::TRANSFER.limits_variable,
        "ip=1000/1m,client=1000/1m",
    )])
    .await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 1_000, "JPY").await;
    let b = h.account(&alice, 0, "JPY").await;

    // The first request of a warm process also reads the kill switch and the token.
    h.send(h.post(&alice, "warm", &TransferHarness::body(&a, &b, 1)))
        .await;
    h.counter.reset();
    let resp = h
        .send(h.post(&alice, "new", &TransferHarness::body(&a, &b, 5)))
        .await;
    assert_eq!(resp.status(), 201);
    let counts = h.counter.snapshot();
    assert_eq!(h.counter.get("TransactWriteItems"), 1, "{counts:?}");
    assert_eq!(
        h.counter.get("UpdateItem"),
        2,
        "the ip and client layers: {counts:?}"
    );
    assert_eq!(h.counter.total(), 3, "nothing else: {counts:?}");

    h.counter.reset();
    let replay = h
        .send(h.post(&alice, "new", &TransferHarness::body(&a, &b, 5)))
        .await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let counts = h.counter.snapshot();
    assert_eq!(
        h.counter.total() - h.counter.get("UpdateItem"),
        1,
        "one request besides the limiter: {counts:?}"
    );
}

#[tokio::test]
async fn the_token_lookup_is_cached_per_process() {
    let h = TransferHarness::new().await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 1_000, "JPY").await;
    h.counter.reset();
    for _ in 0..5 {
        assert_eq!(h.get(&alice, &format!("/accounts/{a}")).await.status(), 200);
    }
    assert_eq!(
        h.counter.get("GetItem"),
        5 + 1 + 1,
        "5 account reads, 1 token lookup, 1 kill-switch read: {:?}",
        h.counter.snapshot()
    );
}

/// A request refused by a block-cached layer costs no DynamoDB request in any layer: `ip`,
/// `client` (a client this process has verified, refused before its `ip` increment and
/// refund) and `global`. A request with a token this process has not verified is still counted
/// in `ip` first (lesson 002).
#[tokio::test]
async fn a_block_cached_rejection_costs_nothing_in_every_layer() {
    for (limits, full) in [
        ("ip=3/1m,client=1000/1m", "ip"),
        ("ip=1000/1m,client=3/1m", "client"),
        ("ip=1000/1m,client=1000/1m,global=3/1m", "global"),
    ] {
        let h = TransferHarness::with_env(&[(catalog::TRANSFER.limits_variable, limits)]).await;
        let alice = h.client("alice").await;
        let a = h.account(&alice, 1_000, "JPY").await;
        for _ in 0..3 {
            let resp = h.get(&alice, &format!("/accounts/{a}")).await;
            assert_eq!(resp.status(), 200, "{limits}");
        }
        // The first refusal may cost the write that finds the layer full.
        assert_eq!(h.get(&alice, &format!("/accounts/{a}")).await.status(), 429);
        h.counter.reset();
        for _ in 0..20 {
            let resp = h.get(&alice, &format!("/accounts/{a}")).await;
            assert_eq!(resp.status(), 429, "{limits}");
            let policy = resp.headers()["ratelimit-policy"].to_str().unwrap();
            assert!(policy.starts_with(&format!("\"{full}\"")), "{policy}");
        }
        assert_eq!(h.counter.total(), 0, "{full}: {:?}", h.counter.snapshot());
    }

    // A wrong token against a full `client` layer of someone else still costs its `ip` unit.
    let h =
        TransferHarness::with_env(&[(catalog::TRANSFER.limits_variable, "ip=1000/1m,client=1/1m")])
            .await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 1_000, "JPY").await;
    assert_eq!(h.get(&alice, &format!("/accounts/{a}")).await.status(), 200);
    let stranger = tollgate_tests::transfer::TestClient {
        id: alice.id.clone(),
        token: "tg_not_a_token".into(),
    };
    h.counter.reset();
    assert_eq!(
        h.get(&stranger, &format!("/accounts/{a}")).await.status(),
        401
    );
    assert_eq!(
        h.counter.get("UpdateItem"),
        1,
        "the ip unit: {:?}",
        h.counter.snapshot()
    );
}
