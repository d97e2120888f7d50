//! Rate-limit counters: the CLI sees and resets the counter the function is counting.

use tollgate::catalog;
use tollgate::client_addr::ClientAddr;
use tollgate::ratelimit::{Admission, Layer, LimitCheck, RateLimiter, RateLimits};
use tollgate_tests::cli_args;

use crate::harness::{keys, shared, TestCli};

/// Counts `n` requests from `ip` the way ephemeral-key does (its scope, its `ip` layer).
async fn count_session_requests(cli: &TestCli, limits: &RateLimits, ip: &str, n: usize) {
    let limiter = RateLimiter::new(
        cli.ddb.clone(),
        cli.table("RateLimitTable"),
        tollgate::catalog::EPHEMERAL_KEY.name,
        shared(&cli.clock),
    );
    let key = ClientAddr::from_ip(ip.parse().unwrap()).to_string();
    let check = LimitCheck {
        limit: limits.get(Layer::Ip).unwrap(),
        key: &key,
    };
    for _ in 0..n {
        let mut admission = Admission::default();
        limiter.check(&mut admission, &[check]).await.unwrap();
    }
}

#[tokio::test]
async fn show_count_then_reset() {
    let limits = "ip=5/1h,global=50/1d";
    let cli = TestCli::with_env(&[(catalog::EPHEMERAL_KEY.limits_variable, limits)]).await;
    let show = cli_args::limits(
        "show",
        catalog::EPHEMERAL_KEY.name,
        "ip",
        Some("2001:db8:1:2::99"),
    );

    let empty = cli.json(&show).await;
    assert_eq!(
        keys(&empty),
        [
            "count",
            "function",
            "key",
            "layer",
            "limit",
            "window_ends_at"
        ]
    );
    assert_eq!(empty["count"], 0);
    assert_eq!(empty["limit"], 5);
    assert_eq!(empty["key"], "2001:db8:1:2::/64");
    // T0 is one second into an hour: this window ends at the next whole hour.
    let hour_end = (tollgate_tests::T0_MS / 1000 - 1) + 3600;
    assert_eq!(empty["window_ends_at"], hour_end);

    // Another host of the same /64 is the same counter.
    count_session_requests(
        &cli,
        &RateLimits::parse(limits).unwrap(),
        "2001:db8:1:2::1",
        3,
    )
    .await;
    assert_eq!(cli.json(&show).await["count"], 3);
    let as_counted = cli
        .json(&cli_args::limits(
            "show",
            catalog::EPHEMERAL_KEY.name,
            "ip",
            Some("2001:db8:1:2::/64"),
        ))
        .await;
    assert_eq!(as_counted["count"], 3);

    let reset = cli
        .json(&cli_args::limits(
            "reset",
            catalog::EPHEMERAL_KEY.name,
            "ip",
            Some("2001:db8:1:2::99"),
        ))
        .await;
    assert_eq!(reset["reset"], true);
    assert_eq!(reset["key"], "2001:db8:1:2::/64");
    assert_eq!(cli.json(&show).await["count"], 0);
}

#[tokio::test]
async fn limits_come_from_the_functions_variables_or_defaults() {
    // Nothing set: transfer's default client layer (60/1m).
    let cli = TestCli::new().await;
    let client = cli
        .json(&cli_args::limits(
            "show",
            catalog::TRANSFER.name,
            "client",
            Some("cl_1"),
        ))
        .await;
    assert_eq!(
        (client["limit"].as_u64(), client["count"].as_u64()),
        (Some(60), Some(0))
    );
    assert_eq!(client["key"], "cl_1");

    // global takes no key.
    let global = cli
        .json(&cli_args::limits(
            "show",
            catalog::EPHEMERAL_KEY.name,
            "global",
            None,
        ))
        .await;
    assert_eq!(
        (global["limit"].as_u64(), global["key"].as_str()),
        (Some(2000), Some(""))
    );

    // A layer the function does not count, and a layer without its key.
    let line = cli
        .fails(&cli_args::limits(
            "show",
            catalog::EPHEMERAL_KEY.name,
            "client",
            Some("c"),
        ))
        .await;
    assert!(
        line.contains(catalog::EPHEMERAL_KEY.limits_variable),
        "{line}"
    );
    let line = cli
        .fails(&cli_args::limits(
            "show",
            catalog::TRANSFER.name,
            "ip",
            None,
        ))
        .await;
    assert!(line.contains("--key"), "{line}");
    let line = cli
        .fails(&cli_args::limits(
            "show",
            catalog::TRANSFER.name,
            "user",
            Some("x"),
        ))
        .await;
    assert!(line.contains("layer"), "{line}");
    let line = cli
        .fails(&cli_args::limits(
            "show",
            catalog::TRANSFER.name,
            "ip",
            Some("nope"),
        ))
        .await;
    assert!(line.contains("IP address"), "{line}");

    // A bad limits variable names itself, as the function's start would.
    let cli = TestCli::with_env(&[(catalog::TRANSFER.limits_variable, "ip=ten/1m")]).await;
    let line = cli
        .fails(&cli_args::limits(
            "show",
            catalog::TRANSFER.name,
            "ip",
            Some("192.0.2.1"),
        ))
        .await;
    assert!(line.contains(catalog::TRANSFER.limits_variable), "{line}");
}

#[tokio::test]
async fn a_layer_turned_off_has_no_counter_to_show_or_reset() {
    let cli =
        TestCli::with_env(&[(catalog::EPHEMERAL_KEY.limits_variable, "ip=5/1h,global=off")]).await;
    for action in ["show", "reset"] {
        let line = cli
            .fails(&cli_args::limits(
                action,
                catalog::EPHEMERAL_KEY.name,
                "global",
                None,
            ))
            .await;
        assert!(
            line.contains("global layer is off")
                && line.contains(catalog::EPHEMERAL_KEY.limits_variable),
            "{action}: {line}"
        );
    }
    // The layers still counted are unaffected.
    let ip = cli
        .json(&cli_args::limits(
            "show",
            catalog::EPHEMERAL_KEY.name,
            "ip",
            Some("192.0.2.1"),
        ))
        .await;
    assert_eq!(ip["limit"], 5);
}
