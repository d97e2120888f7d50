//! `GET /transfers/{id}` and `GET /accounts/{id}`: visible to their owner only.

use tollgate_tests::json_body;
use tollgate_tests::transfer::TransferHarness;

#[tokio::test]
async fn a_transfer_and_an_account_are_visible_to_their_owner_only() {
    let h = TransferHarness::new().await;
    let alice = h.client("alice").await;
    let bob = h.client("bob").await;
    let a = h.account(&alice, 1_000, "JPY").await;
    let b = h.account(&alice, 0, "JPY").await;
    let created = h
        .send(h.post(&alice, "k", &TransferHarness::body(&a, &b, 10)))
        .await;
    let location = created.headers()["location"].to_str().unwrap().to_string();

    let mine = h.get(&alice, &location).await;
    assert_eq!(mine.status(), 200);
    assert_eq!(json_body(&mine), json_body(&created));
    let theirs = h.get(&bob, &location).await;
    assert_eq!(theirs.status(), 404);
    assert_eq!(json_body(&theirs)["code"], "transfer_not_found");

    let account = h.get(&alice, &format!("/accounts/{a}")).await;
    assert_eq!(account.status(), 200);
    assert_eq!(
        json_body(&account),
        serde_json::json!({"account_id": a, "balance": 990, "currency": "JPY"})
    );
    assert_eq!(h.get(&bob, &format!("/accounts/{a}")).await.status(), 404);
    assert_eq!(h.get(&alice, "/accounts/acc_none").await.status(), 404);
}

#[tokio::test]
async fn routing_unknown_paths_and_wrong_methods() {
    let h = TransferHarness::with_env(&[("BASE_PATH", "/api")]).await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 5, "JPY").await;
    assert_eq!(
        h.get(&alice, &format!("/api/accounts/{a}")).await.status(),
        200
    );
    assert_eq!(
        h.get(&alice, &format!("/accounts/{a}")).await.status(),
        404,
        "outside BASE_PATH"
    );
    assert_eq!(h.get(&alice, "/api/nothing").await.status(), 404);
    // A new transfer's Location carries the base path, so it resolves behind CloudFront too.
    let b = h.account(&alice, 0, "JPY").await;
    let created = h
        .send(
            tollgate_tests::events::HttpEvent::post("/api/transfers")
                .header("authorization", &format!("Bearer {}", alice.token))
                .header("idempotency-key", "k")
                .body(TransferHarness::body(&a, &b, 1))
                .request(),
        )
        .await;
    assert_eq!(created.status(), 201);
    let location = created.headers()["location"].to_str().unwrap();
    assert!(location.starts_with("/api/transfers/tr_"), "{location}");
    assert_eq!(h.get(&alice, location).await.status(), 200);

    // Ids that cannot exist are 404 without a store round trip (DynamoDB would refuse a key
    // over 2048 bytes with an error that is not the client's).
    let long = "a".repeat(3000);
    for path in [
        format!("/api/accounts/{long}"),
        format!("/api/transfers/{long}"),
    ] {
        let resp = h.get(&alice, &path).await;
        assert_eq!(resp.status(), 404);
    }
    let missing = h
        .send(tollgate_tests::events::HttpEvent::get(&format!("/api/accounts/{a}")).request())
        .await;
    assert_eq!(missing.status(), 401);
    assert_eq!(missing.headers()["www-authenticate"], "Bearer");

    let wrong = h.get(&alice, "/api/transfers").await;
    assert_eq!(wrong.status(), 405);
    assert_eq!(wrong.headers()["allow"], "POST");
}
