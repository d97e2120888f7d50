//! What the function asks OpenAI for, and what it does while OpenAI is failing (lesson 003).

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tollgate::clock::Clock;
use tollgate_tests::json_body;
use tollgate_tests::openai::{Answer, LEAK_MARKER};
use tollgate_tests::session::{SessionHarness, SECRET_EXPIRES_AT};
use tollgate_tests::ssm::{Reply, SsmStandIn};

#[tokio::test]
async fn the_upstream_body_comes_from_configuration_and_only_four_fields_come_back() {
    let h = SessionHarness::new(&[
        ("REALTIME_MODEL", "gpt-realtime-mini"),
        ("REALTIME_VOICES", "cedar,marin"),
        ("REALTIME_EXPIRES_AFTER_SECONDS", "120"),
    ])
    .await;
    let resp = h
        .send(SessionHarness::post("192.0.2.10", Some(r#"{"voice":"marin"}"#)).request())
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["cache-control"], "no-store");
    let body = json_body(&resp);
    assert_eq!(
        body,
        serde_json::json!({"client_secret": "ek_test_0001", "expires_at": SECRET_EXPIRES_AT, "model": "gpt-realtime-mini", "voice": "marin"})
    );

    let sent = &h.openai.requests().await[0];
    assert_eq!(sent.headers["authorization"], "Bearer sk-test-key");
    let upstream: serde_json::Value = serde_json::from_slice(&sent.body).unwrap();
    assert_eq!(upstream["session"]["model"], "gpt-realtime-mini");
    assert_eq!(upstream["session"]["audio"]["output"]["voice"], "marin");
    assert_eq!(upstream["expires_after"]["seconds"], 120);

    // No body: the first voice of the allowlist.
    let resp = h
        .send(SessionHarness::post("192.0.2.10", None).request())
        .await;
    assert_eq!(json_body(&resp)["voice"], "cedar");
}

#[tokio::test]
async fn a_voice_outside_the_allowlist_or_a_bad_body_is_400_without_an_upstream_call() {
    let h = SessionHarness::new(&[]).await;
    for body in [
        r#"{"voice":"alloy"}"#,
        r#"{"voice":7}"#,
        r#"{"model":"gpt-4o"}"#,
        "[]",
        "nope",
        r#"{"voice":"marin","voice":"cedar"}"#,
    ] {
        let resp = h
            .send(SessionHarness::post("192.0.2.11", Some(body)).request())
            .await;
        assert_eq!(resp.status(), 400, "{body}");
        assert_eq!(json_body(&resp)["code"], "invalid_request");
    }
    assert_eq!(h.openai.calls().await, 0);
}

#[tokio::test]
async fn a_500_starts_a_cooldown_without_upstream_calls_then_one_probe_and_quota_is_refunded() {
    let h = SessionHarness::new(&[("UPSTREAM_COOLDOWN_SECONDS", "5")]).await;
    h.openai.then([Answer::Status(500)]);
    let failed = h
        .send(SessionHarness::post("192.0.2.12", None).request())
        .await;
    assert_eq!(failed.status(), 503);
    assert_eq!(failed.headers()["retry-after"], "5");
    assert_eq!(json_body(&failed)["code"], "temporarily_unavailable");
    assert_eq!(h.openai.calls().await, 1);
    assert_eq!(
        h.counter_sum("#ip#").await,
        0,
        "the failed request's quota was given back"
    );
    assert_eq!(h.counter_sum("#global#").await, 0);

    for _ in 0..10 {
        h.clock.advance(Duration::from_millis(400));
        let resp = h
            .send(SessionHarness::post("192.0.2.12", None).request())
            .await;
        assert_eq!(resp.status(), 503);
        assert!(
            resp.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
                >= 1
        );
    }
    assert_eq!(
        h.openai.calls().await,
        1,
        "no upstream call during the cooldown"
    );
    assert_eq!(h.counter_sum("#").await, 0, "cooldown answers use no quota");

    h.clock.advance(Duration::from_millis(1_000));
    let probe = h
        .send(SessionHarness::post("192.0.2.12", None).request())
        .await;
    assert_eq!(probe.status(), 200);
    assert_eq!(h.openai.calls().await, 2, "one probe after the cooldown");
    assert_eq!(h.counter_sum("#ip#").await, 1);
}

#[tokio::test]
async fn the_upstreams_longer_retry_after_extends_the_cooldown() {
    let h = SessionHarness::new(&[("UPSTREAM_COOLDOWN_SECONDS", "5")]).await;
    h.openai.then([Answer::StatusRetryAfter(429, 30)]);
    let resp = h
        .send(SessionHarness::post("192.0.2.13", None).request())
        .await;
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "30");
    h.clock.advance(Duration::from_secs(29));
    assert_eq!(
        h.send(SessionHarness::post("192.0.2.13", None).request())
            .await
            .status(),
        503
    );
    assert_eq!(h.openai.calls().await, 1);
}

#[tokio::test]
async fn timeouts_malformed_bodies_and_odd_statuses_are_503_with_cooldown() {
    for answer in [
        Answer::Slow(Duration::from_secs(4)),
        Answer::Malformed,
        Answer::Status(404),
        Answer::Status(502),
    ] {
        let h = SessionHarness::new(&[("UPSTREAM_TIMEOUT_SECONDS", "1")]).await;
        h.openai.then([answer.clone()]);
        let resp = h
            .send(SessionHarness::post("192.0.2.14", None).request())
            .await;
        assert_eq!(resp.status(), 503, "{answer:?}");
        assert_eq!(
            h.send(SessionHarness::post("192.0.2.14", None).request())
                .await
                .status(),
            503
        );
        assert_eq!(h.openai.calls().await, 1, "{answer:?}: cooled down");
    }
}

#[tokio::test]
async fn nothing_from_upstream_reaches_a_response() {
    for answer in [
        Answer::Status(500),
        Answer::Status(400),
        Answer::Status(401),
        Answer::Malformed,
    ] {
        let h = SessionHarness::new(&[]).await;
        h.openai.then([answer.clone(), answer.clone()]);
        let resp = h
            .send(SessionHarness::post("192.0.2.15", None).request())
            .await;
        assert!(resp.status().as_u16() >= 500, "{answer:?}");
        let mut all = tollgate_tests::text_body(&resp);
        for (name, value) in resp.headers() {
            all.push_str(&format!("{name}: {value:?}\n"));
        }
        let host = h.openai.server.uri().replace("http://", "");
        for leak in [
            LEAK_MARKER,
            "Incorrect API key",
            host.as_str(),
            "invalid_request_error",
            "sk-test-key",
        ] {
            assert!(!all.contains(leak), "{answer:?} leaked {leak:?}: {all}");
        }
    }
}

#[tokio::test]
async fn a_refused_key_is_fetched_again_once_and_a_rotated_key_works() {
    let ssm = SsmStandIn::start(Reply::Value("sk-old".into())).await;
    let h = SessionHarness::with_ssm(&[("UPSTREAM_AUTH_COOLDOWN_SECONDS", "60")], &ssm).await;
    assert_eq!(
        h.send(SessionHarness::post("192.0.2.16", None).request())
            .await
            .status(),
        200
    );
    assert_eq!(ssm.calls().await, 1);

    // The operator rotated the key: OpenAI refuses the cached one once.
    ssm.set(Reply::Value("sk-new".into()));
    h.openai.then([Answer::Status(401)]);
    let resp = h
        .send(SessionHarness::post("192.0.2.16", None).request())
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(ssm.calls().await, 2, "exactly one re-fetch");
    let sent = h.openai.requests().await;
    assert_eq!(sent.len(), 3, "exactly one retry");
    assert_eq!(sent[1].headers["authorization"], "Bearer sk-old");
    assert_eq!(sent[2].headers["authorization"], "Bearer sk-new");

    // Later the new key is revoked too, and SSM still holds it: one fresh read finds the very
    // key OpenAI refused, so there is nothing to retry with. 503 and a cooldown, not a 500.
    h.clock.advance(Duration::from_secs(61));
    h.openai.then([Answer::Status(401)]);
    let resp = h
        .send(SessionHarness::post("192.0.2.16", None).request())
        .await;
    assert_eq!(resp.status(), 503);
    assert_eq!(json_body(&resp)["code"], "temporarily_unavailable");
    assert_eq!(resp.headers()["retry-after"], "60");
    assert_eq!(ssm.calls().await, 3, "one fresh read");
    assert_eq!(h.openai.calls().await, 4, "no retry with the same key");
    assert_eq!(
        h.counter_sum("#ip#").await,
        2,
        "the refused request's quota was given back"
    );

    // The cooldown: 503 at once, without OpenAI, SSM or quota.
    h.clock.advance(Duration::from_secs(20));
    let cooling = h
        .send(SessionHarness::post("192.0.2.16", None).request())
        .await;
    assert_eq!(cooling.status(), 503);
    assert_eq!(cooling.headers()["retry-after"], "40");
    assert_eq!((ssm.calls().await, h.openai.calls().await), (3, 4));
    assert_eq!(h.counter_sum("#ip#").await, 2);

    // The operator puts a valid key into SSM; after the cooldown it is found and used.
    ssm.set(Reply::Value("sk-newest".into()));
    h.clock.advance(Duration::from_secs(40));
    h.openai.then([Answer::Status(401)]);
    let resp = h
        .send(SessionHarness::post("192.0.2.16", None).request())
        .await;
    assert_eq!(resp.status(), 200);
    let sent = h.openai.requests().await;
    assert_eq!(sent.len(), 6);
    assert_eq!(sent[4].headers["authorization"], "Bearer sk-new");
    assert_eq!(sent[5].headers["authorization"], "Bearer sk-newest");
    assert_eq!(ssm.calls().await, 4);
}

/// Lesson 003 for a refused key: OpenAI answers 401 to everything and SSM holds the refused
/// key. Requests every 3 seconds must not each cost two upstream calls and an SSM read.
#[tokio::test]
async fn a_key_refused_even_fresh_from_ssm_cools_down_instead_of_storming() {
    const COOLDOWN: u64 = 60;
    let ssm = SsmStandIn::start(Reply::Value("sk-revoked".into())).await;
    let h = SessionHarness::with_ssm(&[("UPSTREAM_AUTH_COOLDOWN_SECONDS", "60")], &ssm).await;
    h.openai.set_default(Answer::Status(401));
    let start_ms = h.clock.now_ms();
    for i in 0..30u64 {
        if i > 0 {
            h.clock.advance(Duration::from_secs(3));
        }
        let resp = h
            .send(SessionHarness::post("192.0.2.18", None).request())
            .await;
        assert_eq!(resp.status(), 503, "request {i}");
        let body = json_body(&resp);
        assert_eq!(body["code"], "temporarily_unavailable");
        let retry_after: u64 = resp.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(body["retry_after"], retry_after);
        // A cooldown starts at 0 s and 60 s; in between, the wait counts down.
        let elapsed = (h.clock.now_ms() - start_ms) / 1000;
        assert_eq!(retry_after, COOLDOWN - elapsed % COOLDOWN, "request {i}");
        assert!(retry_after >= 1);
        assert_eq!(h.counter_sum("#").await, 0, "request {i}: no quota spent");
    }
    let elapsed = (h.clock.now_ms() - start_ms) / 1000;
    let periods = elapsed.div_ceil(COOLDOWN) as usize;
    let (upstream, reads) = (h.openai.calls().await, ssm.calls().await);
    assert!(
        upstream <= 2 * periods,
        "{upstream} upstream calls in {elapsed} s"
    );
    assert!(reads <= 1 + periods, "{reads} SSM reads in {elapsed} s");
    assert!(upstream < 30 && reads < 30, "not one per request");
}

/// Concurrent refusals of the same cached key share one fresh read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_refusals_share_one_fresh_read_of_the_key() {
    let ssm = SsmStandIn::start(Reply::Value("sk-revoked".into())).await;
    let h = Arc::new(SessionHarness::with_ssm(&[], &ssm).await);
    assert_eq!(
        h.send(SessionHarness::post("192.0.2.19", None).request())
            .await
            .status(),
        200
    );
    assert_eq!(ssm.calls().await, 1);
    h.openai.set_default(Answer::Status(401));
    let answers = join_all((0..8).map(|i| {
        let h = h.clone();
        let req = SessionHarness::post(&format!("198.51.100.{}", 20 + i), None).request();
        tokio::spawn(async move { h.send(req).await.status().as_u16() })
    }))
    .await;
    let answers: Vec<u16> = answers.into_iter().map(Result::unwrap).collect();
    assert_eq!(answers, vec![503; 8]);
    assert_eq!(ssm.calls().await, 2, "one fresh read for all of them");
    assert!(h.openai.calls().await <= 1 + 8, "at most one call each");
    assert_eq!(
        h.counter_sum("#").await,
        2,
        "only the minted request counts (ip and global)"
    );
}

#[tokio::test]
async fn an_ssm_outage_with_no_cached_key_is_503_and_refunded() {
    let ssm = SsmStandIn::start(Reply::Error(500, "InternalServerError".into())).await;
    let h = SessionHarness::with_ssm(&[], &ssm).await;
    let resp = h
        .send(SessionHarness::post("192.0.2.17", None).request())
        .await;
    assert_eq!(resp.status(), 503);
    assert!(!tollgate_tests::text_body(&resp).contains("openai-api-key"));
    assert_eq!(h.openai.calls().await, 0);
    assert_eq!(h.counter_sum("#").await, 0);
}
