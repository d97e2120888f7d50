//! The operator CLI against the running stack: what it writes, the running functions see.
//!
//! It runs the `tollgate` binary the dev stack built, as an operator would (the tests crate does
//! not link the CLI); the stack is found through `TOLLGATE_STACK_FILE`, which the binary inherits.

use std::process::Command;

use serde_json::Value;
use tollgate_functions::catalog;
use tollgate_tests::cli_args;

use crate::kill_switch::session_until;
use crate::readme::cli_dir;
use crate::stack::{session_lock, stack, unique_key};
use crate::{expect_status, http};

/// Runs `tollgate --json <args>`; its one JSON object.
fn cli(args: &[&str]) -> Value {
    let out = Command::new(cli_dir().join("tollgate"))
        .args(args)
        .arg("--json")
        .output()
        .expect("the tollgate binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tollgate {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("tollgate {args:?}: {e}: {stdout}"))
}

#[test]
#[ignore = "needs the local stack: run by cargo xtask test"]
fn a_client_and_accounts_made_with_the_cli_work_in_the_running_function() {
    let client = cli(&["clients", "create", "--name", &unique_key("e2e-cli")]);
    let (id, token) = (
        client["client_id"].as_str().unwrap(),
        client["token"].as_str().unwrap(),
    );
    let from = cli(&["accounts", "create", "--client", id, "--balance", "1000"]);
    let to = cli(&["accounts", "create", "--client", id, "--balance", "0"]);
    let (from, to) = (
        from["account_id"].as_str().unwrap(),
        to["account_id"].as_str().unwrap(),
    );

    let tr = &stack().transfer_url;
    let moved = http::post(format!("{tr}/transfers"))
        .header("Authorization", &format!("Bearer {token}"))
        .header("Idempotency-Key", &unique_key("e2e-cli"))
        .json(&serde_json::json!({"from": from, "to": to, "amount": 100}))
        .send();
    expect_status(&moved, 201, "POST /transfers with a CLI-made client");
    let shown = cli(&["accounts", "show", from]);
    assert_eq!(shown["balance"], 900);
    assert_eq!(shown["client_id"], id);
    let deposited = cli(&["accounts", "deposit", to, "--amount", "5"]);
    assert_eq!(deposited["balance"], 105);
}

#[test]
#[ignore = "needs the local stack: run by cargo xtask test"]
fn the_cli_flips_the_kill_switch_of_the_running_function_and_resets_a_limit() {
    let _serial = session_lock();
    let on = cli(&[
        "kill-switch",
        "on",
        "--function",
        "ephemeral-key",
        "--message",
        "CLI drill",
    ]);
    assert_eq!(on["enabled"], true);
    let refused = session_until("the CLI's flip did not reach the function", |r| {
        r.status == 403
    });
    assert_eq!(refused.json()["detail"], "CLI drill");
    let off = cli(&["kill-switch", "off", "--function", "ephemeral-key"]);
    assert_eq!(off["enabled"], false);
    session_until("the function did not serve again", |r| r.status == 200);

    // A plain session is counted for 127.0.0.1; the operator can see and empty the counter.
    let counted = http::post(format!("{}/session", stack().ephemeral_key_url))
        .json(&serde_json::json!({}))
        .send();
    expect_status(&counted, 200, "POST /session");
    let shown = cli(&cli_args::limits(
        "show",
        catalog::EPHEMERAL_KEY.name,
        "ip",
        Some("127.0.0.1"),
    ));
    assert!(shown["count"].as_u64().unwrap() >= 1, "{shown}");
    // The limits are the ones the running function published after its first answer, not the
    // shell's: this test's shell may not even have the stack's limits variable.
    assert_eq!(shown["limits_source"], "published", "{shown}");
    cli(&cli_args::limits(
        "reset",
        catalog::EPHEMERAL_KEY.name,
        "ip",
        Some("127.0.0.1"),
    ));
    let after = cli(&cli_args::limits(
        "show",
        catalog::EPHEMERAL_KEY.name,
        "ip",
        Some("127.0.0.1"),
    ));
    assert_eq!(after["count"], 0);
}
