//! Lesson 000 (the limit that never reopened) and the invariants of the limiter.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tollgate::gate::Gate;
use tollgate_tests::dynamo::{self, counters_matching, Tables};
use tollgate_tests::events::HttpEvent;
use tollgate_tests::pipeline::{guarded, settings};
use tollgate_tests::{json_body, manual_clock};

async fn new_gate(
    limits: &str,
    extra: &[(&str, &str)],
) -> (
    Gate,
    Tables,
    aws_sdk_dynamodb::Client,
    tollgate::clock::ManualClock,
) {
    let (ddb, _) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let (clock, shared) = manual_clock();
    let gate = Gate::new(settings(&tables, limits, extra), ddb.clone(), shared);
    (gate, tables, ddb, clock)
}

/// Lesson 000, with and without the block cache: the second run makes every rejected retry
/// reach DynamoDB, so the conditional increment itself is what keeps the counter at 10.
#[tokio::test]
async fn lesson_000_counter_stops_at_the_limit_and_the_window_reopens() {
    for cache in ["10000", "0"] {
        let (gate, tables, ddb, clock) =
            new_gate("ip=10/1h", &[("RATE_LIMIT_BLOCK_CACHE_SIZE", cache)]).await;
        let req = HttpEvent::post("/session")
            .from_ip("198.51.100.7")
            .request();

        let mut statuses = Vec::new();
        for _ in 0..13 {
            let resp = guarded(&gate, &req, None).await;
            if resp.status() == 429 {
                let retry_after: u64 = resp.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!(
                    (1..=3600).contains(&retry_after),
                    "Retry-After {retry_after}"
                );
                assert_eq!(json_body(&resp)["code"], "rate_limited");
                assert_eq!(resp.headers()["ratelimit-policy"], "\"ip\";q=10;w=3600");
            }
            statuses.push(resp.status().as_u16());
        }
        assert_eq!(
            statuses,
            [vec![200; 10], vec![429; 3]].concat(),
            "block cache {cache}"
        );
        let counters = counters_matching(&ddb, &tables.rate_limits, "#ip#").await;
        assert_eq!(counters.len(), 1);
        assert_eq!(counters[0].1, 10, "the counter stops at the limit");

        // The client that reconnects every 3 seconds: 200 more rejected retries.
        for _ in 0..200 {
            clock.advance(Duration::from_secs(3));
            assert_eq!(guarded(&gate, &req, None).await.status(), 429);
        }
        assert_eq!(
            counters_matching(&ddb, &tables.rate_limits, "#ip#").await[0].1,
            10
        );

        // Past the window's end (10 minutes into the hour + 600 s of retries): admitted again.
        clock.set(tollgate_tests::T0_MS - 1_000 + 3_600_000);
        let resp = guarded(&gate, &req, None).await;
        assert_eq!(resp.status(), 200, "the next window admits the client");
        assert_eq!(resp.headers()["ratelimit"], "\"ip\";r=9;t=3600");
    }
}

/// Retry-After tells the remaining time of the window, rounded up.
#[tokio::test]
async fn retry_after_is_the_rest_of_the_window() {
    let (gate, _, _, clock) = new_gate("ip=1/1m", &[]).await;
    let req = HttpEvent::post("/x").request();
    assert_eq!(guarded(&gate, &req, None).await.status(), 200);
    clock.advance(Duration::from_millis(20_500));
    let resp = guarded(&gate, &req, None).await;
    assert_eq!(resp.status(), 429);
    // T0 is one second into the minute: 60 - 1 - 20.5 = 38.5 s left, rounded up.
    assert_eq!(resp.headers()["retry-after"], "39");
    assert_eq!(json_body(&resp)["retry_after"], 39);
    assert_eq!(resp.headers()["ratelimit"], "\"ip\";r=0;t=39");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_requests_against_a_limit_of_ten_admit_exactly_ten() {
    let (gate, tables, ddb, _) =
        new_gate("ip=10/1h", &[("RATE_LIMIT_BLOCK_CACHE_SIZE", "0")]).await;
    let gate = Arc::new(gate);
    let req = HttpEvent::post("/session").from_ip("192.0.2.44").request();
    let responses = join_all((0..50).map(|_| {
        let gate = gate.clone();
        let req = req.clone();
        async move { guarded(&gate, &req, None).await.status().as_u16() }
    }))
    .await;
    assert_eq!(responses.iter().filter(|s| **s == 200).count(), 10);
    assert_eq!(responses.iter().filter(|s| **s == 429).count(), 40);
    assert_eq!(
        counters_matching(&ddb, &tables.rate_limits, "#ip#").await[0].1,
        10
    );
}

/// A request a later layer rejects gives back what earlier layers counted: a 429 leaves every
/// counter as it found it.
#[tokio::test]
async fn a_rejection_by_a_later_layer_refunds_the_earlier_ones() {
    let (gate, tables, ddb, _) = new_gate("ip=5/1h,client=2/1h,global=100/1d", &[]).await;
    let req = HttpEvent::post("/transfers")
        .from_ip("192.0.2.50")
        .request();
    let statuses: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(
                guarded(&gate, &req, Some("client-a"))
                    .await
                    .status()
                    .as_u16(),
            );
        }
        v
    };
    assert_eq!(statuses, [200, 200, 429, 429]);
    assert_eq!(
        counters_matching(&ddb, &tables.rate_limits, "#ip#").await[0].1,
        2
    );
    assert_eq!(
        counters_matching(&ddb, &tables.rate_limits, "#client#").await[0].1,
        2
    );
    assert_eq!(
        counters_matching(&ddb, &tables.rate_limits, "#global#").await[0].1,
        2
    );
    // Another client behind the same address still has the address's remaining quota.
    assert_eq!(guarded(&gate, &req, Some("client-b")).await.status(), 200);
    assert_eq!(
        counters_matching(&ddb, &tables.rate_limits, "#ip#").await[0].1,
        3
    );
}

#[tokio::test]
async fn the_global_layer_caps_everyone_together() {
    let (gate, _, _, _) = new_gate("ip=100/1h,global=3/1d", &[]).await;
    let mut statuses = Vec::new();
    for i in 0..5 {
        let req = HttpEvent::post("/session")
            .from_ip(&format!("192.0.2.{}", 60 + i))
            .request();
        statuses.push(guarded(&gate, &req, None).await.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
}

/// Counters of an ended window are never read as the current one, even before TTL deletes them.
#[tokio::test]
async fn counter_items_are_keyed_by_window_and_carry_a_ttl() {
    let (gate, tables, ddb, clock) = new_gate("ip=2/1m", &[]).await;
    let req = HttpEvent::post("/x").from_ip("192.0.2.70").request();
    for _ in 0..2 {
        assert_eq!(guarded(&gate, &req, None).await.status(), 200);
    }
    clock.advance(Duration::from_secs(60));
    assert_eq!(guarded(&gate, &req, None).await.status(), 200);
    let items = dynamo::scan_all(&ddb, &tables.rate_limits).await;
    assert_eq!(items.len(), 2, "one item per window");
    for item in items {
        let expires: u64 = item["expires_at"].as_n().unwrap().parse().unwrap();
        let pk = item["pk"].as_s().unwrap();
        let window_start: u64 = pk.rsplit('#').next().unwrap().parse().unwrap();
        assert_eq!(expires, window_start + 60, "TTL at the window's end: {pk}");
    }
}
