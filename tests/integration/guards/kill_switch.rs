//! The kill switch: a flip applies within the cache time, and an unreadable flag fails closed.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use futures::future::join_all;
use lambda_http::{Body, Response};
use tollgate::clock::ManualClock;
use tollgate::gate::Gate;
use tollgate::kill_switch::{KillSwitch, SetError, DEFAULT_MESSAGE};
use tollgate_functions::catalog;
use tollgate_tests::dynamo::{self, Tables};
use tollgate_tests::events::HttpEvent;
use tollgate_tests::fault_proxy::{Fault, FaultProxy};
use tollgate_tests::pipeline::{guarded, settings};
use tollgate_tests::{json_body, manual_clock};

#[tokio::test]
async fn a_flip_applies_within_the_cache_time_and_counts_nothing() {
    let (ddb, _) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let (clock, shared) = manual_clock();
    let gate = Gate::new(
        settings(&tables, "ip=100/1h", &[("KILL_SWITCH_CACHE_SECONDS", "5")]),
        ddb.clone(),
        shared.clone(),
    );
    // The operator's CLI is another process with its own cache.
    let operator = KillSwitch::new(ddb.clone(), &tables.control, shared, Duration::from_secs(5));
    let req = HttpEvent::post("/session").request();

    assert_eq!(guarded(&gate, &req, None).await.status(), 200);
    operator
        .set(
            "ephemeral-key",
            true,
            Some("Voice demo paused: budget reached"),
        )
        .await
        .unwrap();
    clock.advance(Duration::from_secs(5));
    let resp = guarded(&gate, &req, None).await;
    assert_eq!(resp.status(), 403);
    let body = json_body(&resp);
    assert_eq!(body["code"], "service_disabled");
    assert_eq!(body["detail"], "Voice demo paused: budget reached");
    assert!(resp.headers().get("retry-after").is_none());

    // A denied request touches no counter.
    let counters = dynamo::counters_matching(&ddb, &tables.rate_limits, "#ip#").await;
    assert_eq!(counters[0].1, 1);

    // The other function is not affected by this function's switch.
    assert!(
        !operator
            .status(catalog::TRANSFER.name)
            .await
            .unwrap()
            .enabled
    );

    operator
        .set(catalog::EPHEMERAL_KEY.name, false, None)
        .await
        .unwrap();
    clock.advance(Duration::from_secs(5));
    assert_eq!(guarded(&gate, &req, None).await.status(), 200);
}

#[tokio::test]
async fn an_unreadable_switch_with_nothing_cached_fails_closed() {
    let (ddb, _) = dynamo::client();
    let mut tables = Tables::create(&ddb).await;
    tables.control = "no-such-table-anywhere".into();
    let (_, clock) = manual_clock();
    let gate = Gate::new(settings(&tables, "ip=100/1h", &[]), ddb.clone(), clock);
    let resp = guarded(&gate, &HttpEvent::post("/session").request(), None).await;
    assert_eq!(resp.status(), 503);
    let body = json_body(&resp);
    assert_eq!(body["code"], "temporarily_unavailable");
    assert!(
        resp.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
    assert!(
        !body.to_string().contains("no-such-table"),
        "no table name in the body"
    );
    assert!(dynamo::scan_all(&ddb, &tables.rate_limits).await.is_empty());
}

#[tokio::test]
async fn a_long_message_is_refused_and_a_missing_one_gets_a_default() {
    let (ddb, _) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let (_, clock) = manual_clock();
    let ks = KillSwitch::new(ddb, &tables.control, clock, Duration::from_secs(5));
    assert!(matches!(
        ks.set(catalog::TRANSFER.name, true, Some(&"x".repeat(501)))
            .await,
        Err(SetError::MessageTooLong)
    ));
    let state = ks.set(catalog::TRANSFER.name, true, None).await.unwrap();
    assert_eq!(state.message, tollgate::kill_switch::DEFAULT_MESSAGE);
    assert_eq!(ks.status(catalog::TRANSFER.name).await.unwrap(), state);
}

/// A gate whose DynamoDB requests go through a fault proxy, with the kill switch cached 5 s and
/// a 60 s stale window.
async fn gate_through_proxy() -> (Gate, FaultProxy, ManualClock) {
    let proxy = FaultProxy::start(&dynamo::endpoint()).await;
    let (ddb, _) = dynamo::client_at(&proxy.endpoint());
    let tables = Tables::create(&dynamo::client().0).await;
    let (clock, shared) = manual_clock();
    let gate = Gate::new(
        settings(
            &tables,
            "ip=100000/1h",
            &[
                ("KILL_SWITCH_CACHE_SECONDS", "5"),
                ("KILL_SWITCH_STALE_SECONDS", "60"),
            ],
        ),
        ddb,
        shared,
    );
    (gate, proxy, clock)
}

fn retry_after(resp: &Response<Body>) -> u64 {
    resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// Lesson 003 for the kill switch: while the control table fails, the last good state serves
/// for the cache time plus the stale window, then requests are refused (503, `Retry-After`),
/// and the store is asked once per cache period per process, not once (or three times) per
/// request. When it works again the switch recovers at the next read.
#[tokio::test]
async fn a_failing_store_is_read_once_per_period_serves_stale_then_fails_closed() {
    let (gate, proxy, clock) = gate_through_proxy().await;
    let req = HttpEvent::post("/session").request();
    assert_eq!(guarded(&gate, &req, None).await.status(), 200);
    let reads_before = proxy.seen("GetItem");
    assert_eq!(reads_before, 1);

    proxy.arm_always("GetItem", Fault::ServerError);
    let step = Duration::from_secs(3);
    let mut elapsed = Duration::ZERO;
    for _ in 0..30 {
        clock.advance(step);
        elapsed += step;
        let resp = guarded(&gate, &req, None).await;
        // The last good state is 5 s (cache) + 60 s (stale window) old at most when it serves.
        if elapsed < Duration::from_secs(65) {
            assert_eq!(resp.status(), 200, "at {elapsed:?}: {}", json_body(&resp));
        } else {
            assert_eq!(resp.status(), 503, "at {elapsed:?}");
            assert_eq!(json_body(&resp)["code"], "temporarily_unavailable");
            let secs = retry_after(&resp);
            assert!(
                (1..=5).contains(&secs),
                "at {elapsed:?}: Retry-After {secs}"
            );
        }
    }
    let reads = proxy.seen("GetItem") - reads_before;
    let bound = (elapsed.as_secs() / 5 + 1) as usize;
    assert!(
        reads <= bound,
        "{reads} reads in {elapsed:?}; at most one per 5 s period ({bound})"
    );
    assert!(reads >= 2, "the store is still asked now and then: {reads}");

    // The store heals: the next read after the cooldown serves again, and is cached.
    proxy.disarm("GetItem");
    clock.advance(Duration::from_secs(5));
    let seen = proxy.seen("GetItem");
    assert_eq!(guarded(&gate, &req, None).await.status(), 200);
    assert_eq!(guarded(&gate, &req, None).await.status(), 200);
    assert_eq!(proxy.seen("GetItem"), seen + 1);
}

/// With nothing cached a failing store fails closed at once and is not asked again until the
/// cooldown ends.
#[tokio::test]
async fn with_nothing_cached_a_failing_store_fails_closed_fast() {
    let (gate, proxy, clock) = gate_through_proxy().await;
    proxy.arm_always("GetItem", Fault::ServerError);
    let req = HttpEvent::post("/session").request();
    for _ in 0..20 {
        let resp = guarded(&gate, &req, None).await;
        assert_eq!(resp.status(), 503);
        assert!((1..=5).contains(&retry_after(&resp)));
        clock.advance(Duration::from_millis(500));
    }
    // 10 s elapsed, one read per 5 s period.
    let reads = proxy.seen("GetItem");
    assert!((1..=3).contains(&reads), "{reads} reads");
}

/// Concurrent requests while the store fails share one read (single flight), instead of each
/// repeating the failing read.
#[tokio::test]
async fn concurrent_requests_share_one_read_while_the_store_fails() {
    let (gate, proxy, clock) = gate_through_proxy().await;
    let req = HttpEvent::post("/session").request();
    assert_eq!(guarded(&gate, &req, None).await.status(), 200);
    proxy.arm_always("GetItem", Fault::ServerError);
    clock.advance(Duration::from_secs(6));
    let statuses: Vec<u16> = join_all((0..10).map(|_| guarded(&gate, &req, None)))
        .await
        .iter()
        .map(|r| r.status().as_u16())
        .collect();
    assert_eq!(statuses, [200; 10], "the last good state serves");
    assert_eq!(proxy.seen("GetItem"), 2, "one read before, one for all ten");
}

/// An `enabled` attribute that is not a boolean (written by hand, by another tool) means the
/// switch's state is unknown: it counts as on (403 with the default message), never as off.
#[tokio::test]
async fn a_malformed_switch_counts_as_on() {
    for malformed in [
        AttributeValue::S("false".into()),
        AttributeValue::N("0".into()),
        AttributeValue::Null(true),
    ] {
        let (ddb, _) = dynamo::client();
        let tables = Tables::create(&ddb).await;
        let (clock, shared) = manual_clock();
        ddb.put_item()
            .table_name(&tables.control)
            .item("pk", AttributeValue::S("kill-switch#ephemeral-key".into()))
            .item("enabled", malformed.clone())
            .item("message", AttributeValue::S("leftover".into()))
            .send()
            .await
            .unwrap();
        let gate = Gate::new(
            settings(&tables, "ip=100/1h", &[]),
            ddb.clone(),
            shared.clone(),
        );
        let req = HttpEvent::post("/session").request();
        let resp = guarded(&gate, &req, None).await;
        assert_eq!(resp.status(), 403, "{malformed:?}");
        let body = json_body(&resp);
        assert_eq!(body["code"], "service_disabled");
        assert_eq!(body["detail"], DEFAULT_MESSAGE);
        assert!(dynamo::scan_all(&ddb, &tables.rate_limits).await.is_empty());

        // The operator sees it as on too, and turning it off repairs it.
        let operator = KillSwitch::new(ddb.clone(), &tables.control, shared, Duration::ZERO);
        assert!(
            operator
                .status(catalog::EPHEMERAL_KEY.name)
                .await
                .unwrap()
                .enabled
        );
        operator
            .set(catalog::EPHEMERAL_KEY.name, false, None)
            .await
            .unwrap();
        clock.advance(Duration::from_secs(5));
        assert_eq!(guarded(&gate, &req, None).await.status(), 200);
    }
}
