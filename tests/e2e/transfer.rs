//! `POST /transfers` with an `Idempotency-Key`, its replay, and the balance it leaves.

use crate::stack::{session_lock, stack, unique_key};
use crate::{expect_status, http};

const AMOUNT: u64 = 100;

/// The account's balance, through the published transfer URL.
pub fn balance(account: &str) -> u64 {
    let stack = stack();
    let resp = http::get(format!("{}/accounts/{account}", stack.transfer_url))
        .header("Authorization", &format!("Bearer {}", stack.demo.token))
        .send();
    expect_status(&resp, 200, "GET /accounts/{id}");
    let body = resp.json();
    assert_eq!(body["account_id"], account);
    body["balance"].as_u64().expect("balance")
}

#[test]
#[ignore = "needs the local stack: run by cargo xtask test"]
fn a_retried_transfer_is_replayed_not_repeated() {
    // The README's examples move the same demo accounts' money.
    let _serial = session_lock();
    let stack = stack();
    let (from, to) = (&stack.demo.accounts[0], &stack.demo.accounts[1]);
    let before = balance(from);
    assert!(
        before >= AMOUNT,
        "the demo payer {from} has {before}, less than {AMOUNT}: restart the stack for fresh demo data"
    );
    let key = unique_key("e2e");
    let send = || {
        http::post(format!("{}/transfers", stack.transfer_url))
            .header("Authorization", &format!("Bearer {}", stack.demo.token))
            .header("Idempotency-Key", &key)
            .json(&serde_json::json!({"from": from, "to": to, "amount": AMOUNT, "memo": "e2e"}))
            .send()
    };

    let first = send();
    expect_status(&first, 201, "POST /transfers");
    assert_eq!(first.header("idempotent-replayed"), None);
    let body = first.json();
    let id = body["transfer_id"].as_str().expect("transfer_id");
    assert_eq!(
        first.header("location"),
        Some(format!("/transfers/{id}").as_str())
    );
    assert_eq!(
        (&body["from"], &body["to"], &body["amount"]),
        (&from.as_str().into(), &to.as_str().into(), &AMOUNT.into())
    );

    let again = send();
    expect_status(&again, 201, "the same POST /transfers again");
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        again.text(),
        first.text(),
        "a replay returns the stored body byte for byte"
    );
    assert_eq!(again.header("location"), first.header("location"));

    assert_eq!(balance(from), before - AMOUNT, "moved once, not twice");

    let shown = http::get(format!("{}/transfers/{id}", stack.transfer_url))
        .header("Authorization", &format!("Bearer {}", stack.demo.token))
        .send();
    expect_status(&shown, 200, "GET /transfers/{id}");
    assert_eq!(shown.json()["transfer_id"], id);
}
