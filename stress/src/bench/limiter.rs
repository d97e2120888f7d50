//! Part 2: the limiter against a bare conditional `UpdateItem` with its exact expressions
//! (alternating which goes first), sliding windows against fixed ones (and window rolls on a
//! manual clock), what a rejection and a session cost with and without the block cache, and
//! admissions per second through 1 shard against [`SHARDS`]. One client's SDK interceptors
//! count the requests and ask each for its capacity (the library itself asks for nothing).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;
use serde::Serialize;
use tollgate::clock::{ManualClock, SharedClock, SystemClock};
use tollgate::ratelimit::{
    Admission, Layer, LimitCheck, RateLimit, RateLimiter, Shards, Verdict,
    DEFAULT_BLOCK_CACHE_MAX_AGE,
};
use tollgate_tests::capacity::{merge, CapacityMeter, OpCapacity};
use tollgate_tests::counting::RequestCounter;
use tollgate_tests::dynamo::{self, Tables};

use super::capacity::{self, CapacityFigures};
use super::stats::{ms, Quantiles};
use super::{BenchError, WARMUP};

/// The block cache's capacity when on (the functions' default).
const BLOCK_CACHE: usize = 10_000;
/// The full key's limit per hour.
const SMALL_LIMIT: u32 = 5;
/// A limit far above any call count: every check is one admitted increment.
const BIG_LIMIT: u32 = 100_000_000;
/// Window rolls measured on the manual clock.
const ROLLS: usize = 5;
/// The sharded layer's shards, against 1.
const SHARDS: u32 = 8;
/// Limiters (as processes) and workers per limiter for the shard figures.
const SHARD_LIMITERS: usize = 4;
const WORKERS_PER_LIMITER: usize = 4;
/// Rounds of (1 shard, [`SHARDS`]) in alternating order.
const SHARD_ROUNDS: usize = 3;

/// Checks of a full key through one limiter.
#[derive(Debug, Serialize)]
pub struct Rejections {
    /// `fixed` or `sliding`.
    pub window: &'static str,
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
    /// With the cache on: 0 requests per rejection, `met`; only the first rejection (which
    /// fills the cache) cost a request, `after_first`; otherwise `not_met`. Off: `none`.
    pub cache_goal: &'static str,
}

/// One window kind's admissions, steady state.
#[derive(Debug, Serialize)]
pub struct Admissions {
    pub latency: Quantiles,
    pub requests_per_admission: f64,
    pub capacity: CapacityFigures,
}

/// The first admission of a new window, and the one after it, averaged over [`ROLLS`] rolls.
#[derive(Debug, Serialize)]
pub struct Roll {
    pub window: &'static str,
    pub rolls: usize,
    pub first_requests: f64,
    pub first_reads: f64,
    pub next_requests: f64,
    pub first_capacity: CapacityFigures,
}

/// Part 2's sliding figures.
#[derive(Debug, Serialize)]
pub struct Sliding {
    pub fixed: Admissions,
    pub sliding: Admissions,
    pub median_ratio: f64,
    pub p90_ratio: f64,
    /// Goal: sliding at most 1.1× fixed, medians.
    pub overhead_met: bool,
    pub rolls: Vec<Roll>,
    pub window_s: u64,
}

/// Sessions of one kind: what each costs.
#[derive(Debug, Serialize)]
pub struct Sessions {
    /// `admitted`, `ip_full` or `global_full`.
    pub kind: &'static str,
    /// Block cache capacity (0: off).
    pub block_cache: usize,
    pub sessions: usize,
    pub admitted: usize,
    pub rejected: usize,
    pub requests_per_session: f64,
    /// `(operation, requests)`.
    pub operations: Vec<(String, usize)>,
    pub capacity: CapacityFigures,
}

/// One shard count's admissions per second.
#[derive(Debug, Serialize)]
pub struct ShardRate {
    pub shards: u32,
    pub admissions: usize,
    pub wall_s: f64,
    pub per_second: f64,
    pub requests_per_admission: f64,
}

/// Part 2's shard figures.
#[derive(Debug, Serialize)]
pub struct ShardFigures {
    pub limiters: usize,
    pub workers: usize,
    pub rounds: usize,
    pub one: ShardRate,
    pub many: ShardRate,
    /// `many` over `one`, admissions per second.
    pub ratio: f64,
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
    pub sliding: Sliding,
    pub small_limit: u32,
    pub block_cache: Vec<Rejections>,
    pub sessions: Vec<Sessions>,
    pub shards: ShardFigures,
}

impl Limiter {
    /// The sessions of `kind` with the block cache on or off.
    pub fn session(&self, kind: &str, cached: bool) -> Option<&Sessions> {
        self.sessions
            .iter()
            .find(|s| s.kind == kind && (s.block_cache > 0) == cached)
    }
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

/// A check that must be admitted.
async fn admit(limiter: &RateLimiter, checks: &[LimitCheck<'_>]) -> Result<(), BenchError> {
    match check(limiter, checks).await? {
        Verdict::Admitted => Ok(()),
        Verdict::Rejected(d) => Err(BenchError::WrongAnswer(format!(
            "the limiter refused a check under a limit of {}",
            d.limit.limit()
        ))),
    }
}

fn limit(layer: Layer, limit: u32, window: Duration) -> Result<RateLimit, BenchError> {
    RateLimit::new(layer, limit, window).map_err(|e| BenchError::Setup(format!("a limit: {e}")))
}

/// The client, its counters, and the tables every section uses.
struct Bench {
    ddb: Client,
    counter: RequestCounter,
    meter: CapacityMeter,
    table: String,
    clock: SharedClock,
    n: usize,
}

impl Bench {
    fn limiter(&self, scope: &str, block_cache: usize) -> RateLimiter {
        self.limiter_on(scope, block_cache, self.clock.clone())
    }

    fn limiter_on(&self, scope: &str, block_cache: usize, clock: SharedClock) -> RateLimiter {
        RateLimiter::new(self.ddb.clone(), &self.table, scope, clock)
            .with_block_cache(block_cache, DEFAULT_BLOCK_CACHE_MAX_AGE)
    }

    /// Forgets what the counters saw so far.
    fn reset(&self) {
        self.counter.reset();
        self.meter.reset();
    }
}

pub async fn run(n: usize) -> Result<Limiter, BenchError> {
    let (ddb, counter, meter) = dynamo::metered_client();
    let tables = Tables::create(&ddb).await;
    let b = Bench {
        ddb,
        counter,
        meter,
        table: tables.rate_limits.clone(),
        clock: Arc::new(SystemClock),
        n,
    };
    let hour = Duration::from_secs(3600);

    // 1. Overhead.
    let big = limit(Layer::Client, BIG_LIMIT, hour)?;
    let limiter = b.limiter("bench", BLOCK_CACHE);
    let expires = b.clock.now_ms() / 1000 + 3600;
    let admitted_checks = [LimitCheck {
        limit: &big,
        key: "k",
    }];
    for _ in 0..WARMUP {
        check(&limiter, &admitted_checks).await?;
        bare_update(&b.ddb, &b.table, BIG_LIMIT, expires).await;
    }
    let mut limiter_ms = Vec::with_capacity(n);
    let mut bare_ms = Vec::with_capacity(n);
    for i in 0..n {
        for ours_first in [i % 2 == 0, i % 2 != 0] {
            let t = Instant::now();
            if ours_first {
                admit(&limiter, &admitted_checks).await?;
                limiter_ms.push(ms(t.elapsed()));
            } else {
                let ok = bare_update(&b.ddb, &b.table, BIG_LIMIT, expires).await;
                bare_ms.push(ms(t.elapsed()));
                if !ok {
                    return Err(BenchError::WrongAnswer(format!(
                        "bare UpdateItem {i} failed"
                    )));
                }
            }
        }
    }

    let sliding = sliding(&b).await?;
    let block_cache = rejections(&b).await?;
    println!("part 2: sessions (ip, then global), block cache on and off");
    let sessions = sessions(&b).await?;
    println!("part 2: a global layer of 1 shard against {SHARDS}");
    let shards = shards(&b).await?;

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
        sliding,
        small_limit: SMALL_LIMIT,
        block_cache,
        sessions,
        shards,
    })
}

/// The same layer fixed and sliding, alternating; then window rolls on a manual clock.
async fn sliding(b: &Bench) -> Result<Sliding, BenchError> {
    let hour = Duration::from_secs(3600);
    let fixed = limit(Layer::Ip, BIG_LIMIT, hour)?;
    let sliding = fixed.sliding();
    let limiter = b.limiter("bench-sliding", BLOCK_CACHE);
    // Different keys: a fixed and a sliding layer of one window share the item key format.
    let checks = |sliding_layer: bool| {
        [match sliding_layer {
            false => LimitCheck {
                limit: &fixed,
                key: "fixed",
            },
            true => LimitCheck {
                limit: &sliding,
                key: "sliding",
            },
        }]
    };
    // The warm-up includes the sliding layer's one read of its previous window.
    for _ in 0..WARMUP {
        admit(&limiter, &checks(false)).await?;
        admit(&limiter, &checks(true)).await?;
    }
    let mut lat: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut requests = [0usize; 2];
    let mut used: [BTreeMap<String, OpCapacity>; 2] = Default::default();
    for i in 0..b.n {
        for sliding_first in [i % 2 == 0, i % 2 != 0] {
            let k = usize::from(sliding_first);
            b.reset();
            let t = Instant::now();
            admit(&limiter, &checks(sliding_first)).await?;
            lat[k].push(ms(t.elapsed()));
            requests[k] += b.counter.total();
            merge(&mut used[k], &b.meter.take());
        }
    }
    let admissions = |k: usize| Admissions {
        latency: Quantiles::of(&lat[k]),
        requests_per_admission: requests[k] as f64 / b.n as f64,
        capacity: capacity::figures(&used[k], &BTreeMap::new(), b.n),
    };
    let (fixed_adm, sliding_adm) = (admissions(0), admissions(1));

    // Window rolls: a minute-long window on a clock the bench moves.
    let minute = Duration::from_secs(60);
    let fixed_m = limit(Layer::Ip, BIG_LIMIT, minute)?;
    let sliding_m = fixed_m.sliding();
    let now = b.clock.now_ms();
    let manual = ManualClock::at(now - now % 60_000 + 1_000);
    let roll_limiter = b.limiter_on("bench-rolls", BLOCK_CACHE, Arc::new(manual.clone()));
    let mut rolls = Vec::new();
    for (window, layer, key) in [
        ("fixed", &fixed_m, "roll-fixed"),
        ("sliding", &sliding_m, "roll-sliding"),
    ] {
        let c = [LimitCheck { limit: layer, key }];
        // The window before the first measured one holds a request, so there is something to
        // read.
        admit(&roll_limiter, &c).await?;
        let (mut first, mut reads, mut next) = (0, 0, 0);
        let mut used = BTreeMap::new();
        for _ in 0..ROLLS {
            manual.advance(minute);
            b.reset();
            admit(&roll_limiter, &c).await?;
            first += b.counter.total();
            reads += b.counter.get("GetItem");
            merge(&mut used, &b.meter.take());
            b.reset();
            admit(&roll_limiter, &c).await?;
            next += b.counter.total();
        }
        let per = |x: usize| x as f64 / ROLLS as f64;
        rolls.push(Roll {
            window,
            rolls: ROLLS,
            first_requests: per(first),
            first_reads: per(reads),
            next_requests: per(next),
            first_capacity: capacity::figures(&used, &BTreeMap::new(), ROLLS),
        });
    }
    let median_ratio = sliding_adm.latency.median / fixed_adm.latency.median;
    Ok(Sliding {
        p90_ratio: sliding_adm.latency.p90 / fixed_adm.latency.p90,
        overhead_met: median_ratio <= 1.1,
        median_ratio,
        fixed: fixed_adm,
        sliding: sliding_adm,
        rolls,
        window_s: minute.as_secs(),
    })
}

/// A full key checked `n` times, fixed and sliding, block cache on and off.
async fn rejections(b: &Bench) -> Result<Vec<Rejections>, BenchError> {
    let hour = Duration::from_secs(3600);
    let small = limit(Layer::Ip, SMALL_LIMIT, hour)?;
    let mut out = Vec::new();
    for (window, layer) in [("fixed", small), ("sliding", small.sliding())] {
        for capacity in [BLOCK_CACHE, 0] {
            let limiter = b.limiter("bench", capacity);
            let key = format!("full-{window}-{capacity}");
            let checks = [LimitCheck {
                limit: &layer,
                key: &key,
            }];
            for _ in 0..layer.limit() {
                admit(&limiter, &checks).await?;
            }
            b.reset();
            let (mut rejected, mut admitted, mut first) = (0, 0, 0);
            for i in 0..b.n {
                match check(&limiter, &checks).await? {
                    Verdict::Admitted => admitted += 1,
                    Verdict::Rejected(_) => rejected += 1,
                }
                if i == 0 {
                    first = b.counter.total();
                }
            }
            let requests = b.counter.total();
            let cache_goal = match capacity {
                0 => "none",
                _ if requests == 0 => "met",
                _ if requests == first => "after_first",
                _ => "not_met",
            };
            out.push(Rejections {
                window,
                capacity,
                max_age_s: DEFAULT_BLOCK_CACHE_MAX_AGE.as_secs(),
                checks: b.n,
                rejected,
                admitted,
                requests,
                first,
                later_rejections: rejected.saturating_sub(1),
                later_requests: requests - first,
                per_rejection: requests as f64 / rejected.max(1) as f64,
                per_rejection_after_first: (requests - first) as f64
                    / rejected.saturating_sub(1).max(1) as f64,
                cache_goal,
            });
        }
    }
    Ok(out)
}

/// Sessions as `ephemeral-key` counts them, `ip` then `global`: `n` admitted, then `n` against a
/// full `ip` layer and `n` against a full `global` layer, block cache on and off.
async fn sessions(b: &Bench) -> Result<Vec<Sessions>, BenchError> {
    let ip_big = limit(Layer::Ip, BIG_LIMIT, Duration::from_secs(3600))?;
    let ip_small = limit(Layer::Ip, SMALL_LIMIT, Duration::from_secs(3600))?;
    let global_big = limit(Layer::Global, BIG_LIMIT, Duration::from_secs(86_400))?;
    let global_small = limit(Layer::Global, SMALL_LIMIT, Duration::from_secs(86_400))?;
    let mut out = Vec::new();
    let mut reference = BTreeMap::new();
    let kinds = [
        ("admitted", BLOCK_CACHE, &ip_big, &global_big),
        ("ip_full", BLOCK_CACHE, &ip_small, &global_big),
        ("ip_full", 0, &ip_small, &global_big),
        ("global_full", BLOCK_CACHE, &ip_big, &global_small),
        ("global_full", 0, &ip_big, &global_small),
    ];
    for (kind, block_cache, ip, global) in kinds {
        // Each its own scope: `global` has one key per scope.
        let limiter = b.limiter(&format!("bench-session-{kind}-{block_cache}"), block_cache);
        let checks = [
            LimitCheck {
                limit: ip,
                key: "203.0.113.7",
            },
            LimitCheck {
                limit: global,
                key: RateLimiter::layer_key(Layer::Global, "203.0.113.7"),
            },
        ];
        let fill = match kind {
            "admitted" => WARMUP,
            _ => SMALL_LIMIT as usize,
        };
        for _ in 0..fill {
            admit(&limiter, &checks).await?;
        }
        b.reset();
        let (mut admitted, mut rejected) = (0, 0);
        for _ in 0..b.n {
            match check(&limiter, &checks).await? {
                Verdict::Admitted => admitted += 1,
                Verdict::Rejected(_) => rejected += 1,
            }
        }
        let expected = match kind {
            "admitted" => admitted,
            _ => rejected,
        };
        if expected != b.n {
            return Err(BenchError::WrongAnswer(format!(
                "sessions {kind}: {admitted} admitted, {rejected} rejected of {}",
                b.n
            )));
        }
        let mut operations: Vec<(String, usize)> = b.counter.snapshot().into_iter().collect();
        operations.sort();
        let used = b.meter.take();
        let capacity = capacity::figures(&used, &reference, b.n);
        if kind == "admitted" {
            // The increments a rejection fails to make are the admitted ones (rule 2).
            reference = used;
        }
        out.push(Sessions {
            kind,
            block_cache,
            sessions: b.n,
            admitted,
            rejected,
            requests_per_session: operations.iter().map(|o| o.1).sum::<usize>() as f64 / b.n as f64,
            operations,
            capacity,
        });
    }
    Ok(out)
}

/// Admissions per second through one `global` layer of 1 shard and of [`SHARDS`]: workers over
/// several limiters, `4 n` admissions per shard count and round, rounds alternating which
/// goes first.
async fn shards(b: &Bench) -> Result<ShardFigures, BenchError> {
    let day = Duration::from_secs(86_400);
    let one = limit(Layer::Global, BIG_LIMIT, day)?;
    let many = one
        .with_shards(Shards::Count(SHARDS))
        .map_err(|e| BenchError::Setup(format!("a sharded limit: {e}")))?;
    let per_round = 4 * b.n;
    let workers = SHARD_LIMITERS * WORKERS_PER_LIMITER;
    let mut totals = [(0usize, 0.0f64, 0usize); 2];
    for round in 0..SHARD_ROUNDS {
        let order = match round % 2 {
            0 => [0, 1],
            _ => [1, 0],
        };
        for k in order {
            let layer = Arc::new([one, many][k]);
            let scope = format!("bench-shards-{}", layer.shards());
            let limiters: Vec<Arc<RateLimiter>> = (0..SHARD_LIMITERS)
                .map(|_| Arc::new(b.limiter(&scope, BLOCK_CACHE)))
                .collect();
            // Connections and each limiter's first shard, not measured.
            for l in &limiters {
                admit(
                    l,
                    &[LimitCheck {
                        limit: &layer,
                        key: "",
                    }],
                )
                .await?;
            }
            b.reset();
            let started = Instant::now();
            let mut handles = Vec::new();
            for w in 0..workers {
                let limiter = limiters[w % SHARD_LIMITERS].clone();
                let layer = layer.clone();
                let share = per_round / workers + usize::from(w < per_round % workers);
                handles.push(tokio::spawn(async move {
                    for _ in 0..share {
                        admit(
                            &limiter,
                            &[LimitCheck {
                                limit: &layer,
                                key: "",
                            }],
                        )
                        .await?;
                    }
                    Ok::<_, BenchError>(share)
                }));
            }
            let mut admitted = 0;
            for h in handles {
                admitted += h
                    .await
                    .map_err(|e| BenchError::Setup(format!("a shard worker: {e}")))??;
            }
            let t = &mut totals[k];
            t.0 += admitted;
            t.1 += started.elapsed().as_secs_f64();
            t.2 += b.counter.total();
        }
    }
    let rate = |k: usize, shards: u32| {
        let (admissions, wall_s, requests) = totals[k];
        ShardRate {
            shards,
            admissions,
            wall_s,
            per_second: admissions as f64 / wall_s,
            requests_per_admission: requests as f64 / admissions.max(1) as f64,
        }
    };
    let (one, many) = (rate(0, 1), rate(1, SHARDS));
    Ok(ShardFigures {
        limiters: SHARD_LIMITERS,
        workers,
        rounds: SHARD_ROUNDS,
        ratio: many.per_second / one.per_second,
        one,
        many,
    })
}
