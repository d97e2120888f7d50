//! What the function asks OpenAI for, and what it does while OpenAI is failing (lesson 003).

use std::time::Duration;

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
    let h = SessionHarness::with_ssm(&[], &ssm).await;
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

    // Still refused with the fresh key: 500, one re-fetch, one retry, no storm.
    h.openai.then([Answer::Status(401), Answer::Status(401)]);
    let resp = h
        .send(SessionHarness::post("192.0.2.16", None).request())
        .await;
    assert_eq!(resp.status(), 500);
    assert_eq!(json_body(&resp)["code"], "internal_error");
    assert_eq!(ssm.calls().await, 3);
    assert_eq!(h.openai.calls().await, 5);
    assert_eq!(
        h.counter_sum("#ip#").await,
        2,
        "the failed request's quota was given back"
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
