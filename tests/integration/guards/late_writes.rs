//! The limiter's bound under hostile timing and configuration changes: increments still on their
//! way when a window ends (held by the fault proxy, two processes with their own clocks), and a
//! change of a layer's shard count in the middle of a window.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tollgate::clock::ManualClock;
use tollgate::ratelimit::{Admission, LimitCheck, RateLimit, RateLimiter, Verdict};
use tollgate_functions::catalog;
use tollgate_tests::dynamo::{self, counters_matching, Tables};
use tollgate_tests::fault_proxy::FaultProxy;
use tollgate_tests::{manual_clock, T0_MS};

const MINUTE: u64 = 60_000;
/// The start of the minute holding T0 (T0 is one second into it).
const MINUTE_0: u64 = T0_MS - 1_000;

/// One process: its own DynamoDB client (at `endpoint`), clock and caches.
fn process(ddb: aws_sdk_dynamodb::Client, tables: &Tables) -> (Arc<RateLimiter>, ManualClock) {
    let (clock, shared) = manual_clock();
    let limiter = RateLimiter::new(
        ddb,
        &tables.rate_limits,
        catalog::EPHEMERAL_KEY.name,
        shared,
    )
    .with_block_cache(10_000, Duration::from_secs(5));
    (Arc::new(limiter), clock)
}

async fn admitted(limiter: &RateLimiter, limit: &RateLimit) -> bool {
    let mut admission = Admission::default();
    let checks = [LimitCheck { limit, key: "" }];
    matches!(
        limiter.check(&mut admission, &checks).await.unwrap(),
        Verdict::Admitted
    )
}

/// `n` checks one after the other: how many were admitted.
async fn admit_n(limiter: &RateLimiter, limit: &RateLimit, n: usize) -> usize {
    let mut count = 0;
    for _ in 0..n {
        count += usize::from(admitted(limiter, limit).await);
    }
    count
}

/// Process A sends 60 increments in the last slot of minute 0 that DynamoDB receives only after
/// process B, in minute 1, has read minute 0 as its previous window and admitted what it left.
/// Counted into minute 0 as they were sent, they would put 40 + 60 + 60 = 160 admissions into
/// one span of a minute. Sealed by B's read, they are refused there and counted again in minute
/// 1, which is full: the span holds exactly the limit.
#[tokio::test]
async fn increments_delayed_across_a_sliding_boundary_never_pass_the_limit() {
    let (direct, _) = dynamo::client();
    let tables = Tables::create(&direct).await;
    let proxy = FaultProxy::start(&dynamo::endpoint()).await;
    let (through_proxy, _) = dynamo::client_at(&proxy.endpoint());
    let limit: RateLimit = "global=100/1m:sliding".parse().unwrap();

    let (a, a_clock) = process(through_proxy, &tables);
    let (b, b_clock) = process(direct, &tables);
    a_clock.set(MINUTE_0 + 10_000);
    assert_eq!(admit_n(&a, &limit, 40).await, 40);

    // A, in minute 0's last slot: 60 increments, each held on its way to DynamoDB.
    a_clock.set(MINUTE_0 + MINUTE - 100);
    let release = proxy.hold_always_when("UpdateItem", "");
    let seen_before = proxy.seen("UpdateItem");
    let late = tokio::spawn({
        let (a, limit) = (a.clone(), limit);
        async move {
            let checks = (0..60).map(|_| admitted(&a, &limit));
            join_all(checks).await.into_iter().filter(|&ok| ok).count()
        }
    });
    while proxy.seen("UpdateItem") < seen_before + 60 {
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // B, 100 ms into minute 1, reads minute 0 (40) and takes what that leaves.
    b_clock.set(MINUTE_0 + MINUTE + 100);
    let by_b = admit_n(&b, &limit, 100).await;
    assert_eq!(by_b, 60, "B admits what minute 0's 40 leave of the limit");

    // The held increments reach DynamoDB now, after B's read; A's clock has moved on a little.
    a_clock.set(MINUTE_0 + MINUTE + 150);
    release.open();
    let late = late.await.unwrap();
    proxy.disarm("UpdateItem");

    let in_one_span = 40 + late + by_b;
    assert_eq!(
        in_one_span, 100,
        "admitted within 50 s: 40 early, {late} late ones of A, {by_b} of B"
    );
}

/// A process whose clock lags behind the one that sealed a window counts in the window after,
/// not in the sealed one.
#[tokio::test]
async fn a_process_behind_the_others_counts_in_the_window_they_are_in() {
    let (ddb, _) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let limit: RateLimit = "global=10/1m:sliding".parse().unwrap();
    let (a, a_clock) = process(ddb.clone(), &tables);
    let (b, b_clock) = process(ddb.clone(), &tables);
    a_clock.set(MINUTE_0 + 30_000);
    assert_eq!(admit_n(&a, &limit, 4).await, 4);
    // B is in minute 1 and reads minute 0; A's clock is 2 s behind, still in minute 0.
    b_clock.set(MINUTE_0 + MINUTE + 1_000);
    assert_eq!(admit_n(&b, &limit, 10).await, 6);
    a_clock.set(MINUTE_0 + MINUTE - 1_000);
    assert_eq!(
        admit_n(&a, &limit, 10).await,
        0,
        "minute 0 is sealed; minute 1 is full"
    );
}

/// Changing the shard count (or sharding a layer, or no longer sharding it) in the middle of a
/// window: processes with the new configuration count the window in the layout it started
/// with, so it never holds more than the limit, and the operator's view sums that layout. The
/// new layout starts with the next window.
#[tokio::test]
async fn a_change_of_the_shard_count_never_admits_more_than_the_limit_in_a_window() {
    for (before, after) in [
        ("global=100/1d:shards=4", "global=100/1d:shards=8"),
        ("global=100/1d", "global=100/1d:shards=8"),
        ("global=100/1d:shards=8", "global=100/1d"),
        (
            "global=100/1m:sliding:shards=4",
            "global=100/1m:sliding:shards=8",
        ),
    ] {
        let (ddb, _) = dynamo::client();
        let tables = Tables::create(&ddb).await;
        let (old_limit, new_limit): (RateLimit, RateLimit) =
            (before.parse().unwrap(), after.parse().unwrap());
        let (old, old_clock) = process(ddb.clone(), &tables);
        let (new, new_clock) = process(ddb.clone(), &tables);
        old_clock.set(MINUTE_0 + 10_000);
        new_clock.set(MINUTE_0 + 20_000);
        assert_eq!(admit_n(&old, &old_limit, 150).await, 100, "{before}");
        assert_eq!(
            admit_n(&new, &new_limit, 100).await,
            0,
            "{before} → {after}: the window is full whatever the layout"
        );
        let usage = new.usage(&new_limit, "").await.unwrap();
        assert_eq!(
            usage.count, 100,
            "{before} → {after}: what the functions count"
        );

        if new_limit.window_secs() == 60 {
            // Sliding: the next minute starts full (minute 0's 100 are still inside at its
            // start), whatever layout each window was counted in.
            new_clock.set(MINUTE_0 + MINUTE + 1_000);
            assert_eq!(
                admit_n(&new, &new_limit, 50).await,
                0,
                "{after}: next minute"
            );
            new_clock.set(MINUTE_0 + 2 * MINUTE + 1_000);
        } else {
            new_clock.set(MINUTE_0 + 86_400_000 + 1_000);
        }
        // A later window is counted in the new layout, and holds the limit again.
        assert_eq!(admit_n(&new, &new_limit, 150).await, 100, "{after}: later");
        if new_limit.shards() > 1 {
            let last_shard = format!("~{}#", new_limit.shards() - 1);
            let items = counters_matching(&ddb, &tables.rate_limits, &last_shard).await;
            assert!(
                !items.is_empty(),
                "{after}: the new layout's shards are used"
            );
        }
    }
}
