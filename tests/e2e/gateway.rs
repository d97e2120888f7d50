//! Requests reach the functions as API Gateway's payload 2.0 presents them, so that a local
//! answer is the deployed answer: a header field sent twice arrives as one field holding both
//! values joined with commas (AWS joins them; `cargo lambda watch` alone would keep the first
//! and drop the rest, and the stack's front joins them before it does). Through the stack's
//! published transfer URL and through the page's `/api` (`web/dev/server.cjs`, whose Node
//! `req.headers` keeps only the first of some names, `Authorization` among them).

use crate::stack::{session_lock, stack, unique_key};
use crate::transfer::balance;
use crate::{expect_status, http};

/// The two ways in: the published function URL, and the page's same-origin `/api`.
fn entrances() -> [(&'static str, String); 2] {
    let stack = stack();
    let page = stack.web_url.split('?').next().unwrap_or_default();
    [
        ("the published transfer URL", stack.transfer_url.clone()),
        (
            "the page's /api",
            format!("{}/api", page.trim_end_matches('/')),
        ),
    ]
}

fn transfer(base: &str) -> http::Request {
    let stack = stack();
    let (from, to) = (&stack.demo.accounts[0], &stack.demo.accounts[1]);
    http::post(format!("{base}/transfers"))
        .json(&serde_json::json!({"from": from, "to": to, "amount": 1, "memo": "e2e twice"}))
}

/// Two `Idempotency-Key` fields name no single key on AWS (one field holding a list): 400,
/// and no money moves. Locally the first used to win: 201, money moved.
#[test]
#[ignore = "needs the local stack: run by cargo xtask test"]
fn two_idempotency_key_fields_are_a_400_and_move_no_money() {
    let _serial = session_lock();
    let stack = stack();
    let payer = &stack.demo.accounts[0];
    let before = balance(payer);
    for (way, base) in entrances() {
        let resp = transfer(&base)
            .header("Authorization", &format!("Bearer {}", stack.demo.token))
            .header("Idempotency-Key", &unique_key("first"))
            .header("Idempotency-Key", &unique_key("second"))
            .send();
        expect_status(
            &resp,
            400,
            &format!("two Idempotency-Key fields through {way}"),
        );
        let problem = resp.json();
        assert_eq!(problem["code"], "invalid_request", "{way}: {problem}");
        assert_eq!(balance(payer), before, "{way}: no money moved");
    }
}

/// Two `Authorization` fields are one credential on AWS (`Bearer a,Bearer b`), which names no
/// client: 401, and no money moves, even when the first field alone is a good token.
#[test]
#[ignore = "needs the local stack: run by cargo xtask test"]
fn two_authorization_fields_are_a_401_and_move_no_money() {
    let _serial = session_lock();
    let stack = stack();
    let payer = &stack.demo.accounts[0];
    let before = balance(payer);
    for (way, base) in entrances() {
        let resp = transfer(&base)
            .header("Authorization", &format!("Bearer {}", stack.demo.token))
            .header("Authorization", "Bearer someone-else")
            .header("Idempotency-Key", &unique_key("auth-twice"))
            .send();
        expect_status(
            &resp,
            401,
            &format!("two Authorization fields through {way}"),
        );
        assert_eq!(balance(payer), before, "{way}: no money moved");
    }
}
