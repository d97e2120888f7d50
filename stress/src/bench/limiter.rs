//! Part 2: the limiter against a bare conditional `UpdateItem`.
//!
//! `RateLimiter::check` with one layer (limit far above the calls, so every call is one
//! admitted increment) against `update_item` with the limiter's exact expressions and
//! return-value settings, from the same client, alternating which goes first in each pair so
//! drift and caching hit both alike. Then what a rejection costs: a full key checked again and
//! again through one limiter, block cache on and off, DynamoDB requests counted by the SDK
//! interceptor.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;
use serde::Serialize;
use tollgate::clock::{SharedClock, SystemClock};
use tollgate::ratelimit::{
    Admission, Layer, LimitCheck, RateLimit, RateLimiter, Verdict, DEFAULT_BLOCK_CACHE_MAX_AGE,
};
use tollgate_tests::dynamo::{self, Tables};

use super::stats::{ms, Quantiles};
use super::{BenchError, WARMUP};

/// The block cache's capacity when on (the functions' default).
const BLOCK_CACHE: usize = 10_000;
/// The full key's limit per hour.
const SMALL_LIMIT: u32 = 5;

/// Checks of a full key through one limiter.
#[derive(Debug, Serialize)]
pub struct Rejections {
    /// Block cache capacity (0: off).
    pub capacity: usize,
    pub max_age_s: u64,
    pub checks: usize,
    pub rejected: usize,
    pub admitted: usize,
    /// DynamoDB requests for all the checks.
    pub requests: usize,
    /// ... of which for the first check.
    pub first: usize,
    /// ... and for the rejections after the first (how many, and their requests).
    pub later_rejections: usize,
    pub later_requests: usize,
    pub per_rejection: f64,
    pub per_rejection_after_first: f64,
}

/// Part 2's figures.
#[derive(Debug, Serialize)]
pub struct Limiter {
    pub n: usize,
    pub warmup: usize,
    pub limiter: Quantiles,
    pub bare: Quantiles,
    pub median_ratio: f64,
    pub p90_ratio: f64,
    /// Goal: at most 1.1× the bare call, medians.
    pub overhead_met: bool,
    pub small_limit: u32,
    pub block_cache: Vec<Rejections>,
    /// Goal: 0 requests per rejection with the block cache: `met`, `after_first` (only the
    /// first rejection, which fills the cache, cost a request) or `not_met`.
    pub cache_goal: &'static str,
}

/// Exactly the limiter's increment, without the limiter around it.
async fn bare_update(ddb: &Client, table: &str, limit: u32, expires: u64) -> bool {
    ddb.update_item()
        .table_name(table)
        .key("pk", AttributeValue::S("bare".into()))
        .update_expression("ADD #count :one SET #expires = if_not_exists(#expires, :expires)")
        .condition_expression("attribute_not_exists(#count) OR #count < :limit")
        .expression_attribute_names("#count", "count")
        .expression_attribute_names("#expires", "expires_at")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .expression_attribute_values(":limit", AttributeValue::N(limit.to_string()))
        .expression_attribute_values(":expires", AttributeValue::N(expires.to_string()))
        .return_values(ReturnValue::UpdatedNew)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .send()
        .await
        .is_ok()
}

async fn check(limiter: &RateLimiter, checks: &[LimitCheck<'_>]) -> Result<Verdict, BenchError> {
    let mut admission = Admission::default();
    limiter
        .check(&mut admission, checks)
        .await
        .map_err(|e| BenchError::WrongAnswer(format!("the limiter failed: {e}")))
}

pub async fn run(n: usize) -> Result<Limiter, BenchError> {
    let (ddb, counter) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let limit = |layer, limit| {
        RateLimit::new(layer, limit, Duration::from_secs(3600))
            .map_err(|e| BenchError::Setup(format!("a limit: {e}")))
    };
    let big_limit = 100_000_000;
    let big = limit(Layer::Client, big_limit)?;
    let limiter = RateLimiter::new(ddb.clone(), &tables.rate_limits, "bench", clock.clone())
        .with_block_cache(BLOCK_CACHE, DEFAULT_BLOCK_CACHE_MAX_AGE);
    let expires = clock.now_ms() / 1000 + 3600;
    let admitted_checks = [LimitCheck {
        limit: &big,
        key: "k",
    }];

    for _ in 0..WARMUP {
        check(&limiter, &admitted_checks).await?;
        bare_update(&ddb, &tables.rate_limits, big_limit, expires).await;
    }
    let mut limiter_ms = Vec::with_capacity(n);
    let mut bare_ms = Vec::with_capacity(n);
    for i in 0..n {
        for ours_first in [i % 2 == 0, i % 2 != 0] {
            let t = Instant::now();
            if ours_first {
                let verdict = check(&limiter, &admitted_checks).await?;
                limiter_ms.push(ms(t.elapsed()));
                if verdict != Verdict::Admitted {
                    return Err(BenchError::WrongAnswer(format!(
                        "the limiter refused call {i} under a limit of {big_limit}"
                    )));
                }
            } else {
                let ok = bare_update(&ddb, &tables.rate_limits, big_limit, expires).await;
                bare_ms.push(ms(t.elapsed()));
                if !ok {
                    return Err(BenchError::WrongAnswer(format!(
                        "bare UpdateItem {i} failed"
                    )));
                }
            }
        }
    }

    let small = limit(Layer::Ip, SMALL_LIMIT)?;
    let mut block_cache = Vec::new();
    for capacity in [BLOCK_CACHE, 0] {
        let limiter = RateLimiter::new(ddb.clone(), &tables.rate_limits, "bench", clock.clone())
            .with_block_cache(capacity, DEFAULT_BLOCK_CACHE_MAX_AGE);
        let key = format!("full-{capacity}");
        let checks = [LimitCheck {
            limit: &small,
            key: &key,
        }];
        for _ in 0..small.limit() {
            check(&limiter, &checks).await?;
        }
        counter.reset();
        let (mut rejected, mut admitted, mut first) = (0, 0, 0);
        for i in 0..n {
            match check(&limiter, &checks).await? {
                Verdict::Admitted => admitted += 1,
                Verdict::Rejected(_) => rejected += 1,
            }
            if i == 0 {
                first = counter.total();
            }
        }
        let requests = counter.total();
        block_cache.push(Rejections {
            capacity,
            max_age_s: DEFAULT_BLOCK_CACHE_MAX_AGE.as_secs(),
            checks: n,
            rejected,
            admitted,
            requests,
            first,
            later_rejections: rejected.saturating_sub(1),
            later_requests: requests - first,
            per_rejection: requests as f64 / rejected.max(1) as f64,
            per_rejection_after_first: (requests - first) as f64
                / rejected.saturating_sub(1).max(1) as f64,
        });
    }
    let cache_goal = match block_cache.iter().find(|r| r.capacity != 0) {
        Some(r) if r.requests == 0 => "met",
        Some(r) if r.requests == r.first => "after_first",
        _ => "not_met",
    };
    let (limiter, bare) = (Quantiles::of(&limiter_ms), Quantiles::of(&bare_ms));
    let median_ratio = limiter.median / bare.median;
    Ok(Limiter {
        n,
        warmup: WARMUP,
        median_ratio,
        p90_ratio: limiter.p90 / bare.p90,
        overhead_met: median_ratio <= 1.1,
        limiter,
        bare,
        small_limit: SMALL_LIMIT,
        block_cache,
        cache_goal,
    })
}
