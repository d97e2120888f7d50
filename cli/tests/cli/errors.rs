//! Failures: one line on stderr, status 1 (2 for what clap refuses), nothing on stdout.

use crate::harness::TestCli;

#[tokio::test]
async fn an_unknown_function_is_one_line_and_status_1() {
    let cli = TestCli::new().await;
    for args in [
        &["kill-switch", "on", "--function", "transfers"][..],
        &["kill-switch", "status", "--function", "nope", "--json"][..],
        &["limits", "show", "--function", "nope", "--layer", "global"][..],
    ] {
        let line = cli.fails(args).await;
        assert!(line.contains("unknown function"), "{line}");
        assert!(line.contains("ephemeral-key, transfer"), "{line}");
    }
}

#[tokio::test]
async fn bad_account_input_is_refused_before_anything_is_written() {
    let cli = TestCli::new().await;
    for currency in ["jpy", "JP", "JPYY", "J1Y", ""] {
        let line = cli
            .fails(&[
                "accounts",
                "create",
                "--client",
                "cl_1",
                "--balance",
                "1",
                "--currency",
                currency,
            ])
            .await;
        assert!(line.contains("--currency"), "{currency}: {line}");
    }
    for balance in ["-1", "1.5", "ten", "9223372036854775808"] {
        let line = cli
            .fails(&[
                "accounts",
                "create",
                "--client",
                "cl_1",
                "--balance",
                balance,
            ])
            .await;
        assert!(line.contains("--balance"), "{balance}: {line}");
    }
    let line = cli
        .fails(&["accounts", "create", "--client", " ", "--balance", "1"])
        .await;
    assert!(line.contains("--client"), "{line}");
    let line = cli
        .fails(&[
            "accounts",
            "create",
            "--client",
            "cl_nobody",
            "--balance",
            "1",
        ])
        .await;
    assert!(line.contains("no client cl_nobody"), "{line}");
    let items = tollgate_tests::dynamo::scan_all(&cli.ddb, cli.table("AccountsTable")).await;
    assert!(items.is_empty(), "{items:?}");

    for amount in ["0", "-5"] {
        let line = cli
            .fails(&["accounts", "deposit", "acc_1", "--amount", amount])
            .await;
        assert!(line.contains("--amount"), "{line}");
    }
}

#[tokio::test]
async fn missing_accounts_are_errors() {
    let cli = TestCli::new().await;
    let line = cli.fails(&["accounts", "show", "acc_missing"]).await;
    assert!(line.contains("no account acc_missing"), "{line}");
    let line = cli
        .fails(&["accounts", "deposit", "acc_missing", "--amount", "5"])
        .await;
    assert!(line.contains("no account acc_missing"), "{line}");
    let line = cli.fails(&["accounts", "show", "not/an id"]).await;
    assert!(line.contains("not an account id"), "{line}");
    // The deposit created nothing.
    let items = tollgate_tests::dynamo::scan_all(&cli.ddb, cli.table("AccountsTable")).await;
    assert!(items.is_empty(), "{items:?}");
}

#[tokio::test]
async fn usage_errors_are_clap_s_with_status_2() {
    let cli = TestCli::new().await;
    let out = cli.run(&["accounts", "create", "--balance", "1"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.starts_with("error: "), "{}", out.stderr);
    assert!(out.stderr.contains("--client"), "{}", out.stderr);
    assert!(out.stdout.is_empty());
}

#[tokio::test]
async fn an_unreachable_store_is_one_line() {
    let cli = TestCli::new().await;
    let mut ctx = cli.ctx.clone();
    // Nothing listens on port 1.
    ctx.env.set("DYNAMODB_ENDPOINT", "http://127.0.0.1:1");
    let out = tollgate_cli::run(&ctx, ["kill-switch", "status", "--function", "transfer"]).await;
    assert_eq!(out.code, 1, "{out:?}");
    let line = crate::harness::one_error_line(&out.stderr);
    assert!(line.contains("kill switch"), "{line}");
}
