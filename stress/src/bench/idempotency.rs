//! Part 1: Tollgate's idempotency against AWS Lambda Powertools for Python.
//!
//! The same logical work on both sides, on the same DynamoDB Local: a transfer under a new key,
//! then the very same request again. Ours is `Ledger::transfer` (claim, stored response and
//! money in one `TransactWriteItems`), driven in process after the parsing and fingerprinting
//! the function does; theirs is `bench/powertools_transfer.py` (`@idempotent_function` over the
//! same transaction through boto3), run in its venv with the same counts and concurrency
//! levels. Both sides hand back raw latencies, per-operation request counts and the capacity
//! DynamoDB reported, summarised and billed here by the same code ([`Phase::figures`]).
//!
//! Everything runs twice, in [`MODES`]: both sides without a local cache of completed
//! responses (Tollgate's `IDEMPOTENCY_CACHE_SIZE=0`, Powertools' `use_local_cache=False`), then
//! both with one of the same capacity (Tollgate's default, and Powertools' local cache given
//! that many entries). The transfer `App` is built from an environment that always states its
//! cache size, so a mode never depends on a default.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use serde::{Deserialize, Serialize};
use tollgate::clock::{SharedClock, SystemClock};
use tollgate::config::Env;
use tollgate::idempotency::{fingerprint, IdempotencyKey, Scope, DEFAULT_REPLAY_CACHE_SIZE};
use tollgate_functions::serve::{Function, REPLAY_CACHE_SIZE_VAR};
use tollgate_tests::capacity::{CapacityMeter, OpCapacity};
use tollgate_tests::counting::RequestCounter;
use tollgate_tests::dynamo::{self, Tables};
use transfer::domain::TransferRequest;
use transfer::App;

use super::capacity::{self, CapacityFigures};
use super::stats::{ms, Quantiles};
use super::{BenchError, WARMUP};

/// Local caches of completed responses, per mode: off on both sides, then on with Tollgate's
/// default capacity on both.
pub const MODES: [usize; 2] = [0, DEFAULT_REPLAY_CACHE_SIZE];

/// Concurrency levels: one caller, and as many as a small Lambda fleet would be.
pub const CONCURRENCY: [usize; 2] = [1, 16];
const CLIENT_ID: &str = "cl_bench";
const ROUTE: &str = "POST /transfers";

/// Latencies of one phase, the DynamoDB requests it sent and the capacity DynamoDB reported,
/// per operation.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Phase {
    lat_ms: Vec<f64>,
    requests: BTreeMap<String, usize>,
    #[serde(default)]
    capacity: BTreeMap<String, OpCapacity>,
    wall_s: f64,
}

/// What the report shows of a phase.
#[derive(Debug, Serialize)]
pub struct PhaseFigures {
    pub requests_per_call: f64,
    /// `(operation, requests)`, by name.
    pub operations: Vec<(String, usize)>,
    pub latency: Quantiles,
    /// Calls over the phase's wall-clock time.
    pub throughput: f64,
    pub capacity: CapacityFigures,
}

impl Phase {
    /// `reference`: a phase that wrote the same items successfully (capacity rule 2).
    fn figures(&self, reference: &Phase) -> PhaseFigures {
        let calls = self.lat_ms.len();
        PhaseFigures {
            requests_per_call: self.requests.values().sum::<usize>() as f64 / calls.max(1) as f64,
            operations: self.requests.clone().into_iter().collect(),
            latency: Quantiles::of(&self.lat_ms),
            throughput: calls as f64 / self.wall_s,
            capacity: capacity::figures(&self.capacity, &reference.capacity, calls),
        }
    }
}

/// One side at one concurrency level.
#[derive(Debug, Serialize)]
pub struct Side {
    pub new: PhaseFigures,
    pub duplicate: PhaseFigures,
}

/// Both sides at one concurrency level, and how they compare.
#[derive(Debug, Serialize)]
pub struct Level {
    pub concurrency: usize,
    pub tollgate: Side,
    pub powertools: Side,
    /// Goal: at most half of Powertools' DynamoDB requests per new request.
    pub half_the_requests: bool,
    /// Goals: a lower median latency, per new and per duplicate request (the duplicate's only
    /// with local caches).
    pub faster_new: bool,
    pub faster_duplicate: bool,
    /// Median latency, Tollgate over Powertools.
    pub ratio_new: f64,
    pub ratio_duplicate: f64,
    /// Goal: at most Powertools' billed capacity (read plus write units) per new request.
    pub capacity_new_at_most: bool,
}

/// Both sides at every level, with local caches of one capacity or without.
#[derive(Debug, Serialize)]
pub struct Mode {
    /// Entries of Tollgate's replay cache and of Powertools' local cache (0: both off).
    pub cache: usize,
    pub levels: Vec<Level>,
}

/// What DynamoDB Local reports for transactions, from a probe on a table of its own: one
/// small `PutItem`, and transactions of one and of four small `Put`s (capacity rule 3).
#[derive(Debug, Serialize)]
pub struct Probe {
    pub put: f64,
    pub transaction_one: f64,
    pub transaction_four: f64,
}

/// Part 1's figures.
#[derive(Debug, Serialize)]
pub struct Idempotency {
    pub n: usize,
    pub warmup: usize,
    pub modes: Vec<Mode>,
    pub probe: Probe,
    /// Python, Powertools, boto3 and botocore versions, as the script found them.
    pub versions: BTreeMap<String, String>,
}

impl Idempotency {
    /// The mode with caches off (`false`) or on (`true`).
    pub fn mode(&self, cached: bool) -> Option<&Mode> {
        self.modes.iter().find(|m| (m.cache > 0) == cached)
    }
}

/// Runs both modes; in each, both sides, ours first.
pub async fn run(n: usize, python: &Path, script: &Path) -> Result<Idempotency, BenchError> {
    let probe = probe().await?;
    let mut modes = Vec::new();
    let mut versions = BTreeMap::new();
    for cache in MODES {
        let label = match cache {
            0 => "no local caches".to_string(),
            n => format!("local caches of {n}"),
        };
        let mut ours = BTreeMap::new();
        for c in CONCURRENCY {
            let o = Ours::setup(c, cache).await?;
            // Warm-up (connections, currency cache), not measured.
            o.phase("warm", WARMUP.max(c), c).await?;
            let new = o.phase("k", n, c).await?;
            let dup = o.phase("k", n, c).await?;
            println!(
                "tollgate c={c} ({label}): new median {:.2} ms; duplicate median {:.2} ms",
                Quantiles::of(&new.lat_ms).median,
                Quantiles::of(&dup.lat_ms).median
            );
            ours.insert(c, (new, dup));
        }
        println!("part 1: Powertools for Python ({label})");
        let theirs = powertools(n, python, script, cache)?;
        let mut levels = Vec::new();
        for c in CONCURRENCY {
            let (on, od) = &ours[&c];
            let theirs_c = theirs.results.get(&c.to_string()).ok_or_else(|| {
                BenchError::Powertools(format!(
                    "the script reported no results for concurrency {c}"
                ))
            })?;
            // A duplicate rewrites what the new request wrote: its reference for rule 2.
            let side = |new: &Phase, dup: &Phase| Side {
                new: new.figures(new),
                duplicate: dup.figures(new),
            };
            let (tollgate, powertools) = (side(on, od), side(&theirs_c.new, &theirs_c.dup));
            levels.push(Level {
                concurrency: c,
                half_the_requests: tollgate.new.requests_per_call
                    <= powertools.new.requests_per_call / 2.0,
                faster_new: tollgate.new.latency.median < powertools.new.latency.median,
                faster_duplicate: tollgate.duplicate.latency.median
                    < powertools.duplicate.latency.median,
                ratio_new: tollgate.new.latency.median / powertools.new.latency.median,
                ratio_duplicate: tollgate.duplicate.latency.median
                    / powertools.duplicate.latency.median,
                capacity_new_at_most: tollgate.new.capacity.billed.total()
                    <= powertools.new.capacity.billed.total(),
                tollgate,
                powertools,
            });
        }
        versions = theirs.versions;
        modes.push(Mode { cache, levels });
    }
    Ok(Idempotency {
        n,
        warmup: WARMUP,
        modes,
        probe,
        versions,
    })
}

/// What DynamoDB Local reports for a small `PutItem` and for transactions of one and of four
/// such items, on a table of its own.
async fn probe() -> Result<Probe, BenchError> {
    let (ddb, _, meter) = dynamo::metered_client();
    let table = format!("{}-probe", dynamo::unique_prefix());
    dynamo::create_pk_table(&ddb, &table).await;
    let failed = |e| BenchError::Setup(format!("the capacity probe: {e}"));
    let item = |pk: String| -> Result<Put, BenchError> {
        Put::builder()
            .table_name(&table)
            .item("pk", AttributeValue::S(pk))
            .build()
            .map_err(|e| failed(e.to_string()))
    };
    let units =
        |ops: BTreeMap<String, OpCapacity>, op: &str| ops.get(op).map_or(0.0, |c| c.write_units);
    meter.reset();
    ddb.put_item()
        .table_name(&table)
        .item("pk", AttributeValue::S("put".into()))
        .send()
        .await
        .map_err(|e| failed(e.to_string()))?;
    let put = units(meter.take(), "PutItem");
    let mut transactions = Vec::new();
    for size in [1, 4] {
        let mut request = ddb.transact_write_items();
        for i in 0..size {
            let put = item(format!("t{size}-{i}"))?;
            request = request.transact_items(TransactWriteItem::builder().put(put).build());
        }
        request.send().await.map_err(|e| failed(e.to_string()))?;
        transactions.push(units(meter.take(), "TransactWriteItems"));
    }
    Ok(Probe {
        put,
        transaction_one: transactions[0],
        transaction_four: transactions[1],
    })
}

/// Our side: the transfer function's `App` over tables of its own.
struct Ours {
    app: Arc<App>,
    counter: RequestCounter,
    meter: CapacityMeter,
    /// One (from, to) pair per worker, so concurrent workers do not conflict on accounts.
    pairs: Vec<(String, String)>,
}

impl Ours {
    /// `cache`: the replay cache's capacity, always set explicitly (0: off).
    async fn setup(workers: usize, cache: usize) -> Result<Self, BenchError> {
        let (ddb, counter, meter) = dynamo::metered_client();
        let (direct, _) = dynamo::client();
        let tables = Tables::create(&direct).await;
        let mut pairs = tables.env_pairs();
        pairs.push((REPLAY_CACHE_SIZE_VAR.to_string(), cache.to_string()));
        let env = Env::from_pairs(pairs);
        let clock: SharedClock = Arc::new(SystemClock);
        let app = App::from_env(&env, ddb, None, clock)
            .map_err(|e| BenchError::Setup(format!("the transfer app: {e}")))?;
        let mut pairs = Vec::new();
        for _ in 0..workers {
            let account = |balance| {
                let app = &app;
                async move {
                    app.ledger
                        .create_account(CLIENT_ID, balance, "JPY")
                        .await
                        .map(|a| a.account_id)
                        .map_err(|e| BenchError::Setup(format!("an account: {e}")))
                }
            };
            pairs.push((account(1_000_000_000).await?, account(0).await?));
        }
        Ok(Self {
            app: Arc::new(app),
            counter,
            meter,
            pairs,
        })
    }

    /// `n` requests over `workers` workers (each sequential), keys `prefix-<worker>-<i>`; every
    /// one must answer 201 (a replay answers the stored 201).
    async fn phase(&self, prefix: &str, n: usize, workers: usize) -> Result<Phase, BenchError> {
        self.counter.reset();
        self.meter.reset();
        let started = Instant::now();
        let mut handles = Vec::new();
        for (w, (from, to)) in self.pairs.iter().take(workers).enumerate() {
            let app = self.app.clone();
            let body = serde_json::json!({"from": from, "to": to, "amount": 1, "memo": "bench"})
                .to_string();
            let prefix = prefix.to_string();
            let share = n / workers + usize::from(w < n % workers);
            handles.push(tokio::spawn(async move {
                let mut lat = Vec::with_capacity(share);
                let mut wrong = 0;
                for i in 0..share {
                    let key = format!("{prefix}-{w}-{i}");
                    let t = Instant::now();
                    let status = transfer_once(&app, &key, &body).await;
                    lat.push(ms(t.elapsed()));
                    wrong += usize::from(status != Some(201));
                }
                (lat, wrong)
            }));
        }
        let mut phase = Phase::default();
        let mut wrong = 0;
        for h in handles {
            let (lat, w) = h
                .await
                .map_err(|e| BenchError::Setup(format!("a worker: {e}")))?;
            phase.lat_ms.extend(lat);
            wrong += w;
        }
        phase.wall_s = started.elapsed().as_secs_f64();
        phase.requests = self.counter.snapshot().into_iter().collect();
        phase.capacity = self.meter.take();
        if wrong > 0 {
            return Err(BenchError::WrongAnswer(format!(
                "{wrong} transfers of phase {prefix} did not answer 201"
            )));
        }
        Ok(phase)
    }
}

/// One `POST /transfers` as the function does it after authentication: parse, scope,
/// fingerprint, `Ledger::transfer`. The status, or `None` (logged) on an error.
async fn transfer_once(app: &App, key: &str, body: &str) -> Option<u16> {
    let req = TransferRequest::parse(body.as_bytes(), u64::MAX).ok()?;
    let key = IdempotencyKey::parse(Some(key.as_bytes())).ok()?;
    let scope = Scope::new(CLIENT_ID, ROUTE, &key);
    let fp = fingerprint(&req.canonical);
    match app
        .ledger
        .transfer(CLIENT_ID, &scope, &fp, &req, "bench")
        .await
    {
        Ok(resp) => Some(resp.status().as_u16()),
        Err(e) => {
            eprintln!("transfer failed: {e:?}");
            None
        }
    }
}

/// What `bench/powertools_transfer.py` writes.
#[derive(Debug, Deserialize)]
struct PowertoolsRun {
    versions: BTreeMap<String, String>,
    /// By concurrency level, as a string.
    results: BTreeMap<String, PowertoolsLevel>,
}

#[derive(Debug, Deserialize)]
struct PowertoolsLevel {
    new: Phase,
    dup: Phase,
}

/// The script's run with its local cache of `cache` entries (0: off).
fn powertools(
    n: usize,
    python: &Path,
    script: &Path,
    cache: usize,
) -> Result<PowertoolsRun, BenchError> {
    let out = std::env::temp_dir().join(format!(
        "tollgate-bench-{}-{cache}.json",
        std::process::id()
    ));
    let concurrency = CONCURRENCY.map(|c| c.to_string()).join(",");
    let status = Command::new(python)
        .arg(script)
        .args(["--endpoint", &dynamo::endpoint()])
        .args(["--n", &n.to_string()])
        .args(["--warmup", &WARMUP.to_string()])
        .args(["--concurrency", &concurrency])
        .args(["--local-cache-size", &cache.to_string()])
        .arg("--out")
        .arg(&out)
        .status()
        .map_err(|e| {
            BenchError::Powertools(format!("could not start {}: {e}", python.display()))
        })?;
    if !status.success() {
        return Err(BenchError::Powertools(format!(
            "the script failed ({status})"
        )));
    }
    let text = std::fs::read(&out)
        .map_err(|e| BenchError::Powertools(format!("no results in {}: {e}", out.display())))?;
    let _ = std::fs::remove_file(&out);
    serde_json::from_slice(&text)
        .map_err(|e| BenchError::Powertools(format!("unreadable results: {e}")))
}
