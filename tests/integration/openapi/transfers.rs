//! The transfer function's responses, checked against the document.

use std::time::Duration;

use serde_json::{json, Value};
use tollgate::idempotency::{fingerprint, Claim, IdempotencyKey, Scope};
use tollgate::kill_switch::KillSwitch;
use tollgate_functions::catalog;
use tollgate_tests::events::HttpEvent;
use tollgate_tests::json_body;
use tollgate_tests::transfer::{TestClient, TransferHarness};

use crate::openapi::spec::Checker;

const POST: &str = "POST /transfers";
const GET_TRANSFER: &str = "GET /transfers/{id}";
const GET_ACCOUNT: &str = "GET /accounts/{id}";

fn code(resp: &lambda_http::Response<lambda_http::Body>) -> String {
    json_body(resp)["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn replayed(resp: &lambda_http::Response<lambda_http::Body>) -> bool {
    resp.headers().get("idempotent-replayed").is_some()
}

/// A request with a bearer token.
fn authed(event: HttpEvent, client: &TestClient) -> HttpEvent {
    event.header("authorization", &format!("Bearer {}", client.token))
}

pub async fn transfer_created_replayed_and_read(c: &Checker) {
    let h = TransferHarness::new().await;
    let alice = h.client("alice").await;
    let bob = h.client("bob").await;
    let a = h.account(&alice, 1_000, "JPY").await;
    let b = h.account(&alice, 0, "JPY").await;

    let with_memo = json!({"from": a, "to": b, "amount": 250, "memo": "rent"});
    let created = h
        .send(h.post(&alice, "k-201", &with_memo.to_string()))
        .await;
    assert_eq!(created.status(), 201);
    c.check(POST, &created);
    c.accepted_body(POST, &with_memo);
    // The same body with another field order and white space is the same request.
    let reordered = format!(r#"{{ "memo": "rent", "amount": 250, "to": "{b}", "from": "{a}" }}"#);
    let replay = h.send(h.post(&alice, "k-201", &reordered)).await;
    assert_eq!(replay.status(), 201);
    assert!(replayed(&replay));
    c.check(POST, &replay);

    // Without a memo the body says `"memo": null`.
    let plain: Value = serde_json::from_str(&TransferHarness::body(&a, &b, 1)).unwrap();
    let created_plain = h
        .send(h.post(&alice, "k-201-plain", &plain.to_string()))
        .await;
    assert_eq!(created_plain.status(), 201);
    assert_eq!(json_body(&created_plain)["memo"], Value::Null);
    c.check(POST, &created_plain);
    c.accepted_body(POST, &plain);

    let location = created.headers()["location"].to_str().unwrap().to_string();
    let shown = h.get(&alice, &location).await;
    assert_eq!(shown.status(), 200);
    c.check(GET_TRANSFER, &shown);
    let account = h.get(&alice, &format!("/accounts/{a}")).await;
    assert_eq!(account.status(), 200);
    c.check(GET_ACCOUNT, &account);

    for resp in [
        h.get(&bob, &location).await,
        h.get(&alice, "/transfers/tr_00000000000000000000000000000000")
            .await,
    ] {
        assert_eq!(code(&resp), "transfer_not_found");
        c.check(GET_TRANSFER, &resp);
    }
    for resp in [
        h.get(&bob, &format!("/accounts/{a}")).await,
        h.get(&alice, "/accounts/acc_none").await,
    ] {
        assert_eq!(code(&resp), "account_not_found");
        c.check(GET_ACCOUNT, &resp);
    }
}

pub async fn transfer_refusals_are_stored_and_replayed(c: &Checker) {
    let h = TransferHarness::new().await;
    let alice = h.client("alice").await;
    let bob = h.client("bob").await;
    let a = h.account(&alice, 100, "JPY").await;
    let a_usd = h.account(&alice, 100, "USD").await;
    let b = h.account(&bob, 100, "JPY").await;

    let cases = [
        (
            "k-402",
            TransferHarness::body(&a, &b, 500),
            "insufficient_funds",
        ),
        ("k-403", TransferHarness::body(&b, &a, 1), "forbidden"),
        (
            "k-404",
            TransferHarness::body(&a, "acc_nope", 1),
            "account_not_found",
        ),
        (
            "k-422",
            TransferHarness::body(&a, &a_usd, 1),
            "currency_mismatch",
        ),
    ];
    for (key, body, expected) in &cases {
        let first = h.send(h.post(&alice, key, body)).await;
        assert_eq!(code(&first), *expected, "{key}");
        c.check(POST, &first);
        let replay = h.send(h.post(&alice, key, body)).await;
        assert!(replayed(&replay), "{key}");
        assert_eq!(replay.body().as_ref(), first.body().as_ref(), "{key}");
        c.check(POST, &replay);
    }

    let reused = h
        .send(h.post(&alice, "k-402", &TransferHarness::body(&a, &b, 1)))
        .await;
    assert_eq!(code(&reused), "idempotency_key_reused");
    c.check(POST, &reused);
}

pub async fn transfer_bad_requests_and_credentials(c: &Checker) {
    let h = TransferHarness::with_env(&[("MAX_BODY_BYTES", "512")]).await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 1_000, "JPY").await;
    let b = h.account(&alice, 0, "JPY").await;
    let good = TransferHarness::body(&a, &b, 10);

    // Bodies the document's schema refuses too.
    for body in [
        json!([]),
        json!({"from": a, "to": b, "amount": 1, "currency": "JPY"}),
        json!({"from": a, "to": b, "amount": 0}),
        json!({"from": a, "to": b, "amount": -1}),
        json!({"from": a, "to": b, "amount": 1.5}),
        json!({"from": a, "to": b, "amount": "10"}),
        json!({"from": a, "to": b, "amount": 1, "memo": "m".repeat(141)}),
        json!({"from": a, "to": b, "amount": 1, "memo": 7}),
        json!({"to": b, "amount": 1}),
        json!({"from": "a b", "to": b, "amount": 1}),
    ] {
        let resp = h.send(h.post(&alice, "k-400", &body.to_string())).await;
        assert_eq!(resp.status(), 400, "{body}");
        c.check(POST, &resp);
        c.refused_body(POST, &body);
    }
    // Not JSON, and a duplicate member name: beyond any schema, still 400.
    for body in [
        "not json".to_string(),
        format!(r#"{{"from":"{a}","to":"{b}","amount":1,"amount":2}}"#),
    ] {
        let resp = h.send(h.post(&alice, "k-400", &body)).await;
        assert_eq!(resp.status(), 400, "{body}");
        c.check(POST, &resp);
    }
    // Keys: missing, too long, not visible ASCII.
    let no_key = authed(HttpEvent::post("/transfers"), &alice)
        .header("content-type", "application/json")
        .body(good.clone())
        .request();
    for req in [
        no_key,
        h.post(&alice, &"k".repeat(256), &good),
        h.post(&alice, "has space", &good),
    ] {
        let resp = h.send(req).await;
        assert_eq!(resp.status(), 400);
        c.check(POST, &resp);
    }

    let large = json!({"from": a, "to": b, "amount": 1, "memo": "x".repeat(600)}).to_string();
    let resp = h.send(h.post(&alice, "k-413", &large)).await;
    assert_eq!(resp.status(), 413);
    c.check(POST, &resp);
    // A body over the limit is refused on every route, before anything else is done.
    for (path, op) in [
        ("/transfers/tr_x", GET_TRANSFER),
        ("/accounts/acc_x", GET_ACCOUNT),
    ] {
        let resp = h
            .send(
                authed(HttpEvent::get(path), &alice)
                    .body(large.clone())
                    .request(),
            )
            .await;
        assert_eq!(resp.status(), 413, "{path}");
        c.check(op, &resp);
    }

    let stranger = TestClient {
        id: "nobody".into(),
        token: "tg_not-a-real-token".into(),
    };
    let anonymous = HttpEvent::post("/transfers")
        .header("idempotency-key", "k-401")
        .body(good.clone())
        .request();
    for req in [anonymous, h.post(&stranger, "k-401", &good)] {
        let resp = h.send(req).await;
        assert_eq!(resp.status(), 401);
        c.check(POST, &resp);
    }
    let resp = h.get(&stranger, "/transfers/tr_x").await;
    assert_eq!(resp.status(), 401);
    c.check(GET_TRANSFER, &resp);
    let resp = h
        .send(HttpEvent::get(&format!("/accounts/{a}")).request())
        .await;
    assert_eq!(resp.status(), 401);
    c.check(GET_ACCOUNT, &resp);
}

/// 409: the key is held by a request still being processed. DynamoDB Local serialises
/// transactions, so the in-flight duplicate is stood in by a live claim on the same key and
/// body, which the transaction finds exactly as it would find a concurrent one.
pub async fn transfer_in_progress(c: &Checker) {
    let h = TransferHarness::new().await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 1_000, "JPY").await;
    let b = h.account(&alice, 0, "JPY").await;
    let body = TransferHarness::body(&a, &b, 10);
    let scope = Scope::new(
        &alice.id,
        "POST /transfers",
        &IdempotencyKey::parse(Some(b"k-409")).unwrap(),
    );
    let canonical: Value = serde_json::from_str(&body).unwrap();
    let claim = h
        .app
        .ledger
        .idempotency()
        .claim(&scope, &fingerprint(&canonical), Duration::from_secs(30))
        .await
        .unwrap();
    assert!(matches!(claim, Claim::Acquired(_)));

    let resp = h.send(h.post(&alice, "k-409", &body)).await;
    assert_eq!(resp.status(), 409);
    c.check(POST, &resp);
    assert_eq!(h.balance(&a).await, 1_000, "nothing moved");
}

pub async fn transfer_routing(c: &Checker) {
    let h = TransferHarness::new().await;
    let alice = h.client("alice").await;
    for path in ["/nothing", "/transfers/a/b", "/accounts/", "/"] {
        let resp = h.get(&alice, path).await;
        c.check_unknown_route(path, &resp);
    }
    for (method, path, template) in [
        ("GET", "/transfers", "/transfers"),
        ("DELETE", "/transfers", "/transfers"),
        ("POST", "/transfers/tr_x", "/transfers/{id}"),
        ("PUT", "/accounts/acc_x", "/accounts/{id}"),
    ] {
        let resp = h
            .send(authed(HttpEvent::new(method, path), &alice).request())
            .await;
        assert_eq!(resp.status(), 405, "{method} {path}");
        c.check_other_method(method, template, &resp);
    }
}

pub async fn transfer_rate_limited(c: &Checker) {
    let h =
        TransferHarness::with_env(&[(catalog::TRANSFER.limits_variable, "ip=100/1m,client=1/1m")])
            .await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 1_000, "JPY").await;
    let b = h.account(&alice, 0, "JPY").await;
    let first = h.get(&alice, &format!("/accounts/{a}")).await;
    assert_eq!(first.status(), 200);
    c.check(GET_ACCOUNT, &first);

    let limited = [
        (
            POST,
            h.send(h.post(&alice, "k", &TransferHarness::body(&a, &b, 1)))
                .await,
        ),
        (GET_TRANSFER, h.get(&alice, "/transfers/tr_x").await),
        (GET_ACCOUNT, h.get(&alice, &format!("/accounts/{a}")).await),
    ];
    for (op, resp) in &limited {
        assert_eq!(resp.status(), 429, "{op}");
        c.check(op, resp);
    }
}

pub async fn transfer_kill_switch(c: &Checker) {
    let h = TransferHarness::new().await;
    let alice = h.client("alice").await;
    let (_, clock) = tollgate_tests::manual_clock();
    KillSwitch::new(
        h.ddb.clone(),
        &h.tables.control,
        clock,
        Duration::from_secs(5),
    )
    .set(
        "transfer",
        true,
        Some("Transfers are paused for maintenance."),
    )
    .await
    .unwrap();
    let resps = [
        (
            POST,
            h.send(h.post(&alice, "k", &TransferHarness::body("acc_a", "acc_b", 1)))
                .await,
        ),
        (GET_TRANSFER, h.get(&alice, "/transfers/tr_x").await),
        (GET_ACCOUNT, h.get(&alice, "/accounts/acc_a").await),
    ];
    for (op, resp) in &resps {
        assert_eq!(code(resp), "service_disabled", "{op}");
        c.check(op, resp);
    }
}

pub async fn transfer_behind_cloudfront(c: &Checker) {
    let h = TransferHarness::with_env(&[
        ("CLIENT_IP_SOURCE", "cloudfront"),
        ("ORIGIN_VERIFY_SECRET", "origin-secret-for-tests"),
    ])
    .await;
    let alice = h.client("alice").await;
    let body = TransferHarness::body("acc_a", "acc_b", 1);
    let requests = |origin: Option<&str>| {
        let with = |e: HttpEvent| {
            let e = authed(e, &alice).header("cloudfront-viewer-address", "not-an-address");
            match origin {
                Some(secret) => e.header("x-origin-verify", secret),
                None => e,
            }
        };
        [
            (
                POST,
                with(HttpEvent::post("/transfers"))
                    .header("idempotency-key", "k")
                    .body(body.clone())
                    .request(),
            ),
            (
                GET_TRANSFER,
                with(HttpEvent::get("/transfers/tr_x")).request(),
            ),
            (
                GET_ACCOUNT,
                with(HttpEvent::get("/accounts/acc_a")).request(),
            ),
        ]
    };
    for (op, req) in requests(None) {
        let resp = h.send(req).await;
        assert_eq!(code(&resp), "forbidden", "{op}");
        c.check(op, &resp);
    }
    for (op, req) in requests(Some("origin-secret-for-tests")) {
        let resp = h.send(req).await;
        assert_eq!(code(&resp), "invalid_request", "{op}");
        c.check(op, &resp);
    }
}

/// 500: a deployment whose events carry no usable source address (`CLIENT_IP_SOURCE=peer`
/// behind something that is not API Gateway or a function URL).
pub async fn transfer_internal_error(c: &Checker) {
    let h = TransferHarness::new().await;
    let alice = h.client("alice").await;
    let from_nowhere = |e: HttpEvent| authed(e, &alice).from_ip("unknown");
    let resps = [
        (
            POST,
            h.send(
                from_nowhere(HttpEvent::post("/transfers"))
                    .header("idempotency-key", "k")
                    .body(TransferHarness::body("acc_a", "acc_b", 1))
                    .request(),
            )
            .await,
        ),
        (
            GET_TRANSFER,
            h.send(from_nowhere(HttpEvent::get("/transfers/tr_x")).request())
                .await,
        ),
        (
            GET_ACCOUNT,
            h.send(from_nowhere(HttpEvent::get("/accounts/acc_a")).request())
                .await,
        ),
    ];
    for (op, resp) in &resps {
        assert_eq!(code(resp), "internal_error", "{op}");
        c.check(op, resp);
    }
}

/// 503: the ledger's tables cannot be used.
pub async fn transfer_unavailable(c: &Checker) {
    let h = TransferHarness::with_env(&[
        (
            catalog::ACCOUNTS.function_variable,
            "tollgate-openapi-missing-accounts",
        ),
        (
            catalog::TRANSFERS.function_variable,
            "tollgate-openapi-missing-transfers",
        ),
    ])
    .await;
    let alice = h.client("alice").await;
    let resps = [
        (
            POST,
            h.send(h.post(&alice, "k", &TransferHarness::body("acc_a", "acc_b", 1)))
                .await,
        ),
        (
            GET_TRANSFER,
            h.get(&alice, "/transfers/tr_00000000000000000000000000000000")
                .await,
        ),
        (GET_ACCOUNT, h.get(&alice, "/accounts/acc_a").await),
    ];
    for (op, resp) in &resps {
        assert_eq!(code(resp), "temporarily_unavailable", "{op}");
        c.check(op, resp);
    }
    // An id that is not of the shape we mint is not looked up: 404 even with no tables.
    let resp = h.get(&alice, "/transfers/tr_x").await;
    assert_eq!(
        (resp.status().as_u16(), code(&resp)),
        (404, "transfer_not_found".into())
    );
}
