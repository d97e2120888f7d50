//! Rate-limit counters: the CLI sees and resets the counter the function is counting, under the
//! limits the function published (not the ones in the operator's shell).

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use tollgate::client_addr::ClientAddr;
use tollgate::published_limits::LimitsRecord;
use tollgate::ratelimit::{Admission, Layer, LimitCheck, RateLimiter, RateLimits};
use tollgate_functions::catalog;
use tollgate_functions::serve::GuardedFunction;
use tollgate_tests::cli_args;

use crate::harness::{keys, shared, TestCli};

/// When the test clock's processes publish: T0, in seconds.
const PUBLISHED_AT: u64 = tollgate_tests::T0_MS / 1000;

/// Publishes `spec` for `function` as a starting process of it does (block cache of 5 s).
async fn publish(cli: &TestCli, function: &catalog::Function, spec: &str) {
    LimitsRecord::new(
        cli.ddb.clone(),
        cli.table("ControlTable"),
        shared(&cli.clock),
    )
    .publish(
        function.name,
        &RateLimits::parse(spec).unwrap(),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
}

/// Counts `n` requests from `ip` the way ephemeral-key does (its scope, its `ip` layer).
async fn count_session_requests(cli: &TestCli, limits: &RateLimits, ip: &str, n: usize) {
    let limiter = RateLimiter::new(
        cli.ddb.clone(),
        cli.table("RateLimitTable"),
        tollgate_functions::catalog::EPHEMERAL_KEY.name,
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

/// `limits ...` with `--limits SPEC` added.
fn with_flag<'a>(mut args: Vec<&'a str>, spec: &'a str) -> Vec<&'a str> {
    args.extend(["--limits", spec]);
    args
}

#[tokio::test]
async fn show_count_then_reset() {
    let limits = "ip=5/1h,global=50/1d";
    let cli = TestCli::new().await;
    publish(&cli, &catalog::EPHEMERAL_KEY, limits).await;
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
            "limits",
            "limits_published_at",
            "limits_source",
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
    assert_eq!(reset["limits_source"], "published");
    assert_eq!(reset["block_cache_seconds"], 5);
    assert_eq!(cli.json(&show).await["count"], 0);
}

/// The operator's shell says one thing, the function counts under another: the CLI reports the
/// function's. Here the transfer function itself, built from its own environment as a Lambda
/// process is, publishes what it parsed.
#[tokio::test]
async fn the_limits_are_the_ones_the_function_published_not_the_shells() {
    let cli = TestCli::with_env(&[
        (catalog::TRANSFER.limits_variable, "ip=999/1m,client=999/1m"),
        (
            catalog::EPHEMERAL_KEY.limits_variable,
            "ip=999/1m,global=999/1d",
        ),
    ])
    .await;
    let mut function_env = cli.ctx.env.clone();
    function_env.set(
        catalog::TRANSFER.limits_variable,
        "ip=300/1m,client=7/1h:shards=2",
    );
    let transfer =
        transfer::App::from_env(&function_env, cli.ddb.clone(), None, shared(&cli.clock))
            .expect("valid settings");
    transfer.gate().publish_limits().await.unwrap();

    // The CLI runs later than the function started.
    cli.clock.advance(Duration::from_secs(90));
    let shown = cli
        .json(&cli_args::limits(
            "show",
            catalog::TRANSFER.name,
            "client",
            Some("cl_1"),
        ))
        .await;
    assert_eq!(shown["limit"], 7, "{shown}");
    assert_eq!(shown["limits"], "ip=300/1m,client=7/1h:shards=2");
    assert_eq!(shown["limits_source"], "published");
    assert_eq!(shown["limits_published_at"], PUBLISHED_AT);
    // An hour window (the shell's is a minute): it ends at the next whole hour.
    assert_eq!(shown["window_ends_at"], PUBLISHED_AT - 1 + 3600);

    let human = cli
        .run(&cli_args::limits(
            "show",
            catalog::TRANSFER.name,
            "client",
            Some("cl_1"),
        ))
        .await;
    assert_eq!(human.code, 0, "{human:?}");
    assert!(
        human
            .stdout
            .contains("as transfer published them at 2036-01-01T00:00:01Z"),
        "{}",
        human.stdout
    );

    // A function that has published nothing has no limits the CLI could know, whatever the
    // shell says.
    let line = cli
        .fails(&cli_args::limits(
            "show",
            catalog::EPHEMERAL_KEY.name,
            "ip",
            Some("192.0.2.1"),
        ))
        .await;
    assert!(
        line.contains("cannot know ephemeral-key's limits"),
        "{line}"
    );
}

#[tokio::test]
async fn without_published_limits_it_says_it_cannot_know_them_and_changes_nothing() {
    let cli = TestCli::new().await;
    let limits = RateLimits::parse(catalog::EPHEMERAL_KEY.default_limits).unwrap();
    count_session_requests(&cli, &limits, "192.0.2.1", 2).await;
    for action in ["show", "reset"] {
        let line = cli
            .fails(&cli_args::limits(
                action,
                catalog::EPHEMERAL_KEY.name,
                "ip",
                Some("192.0.2.1"),
            ))
            .await;
        for part in [
            "cannot know ephemeral-key's limits",
            cli.table("ControlTable"),
            "has answered a request",
            "--limits SPEC",
            catalog::EPHEMERAL_KEY.limits_variable,
        ] {
            assert!(line.contains(part), "{action}: {part:?} not in {line}");
        }
    }
    // The refused reset emptied nothing.
    let shown = cli
        .json(&with_flag(
            cli_args::limits("show", catalog::EPHEMERAL_KEY.name, "ip", Some("192.0.2.1")),
            catalog::EPHEMERAL_KEY.default_limits,
        ))
        .await;
    assert_eq!(shown["count"], 2);
}

#[tokio::test]
async fn limits_given_with_the_flag_are_used_and_say_so() {
    let cli = TestCli::new().await;
    let args = with_flag(
        cli_args::limits("show", catalog::TRANSFER.name, "ip", Some("192.0.2.7")),
        " ip=3/1m , client=60/1m ",
    );
    let shown = cli.json(&args).await;
    assert_eq!(shown["limit"], 3);
    assert_eq!(shown["limits"], "ip=3/1m,client=60/1m");
    assert_eq!(shown["limits_source"], "--limits");
    assert_eq!(shown["limits_published_at"], serde_json::Value::Null);

    // The flag wins over what the function published.
    publish(&cli, &catalog::TRANSFER, "ip=300/1m,client=60/1m").await;
    assert_eq!(cli.json(&args).await["limit"], 3);
    assert_eq!(
        cli.json(&cli_args::limits(
            "show",
            catalog::TRANSFER.name,
            "ip",
            Some("192.0.2.7")
        ))
        .await["limit"],
        300
    );

    let reset = cli
        .run(&with_flag(
            cli_args::limits("reset", catalog::TRANSFER.name, "ip", Some("192.0.2.7")),
            "ip=3/1m",
        ))
        .await;
    assert_eq!(reset.code, 0, "{reset:?}");
    assert!(
        reset
            .stdout
            .contains("at most RATE_LIMIT_BLOCK_CACHE_SECONDS after this reset (default 5 s"),
        "{}",
        reset.stdout
    );

    let line = cli
        .fails(&with_flag(
            cli_args::limits("show", catalog::TRANSFER.name, "ip", Some("192.0.2.7")),
            "ip=ten/1m",
        ))
        .await;
    assert!(line.contains("--limits"), "{line}");
}

#[tokio::test]
async fn the_reset_note_tells_how_long_warm_instances_may_still_refuse() {
    let cli = TestCli::new().await;
    LimitsRecord::new(
        cli.ddb.clone(),
        cli.table("ControlTable"),
        shared(&cli.clock),
    )
    .publish(
        catalog::EPHEMERAL_KEY.name,
        &RateLimits::parse("ip=5/1h:sliding,global=50/1d").unwrap(),
        Duration::from_secs(7),
    )
    .await
    .unwrap();
    let sliding = cli
        .run(&cli_args::limits(
            "reset",
            catalog::EPHEMERAL_KEY.name,
            "ip",
            Some("192.0.2.1"),
        ))
        .await;
    assert_eq!(sliding.code, 0, "{sliding:?}");
    for part in [
        "for at most 7 s",
        "The previous window is voided too",
        "next increment",
    ] {
        assert!(
            sliding.stdout.contains(part),
            "{part:?}: {}",
            sliding.stdout
        );
    }
    assert!(
        !sliding.stdout.contains("until the window ends"),
        "{}",
        sliding.stdout
    );
    let fixed = cli
        .run(&cli_args::limits(
            "reset",
            catalog::EPHEMERAL_KEY.name,
            "global",
            None,
        ))
        .await;
    assert!(fixed.stdout.contains("for at most 7 s"), "{}", fixed.stdout);
    assert!(
        !fixed.stdout.contains("previous window"),
        "{}",
        fixed.stdout
    );

    // A function without a block cache refuses nothing from memory.
    LimitsRecord::new(
        cli.ddb.clone(),
        cli.table("ControlTable"),
        shared(&cli.clock),
    )
    .publish(
        catalog::EPHEMERAL_KEY.name,
        &RateLimits::parse("ip=5/1h,global=50/1d").unwrap(),
        Duration::ZERO,
    )
    .await
    .unwrap();
    let off = cli
        .json(&cli_args::limits(
            "reset",
            catalog::EPHEMERAL_KEY.name,
            "global",
            None,
        ))
        .await;
    assert_eq!(off["block_cache_seconds"], 0);
}

#[tokio::test]
async fn layers_keys_and_unusable_published_limits() {
    let cli = TestCli::new().await;
    publish(&cli, &catalog::TRANSFER, catalog::TRANSFER.default_limits).await;
    publish(
        &cli,
        &catalog::EPHEMERAL_KEY,
        catalog::EPHEMERAL_KEY.default_limits,
    )
    .await;
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
        line.contains("has no client layer")
            && line.contains(catalog::EPHEMERAL_KEY.default_limits)
            && line.contains(catalog::EPHEMERAL_KEY.limits_variable),
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

    // An item nobody's code wrote (by hand, or by another version) is not guessed at.
    cli.ddb
        .put_item()
        .table_name(cli.table("ControlTable"))
        .item(
            "pk",
            AttributeValue::S(tollgate::published_limits::key(catalog::TRANSFER.name)),
        )
        .item("spec", AttributeValue::S("ip=ten/1m".into()))
        .item("block_cache_seconds", AttributeValue::N("5".into()))
        .item("published_at", AttributeValue::N("1".into()))
        .send()
        .await
        .unwrap();
    let line = cli
        .fails(&cli_args::limits(
            "show",
            catalog::TRANSFER.name,
            "ip",
            Some("192.0.2.1"),
        ))
        .await;
    assert!(
        line.contains("cannot use the limits transfer published") && line.contains("--limits"),
        "{line}"
    );
}

#[tokio::test]
async fn a_layer_turned_off_has_no_counter_to_show_or_reset() {
    let cli = TestCli::new().await;
    publish(&cli, &catalog::EPHEMERAL_KEY, "ip=5/1h,global=off").await;
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
                && line.contains("ip=5/1h,global=off")
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
