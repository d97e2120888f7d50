//! `POST /session` responses, checked against the document.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tollgate::kill_switch::KillSwitch;
use tollgate_functions::catalog;
use tollgate_tests::events::HttpEvent;
use tollgate_tests::json_body;
use tollgate_tests::openai::Answer;
use tollgate_tests::session::SessionHarness;
use tollgate_tests::ssm::{Reply, SsmStandIn};

use crate::openapi::spec::Checker;

const SESSION: &str = "POST /session";

fn code(resp: &lambda_http::Response<lambda_http::Body>) -> String {
    json_body(resp)["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

pub async fn session_minted_replayed_and_reused(c: &Checker) {
    let h = SessionHarness::new(&[]).await;
    let resp = h
        .send(SessionHarness::post("192.0.2.30", None).request())
        .await;
    assert_eq!(resp.status(), 200);
    c.check(SESSION, &resp);

    let cedar = json!({"voice": "cedar"});
    let with_key = || {
        SessionHarness::post("192.0.2.30", Some(&cedar.to_string()))
            .header("idempotency-key", "0b6f6a3e-4c4e-4b8a-9f0e-3d2c1b0a9f8e")
    };
    let first = h.send(with_key().request()).await;
    assert_eq!(first.status(), 200);
    c.check(SESSION, &first);
    c.accepted_body(SESSION, &cedar);
    let replay = h.send(with_key().request()).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.body().as_ref(), first.body().as_ref());
    c.check(SESSION, &replay);

    let reused = h
        .send(
            SessionHarness::post("192.0.2.30", Some(r#"{"voice":"marin"}"#))
                .header("idempotency-key", "0b6f6a3e-4c4e-4b8a-9f0e-3d2c1b0a9f8e")
                .request(),
        )
        .await;
    assert_eq!(code(&reused), "idempotency_key_reused");
    c.check(SESSION, &reused);
}

pub async fn session_bad_requests(c: &Checker) {
    let h = SessionHarness::new(&[
        ("MAX_BODY_BYTES", "256"),
        (
            catalog::EPHEMERAL_KEY.limits_variable,
            "ip=1000/1h,global=2000/1d",
        ),
    ])
    .await;
    // Bodies the document's schema refuses too.
    for body in [
        json!({"voice": 7}),
        json!({"model": "gpt-4o"}),
        json!({"voice": "marin", "expires_after": 7200}),
        json!([]),
        json!("marin"),
    ] {
        let resp = h
            .send(SessionHarness::post("192.0.2.31", Some(&body.to_string())).request())
            .await;
        assert_eq!(resp.status(), 400, "{body}");
        c.check(SESSION, &resp);
        c.refused_body(SESSION, &body);
    }
    // A voice outside the allowlist (configuration, not schema), a duplicate member name, text
    // that is not JSON, and malformed keys: 400 as well.
    let mut requests = vec![
        SessionHarness::post("192.0.2.31", Some(r#"{"voice":"alloy"}"#)),
        SessionHarness::post("192.0.2.31", Some(r#"{"voice":"marin","voice":"cedar"}"#)),
        SessionHarness::post("192.0.2.31", Some("nope")),
    ];
    // Malformed keys, a key too short to be unguessable, and two keys.
    for key in ["", "has space", &"k".repeat(256), "reconnect-1"] {
        requests.push(SessionHarness::post("192.0.2.31", None).header("idempotency-key", key));
    }
    requests.push(
        SessionHarness::post("192.0.2.31", None)
            .header("idempotency-key", "0b6f6a3e-4c4e-4b8a-9f0e-3d2c1b0a9f8e")
            .append_header("idempotency-key", "7d444840-9dc0-11d1-b245-5ffdce74fad2"),
    );
    for req in requests {
        let resp = h.send(req.request()).await;
        assert_eq!(resp.status(), 400);
        c.check(SESSION, &resp);
    }

    let large = json!({"voice": "x".repeat(300)}).to_string();
    let resp = h
        .send(SessionHarness::post("192.0.2.31", Some(&large)).request())
        .await;
    assert_eq!(resp.status(), 413);
    c.check(SESSION, &resp);
}

/// A duplicate while the first request's upstream call is still running gets 409.
pub async fn session_in_progress(c: &Checker) {
    let h = Arc::new(SessionHarness::new(&[("UPSTREAM_TIMEOUT_SECONDS", "5")]).await);
    h.openai.then([Answer::Slow(Duration::from_millis(1_500))]);
    let req = || {
        SessionHarness::post("192.0.2.32", None)
            .header("idempotency-key", "slow-4c4e-4b8a-9f0e-3d2c1b0a")
    };
    let first = {
        let h = h.clone();
        let r = req().request();
        tokio::spawn(async move { h.send(r).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let duplicate = h.send(req().request()).await;
    assert_eq!(duplicate.status(), 409);
    c.check(SESSION, &duplicate);
    let first = first.await.unwrap();
    assert_eq!(first.status(), 200);
    c.check(SESSION, &first);
}

pub async fn session_rate_limited(c: &Checker) {
    let h = SessionHarness::new(&[(
        catalog::EPHEMERAL_KEY.limits_variable,
        "ip=1/1h,global=2000/1d",
    )])
    .await;
    let admitted = h
        .send(SessionHarness::post("192.0.2.33", None).request())
        .await;
    assert_eq!(admitted.status(), 200);
    c.check(SESSION, &admitted);
    let limited = h
        .send(SessionHarness::post("192.0.2.33", None).request())
        .await;
    assert_eq!(limited.status(), 429);
    c.check(SESSION, &limited);
}

pub async fn session_kill_switch_and_cloudfront(c: &Checker) {
    let h = SessionHarness::new(&[]).await;
    let (_, clock) = tollgate_tests::manual_clock();
    KillSwitch::new(
        h.ddb.clone(),
        &h.tables.control,
        clock,
        Duration::from_secs(5),
    )
    .set(
        catalog::EPHEMERAL_KEY.name,
        true,
        Some("The demo is paused for today."),
    )
    .await
    .unwrap();
    let resp = h
        .send(SessionHarness::post("192.0.2.34", None).request())
        .await;
    assert_eq!(code(&resp), "service_disabled");
    assert_eq!(json_body(&resp)["detail"], "The demo is paused for today.");
    c.check(SESSION, &resp);

    let h = SessionHarness::new(&[
        ("CLIENT_IP_SOURCE", "cloudfront"),
        ("ORIGIN_VERIFY_SECRET", "origin-secret-for-tests"),
    ])
    .await;
    let untrusted = h
        .send(
            HttpEvent::post("/session")
                .header("cloudfront-viewer-address", "198.51.100.1:443")
                .request(),
        )
        .await;
    assert_eq!(code(&untrusted), "forbidden");
    c.check(SESSION, &untrusted);
    let malformed = h
        .send(
            HttpEvent::post("/session")
                .header("x-origin-verify", "origin-secret-for-tests")
                .header("cloudfront-viewer-address", "198.51.100.1")
                .request(),
        )
        .await;
    assert_eq!(code(&malformed), "invalid_request");
    c.check(SESSION, &malformed);
}

pub async fn session_upstream_failures(c: &Checker) {
    let h = SessionHarness::new(&[("UPSTREAM_COOLDOWN_SECONDS", "5")]).await;
    h.openai.then([Answer::Status(500)]);
    let failing = h
        .send(SessionHarness::post("192.0.2.35", None).request())
        .await;
    assert_eq!(failing.status(), 503);
    c.check(SESSION, &failing);
    // During the cooldown: 503 without an upstream call.
    let cooling = h
        .send(SessionHarness::post("192.0.2.35", None).request())
        .await;
    assert_eq!(cooling.status(), 503);
    c.check(SESSION, &cooling);

    // A refused API key: 503 and the longer key cooldown.
    h.clock.advance(Duration::from_secs(6));
    h.openai.then([Answer::Status(401), Answer::Status(401)]);
    let refused = h
        .send(SessionHarness::post("192.0.2.35", None).request())
        .await;
    assert_eq!(refused.status(), 503);
    assert_eq!(code(&refused), "temporarily_unavailable");
    c.check(SESSION, &refused);

    // A misconfigured deployment: the key's SSM parameter does not exist.
    let ssm = SsmStandIn::start(Reply::Error(400, "ParameterNotFound".into())).await;
    let h = SessionHarness::with_ssm(&[], &ssm).await;
    let misconfigured = h
        .send(SessionHarness::post("192.0.2.35", None).request())
        .await;
    assert_eq!(misconfigured.status(), 500);
    c.check(SESSION, &misconfigured);
}

pub async fn session_routing(c: &Checker) {
    let h = SessionHarness::new(&[("BASE_PATH", "/api")]).await;
    for method in ["GET", "PUT", "DELETE"] {
        let resp = h
            .send(HttpEvent::new(method, "/api/session").request())
            .await;
        assert_eq!(resp.status(), 405, "{method}");
        c.check_other_method(method, "/session", &resp);
    }
    for path in ["/session", "/api/nothing", "/api"] {
        let resp = h.send(HttpEvent::post(path).request()).await;
        c.check_unknown_route(path, &resp);
    }
}
