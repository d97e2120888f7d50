//! Refusals the contract stores under the key and replays.

use tollgate_functions::catalog;
use tollgate_tests::json_body;
use tollgate_tests::transfer::TransferHarness;

#[tokio::test]
async fn insufficient_funds_is_stored_and_still_replayed_after_a_deposit() {
    let h = TransferHarness::new().await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 100, "JPY").await;
    let b = h.account(&alice, 0, "JPY").await;
    let body = TransferHarness::body(&a, &b, 500);
    let first = h.send(h.post(&alice, "k-402", &body)).await;
    assert_eq!(first.status(), 402);
    assert_eq!(json_body(&first)["code"], "insufficient_funds");
    assert_eq!(first.headers()["content-type"], "application/problem+json");

    let token = tollgate::ids::new_id("dep");
    h.app.ledger.deposit(&a, 1_000, &token).await.unwrap();
    let replay = h.send(h.post(&alice, "k-402", &body)).await;
    assert_eq!(replay.status(), 402);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.body().as_ref(), first.body().as_ref());
    assert_eq!((h.balance(&a).await, h.balance(&b).await), (1_100, 0));

    // A new key is a new request, and now there is money.
    assert_eq!(h.send(h.post(&alice, "k-new", &body)).await.status(), 201);
}

#[tokio::test]
async fn missing_accounts_foreign_accounts_and_currency_mismatch_are_stored() {
    let h = TransferHarness::new().await;
    let alice = h.client("alice").await;
    let bob = h.client("bob").await;
    let a = h.account(&alice, 1_000, "JPY").await;
    let a_usd = h.account(&alice, 1_000, "USD").await;
    let b = h.account(&bob, 1_000, "JPY").await;

    let cases = [
        (
            "k-404-from",
            TransferHarness::body("acc_nope", &a, 1),
            404,
            "account_not_found",
        ),
        (
            "k-404-to",
            TransferHarness::body(&a, "acc_nope", 1),
            404,
            "account_not_found",
        ),
        ("k-403", TransferHarness::body(&b, &a, 1), 403, "forbidden"),
        (
            "k-422",
            TransferHarness::body(&a, &a_usd, 1),
            422,
            "currency_mismatch",
        ),
        (
            "k-422-rev",
            TransferHarness::body(&a_usd, &a, 1),
            422,
            "currency_mismatch",
        ),
    ];
    for (key, body, status, code) in &cases {
        let first = h.send(h.post(&alice, key, body)).await;
        assert_eq!(first.status(), *status, "{key}");
        assert_eq!(json_body(&first)["code"], *code, "{key}");
        let replay = h.send(h.post(&alice, key, body)).await;
        assert_eq!(replay.status(), *status, "{key}");
        assert_eq!(replay.headers()["idempotent-replayed"], "true", "{key}");
        assert_eq!(replay.body().as_ref(), first.body().as_ref(), "{key}");
    }
    for acc in [&a, &a_usd, &b] {
        assert_eq!(h.balance(acc).await, 1_000);
    }
    assert_eq!(h.count(&h.tables.transfers).await, 0);
}

/// Accounts in another currency than the default work; the first transfer learns the currency.
#[tokio::test]
async fn transfers_in_a_non_default_currency() {
    let h = TransferHarness::new().await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 1_000, "EUR").await;
    let b = h.account(&alice, 0, "EUR").await;
    for (i, amount) in [100, 200].into_iter().enumerate() {
        let resp = h
            .send(h.post(
                &alice,
                &format!("eur-{i}"),
                &TransferHarness::body(&a, &b, amount),
            ))
            .await;
        assert_eq!(resp.status(), 201);
    }
    assert_eq!((h.balance(&a).await, h.balance(&b).await), (700, 300));
    let short = h
        .send(h.post(&alice, "eur-402", &TransferHarness::body(&a, &b, 5_000)))
        .await;
    assert_eq!(short.status(), 402);
}

#[tokio::test]
async fn missing_and_unknown_tokens_get_401_and_are_counted_by_address() {
    let h =
        TransferHarness::with_env(&[(catalog::TRANSFER.limits_variable, "ip=5/1m,client=100/1m")])
            .await;
    let mut statuses = Vec::new();
    for i in 0..8 {
        let mut event = tollgate_tests::events::HttpEvent::post("/transfers").from_ip("192.0.2.9");
        if i % 2 == 0 {
            event = event.header("authorization", &format!("Bearer tg_forged{i}"));
        }
        statuses.push(
            h.send(event.header("idempotency-key", "k").body("{}").request())
                .await
                .status()
                .as_u16(),
        );
    }
    assert_eq!(statuses, [vec![401; 5], vec![429; 3]].concat());
}

/// The credit keeps `balance + amount <= MAX_BALANCE`: a transfer that would take `to` past it
/// is refused with 422 `balance_limit_exceeded`, stored and replayed like the other refusals.
#[tokio::test]
async fn a_credit_past_the_balance_ceiling_is_refused_stored_and_replayed() {
    let h = TransferHarness::new().await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 1_000, "JPY").await;
    let full = transfer::ledger::MAX_BALANCE - 5;
    let b = h.account(&alice, full, "JPY").await;
    let body = TransferHarness::body(&a, &b, 10);
    let first = h.send(h.post(&alice, "k-ceiling", &body)).await;
    assert_eq!(first.status(), 422, "{:?}", json_body(&first));
    assert_eq!(json_body(&first)["code"], "balance_limit_exceeded");
    let replay = h.send(h.post(&alice, "k-ceiling", &body)).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.body().as_ref(), first.body().as_ref());
    assert_eq!((h.balance(&a).await, h.balance(&b).await), (1_000, full));

    // Up to the ceiling exactly is fine.
    let to_the_top = TransferHarness::body(&a, &b, 5);
    let done = h.send(h.post(&alice, "k-ceiling-5", &to_the_top)).await;
    assert_eq!(done.status(), 201);
    assert_eq!(h.balance(&b).await, transfer::ledger::MAX_BALANCE);
}
