//! DynamoDB requests per transfer, counted by an SDK interceptor.

use tollgate_functions::catalog;
use tollgate_tests::transfer::TransferHarness;

#[tokio::test]
async fn a_new_transfer_costs_one_transaction_and_a_replay_at_most_one_request() {
    // Without the replay cache, a replay is the transaction sent again (and cancelled); with
    // it, a process that has seen the key completed sends nothing.
    for (cache, replay_requests) in [("0", 1), ("10000", 0)] {
        let h = TransferHarness::with_env(&[
            (
                catalog::TRANSFER.limits_variable,
                "ip=1000/1m,client=1000/1m",
            ),
            ("IDEMPOTENCY_CACHE_SIZE", cache),
        ])
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
            replay_requests,
            "cache {cache}: requests besides the limiter: {counts:?}"
        );
    }
}

/// The replay cache answers as the store does: the same bytes for the same body, 422 for
/// another, both without a DynamoDB request beyond the limiter; a record learnt from the store
/// (a duplicate another process committed) is kept too; an expired one is never used.
#[tokio::test]
async fn the_replay_cache_answers_like_the_store_and_not_past_expiry() {
    let cached = TransferHarness::with_env(&[("IDEMPOTENCY_TTL_SECONDS", "600")]).await;
    let alice = cached.client("alice").await;
    let a = cached.account(&alice, 1_000, "JPY").await;
    let b = cached.account(&alice, 0, "JPY").await;
    let body = TransferHarness::body(&a, &b, 7);
    let first = cached.send(cached.post(&alice, "k-1", &body)).await;
    assert_eq!(first.status(), 201);

    // Another process over the same tables, without a cache: the store's answer.
    let (ddb, _) = tollgate_tests::dynamo::client();
    let mut env = tollgate::config::Env::from_pairs(cached.tables.env_pairs());
    env.set("IDEMPOTENCY_CACHE_SIZE", "0");
    let (_, clock) = tollgate_tests::manual_clock();
    use tollgate_functions::serve::GuardedFunction;
    let uncached = transfer::App::from_env(&env, ddb, None, clock).unwrap();
    let from_store = uncached.handle(cached.post(&alice, "k-1", &body)).await;

    cached.counter.reset();
    let from_cache = cached.send(cached.post(&alice, "k-1", &body)).await;
    let other_body = TransferHarness::body(&a, &b, 8);
    let reused = cached.send(cached.post(&alice, "k-1", &other_body)).await;
    let counts = cached.counter.snapshot();
    assert_eq!(
        cached.counter.total() - cached.counter.get("UpdateItem"),
        0,
        "{counts:?}"
    );
    assert_eq!(from_cache.status(), from_store.status());
    // The stored part of the answer (the envelope's request id and RateLimit are per request).
    for header in ["content-type", "location", "idempotent-replayed"] {
        assert_eq!(
            from_cache.headers()[header],
            from_store.headers()[header],
            "{header}"
        );
    }
    assert_eq!(from_cache.body().as_ref(), from_store.body().as_ref());
    assert_eq!(from_cache.headers()["idempotent-replayed"], "true");
    assert_eq!(reused.status(), 422);
    assert_eq!(
        tollgate_tests::json_body(&reused)["code"],
        "idempotency_key_reused"
    );

    // A key the other process committed: learnt from the store once, then kept.
    let theirs = uncached.handle(cached.post(&alice, "k-2", &body)).await;
    assert_eq!(theirs.status(), 201);
    assert_eq!(
        cached
            .send(cached.post(&alice, "k-2", &body))
            .await
            .status(),
        201
    );
    cached.counter.reset();
    assert_eq!(
        cached
            .send(cached.post(&alice, "k-2", &body))
            .await
            .status(),
        201
    );
    assert_eq!(cached.counter.total() - cached.counter.get("UpdateItem"), 0);

    // Past the record's expiry the key is new again: a second transfer, not the first's replay.
    cached.clock.advance(std::time::Duration::from_secs(601));
    let again = cached.send(cached.post(&alice, "k-1", &body)).await;
    assert_eq!(again.status(), 201);
    assert!(again.headers().get("idempotent-replayed").is_none());
    assert_ne!(again.body().as_ref(), first.body().as_ref());
    assert_eq!(cached.balance(&b).await, 7 + 7 + 7);
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
