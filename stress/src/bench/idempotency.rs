//! Part 1: Tollgate's idempotency against AWS Lambda Powertools for Python, the same work on the
//! same DynamoDB Local: ours is `Ledger::transfer` driven in process after the function's
//! parsing; theirs is `bench/powertools_transfer.py` (`@idempotent_function` over the same
//! transaction through boto3), one long-lived process taking one command per line, so a block of
//! theirs costs no interpreter start and the driver decides the order ([`super::blocks`]). Both
//! hand back latencies, requests and capacity, summarised and billed by the same code, without
//! and with local caches of one capacity ([`MODES`]; the cache size is always set explicitly).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Instant;

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tollgate::config::Env;
use tollgate::idempotency::DEFAULT_REPLAY_CACHE_SIZE;
use tollgate_functions::serve::REPLAY_CACHE_SIZE_VAR;
use tollgate_tests::capacity::{CapacityMeter, OpCapacity};
use tollgate_tests::counting::RequestCounter;
use tollgate_tests::dynamo::{self, Tables};
use transfer::App;

use super::blocks::{schedule, Blocks, ByOrder, Phase, PhaseFigures, Which, BLOCKS};
use super::stats::ms;
use super::transfer_app;
use super::{BenchError, WARMUP};

/// Local caches of completed responses, per mode: off on both sides, then on with Tollgate's
/// default capacity on both.
pub const MODES: [usize; 2] = [0, DEFAULT_REPLAY_CACHE_SIZE];

/// Concurrency levels: one caller, and as many as a small Lambda fleet would be.
pub const CONCURRENCY: [usize; 2] = [1, 16];
const CLIENT_ID: &str = "cl_bench";

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
    /// The medians over the pairs of blocks where Tollgate ran first (`a_first`) and over
    /// those where Powertools did (`b_first`), per phase.
    pub order_new: ByOrder,
    pub order_duplicate: ByOrder,
    /// Goal: at most Powertools' billed capacity (read plus write units) per new request.
    pub capacity_new_at_most: bool,
}

impl Level {
    fn new(concurrency: usize, new: &Blocks, dup: &Blocks) -> Self {
        // A duplicate rewrites what the new request wrote: its reference for rule 2.
        let side = |which| {
            let (new, dup) = (new.side(which), dup.side(which));
            Side {
                new: new.figures(&new),
                duplicate: dup.figures(&new),
            }
        };
        let (tollgate, powertools) = (side(Which::A), side(Which::B));
        Level {
            concurrency,
            half_the_requests: tollgate.new.requests_per_call
                <= powertools.new.requests_per_call / 2.0,
            faster_new: tollgate.new.latency.median < powertools.new.latency.median,
            faster_duplicate: tollgate.duplicate.latency.median
                < powertools.duplicate.latency.median,
            ratio_new: tollgate.new.latency.median / powertools.new.latency.median,
            ratio_duplicate: tollgate.duplicate.latency.median
                / powertools.duplicate.latency.median,
            order_new: new.by_order(),
            order_duplicate: dup.by_order(),
            capacity_new_at_most: tollgate.new.capacity.billed.total()
                <= powertools.new.capacity.billed.total(),
            tollgate,
            powertools,
        }
    }
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
    /// Blocks per side and phase (pairs of one block of each side).
    pub blocks: usize,
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

/// Runs both modes; in each, both sides at each level, in alternating blocks.
pub async fn run(n: usize, python: &Path, script: &Path) -> Result<Idempotency, BenchError> {
    let probe = probe().await?;
    let mut theirs = Powertools::start(python, script).await?;
    let mut modes = Vec::new();
    for cache in MODES {
        let label = match cache {
            0 => "no local caches".to_string(),
            n => format!("local caches of {n}"),
        };
        let mut levels = Vec::new();
        for c in CONCURRENCY {
            let ours = Ours::setup(c, cache).await?;
            let context = theirs.setup(c, cache).await?;
            // Warm-up (connections, currency cache), not measured; ours, then theirs.
            ours.phase("warm", WARMUP.max(c), c).await?;
            theirs.phase(&context, "warm", WARMUP.max(c)).await?;
            // New requests, block by block, then the same keys again: each duplicate block
            // replays the new block of the same index, on its own side.
            let mut phases = Vec::new();
            for _ in ["new", "duplicate"] {
                let mut blocks = Blocks::default();
                for block in schedule(n, BLOCKS) {
                    let tag = format!("k{}", block.index);
                    let phase = match block.side {
                        Which::A => ours.phase(&tag, block.len, c).await?,
                        Which::B => theirs.phase(&context, &tag, block.len).await?,
                    };
                    blocks.push(block, phase);
                }
                phases.push(blocks);
            }
            let level = Level::new(c, &phases[0], &phases[1]);
            println!(
                "part 1, c={c} ({label}): new median {:.2} ms Tollgate, {:.2} ms Powertools; duplicate {:.3} / {:.3} ms; new ratio {:.2} with Tollgate first, {:.2} with Powertools first",
                level.tollgate.new.latency.median,
                level.powertools.new.latency.median,
                level.tollgate.duplicate.latency.median,
                level.powertools.duplicate.latency.median,
                level.order_new.a_first.ratio,
                level.order_new.b_first.ratio,
            );
            levels.push(level);
        }
        modes.push(Mode { cache, levels });
    }
    let versions = theirs.finish().await?;
    Ok(Idempotency {
        n,
        warmup: WARMUP,
        blocks: BLOCKS.min(n),
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
        let app = transfer_app::build(&env, ddb)?;
        let mut pairs = Vec::new();
        for _ in 0..workers {
            let account = |balance| transfer_app::account(&app, CLIENT_ID, balance);
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
                    let status = transfer_app::ledger_transfer(&app, CLIENT_ID, &key, &body).await;
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

/// Their side: `bench/powertools_transfer.py`, one process for the whole part, driven one
/// command per line on its stdin; each answer is one line of JSON on its stdout (its own output
/// goes to stderr). A mode and level is a *context* of the script's: tables, accounts and a
/// decorated function of its own, as [`Ours::setup`] makes ours.
struct Powertools {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    /// What the script found installed, from its first line.
    versions: BTreeMap<String, String>,
}

/// The script's first line.
#[derive(Debug, Deserialize)]
struct Hello {
    versions: BTreeMap<String, String>,
}

impl Powertools {
    async fn start(python: &Path, script: &Path) -> Result<Self, BenchError> {
        let max_workers = CONCURRENCY.iter().max().copied().unwrap_or(1);
        let mut child = tokio::process::Command::new(python)
            .arg(script)
            .args(["--endpoint", &dynamo::endpoint()])
            .args(["--max-workers", &max_workers.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                BenchError::Powertools(format!("could not start {}: {e}", python.display()))
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(BenchError::Powertools("no pipes to the script".into()));
        };
        let mut me = Self {
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
            versions: BTreeMap::new(),
        };
        let hello: Hello = me.read().await?;
        me.versions = hello.versions;
        Ok(me)
    }

    /// The script's next answer: `T`, or the error it reported (its traceback).
    async fn read<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, BenchError> {
        let line = self
            .stdout
            .next_line()
            .await
            .map_err(|e| BenchError::Powertools(format!("reading its answer: {e}")))?;
        let Some(line) = line else {
            let status = self.child.wait().await.ok();
            return Err(BenchError::Powertools(format!(
                "the script ended without answering ({status:?}); its stderr is above"
            )));
        };
        let value: serde_json::Value = serde_json::from_str(&line)
            .map_err(|e| BenchError::Powertools(format!("unreadable answer ({e}): {line}")))?;
        if let Some(error) = value.get("error") {
            return Err(BenchError::Powertools(format!(
                "the script failed:\n{}",
                error.as_str().unwrap_or_default()
            )));
        }
        serde_json::from_value(value)
            .map_err(|e| BenchError::Powertools(format!("unexpected answer ({e}): {line}")))
    }

    /// Sends one command and reads its answer.
    async fn ask<T: serde::de::DeserializeOwned>(
        &mut self,
        command: serde_json::Value,
    ) -> Result<T, BenchError> {
        let mut line = command.to_string();
        line.push('\n');
        let sent = async {
            self.stdin.write_all(line.as_bytes()).await?;
            self.stdin.flush().await
        };
        sent.await
            .map_err(|e| BenchError::Powertools(format!("sending a command: {e}")))?;
        self.read().await
    }

    /// A context with `workers` pairs of accounts and a local cache of `cache` entries (0:
    /// off): its name, for [`Self::phase`].
    async fn setup(&mut self, workers: usize, cache: usize) -> Result<String, BenchError> {
        let context = format!("c{workers}-cache{cache}");
        let _: serde_json::Value = self
            .ask(serde_json::json!({
                "cmd": "setup",
                "context": context,
                "workers": workers,
                "local_cache_size": cache,
            }))
            .await?;
        Ok(context)
    }

    /// `n` requests over the context's workers, keys `<tag>-<worker>-<i>` as ours.
    async fn phase(&mut self, context: &str, tag: &str, n: usize) -> Result<Phase, BenchError> {
        #[derive(Deserialize)]
        struct Answer {
            phase: Phase,
        }
        let answer: Answer = self
            .ask(serde_json::json!({"cmd": "phase", "context": context, "tag": tag, "n": n}))
            .await?;
        Ok(answer.phase)
    }

    /// Closes its stdin (the script then exits) and waits for it: its versions.
    async fn finish(mut self) -> Result<BTreeMap<String, String>, BenchError> {
        drop(self.stdin);
        let status = self
            .child
            .wait()
            .await
            .map_err(|e| BenchError::Powertools(format!("waiting for the script: {e}")))?;
        if !status.success() {
            return Err(BenchError::Powertools(format!(
                "the script failed ({status})"
            )));
        }
        Ok(self.versions)
    }
}
