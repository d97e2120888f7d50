//! Clients and accounts: the round trip an operator makes to set up a caller.

use std::time::Duration;

use secrecy::SecretString;
use tollgate_functions::clients::{token_hash, ClientStore};

use crate::harness::{keys, shared, TestCli};

#[tokio::test]
async fn a_client_and_its_accounts_round_trip() {
    let cli = TestCli::new().await;

    let client = cli.json(&["clients", "create", "--name", "Acme"]).await;
    assert_eq!(keys(&client), ["client_id", "name", "token"]);
    let client_id = client["client_id"].as_str().unwrap();
    let token = client["token"].as_str().unwrap();
    assert!(token.starts_with("tg_"), "{token}");

    // The token works for the functions, and only its hash is stored.
    let store = ClientStore::new(
        cli.ddb.clone(),
        cli.table("ClientsTable"),
        shared(&cli.clock),
        Duration::ZERO,
    );
    let who = store
        .authenticate(&SecretString::from(token.to_string()))
        .await
        .unwrap();
    assert_eq!(who.as_deref(), Some(client_id));
    let items = tollgate_tests::dynamo::scan_all(&cli.ddb, cli.table("ClientsTable")).await;
    let mut stored: Vec<&str> = items
        .iter()
        .map(|i| i["pk"].as_s().unwrap().as_str())
        .collect();
    stored.sort();
    let hash = token_hash(token);
    let id_record = format!("client#{client_id}");
    let mut expected = [id_record.as_str(), hash.as_str()];
    expected.sort();
    assert_eq!(stored, expected, "the token's hash and the id record");
    assert!(
        !format!("{items:?}").contains(token),
        "the token itself was stored"
    );

    let a = cli
        .json(&[
            "accounts",
            "create",
            "--client",
            client_id,
            "--balance",
            "1000",
        ])
        .await;
    assert_eq!(keys(&a), ["account_id", "balance", "client_id", "currency"]);
    assert_eq!(a["balance"], 1000);
    assert_eq!(a["currency"], "JPY");
    assert_eq!(a["client_id"], client_id);
    let b = cli
        .json(&[
            "accounts",
            "create",
            "--client",
            client_id,
            "--balance",
            "0",
            "--currency",
            "USD",
        ])
        .await;
    assert_eq!(
        (b["balance"].as_u64(), b["currency"].as_str()),
        (Some(0), Some("USD"))
    );
    assert_ne!(a["account_id"], b["account_id"]);

    let a_id = a["account_id"].as_str().unwrap();
    let shown = cli.json(&["accounts", "show", a_id]).await;
    assert_eq!(shown, a);

    let deposited = cli
        .json(&["accounts", "deposit", a_id, "--amount", "250"])
        .await;
    let mut account_keys = keys(&deposited);
    assert!(account_keys.contains(&"deposit_token"), "{deposited}");
    account_keys.retain(|k| *k != "deposit_token");
    assert_eq!(account_keys, keys(&a));
    assert_eq!(deposited["balance"], 1250);
    // The same token again (an operator rerunning a deposit whose answer was lost): no change.
    let token = deposited["deposit_token"].as_str().unwrap();
    let again = cli
        .json(&[
            "accounts", "deposit", a_id, "--amount", "250", "--token", token,
        ])
        .await;
    assert_eq!(again["balance"], 1250, "applied once per token");
    let shown = cli.json(&["accounts", "show", a_id]).await;
    assert_eq!(shown["balance"], 1250);
    assert_eq!(shown["currency"], "JPY");

    let b_shown = cli
        .json(&["accounts", "show", b["account_id"].as_str().unwrap()])
        .await;
    assert_eq!(b_shown, b);
}

#[tokio::test]
async fn the_human_form_shows_the_token_once_and_nothing_else_does() {
    let cli = TestCli::new().await;
    let out = cli.run(&["clients", "create", "--name", "Acme"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let token_line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("token:"))
        .expect("a token line");
    let token = token_line.trim_start_matches("token:").trim();
    assert_eq!(out.stdout.matches(token).count(), 1, "{}", out.stdout);
    assert!(out.stdout.contains("shown only now"), "{}", out.stdout);
    let client_id = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("client_id:"))
        .unwrap()
        .trim()
        .to_string();

    let account = cli
        .run(&[
            "accounts",
            "create",
            "--client",
            &client_id,
            "--balance",
            "5",
        ])
        .await;
    assert_eq!(account.code, 0, "{account:?}");
    assert!(
        account.stdout.contains("balance:    5\n"),
        "{}",
        account.stdout
    );
    assert!(!account.stdout.contains(token));
}

#[tokio::test]
async fn deposits_add_up_under_concurrency() {
    let cli = TestCli::new().await;
    let client = cli
        .json(&["clients", "create", "--name", "depositor"])
        .await;
    let a = cli
        .json(&[
            "accounts",
            "create",
            "--client",
            client["client_id"].as_str().unwrap(),
            "--balance",
            "0",
        ])
        .await;
    let id = a["account_id"].as_str().unwrap().to_string();
    let args = ["accounts", "deposit", id.as_str(), "--amount", "10"];
    futures::future::join_all((0..8).map(|_| cli.json(&args))).await;
    let shown = cli.json(&["accounts", "show", &id]).await;
    assert_eq!(shown["balance"], 80);
}

#[tokio::test]
async fn a_revoked_client_can_no_longer_authenticate() {
    let cli = TestCli::new().await;
    let client = cli.json(&["clients", "create", "--name", "Leaky"]).await;
    let (id, token) = (
        client["client_id"].as_str().unwrap(),
        client["token"].as_str().unwrap(),
    );
    let store = ClientStore::new(
        cli.ddb.clone(),
        cli.table("ClientsTable"),
        shared(&cli.clock),
        Duration::ZERO,
    );
    let token = SecretString::from(token.to_string());
    assert_eq!(
        store.authenticate(&token).await.unwrap().as_deref(),
        Some(id)
    );

    let revoked = cli.json(&["clients", "revoke", id]).await;
    assert_eq!(revoked["revoked"], true);
    assert_eq!(store.authenticate(&token).await.unwrap(), None);
    assert!(!store.exists(id).await.unwrap());
    let items = tollgate_tests::dynamo::scan_all(&cli.ddb, cli.table("ClientsTable")).await;
    assert!(items.is_empty(), "both records are gone: {items:?}");

    let line = cli.fails(&["clients", "revoke", id]).await;
    assert!(line.contains("no client"), "{line}");
}
