//! The kill switch: a flip applies within the cache time, and an unreadable flag fails closed.

use std::time::Duration;

use tollgate::gate::Gate;
use tollgate::kill_switch::KillSwitch;
use tollgate_tests::dynamo::{self, Tables};
use tollgate_tests::events::Event;
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
        None,
        shared.clone(),
    );
    // The operator's CLI is another process with its own cache.
    let operator = KillSwitch::new(ddb.clone(), &tables.control, shared, Duration::from_secs(5));
    let req = Event::post("/session").request();

    assert_eq!(guarded(&gate, &req, None).await.status(), 200);
    operator
        .set(
            "ephemeral-key",
            true,
            Some("Voice demo paused: budget reached"),
        )
        .await
        .unwrap()
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
    assert!(!operator.status("transfer").await.unwrap().enabled);

    operator
        .set("ephemeral-key", false, None)
        .await
        .unwrap()
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
    let gate = Gate::new(
        settings(&tables, "ip=100/1h", &[]),
        ddb.clone(),
        None,
        clock,
    );
    let resp = guarded(&gate, &Event::post("/session").request(), None).await;
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
    assert!(ks
        .set("transfer", true, Some(&"x".repeat(501)))
        .await
        .unwrap()
        .is_err());
    let state = ks.set("transfer", true, None).await.unwrap().unwrap();
    assert_eq!(state.message, tollgate::kill_switch::DEFAULT_MESSAGE);
    assert_eq!(ks.status("transfer").await.unwrap(), state);
}
