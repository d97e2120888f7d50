//! Lesson 001 (our own services throttled by the per-address limit) and lesson 002 (auth
//! failures that escaped the limit), through the guard pipeline and the internal routes.

use ephemeral_key::App;
use tollgate::config::Env;
use tollgate::gate::Gate;
use tollgate_functions::catalog;
use tollgate_functions::serve::GuardedFunction;
use tollgate_tests::dynamo::{self, counters_matching, Tables};
use tollgate_tests::events::HttpEvent;
use tollgate_tests::pipeline::{guarded, settings};
use tollgate_tests::{json_body, manual_clock};

const TOKEN: &str = "internal-token-for-tests-0123456789";

async fn new_gate(limits: &str) -> (Gate, Tables, aws_sdk_dynamodb::Client) {
    let (ddb, _) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let (_, clock) = manual_clock();
    let gate = Gate::new(
        settings(&tables, limits, &[("INTERNAL_TOKEN", TOKEN)]),
        ddb.clone(),
        clock,
    );
    (gate, tables, ddb)
}

async fn run(gate: &Gate, token: Option<&str>, n: usize) -> Vec<u16> {
    let mut statuses = Vec::new();
    for _ in 0..n {
        let mut event = HttpEvent::post("/x").from_ip("198.51.100.1");
        if let Some(t) = token {
            event = event.header("x-internal-token", t);
        }
        statuses.push(
            guarded(gate, &event.request(), Some("svc"))
                .await
                .status()
                .as_u16(),
        );
    }
    statuses
}

#[tokio::test]
async fn lesson_001_internal_token_skips_the_address_and_client_layers() {
    let (gate, tables, ddb) = new_gate("ip=5/1m,client=5/1m,global=1000/1d").await;
    assert_eq!(run(&gate, Some(TOKEN), 20).await, vec![200; 20]);
    assert!(counters_matching(&ddb, &tables.rate_limits, "#ip#")
        .await
        .is_empty());
    assert!(counters_matching(&ddb, &tables.rate_limits, "#client#")
        .await
        .is_empty());
    // The spend cap still counts internal callers.
    assert_eq!(
        counters_matching(&ddb, &tables.rate_limits, "#global#").await[0].1,
        20
    );
}

#[tokio::test]
async fn lesson_001_plain_requests_from_one_address_stop_at_the_limit() {
    let (gate, _, _) = new_gate("ip=5/1m").await;
    assert_eq!(
        run(&gate, None, 20).await,
        [vec![200; 5], vec![429; 15]].concat()
    );
}

#[tokio::test]
async fn lesson_001_a_forged_internal_token_is_counted_like_any_request() {
    let (gate, _, _) = new_gate("ip=5/1m").await;
    let forged = &TOKEN[..TOKEN.len() - 1];
    assert_eq!(
        run(&gate, Some(forged), 20).await,
        [vec![200; 5], vec![429; 15]].concat()
    );
    let (gate, _, _) = new_gate("ip=5/1m").await;
    assert_eq!(
        run(&gate, Some(&format!("{TOKEN}x")), 20).await,
        [vec![200; 5], vec![429; 15]].concat()
    );
}

async fn new_app(limits: &str) -> (App, Tables, aws_sdk_dynamodb::Client) {
    let (ddb, _) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let (_, clock) = manual_clock();
    let mut env = Env::from_pairs(tables.env_pairs());
    env.set(catalog::EPHEMERAL_KEY.limits_variable, limits)
        .set("INTERNAL_TOKEN", TOKEN)
        .set("OPENAI_API_KEY", "sk-unused");
    let app = App::from_env(&env, ddb.clone(), None, clock).unwrap();
    (app, tables, ddb)
}

/// Lesson 002: a flood of random invalid tokens, and a flood with no token, both reach 429 at
/// the `ip` limit; the counter is keyed on the address, never on the unverified token.
#[tokio::test]
async fn lesson_002_failed_authentications_are_counted_by_address() {
    for with_token in [true, false] {
        let (app, tables, ddb) = new_app("ip=10/1h,global=off").await;
        let mut statuses = Vec::new();
        for i in 0..25 {
            let mut event = HttpEvent::get("/internal/kill-switch").from_ip("192.0.2.200");
            if with_token {
                event = event.header("x-internal-token", &format!("random-{i}-{}", i * 7919));
            }
            let resp = app.handle(event.request()).await;
            statuses.push(resp.status().as_u16());
        }
        assert_eq!(
            statuses,
            [vec![401; 10], vec![429; 15]].concat(),
            "with token: {with_token}"
        );
        let items = dynamo::scan_all(&ddb, &tables.rate_limits).await;
        assert_eq!(items.len(), 1, "one counter for the address");
        let pk = items[0]["pk"].as_s().unwrap();
        assert!(pk.contains("#ip#") && pk.contains("192.0.2.200"), "{pk}");
        assert!(
            !pk.contains("random"),
            "the unverified token is no part of the key: {pk}"
        );
    }
}

#[tokio::test]
async fn internal_routes_work_with_the_real_token_and_refuse_others() {
    let (app, _, _) = new_app("ip=10/1h,global=off").await;
    let ok = app
        .handle(
            HttpEvent::put("/internal/kill-switch")
                .header("x-internal-token", TOKEN)
                .json(&serde_json::json!({"function": "ephemeral-key", "enabled": true, "message": "Down for a moment"}))
                .request(),
        )
        .await;
    assert_eq!(ok.status(), 200);
    assert_eq!(
        json_body(&ok),
        serde_json::json!({"function": "ephemeral-key", "enabled": true, "message": "Down for a moment"})
    );
    // The kill switch does not lock the operator out of its own routes.
    let status = app
        .handle(
            HttpEvent::get("/internal/kill-switch")
                .header("x-internal-token", TOKEN)
                .request(),
        )
        .await;
    assert_eq!(status.status(), 200);
    assert_eq!(json_body(&status)["enabled"], true);

    let missing = app
        .handle(HttpEvent::get("/internal/kill-switch").request())
        .await;
    assert_eq!(missing.status(), 401);
    assert_eq!(json_body(&missing)["code"], "unauthorized");
    let wrong_method = app
        .handle(
            HttpEvent::post("/internal/kill-switch")
                .header("x-internal-token", TOKEN)
                .request(),
        )
        .await;
    assert_eq!(wrong_method.status(), 405);
    assert_eq!(wrong_method.headers()["allow"], "GET, PUT");
    let unknown = app.handle(HttpEvent::get("/nowhere").request()).await;
    assert_eq!(unknown.status(), 404);
    assert_eq!(
        unknown.headers()["content-type"],
        "application/problem+json"
    );
    assert!(unknown.headers().contains_key("x-request-id"));

    for (body, why) in [
        (
            r#"{"function":"billing","enabled":true}"#,
            "unknown function",
        ),
        (
            r#"{"function":"transfer","enabled":"yes"}"#,
            "enabled not a boolean",
        ),
        (
            r#"{"function":"transfer","enabled":true,"extra":1}"#,
            "unknown field",
        ),
        ("not json", "not JSON"),
    ] {
        let resp = app
            .handle(
                HttpEvent::put("/internal/kill-switch")
                    .header("x-internal-token", TOKEN)
                    .body(body)
                    .request(),
            )
            .await;
        assert_eq!(resp.status(), 400, "{why}");
    }
}
