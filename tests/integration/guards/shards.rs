//! A hot layer spread over shards: never more than its limit in total, writes spread evenly,
//! rejections free once every shard is known full, and how early it can refuse.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tollgate::ratelimit::{Admission, LimitCheck, RateLimit, RateLimiter, Verdict, SHARD_TRIES};
use tollgate_functions::catalog;
use tollgate_tests::dynamo::{self, counters_matching, Tables};
use tollgate_tests::manual_clock;

/// `processes` limiters (each with its own block cache, as separate Lambda instances have),
/// each running `workers` concurrent loops of `per_worker` checks of `limit`.
/// Returns the admissions, and how many had been admitted (over all processes) when the first
/// rejection came back: a lower bound, as up to `loops - 1` admissions made by then may not
/// have been counted yet.
async fn flood(
    limiters: &[Arc<RateLimiter>],
    limit: RateLimit,
    workers: usize,
    per_worker: usize,
) -> (u32, Option<u32>) {
    let admitted = Arc::new(AtomicU32::new(0));
    let at_first_refusal = Arc::new(AtomicU32::new(u32::MAX));
    let loops = limiters.iter().flat_map(|limiter| {
        (0..workers).map({
            let (admitted, at_first_refusal) = (admitted.clone(), at_first_refusal.clone());
            move |_| {
                let (limiter, admitted, at_first_refusal) =
                    (limiter.clone(), admitted.clone(), at_first_refusal.clone());
                async move {
                    for _ in 0..per_worker {
                        let mut admission = Admission::default();
                        let checks = [LimitCheck {
                            limit: &limit,
                            key: "",
                        }];
                        match limiter.check(&mut admission, &checks).await.unwrap() {
                            Verdict::Admitted => {
                                admitted.fetch_add(1, Ordering::SeqCst);
                            }
                            Verdict::Rejected(_) => {
                                let so_far = admitted.load(Ordering::SeqCst);
                                at_first_refusal.fetch_min(so_far, Ordering::SeqCst);
                            }
                        }
                    }
                }
            }
        })
    });
    join_all(loops).await;
    let first = at_first_refusal.load(Ordering::SeqCst);
    (
        admitted.load(Ordering::SeqCst),
        (first != u32::MAX).then_some(first),
    )
}

fn limiters(ddb: &aws_sdk_dynamodb::Client, table: &str, n: usize) -> Vec<Arc<RateLimiter>> {
    let (_, clock) = manual_clock();
    (0..n)
        .map(|_| {
            let limiter = RateLimiter::new(
                ddb.clone(),
                table,
                catalog::EPHEMERAL_KEY.name,
                clock.clone(),
            )
            .with_block_cache(10_000, Duration::from_secs(5));
            Arc::new(limiter)
        })
        .collect()
}

/// Flooded with three times its limit by three processes at once, a cap of 300 over 8 shards
/// admits exactly 300, every shard holds exactly its share, and once every shard is known full
/// a rejection costs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sharded_cap_flooded_with_three_times_its_limit_admits_exactly_the_limit() {
    let (ddb, counter) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let limit: RateLimit = "global=300/1h:shards=8".parse().unwrap();
    let processes = limiters(&ddb, &tables.rate_limits, 3);
    let (admitted, first_refusal) = flood(&processes, limit, 5, 60).await;
    assert_eq!(admitted, 300);
    // With no more shards than a request tries, nothing is refused while a shard has room (up
    // to 14 admissions of the other loops may still be on their way back).
    let first = first_refusal.expect("the flood is three times the limit");
    assert!(first >= 300 - 14, "first refusal after {first} of 300");
    let shards = counters_matching(&ddb, &tables.rate_limits, "#global#").await;
    assert_eq!(shards.len(), 8, "{shards:?}");
    let mut counts: Vec<u64> = shards.iter().map(|(_, n)| *n).collect();
    counts.sort();
    assert_eq!(counts, [37, 37, 37, 37, 38, 38, 38, 38]);

    counter.reset();
    let (more, _) = flood(&processes, limit, 2, 50).await;
    assert_eq!(more, 0);
    assert_eq!(counter.total(), 0, "{:?}", counter.snapshot());
}

/// 10,000 admissions through a sharded layer from two processes: no shard takes more than 1.2
/// times the mean of the writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_spread_evenly_over_the_shards() {
    let (ddb, _) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let limit: RateLimit = "global=100000/1h:shards=8".parse().unwrap();
    let processes = limiters(&ddb, &tables.rate_limits, 2);
    let (admitted, _) = flood(&processes, limit, 8, 625).await;
    assert_eq!(admitted, 10_000);
    let shards = counters_matching(&ddb, &tables.rate_limits, "#global#").await;
    let counts: Vec<u64> = shards.iter().map(|(_, n)| *n).collect();
    assert_eq!(counts.len(), 8);
    let mean = 10_000.0 / 8.0;
    let max = *counts.iter().max().unwrap() as f64;
    assert!(max / mean <= 1.2, "max/mean {:.3}: {counts:?}", max / mean);
    println!(
        "max/mean per shard over 10,000 admissions: {:.3} ({counts:?})",
        max / mean
    );
}

/// With more shards than a request tries, a process that has not yet seen the other shards full
/// can refuse early; never with more than `(shards - SHARD_TRIES) × ⌈limit / shards⌉` units
/// left, and the flood still ends with exactly the limit admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_early_refusal_leaves_at_most_the_untried_shards() {
    let (ddb, _) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let limit: RateLimit = "global=320/1h:shards=32".parse().unwrap();
    let processes = limiters(&ddb, &tables.rate_limits, 4);
    let (admitted, first_refusal) = flood(&processes, limit, 4, 60).await;
    assert_eq!(admitted, 320);
    // Less the 15 other loops' admissions possibly not yet counted.
    let bound = 320 - (32 - SHARD_TRIES) * 10 - 15;
    let first = first_refusal.expect("the flood is three times the limit");
    assert!(
        first >= bound,
        "first refusal after {first} of 320 (bound {bound})"
    );
    println!("first refusal after {first} of 320 admitted (bound {bound})");
}
