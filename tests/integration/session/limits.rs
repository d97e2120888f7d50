//! Lesson 000 through the handler, the retry storm, the kill switch and request costs.

use std::time::Duration;

use serde_json::json;
use tollgate::clock::Clock;
use tollgate::idempotency::{fingerprint, Claim, IdempotencyKey, Scope};
use tollgate::kill_switch::KillSwitch;
use tollgate_functions::catalog;
use tollgate_tests::events::HttpEvent;
use tollgate_tests::json_body;
use tollgate_tests::session::{SessionHarness, INTERNAL_TOKEN};

#[tokio::test]
async fn lesson_000_thirteen_requests_ten_secrets_three_429s_counter_ten() {
    let h = SessionHarness::new(&[]).await;
    let mut statuses = Vec::new();
    for _ in 0..13 {
        let resp = h
            .send(SessionHarness::post("198.51.100.7", None).request())
            .await;
        if resp.status() == 429 {
            assert!(
                resp.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
                    >= 1
            );
            assert_eq!(json_body(&resp)["code"], "rate_limited");
        }
        statuses.push(resp.status().as_u16());
    }
    assert_eq!(statuses, [vec![200; 10], vec![429; 3]].concat());
    assert_eq!(h.counter_sum("#198.51.100.7#").await, 10);
    assert_eq!(
        h.openai.calls().await,
        10,
        "no secret minted for a rejected request"
    );
}

/// The client of lesson 000 reconnects every 3 seconds after a 429, for three simulated hours.
#[tokio::test]
async fn the_three_second_retry_storm_never_pushes_a_counter_past_its_limit() {
    let h = SessionHarness::new(&[(
        catalog::EPHEMERAL_KEY.limits_variable,
        "ip=10/1h,global=2000/1d",
    )])
    .await;
    let start_ms = h.clock.now_ms();
    let mut admitted_per_hour = [0u32; 4];
    let mut first_of_window_admitted = Vec::new();
    let mut last_hour = None;
    while h.clock.now_ms() < start_ms + 3 * 3_600_000 {
        let hour = ((h.clock.now_ms() - (start_ms - 1_000)) / 3_600_000) as usize;
        let resp = h
            .send(SessionHarness::post("198.51.100.8", None).request())
            .await;
        if last_hour != Some(hour) {
            first_of_window_admitted.push(resp.status() == 200);
            last_hour = Some(hour);
        }
        if resp.status() == 200 {
            admitted_per_hour[hour] += 1;
        } else {
            assert_eq!(resp.status(), 429);
        }
        h.clock.advance(Duration::from_secs(3));
    }
    assert_eq!(
        first_of_window_admitted,
        [true, true, true],
        "each new window admits the client"
    );
    assert_eq!(&admitted_per_hour[..3], &[10, 10, 10]);
    for (pk, count) in
        tollgate_tests::dynamo::counters_matching(&h.ddb, &h.tables.rate_limits, "#ip#").await
    {
        assert!(count <= 10, "{pk} = {count}");
    }
}

#[tokio::test]
async fn kill_switch_on_gives_403_with_the_message_and_touches_nothing() {
    let h = SessionHarness::new(&[]).await;
    assert_eq!(
        h.send(SessionHarness::post("192.0.2.1", None).request())
            .await
            .status(),
        200
    );
    let (_, clock) = tollgate_tests::manual_clock();
    let operator = KillSwitch::new(
        h.ddb.clone(),
        &h.tables.control,
        clock,
        Duration::from_secs(5),
    );
    operator
        .set(
            catalog::EPHEMERAL_KEY.name,
            true,
            Some("The demo is paused for today."),
        )
        .await
        .unwrap();
    h.clock.advance(Duration::from_secs(5));
    let calls = h.openai.calls().await;
    let counters = h.counter_sum("#").await;
    for _ in 0..3 {
        let resp = h
            .send(SessionHarness::post("192.0.2.1", None).request())
            .await;
        assert_eq!(resp.status(), 403);
        let body = json_body(&resp);
        assert_eq!(body["code"], "service_disabled");
        assert_eq!(body["detail"], "The demo is paused for today.");
    }
    assert_eq!(h.openai.calls().await, calls, "no upstream call");
    assert_eq!(h.counter_sum("#").await, counters, "no counter touched");
}

#[tokio::test]
async fn internal_callers_skip_the_address_layer_but_not_the_spend_cap() {
    let h = SessionHarness::new(&[(
        catalog::EPHEMERAL_KEY.limits_variable,
        "ip=2/1h,global=5/1d",
    )])
    .await;
    let mut statuses = Vec::new();
    for _ in 0..7 {
        let req = SessionHarness::post("10.0.0.1", None).header("x-internal-token", INTERNAL_TOKEN);
        statuses.push(h.send(req.request()).await.status().as_u16());
    }
    assert_eq!(statuses, [vec![200; 5], vec![429; 2]].concat());
    assert_eq!(h.counter_sum("#ip#").await, 0);
    // A forged token is an ordinary request again.
    let forged = SessionHarness::post("10.0.0.2", None).header("x-internal-token", "nope");
    assert_eq!(
        h.send(forged.request()).await.status(),
        429,
        "the global cap is reached"
    );
    assert_eq!(
        h.counter_sum("#10.0.0.2#").await,
        0,
        "refunded: a 429 leaves counters as they were"
    );
}

#[tokio::test]
async fn an_admitted_request_with_warm_caches_costs_one_request_per_layer() {
    let h = SessionHarness::new(&[]).await;
    h.send(SessionHarness::post("192.0.2.3", None).request())
        .await;
    h.counter.reset();
    for _ in 0..3 {
        assert_eq!(
            h.send(SessionHarness::post("192.0.2.3", None).request())
                .await
                .status(),
            200
        );
    }
    assert_eq!(h.counter.get("UpdateItem"), 6, "{:?}", h.counter.snapshot());
    assert_eq!(
        h.counter.total(),
        6,
        "kill switch and secret cost nothing while cached: {:?}",
        h.counter.snapshot()
    );
}

#[tokio::test]
async fn routes_and_methods() {
    let h = SessionHarness::new(&[("BASE_PATH", "/api")]).await;
    assert_eq!(
        h.send(HttpEvent::post("/api/session").request())
            .await
            .status(),
        200
    );
    let wrong = h.send(HttpEvent::get("/api/session").request()).await;
    assert_eq!(wrong.status(), 405);
    assert_eq!(wrong.headers()["allow"], "POST");
    assert_eq!(
        h.send(HttpEvent::post("/session").request()).await.status(),
        404
    );
}

/// `ip` counts every request (lesson 002); `global`, the spend cap, only those that will call
/// upstream: a 400, 409 or 422 spends no global unit, and a replay spends nothing.
#[tokio::test]
async fn refused_requests_count_in_ip_but_never_in_global() {
    let h = SessionHarness::new(&[(
        catalog::EPHEMERAL_KEY.limits_variable,
        "ip=100/1h,global=2000/1d",
    )])
    .await;
    let ip = "192.0.2.40";
    let key = "0b6f6a3e-4c4e-4b8a-9f0e-3d2c1b0a9f8e";
    for (req, what) in [
        (SessionHarness::post(ip, Some("nope")), "not JSON"),
        (
            SessionHarness::post(ip, Some(r#"{"voice":"alloy"}"#)),
            "voice",
        ),
        (
            SessionHarness::post(ip, None).header("idempotency-key", "has space"),
            "key",
        ),
    ] {
        assert_eq!(h.send(req.request()).await.status(), 400, "{what}");
    }
    assert_eq!(h.counter_sum("#ip#").await, 3, "each 400 costs an ip unit");
    assert_eq!(h.counter_sum("#global#").await, 0, "and no global unit");

    let cedar =
        || SessionHarness::post(ip, Some(r#"{"voice":"cedar"}"#)).header("idempotency-key", key);
    assert_eq!(h.send(cedar().request()).await.status(), 200);
    assert_eq!(
        (h.counter_sum("#ip#").await, h.counter_sum("#global#").await),
        (4, 1)
    );

    // The same key with another body: 422, no global unit.
    let reused = SessionHarness::post(ip, Some(r#"{"voice":"marin"}"#))
        .header("idempotency-key", key)
        .request();
    assert_eq!(h.send(reused).await.status(), 422);
    assert_eq!(
        (h.counter_sum("#ip#").await, h.counter_sum("#global#").await),
        (5, 1)
    );

    // A key another request of this address holds (its upstream call is running): 409, no
    // global unit.
    let busy = "7d444840-9dc0-11d1-b245-5ffdce74fad2";
    let scope = Scope::new(
        ip,
        "POST /session",
        &IdempotencyKey::parse(Some(busy.as_bytes())).unwrap(),
    );
    let claim = h
        .app
        .sessions
        .idempotency
        .claim(&scope, &fingerprint(&json!({})), Duration::from_secs(30))
        .await
        .unwrap();
    assert!(matches!(claim, Claim::Acquired(_)));
    let duplicate = SessionHarness::post(ip, None)
        .header("idempotency-key", busy)
        .request();
    assert_eq!(h.send(duplicate).await.status(), 409);
    assert_eq!(
        (h.counter_sum("#ip#").await, h.counter_sum("#global#").await),
        (6, 1)
    );

    // A replay costs nothing at all.
    let replay = h.send(cedar().request()).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(
        (h.counter_sum("#ip#").await, h.counter_sum("#global#").await),
        (6, 1)
    );
    assert_eq!(h.openai.calls().await, 1);
}

/// Lesson 000's client sending garbage: a broken body every 3 seconds for ten minutes fills its
/// address's windows and never moves the spend cap.
#[tokio::test]
async fn a_reconnect_loop_of_invalid_bodies_never_moves_global() {
    let h = SessionHarness::new(&[(
        catalog::EPHEMERAL_KEY.limits_variable,
        "ip=10/1m,global=2000/1d",
    )])
    .await;
    let start_ms = h.clock.now_ms();
    let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
    while h.clock.now_ms() < start_ms + 600_000 {
        let resp = h
            .send(SessionHarness::post("198.51.100.9", Some(r#"{"voice":"alloy"}"#)).request())
            .await;
        *statuses.entry(resp.status().as_u16()).or_default() += 1;
        assert_eq!(h.counter_sum("#global#").await, 0, "{statuses:?}");
        h.clock.advance(Duration::from_secs(3));
    }
    assert_eq!(
        statuses[&400], 100,
        "ten per one-minute window: {statuses:?}"
    );
    assert_eq!(statuses[&429], 100, "{statuses:?}");
    assert_eq!(h.openai.calls().await, 0);
}
