//! CORS responses, checked against the document: the preflight on every path, from a listed
//! origin (204) and from one not listed (405), and ordinary answers to a listed origin, whose
//! CORS headers the document describes once for all responses.

use tollgate_functions::catalog;
use tollgate_tests::events::HttpEvent;
use tollgate_tests::session::{SessionHarness, INTERNAL_TOKEN};
use tollgate_tests::transfer::TransferHarness;

use crate::openapi::spec::Checker;

const LISTED: &str = "https://app.example.com";
const NOT_LISTED: &str = "https://evil.example.net";
const ORIGINS: (&str, &str) = ("CORS_ALLOWED_ORIGINS", LISTED);

fn preflight(path: &str, origin: &str, method: &str) -> lambda_http::Request {
    HttpEvent::new("OPTIONS", path)
        .header("origin", origin)
        .header("access-control-request-method", method)
        .header("access-control-request-headers", "content-type")
        .request()
}

pub async fn cors_preflights_and_cross_origin_answers(c: &Checker) {
    let h = SessionHarness::new(&[
        ORIGINS,
        (
            catalog::EPHEMERAL_KEY.limits_variable,
            "ip=1/1h,global=10/1d",
        ),
    ])
    .await;
    for (path, method) in [("/session", "POST"), ("/internal/kill-switch", "PUT")] {
        let op = format!("OPTIONS {path}");
        let resp = h.send(preflight(path, LISTED, method)).await;
        assert_eq!(resp.status(), 204, "{path}");
        c.check(&op, &resp);
        let resp = h.send(preflight(path, NOT_LISTED, method)).await;
        assert_eq!(resp.status(), 405, "{path}");
        c.check(&op, &resp);
    }
    let from_page = || {
        SessionHarness::post("192.0.2.90", None)
            .header("origin", LISTED)
            .request()
    };
    let admitted = h.send(from_page()).await;
    assert_eq!(admitted.status(), 200);
    c.check("POST /session", &admitted);
    let limited = h.send(from_page()).await;
    assert_eq!(limited.status(), 429);
    c.check("POST /session", &limited);
    let operator = h
        .send(
            HttpEvent::get("/internal/kill-switch")
                .header("origin", LISTED)
                .header("x-internal-token", INTERNAL_TOKEN)
                .request(),
        )
        .await;
    assert_eq!(operator.status(), 200);
    c.check("GET /internal/kill-switch", &operator);

    let t = TransferHarness::with_env(&[ORIGINS]).await;
    for (path, template, method) in [
        ("/transfers", "/transfers", "POST"),
        ("/transfers/tr_0123", "/transfers/{id}", "GET"),
        ("/accounts/acc_0123", "/accounts/{id}", "GET"),
    ] {
        let op = format!("OPTIONS {template}");
        let resp = t.send(preflight(path, LISTED, method)).await;
        assert_eq!(resp.status(), 204, "{path}");
        c.check(&op, &resp);
        let resp = t.send(preflight(path, NOT_LISTED, method)).await;
        assert_eq!(resp.status(), 405, "{path}");
        c.check(&op, &resp);
    }
    let alice = t.client("alice").await;
    let from = t.account(&alice, 1_000, "JPY").await;
    let to = t.account(&alice, 0, "JPY").await;
    let post = || {
        HttpEvent::post("/transfers")
            .header("origin", LISTED)
            .header("authorization", &format!("Bearer {}", alice.token))
            .header("idempotency-key", "cors-conformance-1")
            .header("content-type", "application/json")
            .body(TransferHarness::body(&from, &to, 10))
            .request()
    };
    let created = t.send(post()).await;
    assert_eq!(created.status(), 201);
    c.check("POST /transfers", &created);
    let replay = t.send(post()).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    c.check("POST /transfers", &replay);
    let account = t
        .send(
            HttpEvent::get(&format!("/accounts/{from}"))
                .header("origin", LISTED)
                .header("authorization", &format!("Bearer {}", alice.token))
                .request(),
        )
        .await;
    assert_eq!(account.status(), 200);
    c.check("GET /accounts/{id}", &account);
    let unknown = t
        .send(
            HttpEvent::get("/nothing")
                .header("origin", LISTED)
                .request(),
        )
        .await;
    c.check_unknown_route("/nothing", &unknown);
}
