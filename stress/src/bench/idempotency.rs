//! Part 1: Tollgate's idempotency against AWS Lambda Powertools for Python.
//!
//! The same logical work on both sides, on the same DynamoDB Local: a transfer under a new key,
//! then the very same request again. Ours is `Ledger::transfer` (claim, stored response and
//! money in one `TransactWriteItems`), driven in process after the parsing and fingerprinting
//! the function does; theirs is `bench/powertools_transfer.py` (`@idempotent_function` over the
//! same transaction through boto3), run in its venv with the same counts and concurrency
//! levels. Both sides hand back raw latencies and per-operation request counts, summarised
//! here by the same code ([`Phase::figures`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tollgate::clock::{SharedClock, SystemClock};
use tollgate::config::Env;
use tollgate::idempotency::{fingerprint, IdempotencyKey, Scope};
use tollgate::serve::Function;
use tollgate_tests::counting::RequestCounter;
use tollgate_tests::dynamo::{self, Tables};
use transfer::domain::TransferRequest;
use transfer::App;

use super::stats::{ms, Quantiles};
use super::{BenchError, WARMUP};

/// Concurrency levels: one caller, and as many as a small Lambda fleet would be.
pub const CONCURRENCY: [usize; 2] = [1, 16];
const CLIENT_ID: &str = "cl_bench";
const ROUTE: &str = "POST /transfers";

/// Latencies of one phase and the DynamoDB requests it sent, per operation.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Phase {
    lat_ms: Vec<f64>,
    requests: BTreeMap<String, usize>,
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
}

impl Phase {
    fn figures(&self) -> PhaseFigures {
        let calls = self.lat_ms.len();
        PhaseFigures {
            requests_per_call: self.requests.values().sum::<usize>() as f64 / calls.max(1) as f64,
            operations: self.requests.clone().into_iter().collect(),
            latency: Quantiles::of(&self.lat_ms),
            throughput: calls as f64 / self.wall_s,
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
    /// Goals: a lower median latency, per new and per duplicate request.
    pub faster_new: bool,
    pub faster_duplicate: bool,
    /// Median latency, Tollgate over Powertools.
    pub ratio_new: f64,
    pub ratio_duplicate: f64,
}

/// Part 1's figures.
#[derive(Debug, Serialize)]
pub struct Idempotency {
    pub n: usize,
    pub warmup: usize,
    pub levels: Vec<Level>,
    /// Python, Powertools, boto3 and botocore versions, as the script found them.
    pub versions: BTreeMap<String, String>,
}

/// Runs both sides, ours first.
pub async fn run(n: usize, python: &Path, script: &Path) -> Result<Idempotency, BenchError> {
    let mut ours = BTreeMap::new();
    for c in CONCURRENCY {
        let o = Ours::setup(c).await?;
        // Warm-up (connections, currency cache), not measured.
        o.phase("warm", WARMUP.max(c), c).await?;
        let new = o.phase("k", n, c).await?;
        let dup = o.phase("k", n, c).await?;
        println!(
            "tollgate c={c}: new median {:.2} ms; duplicate median {:.2} ms",
            Quantiles::of(&new.lat_ms).median,
            Quantiles::of(&dup.lat_ms).median
        );
        ours.insert(c, (new, dup));
    }
    println!("part 1: Powertools for Python");
    let theirs = powertools(n, python, script)?;
    let mut levels = Vec::new();
    for c in CONCURRENCY {
        let (on, od) = &ours[&c];
        let theirs_c = theirs.results.get(&c.to_string()).ok_or_else(|| {
            BenchError::Powertools(format!(
                "the script reported no results for concurrency {c}"
            ))
        })?;
        let side = |new: &Phase, dup: &Phase| Side {
            new: new.figures(),
            duplicate: dup.figures(),
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
            tollgate,
            powertools,
        });
    }
    Ok(Idempotency {
        n,
        warmup: WARMUP,
        levels,
        versions: theirs.versions,
    })
}

/// Our side: the transfer function's `App` over tables of its own.
struct Ours {
    app: Arc<App>,
    counter: RequestCounter,
    /// One (from, to) pair per worker, so concurrent workers do not conflict on accounts.
    pairs: Vec<(String, String)>,
}

impl Ours {
    async fn setup(workers: usize) -> Result<Self, BenchError> {
        let (ddb, counter) = dynamo::client();
        let (direct, _) = dynamo::client();
        let tables = Tables::create(&direct).await;
        let env = Env::from_pairs(tables.env_pairs());
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
            pairs,
        })
    }

    /// `n` requests over `workers` workers (each sequential), keys `prefix-<worker>-<i>`; every
    /// one must answer 201 (a replay answers the stored 201).
    async fn phase(&self, prefix: &str, n: usize, workers: usize) -> Result<Phase, BenchError> {
        self.counter.reset();
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

fn powertools(n: usize, python: &Path, script: &Path) -> Result<PowertoolsRun, BenchError> {
    let out = std::env::temp_dir().join(format!("tollgate-bench-{}.json", std::process::id()));
    let concurrency = CONCURRENCY.map(|c| c.to_string()).join(",");
    let status = Command::new(python)
        .arg(script)
        .args(["--endpoint", &dynamo::endpoint()])
        .args(["--n", &n.to_string()])
        .args(["--warmup", &WARMUP.to_string()])
        .args(["--concurrency", &concurrency])
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
