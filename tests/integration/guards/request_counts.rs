//! What each decision costs in DynamoDB requests, counted by an SDK interceptor.

use std::time::Duration;

use tollgate::gate::Gate;
use tollgate_tests::dynamo::{self, Tables};
use tollgate_tests::events::HttpEvent;
use tollgate_tests::manual_clock;
use tollgate_tests::pipeline::{guarded, settings};

#[tokio::test]
async fn an_admitted_request_costs_one_request_per_layer() {
    let (ddb, counter) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let (_, clock) = manual_clock();
    let gate = Gate::new(settings(&tables, "ip=10/1h,global=100/1d", &[]), ddb, clock);
    let req = HttpEvent::post("/session").request();

    guarded(&gate, &req, None).await; // warms the kill-switch cache
    counter.reset();
    for _ in 0..3 {
        assert_eq!(guarded(&gate, &req, None).await.status(), 200);
    }
    assert_eq!(counter.get("UpdateItem"), 6, "{:?}", counter.snapshot());
    assert_eq!(counter.total(), 6, "nothing else: {:?}", counter.snapshot());
}

#[tokio::test]
async fn a_rejection_learns_its_reset_without_a_second_read_and_the_block_cache_costs_none() {
    let (ddb, counter) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let (clock, shared) = manual_clock();
    let gate = Gate::new(
        settings(&tables, "ip=2/1h", &[]),
        ddb.clone(),
        shared.clone(),
    );
    let req = HttpEvent::post("/session").request();
    for _ in 0..2 {
        assert_eq!(guarded(&gate, &req, None).await.status(), 200);
    }
    // Within the kill switch's cache time, so the only requests are the limiter's.
    clock.advance(Duration::from_secs(3));
    counter.reset();
    // The process that took the last unit knows the key is full: its rejections are free.
    assert_eq!(guarded(&gate, &req, None).await.status(), 429);
    assert_eq!(counter.total(), 0, "{:?}", counter.snapshot());

    // Another process learns it from one failed write, with the reset, and no read.
    let other = Gate::new(settings(&tables, "ip=2/1h", &[]), ddb, shared);
    guarded(
        &other,
        &HttpEvent::post("/session").from_ip("192.0.2.99").request(),
        None,
    )
    .await;
    counter.reset();
    let first = guarded(&other, &req, None).await;
    assert_eq!(first.status(), 429);
    assert_eq!(first.headers()["retry-after"], "3596");
    assert_eq!(
        counter.snapshot(),
        [("UpdateItem".to_string(), 1)].into(),
        "one write, no read"
    );

    counter.reset();
    for _ in 0..50 {
        let resp = guarded(&other, &req, None).await;
        assert_eq!(resp.status(), 429);
    }
    assert_eq!(
        counter.total(),
        0,
        "the block cache answers: {:?}",
        counter.snapshot()
    );

    // Without the block cache each rejection is exactly one failed conditional write.
    let (ddb, counter) = dynamo::client();
    let (_, shared) = manual_clock();
    let uncached = Gate::new(
        settings(&tables, "ip=2/1h", &[("RATE_LIMIT_BLOCK_CACHE_SIZE", "0")]),
        ddb,
        shared,
    );
    guarded(&uncached, &req, None).await;
    counter.reset();
    for _ in 0..5 {
        assert_eq!(guarded(&uncached, &req, None).await.status(), 429);
    }
    assert_eq!(counter.snapshot(), [("UpdateItem".to_string(), 5)].into());
}
