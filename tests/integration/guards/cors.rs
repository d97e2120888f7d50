//! CORS, answered by both functions through their `handle`: a preflight from a listed origin
//! costs nothing (no DynamoDB request, no counter, no upstream call), every other answer to a
//! listed origin can be read by the page (errors and replays too), and an origin not listed gets
//! no CORS header.

use std::sync::Arc;
use std::time::Duration;

use lambda_http::{Body, Response};
use tollgate::config::Env;
use tollgate::cors::{ALLOWED_HEADERS, EXPOSED_HEADERS};
use tollgate::kill_switch::KillSwitch;
use tollgate_functions::catalog;
use tollgate_functions::serve::GuardedFunction;
use tollgate_tests::dynamo;
use tollgate_tests::events::HttpEvent;
use tollgate_tests::openai::Answer;
use tollgate_tests::session::SessionHarness;
use tollgate_tests::transfer::{TestClient, TransferHarness};
use tollgate_tests::{json_body, manual_clock};

const APP: &str = "https://app.example.com";
const LOCAL: &str = "http://localhost:5173";
const OTHER: &str = "https://evil.example.net";
const ORIGINS: (&str, &str) = (
    "CORS_ALLOWED_ORIGINS",
    "https://app.example.com, http://localhost:5173",
);
const CORS_HEADERS: &[&str] = &[
    "access-control-allow-origin",
    "access-control-allow-methods",
    "access-control-allow-headers",
    "access-control-max-age",
    "access-control-expose-headers",
    "access-control-allow-credentials",
];

fn preflight(path: &str, origin: &str, method: &str) -> HttpEvent {
    HttpEvent::new("OPTIONS", path)
        .header("origin", origin)
        .header("access-control-request-method", method)
        .header(
            "access-control-request-headers",
            "content-type, idempotency-key",
        )
}

fn header<'a>(resp: &'a Response<Body>, name: &str) -> Option<&'a str> {
    resp.headers().get(name).map(|v| v.to_str().unwrap())
}

fn assert_preflight(resp: &Response<Body>, origin: &str, methods: &str) {
    assert_eq!(resp.status(), 204, "{:?}", resp.headers());
    assert_eq!(header(resp, "access-control-allow-origin"), Some(origin));
    assert_eq!(header(resp, "access-control-allow-methods"), Some(methods));
    assert_eq!(
        header(resp, "access-control-allow-headers"),
        Some(ALLOWED_HEADERS)
    );
    assert_eq!(header(resp, "access-control-max-age"), Some("600"));
    assert_eq!(header(resp, "vary"), Some("Origin"));
    assert!(header(resp, "x-request-id").is_some());
    assert_eq!(header(resp, "access-control-allow-credentials"), None);
    assert_eq!(header(resp, "ratelimit"), None, "counted in no layer");
    assert!(resp.body().is_empty());
}

/// An ordinary answer the page at `origin` may read, with the headers it acts on.
fn assert_readable(resp: &Response<Body>, origin: &str) {
    assert_eq!(
        header(resp, "access-control-allow-origin"),
        Some(origin),
        "{} {:?}",
        resp.status(),
        resp.headers()
    );
    assert_eq!(
        header(resp, "access-control-expose-headers"),
        Some(EXPOSED_HEADERS)
    );
    assert_eq!(header(resp, "vary"), Some("Origin"));
    assert_eq!(header(resp, "access-control-allow-credentials"), None);
    assert_eq!(header(resp, "access-control-allow-methods"), None);
}

fn assert_no_cors(resp: &Response<Body>) {
    for name in CORS_HEADERS {
        assert_eq!(header(resp, name), None, "{name}: {:?}", resp.headers());
    }
}

#[tokio::test]
async fn a_listed_origins_preflight_spends_nothing_on_either_function() {
    // One session per address per hour and per day: a single counted preflight would show.
    let h = SessionHarness::new(&[
        ORIGINS,
        (
            catalog::EPHEMERAL_KEY.limits_variable,
            "ip=1/1h,global=1/1d",
        ),
    ])
    .await;
    for _ in 0..20 {
        let resp = h
            .send(
                preflight("/session", APP, "POST")
                    .from_ip("192.0.2.80")
                    .request(),
            )
            .await;
        assert_preflight(&resp, APP, "POST");
    }
    let resp = h
        .send(preflight("/internal/kill-switch", LOCAL, "PUT").request())
        .await;
    assert_preflight(&resp, LOCAL, "GET, PUT");
    // The method asked for is not checked here: the browser refuses one the answer lacks.
    let resp = h.send(preflight("/session", APP, "DELETE").request()).await;
    assert_preflight(&resp, APP, "POST");
    assert_eq!(h.counter.total(), 0, "{:?}", h.counter.snapshot());
    assert!(
        dynamo::scan_all(&h.ddb, &h.tables.rate_limits)
            .await
            .is_empty(),
        "no counter item"
    );
    assert_eq!(h.openai.calls().await, 0);

    // The quota is whole: the page's real request is admitted, and readable.
    let resp = h
        .send(
            SessionHarness::post("192.0.2.80", None)
                .header("origin", APP)
                .request(),
        )
        .await;
    assert_eq!(resp.status(), 200);
    assert_readable(&resp, APP);

    let t =
        TransferHarness::with_env(&[ORIGINS, (catalog::TRANSFER.limits_variable, "ip=1/1h")]).await;
    for (path, methods) in [
        ("/transfers", "POST"),
        ("/transfers/tr_0123", "GET"),
        ("/accounts/acc_0123", "GET"),
    ] {
        let resp = t.send(preflight(path, APP, methods).request()).await;
        assert_preflight(&resp, APP, methods);
    }
    assert_eq!(t.counter.total(), 0, "{:?}", t.counter.snapshot());
}

#[tokio::test]
async fn a_preflight_is_answered_even_while_the_kill_switch_is_on() {
    let h = SessionHarness::new(&[ORIGINS]).await;
    let (_, clock) = manual_clock();
    KillSwitch::new(
        h.ddb.clone(),
        &h.tables.control,
        clock,
        Duration::from_secs(5),
    )
    .set(catalog::EPHEMERAL_KEY.name, true, Some("Paused for today."))
    .await
    .unwrap();
    let resp = h.send(preflight("/session", APP, "POST").request()).await;
    assert_preflight(&resp, APP, "POST");
    assert_eq!(h.counter.total(), 0, "the switch was not even read");
    // So the page can read the operator's message on the real request.
    let resp = h
        .send(HttpEvent::post("/session").header("origin", APP).request())
        .await;
    assert_eq!(resp.status(), 403);
    assert_eq!(json_body(&resp)["detail"], "Paused for today.");
    assert_readable(&resp, APP);
}

#[tokio::test]
async fn a_preflight_outside_the_routes_is_not_answered() {
    let h = SessionHarness::new(&[ORIGINS, ("BASE_PATH", "/api")]).await;
    let resp = h
        .send(preflight("/api/session", APP, "POST").request())
        .await;
    assert_preflight(&resp, APP, "POST");
    // Outside BASE_PATH, or no route: the 404 every method gets (readable, and not ok, so the
    // browser stops there).
    for path in ["/session", "/api/nothing"] {
        let resp = h.send(preflight(path, APP, "POST").request()).await;
        assert_eq!(resp.status(), 404, "{path}");
        assert_readable(&resp, APP);
    }
    // Without Access-Control-Request-Method an OPTIONS is no preflight: 405 like any method.
    let resp = h
        .send(
            HttpEvent::new("OPTIONS", "/api/session")
                .header("origin", APP)
                .request(),
        )
        .await;
    assert_eq!(resp.status(), 405);
    assert_readable(&resp, APP);
    assert_eq!(h.counter.total(), 0, "{:?}", h.counter.snapshot());
}

#[tokio::test]
async fn an_origin_not_listed_gets_no_cors_header() {
    for extra in [vec![ORIGINS], vec![]] {
        let configured = !extra.is_empty();
        let h = SessionHarness::new(&extra).await;
        for origin in [OTHER, "https://app.example.com.evil.example.net", "null"] {
            let resp = h
                .send(preflight("/session", origin, "POST").request())
                .await;
            // Routed like any other OPTIONS: 405 before any guard.
            assert_eq!(resp.status(), 405, "{origin}");
            assert_eq!(header(&resp, "allow"), Some("POST"));
            assert_no_cors(&resp);
            // Vary is there whenever CORS is on: the answer depends on the Origin.
            assert_eq!(header(&resp, "vary").is_some(), configured, "{origin}");
        }
        if !configured {
            let resp = h.send(preflight("/session", APP, "POST").request()).await;
            assert_eq!(resp.status(), 405, "CORS is off by default");
            assert_no_cors(&resp);
        }
        assert_eq!(h.counter.total(), 0, "{:?}", h.counter.snapshot());

        let resp = h
            .send(
                HttpEvent::post("/session")
                    .header("origin", OTHER)
                    .request(),
            )
            .await;
        assert_eq!(resp.status(), 200);
        assert_no_cors(&resp);
        assert_eq!(header(&resp, "vary").is_some(), configured);
    }

    let t = TransferHarness::with_env(&[ORIGINS]).await;
    let resp = t
        .send(preflight("/transfers", OTHER, "POST").request())
        .await;
    assert_eq!(resp.status(), 405);
    assert_no_cors(&resp);
    assert_eq!(t.counter.total(), 0);
}

#[tokio::test]
async fn every_session_answer_to_a_listed_origin_is_readable() {
    let h = SessionHarness::new(&[
        ORIGINS,
        (
            catalog::EPHEMERAL_KEY.limits_variable,
            "ip=2/1h,global=100/1d",
        ),
    ])
    .await;
    let keyed = |origin: &str| {
        SessionHarness::post("192.0.2.81", None)
            .header("origin", origin)
            .header("idempotency-key", "0b6f6a3e-4c4e-4b8a-9f0e-3d2c1b0a9f8e")
            .request()
    };
    let first = h.send(keyed(APP)).await;
    assert_eq!(first.status(), 200);
    assert_readable(&first, APP);
    // The replay is the stored answer, with this request's CORS headers, not the first one's.
    let replay = h.send(keyed(LOCAL)).await;
    assert_eq!(header(&replay, "idempotent-replayed"), Some("true"));
    assert_eq!(replay.body().as_ref(), first.body().as_ref());
    assert_readable(&replay, LOCAL);
    // A replay gives its unit back: the second new request finds the layer full.
    let unkeyed = || {
        SessionHarness::post("192.0.2.81", None)
            .header("origin", APP)
            .request()
    };
    assert_eq!(h.send(unkeyed()).await.status(), 200);
    let limited = h.send(unkeyed()).await;
    assert_eq!(limited.status(), 429);
    assert!(header(&limited, "retry-after").is_some());
    assert_readable(&limited, APP);

    h.openai.then([Answer::Status(500)]);
    let failing = h
        .send(
            SessionHarness::post("192.0.2.82", None)
                .header("origin", APP)
                .request(),
        )
        .await;
    assert_eq!(failing.status(), 503);
    assert_readable(&failing, APP);

    let wrong_method = h
        .send(HttpEvent::get("/session").header("origin", APP).request())
        .await;
    assert_eq!(wrong_method.status(), 405);
    assert_readable(&wrong_method, APP);
}

fn authed(event: HttpEvent, client: &TestClient) -> HttpEvent {
    event.header("authorization", &format!("Bearer {}", client.token))
}

#[tokio::test]
async fn every_transfer_answer_to_a_listed_origin_is_readable() {
    let h = TransferHarness::with_env(&[
        ORIGINS,
        (catalog::TRANSFER.limits_variable, "ip=100/1m,client=4/1m"),
    ])
    .await;
    let alice = h.client("alice").await;
    let from = h.account(&alice, 1_000, "JPY").await;
    let to = h.account(&alice, 0, "JPY").await;
    let post = |origin: &str| {
        authed(HttpEvent::post("/transfers"), &alice)
            .header("origin", origin)
            .header("idempotency-key", "cors-transfer-1")
            .header("content-type", "application/json")
            .body(TransferHarness::body(&from, &to, 100))
            .request()
    };
    let created = h.send(post(APP)).await;
    assert_eq!(created.status(), 201);
    assert_readable(&created, APP);
    let replay = h.send(post(LOCAL)).await;
    assert_eq!(replay.status(), 201);
    assert_eq!(header(&replay, "idempotent-replayed"), Some("true"));
    assert_readable(&replay, LOCAL);
    assert_eq!(h.balance(&from).await, 900, "moved once");

    let read = h
        .send(
            authed(HttpEvent::get(&format!("/accounts/{from}")), &alice)
                .header("origin", APP)
                .request(),
        )
        .await;
    assert_eq!(read.status(), 200);
    assert_readable(&read, APP);
    let unauthorized = h
        .send(
            HttpEvent::get(&format!("/accounts/{from}"))
                .header("origin", APP)
                .request(),
        )
        .await;
    assert_eq!(unauthorized.status(), 401);
    assert_readable(&unauthorized, APP);
    // alice's fourth and fifth counted requests: the client layer is full.
    let _ = h.get(&alice, &format!("/accounts/{from}")).await;
    let limited = h
        .send(
            authed(HttpEvent::get(&format!("/accounts/{from}")), &alice)
                .header("origin", APP)
                .request(),
        )
        .await;
    assert_eq!(limited.status(), 429);
    assert_readable(&limited, APP);
}

#[tokio::test]
async fn a_bad_origin_list_names_its_variable_on_both_functions() {
    let (_, clock) = manual_clock();
    for bad in [
        "*",
        "https://app.example.com, *",
        "https://*.example.com",
        "https://app.example.com/",
        "https://app.example.com/app",
        "app.example.com",
        "garbage",
        "ftp://app.example.com",
    ] {
        let env = Env::from_pairs([("CORS_ALLOWED_ORIGINS", bad), ("OPENAI_API_KEY", "sk-x")]);
        let (ddb, _) = dynamo::client();
        let session = ephemeral_key::App::from_env(&env, ddb.clone(), None, clock.clone())
            .map(|_| ())
            .unwrap_err();
        assert_eq!(session.var, "CORS_ALLOWED_ORIGINS", "{bad}");
        assert!(
            session.to_string().contains("CORS_ALLOWED_ORIGINS"),
            "{session}"
        );
        let transfer = transfer::App::from_env(&env, ddb, None, Arc::clone(&clock))
            .map(|_| ())
            .unwrap_err();
        assert_eq!(transfer.var, "CORS_ALLOWED_ORIGINS", "{bad}");
    }
    let err = transfer::App::from_env(
        &Env::from_pairs([("CORS_ALLOWED_ORIGINS", "*")]),
        dynamo::client().0,
        None,
        clock,
    )
    .map(|_| ())
    .unwrap_err();
    assert!(err.to_string().contains("never allowed"), "{err}");
}
