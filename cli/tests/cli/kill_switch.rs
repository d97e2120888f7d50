//! The kill switch as the operator flips it and as the functions read it.

use std::time::Duration;

use tollgate::kill_switch::{KillSwitch, KillSwitchError, DEFAULT_MESSAGE};
use tollgate_functions::catalog;

use crate::harness::{keys, shared, TestCli};

#[tokio::test]
async fn on_with_a_message_then_status_then_off() {
    let cli = TestCli::new().await;
    // The function's own view, without a cache so every check reads the table.
    let function = KillSwitch::new(
        cli.ddb.clone(),
        cli.table("ControlTable"),
        shared(&cli.clock),
        Duration::ZERO,
    );

    let status = cli
        .json(&["kill-switch", "status", "--function", "transfer"])
        .await;
    assert_eq!(keys(&status), ["enabled", "function", "message"]);
    assert_eq!(status["enabled"], false);
    assert_eq!(status["function"], "transfer");

    let on = cli
        .json(&[
            "kill-switch",
            "on",
            "--function",
            "transfer",
            "--message",
            "Back at 10:00 UTC.",
        ])
        .await;
    assert_eq!(
        on,
        serde_json::json!({"function": "transfer", "enabled": true, "message": "Back at 10:00 UTC."})
    );
    let status = cli
        .json(&["kill-switch", "status", "--function", "transfer"])
        .await;
    assert_eq!(status, on);
    assert_eq!(
        function.check(catalog::TRANSFER.name).await,
        Err(KillSwitchError::Disabled {
            message: "Back at 10:00 UTC.".into()
        })
    );
    // One function's switch is not the other's.
    assert_eq!(function.check(catalog::EPHEMERAL_KEY.name).await, Ok(()));

    let off = cli
        .json(&["kill-switch", "off", "--function", "transfer"])
        .await;
    assert_eq!(off["enabled"], false);
    let status = cli
        .json(&["kill-switch", "status", "--function", "transfer"])
        .await;
    assert_eq!(status["enabled"], false);
    assert_eq!(function.check(catalog::TRANSFER.name).await, Ok(()));
}

#[tokio::test]
async fn on_without_a_message_stores_the_default_and_long_messages_are_refused() {
    let cli = TestCli::new().await;
    let on = cli
        .json(&["kill-switch", "on", "--function", "ephemeral-key"])
        .await;
    assert_eq!(on["message"], DEFAULT_MESSAGE);

    let long = "x".repeat(501);
    let line = cli
        .fails(&[
            "kill-switch",
            "on",
            "--function",
            "transfer",
            "--message",
            &long,
        ])
        .await;
    assert!(line.contains("500"), "{line}");
    let status = cli
        .json(&["kill-switch", "status", "--function", "transfer"])
        .await;
    assert_eq!(status["enabled"], false);
}
