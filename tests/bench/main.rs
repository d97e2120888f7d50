//! `cargo xtask bench`: idempotency against AWS Lambda Powertools for Python, and the limiter
//! against a bare conditional `UpdateItem`, on one DynamoDB Local, in one run.
//!
//! Not a test: a `[[bench]]` with `harness = false`, so `cargo test` neither builds nor runs it.
//! `cargo xtask bench` builds it with `--profile bench-fast`, starts DynamoDB Local, and runs it
//! with these variables:
//!
//! - `DYNAMODB_ENDPOINT`: DynamoDB Local;
//! - `BENCH_N`: requests per measured phase (default 400);
//! - `BENCH_PYTHON`, `BENCH_SCRIPT`: the venv's Python and `bench/powertools_transfer.py`;
//! - `BENCH_REPORT`: where the Markdown report goes (none if unset);
//! - `BENCH_MACHINE_*`: versions xtask knows (rustc, DynamoDB Local, profile, command);
//! - `BENCH_ORDER`: how the run went, when xtask runs more parts than this driver's.
//!
//! Everything in the report comes from this run: nothing is typed in by hand.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;
use serde_json::Value;
use tollgate::clock::{SharedClock, SystemClock};
use tollgate::config::Env;
use tollgate::idempotency::{fingerprint, IdempotencyKey, Scope};
use tollgate::ratelimit::{
    Admission, Layer, LimitCheck, RateLimit, RateLimiter, Verdict, DEFAULT_BLOCK_CACHE_MAX_AGE,
};
use tollgate::serve::Function;
use tollgate_tests::counting::RequestCounter;
use tollgate_tests::dynamo::{self, Tables};
use transfer::domain::TransferRequest;
use transfer::App;

const CONCURRENCY: [usize; 2] = [1, 16];
const WARMUP: usize = 20;
const CLIENT_ID: &str = "cl_bench";
const ROUTE: &str = "POST /transfers";

type Res<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

/// Latencies of one phase, and the DynamoDB requests it sent (per operation).
#[derive(Debug, Clone, Default)]
struct Phase {
    lat_ms: Vec<f64>,
    requests: BTreeMap<String, usize>,
    wall_s: f64,
}

impl Phase {
    fn n(&self) -> usize {
        self.lat_ms.len()
    }
    fn total_requests(&self) -> usize {
        self.requests.values().sum()
    }
    fn per_request(&self) -> f64 {
        self.total_requests() as f64 / self.n().max(1) as f64
    }
    fn ops(&self) -> String {
        self.requests
            .iter()
            .map(|(op, n)| format!("{op} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    // Nearest rank.
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn stats(lat: &[f64]) -> (f64, f64) {
    let mut s = lat.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    (quantile(&s, 0.5), quantile(&s, 0.9))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

// ---------------------------------------------------------------------------------------------
// Part 1, ours: Ledger::transfer (idempotency claim + stored response + money, one transaction)
// ---------------------------------------------------------------------------------------------

struct Ours {
    app: Arc<App>,
    counter: RequestCounter,
    /// One (from, to) pair per worker, so concurrent workers do not conflict on accounts.
    pairs: Vec<(String, String)>,
}

async fn ours_setup(workers: usize) -> Res<Ours> {
    let (ddb, counter) = dynamo::client();
    let (direct, _) = dynamo::client();
    let tables = Tables::create(&direct).await;
    let env = Env::from_pairs(tables.env_pairs());
    let clock: SharedClock = Arc::new(SystemClock);
    let app = App::from_env(&env, ddb, None, clock)?;
    let mut pairs = Vec::new();
    for _ in 0..workers {
        let from = app
            .ledger
            .create_account(CLIENT_ID, 1_000_000_000, "JPY")
            .await?;
        let to = app.ledger.create_account(CLIENT_ID, 0, "JPY").await?;
        pairs.push((from.account_id, to.account_id));
    }
    Ok(Ours {
        app: Arc::new(app),
        counter,
        pairs,
    })
}

/// One `POST /transfers` as the function does it after authentication: parse, scope,
/// fingerprint, `Ledger::transfer`. Returns the status.
async fn ours_one(app: &App, key: &str, body: &str) -> u16 {
    let req = TransferRequest::parse(body.as_bytes(), u64::MAX).expect("valid body");
    let key = IdempotencyKey::parse(Some(key.as_bytes())).expect("valid key");
    let scope = Scope::new(CLIENT_ID, ROUTE, &key);
    let fp = fingerprint(&req.canonical);
    match app
        .ledger
        .transfer(CLIENT_ID, &scope, &fp, &req, "bench")
        .await
    {
        Ok(resp) => resp.status().as_u16(),
        Err(e) => {
            eprintln!("transfer failed: {e:?}");
            0
        }
    }
}

fn body(from: &str, to: &str) -> String {
    serde_json::json!({"from": from, "to": to, "amount": 1, "memo": "bench"}).to_string()
}

/// `n` requests over `workers` workers (each sequential); keys `prefix-<worker>-<i>`.
async fn ours_phase(o: &Ours, prefix: &str, n: usize, workers: usize, expect: u16) -> Phase {
    o.counter.reset();
    let started = Instant::now();
    let mut handles = Vec::new();
    for w in 0..workers {
        let app = o.app.clone();
        let (from, to) = o.pairs[w].clone();
        let prefix = prefix.to_string();
        let share = n / workers + usize::from(w < n % workers);
        handles.push(tokio::spawn(async move {
            let body = body(&from, &to);
            let mut lat = Vec::with_capacity(share);
            let mut bad = 0;
            for i in 0..share {
                let key = format!("{prefix}-{w}-{i}");
                let t = Instant::now();
                let status = ours_one(&app, &key, &body).await;
                lat.push(ms(t.elapsed()));
                bad += usize::from(status != expect);
            }
            (lat, bad)
        }));
    }
    let mut phase = Phase::default();
    let mut bad = 0;
    for h in handles {
        let (lat, b) = h.await.expect("worker");
        phase.lat_ms.extend(lat);
        bad += b;
    }
    phase.wall_s = started.elapsed().as_secs_f64();
    phase.requests = o.counter.snapshot().into_iter().collect();
    assert_eq!(bad, 0, "{bad} requests of {prefix} did not answer {expect}");
    phase
}

async fn ours_part1(n: usize) -> Res<BTreeMap<usize, (Phase, Phase)>> {
    let mut out = BTreeMap::new();
    for c in CONCURRENCY {
        let o = ours_setup(c).await?;
        // Warm-up (connections, currency cache), not measured.
        ours_phase(&o, "warm", WARMUP.max(c), c, 201).await;
        let new = ours_phase(&o, "k", n, c, 201).await;
        let dup = ours_phase(&o, "k", n, c, 201).await;
        println!(
            "ours c={c}: new {:.2} req/op median {:.2} ms; dup {:.2} req/op median {:.2} ms",
            new.per_request(),
            stats(&new.lat_ms).0,
            dup.per_request(),
            stats(&dup.lat_ms).0
        );
        out.insert(c, (new, dup));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Part 1, Powertools: bench/powertools_transfer.py, same DynamoDB Local, same N and concurrency
// ---------------------------------------------------------------------------------------------

struct Powertools {
    versions: BTreeMap<String, String>,
    results: BTreeMap<usize, (Phase, Phase)>,
}

fn phase_from_json(v: &Value) -> Phase {
    Phase {
        lat_ms: v["lat_ms"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default(),
        requests: v["requests"]
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0) as usize))
                    .collect()
            })
            .unwrap_or_default(),
        wall_s: v["wall_s"].as_f64().unwrap_or(f64::NAN),
    }
}

fn powertools_part1(n: usize) -> Res<Powertools> {
    let python = std::env::var("BENCH_PYTHON").map_err(|_| "BENCH_PYTHON is not set")?;
    let script = std::env::var("BENCH_SCRIPT").map_err(|_| "BENCH_SCRIPT is not set")?;
    let out = std::env::temp_dir().join(format!("tollgate-bench-{}.json", std::process::id()));
    let status = std::process::Command::new(python)
        .arg(script)
        .args(["--endpoint", &dynamo::endpoint()])
        .args(["--n", &n.to_string()])
        .args(["--warmup", &WARMUP.to_string()])
        .args([
            "--concurrency",
            &CONCURRENCY.map(|c| c.to_string()).join(","),
        ])
        .arg("--out")
        .arg(&out)
        .status()?;
    if !status.success() {
        return Err(format!("the Powertools script failed ({status})").into());
    }
    let v: Value = serde_json::from_slice(&std::fs::read(&out)?)?;
    let _ = std::fs::remove_file(&out);
    let versions = v["versions"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("?").to_string()))
                .collect()
        })
        .unwrap_or_default();
    let mut results = BTreeMap::new();
    for c in CONCURRENCY {
        let r = &v["results"][c.to_string()];
        results.insert(c, (phase_from_json(&r["new"]), phase_from_json(&r["dup"])));
    }
    Ok(Powertools { versions, results })
}

// ---------------------------------------------------------------------------------------------
// Part 2: the limiter against a bare conditional UpdateItem from the same client
// ---------------------------------------------------------------------------------------------

struct Part2 {
    n: usize,
    limiter_ms: Vec<f64>,
    bare_ms: Vec<f64>,
    rejections: usize,
    per_rejection: Vec<Rejections>,
}

/// Checks of a full key through one limiter.
struct Rejections {
    /// Block cache capacity (0: off).
    capacity: usize,
    /// DynamoDB requests for all the checks.
    requests: usize,
    /// ... of which for the first check.
    first: usize,
    rejected: usize,
    admitted: usize,
}

/// Exactly the limiter's increment, without the limiter around it.
async fn bare_update(ddb: &Client, table: &str, pk: &str, limit: u32, expires: u64) -> bool {
    let r = ddb
        .update_item()
        .table_name(table)
        .key("pk", AttributeValue::S(pk.to_string()))
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
        .await;
    r.is_ok()
}

async fn part2(n: usize) -> Res<Part2> {
    let (ddb, counter) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let big = RateLimit::new(Layer::Client, 100_000_000, Duration::from_secs(3600))?;
    let limiter = RateLimiter::new(ddb.clone(), &tables.rate_limits, "bench", clock.clone())
        .with_block_cache(10_000, DEFAULT_BLOCK_CACHE_MAX_AGE);
    let expires = clock.now_ms() / 1000 + 3600;

    // Warm-up, both paths.
    for _ in 0..WARMUP {
        let mut a = Admission::default();
        limiter
            .check(
                &mut a,
                &[LimitCheck {
                    limit: &big,
                    key: "k",
                }],
            )
            .await?;
        bare_update(&ddb, &tables.rate_limits, "bare", 100_000_000, expires).await;
    }
    let mut limiter_ms = Vec::with_capacity(n);
    let mut bare_ms = Vec::with_capacity(n);
    for i in 0..n {
        // Alternate which goes first, so drift and caching hit both alike.
        for first in [i % 2 == 0, i % 2 != 0] {
            if first {
                let mut a = Admission::default();
                let t = Instant::now();
                let v = limiter
                    .check(
                        &mut a,
                        &[LimitCheck {
                            limit: &big,
                            key: "k",
                        }],
                    )
                    .await?;
                limiter_ms.push(ms(t.elapsed()));
                assert_eq!(v, Verdict::Admitted);
            } else {
                let t = Instant::now();
                let ok = bare_update(&ddb, &tables.rate_limits, "bare", 100_000_000, expires).await;
                bare_ms.push(ms(t.elapsed()));
                assert!(ok);
            }
        }
    }

    // Requests per rejection against a full key, block cache on and off.
    let rejections = n;
    let small = RateLimit::new(Layer::Ip, 5, Duration::from_secs(3600))?;
    let mut per_rejection = Vec::new();
    for capacity in [10_000, 0] {
        let limiter = RateLimiter::new(ddb.clone(), &tables.rate_limits, "bench", clock.clone())
            .with_block_cache(capacity, DEFAULT_BLOCK_CACHE_MAX_AGE);
        let key = format!("full-{capacity}");
        let checks = [LimitCheck {
            limit: &small,
            key: &key,
        }];
        for _ in 0..small.limit() {
            let mut a = Admission::default();
            limiter.check(&mut a, &checks).await?;
        }
        counter.reset();
        let (mut rejected, mut admitted, mut first) = (0, 0, 0);
        for i in 0..rejections {
            let mut a = Admission::default();
            match limiter.check(&mut a, &checks).await? {
                Verdict::Admitted => admitted += 1,
                Verdict::Rejected(_) => rejected += 1,
            }
            if i == 0 {
                first = counter.total();
            }
        }
        per_rejection.push(Rejections {
            capacity,
            requests: counter.total(),
            first,
            rejected,
            admitted,
        });
    }
    Ok(Part2 {
        n,
        limiter_ms,
        bare_ms,
        rejections,
        per_rejection,
    })
}

// ---------------------------------------------------------------------------------------------
// The machine, and the report
// ---------------------------------------------------------------------------------------------

fn machine() -> Vec<(String, String)> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| format!("{:.1} GiB", kb / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    vec![
        ("CPUs available (nproc)".into(), cores),
        ("CPU model".into(), cpu),
        ("memory".into(), mem),
        ("Linux kernel".into(), kernel),
    ]
}

fn f2(x: f64) -> String {
    format!("{x:.2}")
}

fn report(
    n: usize,
    ours: &BTreeMap<usize, (Phase, Phase)>,
    pt: &Powertools,
    p2: &Part2,
    date: &str,
) -> String {
    let mut r = String::new();
    let w = &mut r;
    let _ = writeln!(w, "# Benchmarks\n");
    let _ = writeln!(
        w,
        "Written by `cargo xtask bench` on {date}: every number below comes from that one run, \
         {}. Latencies are per request, measured by the caller around the whole operation, in \
         milliseconds; medians and ratios matter, not absolute times (DynamoDB Local on a \
         shared machine is not DynamoDB).\n",
        env_or(
            "BENCH_ORDER",
            "on one DynamoDB Local, in the order part 1 (Tollgate, then Powertools), then part 2"
        )
    );
    let _ = writeln!(w, "## Machine and versions\n");
    let _ = writeln!(w, "| | |\n|---|---|");
    for (k, v) in machine() {
        let _ = writeln!(w, "| {k} | {v} |");
    }
    for (label, var) in [
        ("rustc", "BENCH_MACHINE_RUSTC"),
        ("cargo profile", "BENCH_MACHINE_PROFILE"),
        ("DynamoDB Local", "BENCH_MACHINE_DYNAMODB_LOCAL"),
        ("Java", "BENCH_MACHINE_JAVA"),
    ] {
        let _ = writeln!(w, "| {label} | {} |", env_or(var, "unknown"));
    }
    for (k, v) in &pt.versions {
        let _ = writeln!(w, "| {k} | {v} |");
    }
    let _ = writeln!(
        w,
        "\nReproduce: `{}`\n",
        env_or("BENCH_MACHINE_COMMAND", "cargo xtask bench")
    );

    let _ = writeln!(
        w,
        "## 1. Idempotency: Tollgate against Powertools for Python\n"
    );
    let _ = writeln!(
        w,
        "The same logical work on both sides: a transfer of 1 JPY under a new idempotency key \
         (claim, the business write, the stored response), then the very same request again \
         (a duplicate, answered from the stored response). The business write is one \
         `TransactWriteItems`: debit (conditioned on existence, owner, currency and balance), \
         credit, transfer record.\n\n\
         - **Tollgate**: `transfer::ledger::Ledger::transfer`, preceded by body parsing, key \
           parsing and the RFC 8785 SHA-256 fingerprint, in a Tokio runtime \
           (multi-threaded, default workers); the claim, response, debit, credit and record are \
           one transaction.\n\
         - **Powertools**: `bench/powertools_transfer.py`, a function decorated with \
           `@idempotent_function` (`DynamoDBPersistenceLayer`, payload validation on the body, \
           SHA-256, no local cache) doing the same `TransactWriteItems` through boto3; workers \
           are threads sharing one boto3 client.\n\n\
         {n} new requests and {n} duplicates per concurrency level; at concurrency 16 the \
         requests are split over 16 workers, each with its own pair of accounts (no \
         transaction conflicts), each issuing its share sequentially. {WARMUP} \
         warm-up transfers first, not measured. DynamoDB requests are counted per HTTP \
         attempt, by an SDK interceptor (Rust) and a botocore `before-send` hook (Python), so \
         retries would count too.\n"
    );
    let _ = writeln!(w, "### DynamoDB requests per request\n");
    let _ = writeln!(
        w,
        "| concurrency | side | per new request | per duplicate | new: operations | duplicates: operations |\n|---|---|---|---|---|---|"
    );
    for c in CONCURRENCY {
        for (side, res) in [("Tollgate", ours), ("Powertools", &pt.results)] {
            let (new, dup) = &res[&c];
            let _ = writeln!(
                w,
                "| {c} | {side} | {} | {} | {} | {} |",
                f2(new.per_request()),
                f2(dup.per_request()),
                new.ops(),
                dup.ops()
            );
        }
    }
    let _ = writeln!(w, "\n### Latency per request (ms)\n");
    let _ = writeln!(
        w,
        "| concurrency | phase | Tollgate median | Tollgate p90 | Powertools median | Powertools p90 | median ratio Tollgate / Powertools | throughput Tollgate / Powertools (req/s) |\n|---|---|---|---|---|---|---|---|"
    );
    for c in CONCURRENCY {
        for (phase, idx) in [("new", 0), ("duplicate", 1)] {
            let o = if idx == 0 { &ours[&c].0 } else { &ours[&c].1 };
            let p = if idx == 0 {
                &pt.results[&c].0
            } else {
                &pt.results[&c].1
            };
            let (om, o90) = stats(&o.lat_ms);
            let (pm, p90) = stats(&p.lat_ms);
            let _ = writeln!(
                w,
                "| {c} | {phase} | {} | {} | {} | {} | {} | {:.0} / {:.0} |",
                f2(om),
                f2(o90),
                f2(pm),
                f2(p90),
                f2(om / pm),
                o.n() as f64 / o.wall_s,
                p.n() as f64 / p.wall_s
            );
        }
    }

    let _ = writeln!(
        w,
        "\nHow each side answers (from the operation counts above): a Tollgate duplicate is the \
         whole `TransactWriteItems` sent again and cancelled by the claim's condition, whose \
         cancellation reason carries the stored response; a Powertools duplicate is its \
         conditional `PutItem` of the in-progress record, failing and returning the stored \
         record. A Powertools new request is that `PutItem`, then the business transaction, \
         then an `UpdateItem` storing the result: three round trips, with the idempotency \
         record outside the transaction that moves the money. At concurrency 16 the client \
         and DynamoDB Local share the same CPUs, so those latencies are mostly queueing; the \
         throughput column is requests over the phase's wall-clock time."
    );
    let _ = writeln!(
        w,
        "\n## 2. The limiter against a bare conditional `UpdateItem`\n"
    );
    let (lm, l90) = stats(&p2.limiter_ms);
    let (bm, b90) = stats(&p2.bare_ms);
    let _ = writeln!(
        w,
        "`RateLimiter::check` with one layer (limit far above the calls, so every call is one \
         admitted increment) against `update_item` with the limiter's exact update and \
         condition expressions, attribute names and values and return-value settings, from \
         the same `aws_sdk_dynamodb::Client`, {n} sequential calls each, alternating which \
         goes first in each pair; {WARMUP} warm-up calls each first.\n",
        n = p2.n
    );
    let _ = writeln!(
        w,
        "| | median (ms) | p90 (ms) |\n|---|---|---|\n| `RateLimiter::check`, one layer | {} | {} |\n| bare conditional `UpdateItem` | {} | {} |\n| **ratio** | **{}×** | {}× |\n",
        f2(lm),
        f2(l90),
        f2(bm),
        f2(b90),
        format_args!("{:.3}", lm / bm),
        format_args!("{:.3}", l90 / b90)
    );
    let _ = writeln!(
        w,
        "Requests per rejection: a key with a limit of 5 per hour, filled with 5 admitted \
         checks, then {} more checks of the same key through the same limiter; DynamoDB \
         requests counted by the interceptor for those checks only.\n",
        p2.rejections
    );
    let _ = writeln!(
        w,
        "| block cache | checks | rejected | admitted | DynamoDB requests | of which for the first check | per rejection | per rejection after the first |\n|---|---|---|---|---|---|---|---|"
    );
    for r in &p2.per_rejection {
        let label = if r.capacity == 0 {
            "off (capacity 0)".to_string()
        } else {
            format!("on (capacity {}, 5 s)", r.capacity)
        };
        let _ = writeln!(
            w,
            "| {label} | {} | {} | {} | {} | {} | {:.3} | {:.3} |",
            p2.rejections,
            r.rejected,
            r.admitted,
            r.requests,
            r.first,
            r.requests as f64 / r.rejected.max(1) as f64,
            (r.requests - r.first) as f64 / r.rejected.saturating_sub(1).max(1) as f64
        );
    }

    let _ = writeln!(w, "\n## Goals\n");
    let mut goals = Vec::new();
    for c in CONCURRENCY {
        let (on, od) = &ours[&c];
        let (pn, pd) = &pt.results[&c];
        let half = on.per_request() <= pn.per_request() / 2.0;
        goals.push(format!(
            "- Concurrency {c}, DynamoDB requests per new request at most half of Powertools': \
             {} ({} against {}).",
            if half { "**met**" } else { "**not met**" },
            f2(on.per_request()),
            f2(pn.per_request())
        ));
        for (phase, o, p) in [("new", on, pn), ("duplicate", od, pd)] {
            let (om, pm) = (stats(&o.lat_ms).0, stats(&p.lat_ms).0);
            goals.push(format!(
                "- Concurrency {c}, lower median latency per {phase} request: {} ({} ms against {} ms).",
                if om < pm { "**met**" } else { "**not met**" },
                f2(om),
                f2(pm)
            ));
        }
        goals.push(format!(
            "- Concurrency {c}, DynamoDB requests per duplicate (no goal set): {} against {}.",
            f2(od.per_request()),
            f2(pd.per_request())
        ));
    }
    let ratio = lm / bm;
    goals.push(format!(
        "- Limiter overhead at most 1.1× a bare conditional `UpdateItem` (medians): {} ({:.3}×).",
        if ratio <= 1.1 {
            "**met**"
        } else {
            "**not met**"
        },
        ratio
    ));
    if let Some(r) = p2.per_rejection.iter().find(|r| r.capacity != 0) {
        let later = r.requests - r.first;
        goals.push(format!(
            "- 0 DynamoDB requests per rejection with the block cache: {} (DynamoDB requests: {} for {} \
             rejections: {} for the first, which is the one that finds the key full in DynamoDB \
             and fills the cache, and {later} for the {} after it).",
            if r.requests == 0 {
                "**met**"
            } else if later == 0 {
                "**met for every rejection after the first**, not for the first"
            } else {
                "**not met**"
            },
            r.requests,
            r.rejected,
            r.first,
            r.rejected.saturating_sub(1)
        ));
    }
    for g in goals {
        let _ = writeln!(w, "{g}");
    }
    r
}

fn main() -> Res {
    let n: usize = env_or("BENCH_N", "400").parse()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!("part 1: Tollgate, {n} new + {n} duplicates per concurrency level");
    let ours = rt.block_on(ours_part1(n))?;
    println!("part 1: Powertools for Python");
    let pt = powertools_part1(n)?;
    println!("part 2: limiter vs bare UpdateItem, {n} calls each");
    let p2 = rt.block_on(part2(n))?;
    let date = env_or("BENCH_DATE", "an unrecorded date");
    let text = report(n, &ours, &pt, &p2, &date);
    println!("\n{text}");
    if let Ok(path) = std::env::var("BENCH_REPORT") {
        std::fs::write(&path, &text)?;
        println!("report written to {path}");
    }
    Ok(())
}
