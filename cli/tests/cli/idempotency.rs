//! Idempotency records: the live record under a key, or a one-line error.

use std::time::Duration;

use tollgate::idempotency::{IdempotencyKey, IdempotencyStore, Scope, StoredResponse};

use crate::harness::{keys, shared, TestCli};

fn store(cli: &TestCli, logical_id: &str) -> IdempotencyStore {
    IdempotencyStore::new(
        cli.ddb.clone(),
        cli.table(logical_id),
        shared(&cli.clock),
        Duration::from_secs(86_400),
    )
}

fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::parse(Some(k.as_bytes())).unwrap()
}

#[tokio::test]
async fn a_missing_record_is_a_one_line_error() {
    let cli = TestCli::new().await;
    let line = cli
        .fails(&[
            "idempotency",
            "show",
            "--client",
            "cl_1",
            "--route",
            "POST /transfers",
            "--key",
            "k-1",
        ])
        .await;
    assert!(line.starts_with("error: no live record"), "{line}");

    let out = cli
        .run(&[
            "idempotency",
            "show",
            "--client",
            "cl_1",
            "--route",
            "POST /transfers",
            "--key",
            "k-1",
            "--json",
        ])
        .await;
    assert_eq!(out.code, 1);
    assert!(out.stdout.is_empty(), "{out:?}");
}

#[tokio::test]
async fn a_stored_response_is_shown_until_it_expires() {
    let cli = TestCli::new().await;
    let transfers = store(&cli, "TransferIdempotencyTable");
    let body = br#"{"code":"insufficient_funds","status":402}"#.to_vec();
    let response = StoredResponse {
        status: 402,
        headers: vec![("content-type".into(), "application/problem+json".into())],
        body: body.clone(),
    };
    let scope = Scope::new("cl_1", "POST /transfers", &key("k-1"));
    assert_eq!(
        transfers.store(&scope, "fp", &response).await.unwrap(),
        None
    );

    let args = [
        "idempotency",
        "show",
        "--client",
        "cl_1",
        "--route",
        "POST /transfers",
        "--key",
        "\"k-1\"",
    ];
    let shown = cli.json(&args).await;
    for field in ["state", "fingerprint", "expires_at", "status", "body"] {
        assert!(keys(&shown).contains(&field), "{field} missing: {shown}");
    }
    assert_eq!(shown["state"], "completed");
    assert_eq!(shown["fingerprint"], "fp");
    assert_eq!(shown["status"], 402);
    assert_eq!(shown["body"], String::from_utf8(body).unwrap());
    assert_eq!(shown["body_encoding"], "utf-8");
    assert_eq!(shown["headers"]["content-type"], "application/problem+json");
    assert_eq!(shown["expires_at"], tollgate_tests::T0_MS / 1000 + 86_400);

    // Another client's key of the same name is another record.
    cli.fails(&[
        "idempotency",
        "show",
        "--client",
        "cl_2",
        "--route",
        "POST /transfers",
        "--key",
        "k-1",
    ])
    .await;

    // Expired counts as absent, before DynamoDB's TTL deletes it.
    cli.clock.advance(Duration::from_secs(86_401));
    let line = cli.fails(&args).await;
    assert!(line.contains("no live record"), "{line}");
}

/// A session key as the function accepts them (at least 16 characters).
const SESSION_KEY: &str = "3f2b8c1e-7d4a-4e9b-a1c6-5e8f0d2b7a91";

#[tokio::test]
async fn session_records_are_scoped_to_the_client_address() {
    let cli = TestCli::new().await;
    let sessions = store(&cli, "SessionIdempotencyTable");
    let scope = Scope::new("2001:db8::/64", "POST /session", &key(SESSION_KEY));
    let response = StoredResponse {
        status: 200,
        headers: vec![],
        body: vec![0xff, 0x00, 0x80],
    };
    sessions.store(&scope, "fp", &response).await.unwrap();

    let shown = cli
        .json(&[
            "idempotency",
            "show",
            "--client",
            "2001:db8::42",
            "--route",
            "post  /session",
            "--key",
            SESSION_KEY,
        ])
        .await;
    assert_eq!(shown["status"], 200);
    assert_eq!(shown["body_encoding"], "base64");
    assert_eq!(shown["body"], "/wCA");

    let line = cli
        .fails(&[
            "idempotency",
            "show",
            "--client",
            "cl_1",
            "--route",
            "GET /transfers",
            "--key",
            "k",
        ])
        .await;
    assert!(line.contains("POST /transfers"), "{line}");
}

#[tokio::test]
async fn a_claimed_key_shows_as_in_progress_without_its_owner() {
    let cli = TestCli::new().await;
    let transfers = store(&cli, "TransferIdempotencyTable");
    let scope = Scope::new("cl_1", "POST /transfers", &key("k-2"));
    let claim = transfers
        .claim(&scope, "fp", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(matches!(claim, tollgate::idempotency::Claim::Acquired(_)));

    let shown = cli
        .json(&[
            "idempotency",
            "show",
            "--client",
            "cl_1",
            "--route",
            "POST /transfers",
            "--key",
            "k-2",
        ])
        .await;
    assert_eq!(shown["state"], "in_progress");
    assert_eq!(shown["status"], serde_json::Value::Null);
    assert_eq!(shown["body"], serde_json::Value::Null);
    assert_eq!(shown["lease_until_ms"], tollgate_tests::T0_MS + 30_000);
    assert!(!shown.to_string().contains("owner"), "{shown}");
}
