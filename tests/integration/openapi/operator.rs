//! The operator's `GET|PUT /internal/kill-switch` responses, checked against the document.

use serde_json::json;
use tollgate_functions::catalog;
use tollgate_tests::events::HttpEvent;
use tollgate_tests::json_body;
use tollgate_tests::session::{SessionHarness, INTERNAL_TOKEN};

use crate::openapi::spec::Checker;

const GET: &str = "GET /internal/kill-switch";
const PUT: &str = "PUT /internal/kill-switch";
const PATH: &str = "/internal/kill-switch";

fn code(resp: &lambda_http::Response<lambda_http::Body>) -> String {
    json_body(resp)["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn get() -> HttpEvent {
    HttpEvent::get(PATH).header("x-internal-token", INTERNAL_TOKEN)
}

fn put(body: &str) -> HttpEvent {
    HttpEvent::put(PATH)
        .header("x-internal-token", INTERNAL_TOKEN)
        .header("content-type", "application/json")
        .body(body)
}

pub async fn operator_reads_and_flips(c: &Checker) {
    let h = SessionHarness::new(&[("MAX_BODY_BYTES", "1024")]).await;

    for flip in [
        json!({"function": "transfer", "enabled": true, "message": "Paused for maintenance."}),
        json!({"function": "transfer", "enabled": true}),
        json!({"function": "ephemeral-key", "enabled": false, "message": null}),
    ] {
        let resp = h.send(put(&flip.to_string()).request()).await;
        assert_eq!(resp.status(), 200, "{flip}");
        c.check(PUT, &resp);
        c.accepted_body(PUT, &flip);
    }
    for req in [get(), get().query("function=transfer")] {
        let resp = h.send(req.request()).await;
        assert_eq!(resp.status(), 200);
        c.check(GET, &resp);
    }

    // Bodies the document's schema refuses too.
    for body in [
        json!({"function": "billing", "enabled": true}),
        json!({"function": "transfer", "enabled": "yes"}),
        json!({"function": "transfer", "enabled": true, "extra": 1}),
        json!({"enabled": true}),
        json!({"function": "transfer", "enabled": true, "message": "m".repeat(501)}),
    ] {
        let resp = h.send(put(&body.to_string()).request()).await;
        assert_eq!(resp.status(), 400, "{body}");
        c.check(PUT, &resp);
        c.refused_body(PUT, &body);
    }
    let resp = h.send(put("not json").request()).await;
    assert_eq!(resp.status(), 400);
    c.check(PUT, &resp);
    let resp = h.send(get().query("function=billing").request()).await;
    assert_eq!(resp.status(), 400);
    c.check(GET, &resp);

    let resp = h
        .send(
            put(
                &json!({"function": "transfer", "enabled": true, "message": "x".repeat(1100)})
                    .to_string(),
            )
            .request(),
        )
        .await;
    assert_eq!(resp.status(), 413);
    c.check(PUT, &resp);
    let resp = h.send(get().body("x".repeat(20_000)).request()).await;
    assert_eq!(resp.status(), 413);
    c.check(GET, &resp);

    let missing = h.send(HttpEvent::get(PATH).request()).await;
    assert_eq!(code(&missing), "unauthorized");
    c.check(GET, &missing);
    let wrong = h
        .send(
            HttpEvent::put(PATH)
                .header("x-internal-token", "not-the-token")
                .body(r#"{"function":"transfer","enabled":false}"#)
                .request(),
        )
        .await;
    assert_eq!(code(&wrong), "unauthorized");
    c.check(PUT, &wrong);

    for method in ["POST", "DELETE"] {
        let resp = h
            .send(
                HttpEvent::new(method, PATH)
                    .header("x-internal-token", INTERNAL_TOKEN)
                    .request(),
            )
            .await;
        assert_eq!(resp.status(), 405, "{method}");
        c.check_other_method(method, PATH, &resp);
    }
}

/// Guessing the token is rate limited: failed attempts count in the `ip` layer.
pub async fn operator_rate_limited(c: &Checker) {
    let h = SessionHarness::new(&[(
        catalog::EPHEMERAL_KEY.limits_variable,
        "ip=1/1h,global=2000/1d",
    )])
    .await;
    let guess = |e: HttpEvent| e.from_ip("192.0.2.40").header("x-internal-token", "guess");
    let first = h.send(guess(HttpEvent::get(PATH)).request()).await;
    assert_eq!(first.status(), 401);
    c.check(GET, &first);
    let resp = h.send(guess(HttpEvent::get(PATH)).request()).await;
    assert_eq!(resp.status(), 429);
    c.check(GET, &resp);
    let resp = h
        .send(
            guess(HttpEvent::put(PATH))
                .body(r#"{"function":"transfer","enabled":false}"#)
                .request(),
        )
        .await;
    assert_eq!(resp.status(), 429);
    c.check(PUT, &resp);
}

pub async fn operator_behind_cloudfront(c: &Checker) {
    let h = SessionHarness::new(&[
        ("CLIENT_IP_SOURCE", "cloudfront"),
        ("ORIGIN_VERIFY_SECRET", "origin-secret-for-tests"),
    ])
    .await;
    let flip = r#"{"function":"transfer","enabled":false}"#;
    for (origin, expected) in [
        (None, "forbidden"),
        (Some("origin-secret-for-tests"), "invalid_request"),
    ] {
        let with = |e: HttpEvent| {
            let e = e.header("cloudfront-viewer-address", "garbage");
            match origin {
                Some(secret) => e.header("x-origin-verify", secret),
                None => e,
            }
        };
        let resp = h.send(with(get()).request()).await;
        assert_eq!(code(&resp), expected);
        c.check(GET, &resp);
        let resp = h.send(with(put(flip)).request()).await;
        assert_eq!(code(&resp), expected);
        c.check(PUT, &resp);
    }
}

/// 500: events without a usable source address (a misconfigured deployment).
pub async fn operator_internal_error(c: &Checker) {
    let h = SessionHarness::new(&[]).await;
    let resp = h.send(get().from_ip("unknown").request()).await;
    assert_eq!(code(&resp), "internal_error");
    c.check(GET, &resp);
    let resp = h
        .send(
            put(r#"{"function":"transfer","enabled":false}"#)
                .from_ip("unknown")
                .request(),
        )
        .await;
    assert_eq!(code(&resp), "internal_error");
    c.check(PUT, &resp);
}

/// 503: the control table cannot be used.
pub async fn operator_unavailable(c: &Checker) {
    let h = SessionHarness::new(&[(
        catalog::CONTROL.function_variable,
        "tollgate-openapi-missing-control",
    )])
    .await;
    let resp = h.send(get().request()).await;
    assert_eq!(code(&resp), "temporarily_unavailable");
    c.check(GET, &resp);
    let resp = h
        .send(put(r#"{"function":"transfer","enabled":false}"#).request())
        .await;
    assert_eq!(code(&resp), "temporarily_unavailable");
    c.check(PUT, &resp);
}
