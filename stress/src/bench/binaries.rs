//! Part 3: each function's binary run as Lambda runs it, in the harness's function pool under
//! its runtime API emulator ([`crate::lambda`]), on the harness's stack ([`crate::stack`]:
//! its own tables and the OpenAI stand-in of `tollgate-tests`) talking to DynamoDB Local
//! directly, with no fault proxy in between.
//!
//! - **Cold start**: from just before a process is spawned until its first
//!   `GET …/invocation/next` (configuration read, SDK clients built), then that process's
//!   first request (new connections to DynamoDB and, for `POST /session`, the upstream).
//!   [`COLD_STARTS`] fresh processes each.
//! - **Warm latency**: one long-lived process per function; each request timed around
//!   [`Function::invoke_event`], from the event being queued until the function's answer is
//!   read back.
//! - **Peak memory**: `VmHWM` (peak resident set) from `/proc/<pid>/status` once the process
//!   has served everything, the figure Lambda's `Max Memory Used` reports.
//! - **Size**: the binary Lambda would run (`bootstrap`).
//!
//! Each request's answer is checked (status, and `Idempotent-Replayed` on replays): a
//! benchmark that timed errors would be measuring the wrong thing, so a wrong answer fails it.

use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;
use tollgate::catalog;
use tollgate::ids::random_hex;
use tollgate_tests::events::Event;

use super::stats::{ms, quantile, Quantiles};
use super::{BenchError, WARMUP};
use crate::lambda::Function;
use crate::limits::Limits;
use crate::stack::{self, Stack};

/// Fresh processes per function for the cold-start figures.
const COLD_STARTS: usize = 15;
/// The goal for peak memory, in MB (10^6 bytes, the stricter reading); the template gives each
/// function 128 MB.
const MEMORY_GOAL_MB: f64 = 32.0;
/// Limits far above what the benchmark sends: it measures the limiter's work, not its refusals.
fn limits() -> Limits {
    Limits::new(
        "ip=100000000/1d,global=100000000/1d",
        "ip=100000000/1d,client=100000000/1d",
    )
}

/// The two function binaries, and the profile they were built with (for the report).
#[derive(Debug, Clone)]
pub struct Binaries {
    /// Where both are (`--bin-dir`).
    pub dir: PathBuf,
    pub ephemeral_key: PathBuf,
    pub transfer: PathBuf,
    pub profile: String,
}

/// One kind of request and the answer it must get.
struct Scenario {
    name: &'static str,
    expect: u16,
    replayed: bool,
    /// The event for the `i`-th request of this scenario.
    event: Box<dyn Fn(usize) -> Event + Send + Sync>,
}

/// One function's figures.
#[derive(Debug, Serialize)]
pub struct FunctionFigures {
    pub name: &'static str,
    pub size_mib: f64,
    pub init: Quantiles,
    pub first_scenario: &'static str,
    pub first_median: f64,
    pub cold_peak_mib: f64,
    pub warm_peak_mib: f64,
    /// Requests the warm process served (warm-up included).
    pub warm_requests: usize,
    /// (scenario, latency) in the warm process.
    pub warm: Vec<(&'static str, Quantiles)>,
    /// The highest peak of any process, in MB and MiB.
    pub peak_mb: f64,
    pub peak_mib: f64,
}

/// Part 3's figures.
#[derive(Debug, Serialize)]
pub struct Figures {
    pub profile: String,
    pub target: String,
    pub cold_starts: usize,
    pub warmup: usize,
    pub n: usize,
    pub limits: Limits,
    pub memory_goal_mb: f64,
    pub functions: Vec<FunctionFigures>,
}

pub async fn run(binaries: &Binaries, n: usize) -> Result<Figures, BenchError> {
    // Straight to DynamoDB Local: the figures are the functions', not a proxy's.
    let stack = Stack::start(stack::Options {
        bin_dir: &binaries.dir,
        transfer_instances: 0,
        session_instances: Some(0),
        fault_proxy: false,
        env: [
            ("RUST_LOG".into(), "info".into()),
            ("KILL_SWITCH_CACHE_SECONDS".into(), "5".into()),
            ("SECRETS_TTL_SECONDS".into(), "300".into()),
        ]
        .into_iter()
        .chain(limits().env())
        .collect(),
        name: "bench",
    })
    .await
    .map_err(|e| BenchError::Setup(format!("part 3's stack: {e}")))?;
    let session = stack
        .ephemeral_key
        .clone()
        .ok_or_else(|| BenchError::Setup("part 3's stack has no ephemeral-key".into()))?;
    let fixture = stack
        .seed("bench", &[1_000_000_000_000, 0])
        .await
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    let auth = format!("Bearer {}", fixture.token);
    // The replay scenario sends the very requests the new-key scenario sent before it.
    let run_id = random_hex(4);
    let new_transfer = || -> Box<dyn Fn(usize) -> Event + Send + Sync> {
        let (auth, from, to, run_id) = (
            auth.clone(),
            fixture.accounts[0].clone(),
            fixture.accounts[1].clone(),
            run_id.clone(),
        );
        Box::new(move |i| {
            Event::post("/transfers")
                .header("authorization", &auth)
                .header("idempotency-key", &format!("{run_id}-{i}"))
                .json(&serde_json::json!({"from": from, "to": to, "amount": 1, "memo": format!("bench {i}")}))
        })
    };
    let account = format!("/accounts/{}", fixture.accounts[0]);
    let get_auth = auth.clone();
    let transfer_scenarios = vec![
        Scenario {
            name: "`POST /transfers`, new key",
            expect: 201,
            replayed: false,
            event: new_transfer(),
        },
        Scenario {
            name: "`POST /transfers`, same key and body again (replay)",
            expect: 201,
            replayed: true,
            event: new_transfer(),
        },
        Scenario {
            name: "`GET /accounts/{id}`",
            expect: 200,
            replayed: false,
            event: Box::new(move |_| Event::get(&account).header("authorization", &get_auth)),
        },
        not_found(),
    ];
    let session_scenarios = vec![
        Scenario {
            name: "`POST /session` (upstream: the local stand-in)",
            expect: 200,
            replayed: false,
            event: Box::new(|_| Event::post("/session").json(&serde_json::json!({}))),
        },
        not_found(),
    ];

    let mut functions = Vec::new();
    for (name, function, binary, scenarios) in [
        (
            catalog::EPHEMERAL_KEY.name,
            &session,
            &binaries.ephemeral_key,
            &session_scenarios,
        ),
        (
            catalog::TRANSFER.name,
            &stack.transfer,
            &binaries.transfer,
            &transfer_scenarios,
        ),
    ] {
        let size = std::fs::metadata(binary)
            .map_err(BenchError::io(binary.display()))?
            .len();
        println!("part 3: {name}: {COLD_STARTS} cold starts");
        // Each function's first scenario is its typical request.
        let cold = &scenarios[0];
        let mut init_ms = Vec::new();
        let mut first_ms = Vec::new();
        let mut cold_peak_kb = 0;
        for i in 0..COLD_STARTS {
            let t = Instant::now();
            let pid = function.spawn_instance().await?;
            init_ms.push(ms(t.elapsed()));
            first_ms.push(invoke(function, cold, usize::MAX - i).await?);
            cold_peak_kb = cold_peak_kb.max(peak_kb(pid)?);
            function.kill(pid).await?;
        }
        println!("part 3: {name}: {WARMUP} warm-up + {n} requests per scenario in one process");
        let pid = function.spawn_instance().await?;
        let mut warm = Vec::new();
        for scenario in scenarios {
            for i in 0..WARMUP {
                invoke(function, scenario, 1_000_000 + i).await?;
            }
            let mut lat = Vec::with_capacity(n);
            for i in 0..n {
                lat.push(invoke(function, scenario, i).await?);
            }
            warm.push((scenario.name, Quantiles::of(&lat)));
        }
        let warm_peak_kb = peak_kb(pid)?;
        function.stop().await;
        let peak_kb = cold_peak_kb.max(warm_peak_kb);
        let mib = |kb: u64| kb as f64 / 1024.0;
        functions.push(FunctionFigures {
            name,
            size_mib: size as f64 / (1024.0 * 1024.0),
            init: Quantiles::of(&init_ms),
            first_scenario: cold.name,
            first_median: quantile(&first_ms, 0.5),
            cold_peak_mib: mib(cold_peak_kb),
            warm_peak_mib: mib(warm_peak_kb),
            warm_requests: scenarios.len() * (n + WARMUP),
            warm,
            peak_mb: peak_kb as f64 * 1024.0 / 1e6,
            peak_mib: mib(peak_kb),
        });
    }
    stack.stop(false).await;
    Ok(Figures {
        profile: binaries.profile.clone(),
        target: format!("{}-unknown-linux-gnu", std::env::consts::ARCH),
        cold_starts: COLD_STARTS,
        warmup: WARMUP,
        n,
        limits: limits(),
        memory_goal_mb: MEMORY_GOAL_MB,
        functions,
    })
}

/// A `GET` of a route neither function has: the router's 404, which comes before the kill
/// switch and the limits, so no DynamoDB call.
fn not_found() -> Scenario {
    Scenario {
        name: "`GET /nope` (404)",
        expect: 404,
        replayed: false,
        event: Box::new(|_| Event::get("/nope")),
    }
}

/// Sends request `i` of `scenario`, checks the answer, and returns its latency (ms).
async fn invoke(function: &Function, scenario: &Scenario, i: usize) -> Result<f64, BenchError> {
    let event = (scenario.event)(i);
    let t = Instant::now();
    let answer = function
        .invoke_event(&event)
        .await
        .map_err(|e| BenchError::WrongAnswer(format!("{}: {e}", scenario.name)))?;
    let latency = ms(t.elapsed());
    let replayed = answer
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    if answer.status().as_u16() != scenario.expect || replayed != scenario.replayed {
        return Err(BenchError::WrongAnswer(format!(
            "{}: expected {}{}, got {} {}",
            scenario.name,
            scenario.expect,
            if scenario.replayed { " (replayed)" } else { "" },
            answer.status(),
            String::from_utf8_lossy(answer.body())
        )));
    }
    Ok(latency)
}

/// Peak resident set size of process `pid` so far, in KiB.
fn peak_kb(pid: u32) -> Result<u64, BenchError> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(BenchError::io(&path))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| BenchError::Setup(format!("no VmHWM in {path}")))
}
