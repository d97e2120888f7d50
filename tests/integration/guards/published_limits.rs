//! Each function publishes the limits it counts under in the control table, so that the operator's
//! CLI reports those instead of whatever its own shell says (`cli/src/cmd/limits.rs`). `serve::run`
//! spawns the publish after a process's first answer; these tests call it on functions built from
//! their environment exactly as `run` builds them. The e2e CLI test sees it through the real start.

use std::time::Duration;

use tollgate::gate::Gate;
use tollgate::published_limits::LimitsRecord;
use tollgate_functions::catalog;
use tollgate_functions::serve::GuardedFunction;
use tollgate_tests::dynamo::{self, Tables};
use tollgate_tests::pipeline::settings;
use tollgate_tests::session::SessionHarness;
use tollgate_tests::transfer::TransferHarness;
use tollgate_tests::{manual_clock, T0_MS};

#[tokio::test]
async fn each_function_publishes_the_limits_its_guards_count_under() {
    let session = SessionHarness::new(&[
        (
            catalog::EPHEMERAL_KEY.limits_variable,
            " global=100/1d, ip=3/1h:sliding ",
        ),
        ("RATE_LIMIT_BLOCK_CACHE_SECONDS", "9"),
    ])
    .await;
    session.app.gate().publish_limits().await.unwrap();
    let (_, clock) = manual_clock();
    let record = LimitsRecord::new(session.ddb.clone(), &session.tables.control, clock);
    let published = record
        .read(catalog::EPHEMERAL_KEY.name)
        .await
        .unwrap()
        .expect("ephemeral-key published its limits");
    assert_eq!(published.limits, session.app.gate().settings().rate_limits);
    assert_eq!(
        published.limits.to_string(),
        "ip=3/1h:sliding,global=100/1d"
    );
    assert_eq!(published.block_cache_max_age, Duration::from_secs(9));
    assert_eq!(published.published_at, T0_MS / 1000);
    // Its own item only.
    assert!(record.read(catalog::TRANSFER.name).await.unwrap().is_none());

    // A process without a block cache refuses nothing from memory, and says so.
    let transfer = TransferHarness::with_env(&[("RATE_LIMIT_BLOCK_CACHE_SIZE", "0")]).await;
    transfer.clock.advance(Duration::from_secs(60));
    transfer.app.gate().publish_limits().await.unwrap();
    let (_, clock) = manual_clock();
    let published = LimitsRecord::new(transfer.ddb.clone(), &transfer.tables.control, clock)
        .read(catalog::TRANSFER.name)
        .await
        .unwrap()
        .expect("transfer published its limits");
    assert_eq!(published.limits, transfer.app.gate().settings().rate_limits);
    assert_eq!(published.block_cache_max_age, Duration::ZERO);
    assert_eq!(published.published_at, T0_MS / 1000 + 60);
}

#[tokio::test]
async fn a_later_start_replaces_what_an_earlier_one_published() {
    let (ddb, _) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let (clock, shared) = manual_clock();
    for limits in ["ip=10/1h,global=100/1d", "ip=10/1h,global=100/1d:shards=8"] {
        let gate = Gate::new(settings(&tables, limits, &[]), ddb.clone(), shared.clone());
        gate.publish_limits().await.unwrap();
        clock.advance(Duration::from_secs(1));
    }
    let published = LimitsRecord::new(ddb, &tables.control, shared)
        .read(catalog::EPHEMERAL_KEY.name)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        published.limits.to_string(),
        "ip=10/1h,global=100/1d:shards=8"
    );
    assert_eq!(published.published_at, T0_MS / 1000 + 1);
}

#[tokio::test]
async fn a_publish_that_fails_is_returned_not_raised() {
    let (ddb, _) = dynamo::client();
    let mut tables = Tables::create(&ddb).await;
    tables.control = "no-such-control-table-anywhere".into();
    let (_, clock) = manual_clock();
    let gate = Gate::new(settings(&tables, "ip=10/1h", &[]), ddb, clock);
    assert!(gate.publish_limits().await.is_err());
}
