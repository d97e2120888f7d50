//! Part 3: each function's binary as Lambda runs it, in the harness's function pool under its
//! runtime API emulator, on a stack of its own talking to DynamoDB Local directly (no fault
//! proxy): cold init and first request ([`COLD_STARTS`] fresh processes), warm latency (one
//! long-lived process, timed around [`Pool::invoke_event`]), peak memory (`VmHWM`, what Lambda's
//! `Max Memory Used` reports), size, and the variants the cost per million needs ([`VARIANTS`]).
//! Every answer is checked: a benchmark that timed errors would measure the wrong thing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tollgate::ids::random_hex;
use tollgate_functions::catalog;
use tollgate_tests::events::HttpEvent;

use super::stats::{ms, quantile, Quantiles};
use super::{BenchError, WARMUP};
use crate::lambda::Pool;
use crate::limits::Limits;
use crate::stack::{self, HarnessStack};

/// Fresh processes per function for the cold-start figures. The same binary's median init
/// moves by about 2 ms from run to run (10.5 to 14.5 ms over six runs of one build).
const COLD_STARTS: usize = 30;
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

/// The variants' limits: one session per address and day, so after the first every session from
/// that address is refused by `ip`; transfers as above.
fn variant_limits() -> Limits {
    Limits::new(
        "ip=1/1d,global=100000000/1d",
        "ip=100000000/1d,client=100000000/1d",
    )
}

/// The scenarios the cost per million reads, by name.
pub const NEW_TRANSFER: &str = "`POST /transfers`, new key";
pub const REPLAY: &str = "`POST /transfers`, same key and body again (replay)";
pub const SESSION: &str = "`POST /session` (upstream: the local stand-in)";
pub const REPLAY_UNCACHED: &str = "`POST /transfers` replay, `IDEMPOTENCY_CACHE_SIZE=0`";
pub const SESSION_REFUSED: &str = "`POST /session` refused by `ip` (429), block cache on";
pub const SESSION_REFUSED_UNCACHED: &str =
    "`POST /session` refused by `ip` (429), `RATE_LIMIT_BLOCK_CACHE_SIZE=0`";

/// A stack configured for some of the variant scenarios.
struct VariantStack {
    name: &'static str,
    /// Variables on top of the main stack's.
    env: &'static [(&'static str, &'static str)],
    /// Whether its transfer process times uncached replays.
    replay: bool,
    /// The refused-session scenario its ephemeral-key process times.
    refused: &'static str,
}

const VARIANTS: &[VariantStack] = &[
    VariantStack {
        name: "bench-nocache",
        env: &[
            ("IDEMPOTENCY_CACHE_SIZE", "0"),
            ("RATE_LIMIT_BLOCK_CACHE_SIZE", "0"),
        ],
        replay: true,
        refused: SESSION_REFUSED_UNCACHED,
    },
    VariantStack {
        name: "bench-cached",
        env: &[],
        replay: false,
        refused: SESSION_REFUSED,
    },
];

/// Where the function binaries are (`--bin-dir`), and the profile they were built with (for the
/// report).
#[derive(Debug, Clone)]
pub struct Binaries {
    pub dir: PathBuf,
    pub profile: String,
}

/// The event for the `i`-th request of a scenario.
type Event = Arc<dyn Fn(usize) -> HttpEvent + Send + Sync>;

/// One kind of request and the answer it must get.
struct Scenario {
    name: &'static str,
    expect: u16,
    replayed: bool,
    event: Event,
}

impl Scenario {
    /// A scenario whose answer is not a replay.
    fn new(name: &'static str, expect: u16, event: Event) -> Self {
        let replayed = false;
        Self {
            name,
            expect,
            replayed,
            event,
        }
    }
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

/// One variant scenario, warm.
#[derive(Debug, Serialize)]
pub struct Variant {
    pub function: &'static str,
    pub name: &'static str,
    /// The variables it ran with beyond the main stack's (`NAME=value, ...`).
    pub env: String,
    pub warm: Quantiles,
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
    pub variant_limits: Limits,
    pub memory_goal_mb: f64,
    pub functions: Vec<FunctionFigures>,
    pub variants: Vec<Variant>,
}

impl Figures {
    /// The warm median of the scenario or variant called `name`.
    pub fn warm_median(&self, name: &str) -> Option<f64> {
        self.functions
            .iter()
            .flat_map(|f| f.warm.iter())
            .find(|(scenario, _)| *scenario == name)
            .map(|(_, q)| q.median)
            .or_else(|| {
                self.variants
                    .iter()
                    .find(|v| v.name == name)
                    .map(|v| v.warm.median)
            })
    }
}

pub async fn run(binaries: &Binaries, n: usize) -> Result<Figures, BenchError> {
    // Straight to DynamoDB Local: the figures are the functions', not a proxy's.
    let build = Build::start(&binaries.dir, "bench").await?;
    let mut functions = Vec::new();
    for (which, name) in FUNCTIONS.into_iter().enumerate() {
        functions.push(function(&build, which, &binaries.dir.join(name), n).await?);
    }
    build.stack.stop(false).await;
    let mut variants = Vec::new();
    for v in VARIANTS {
        println!("part 3: variants ({})", v.name);
        variants.extend(run_variant(binaries, n, v).await?);
    }
    Ok(Figures {
        profile: binaries.profile.clone(),
        target: format!("{}-unknown-linux-gnu", std::env::consts::ARCH),
        cold_starts: COLD_STARTS,
        warmup: WARMUP,
        n,
        limits: limits(),
        variant_limits: variant_limits(),
        memory_goal_mb: MEMORY_GOAL_MB,
        functions,
        variants,
    })
}

/// The two functions, in the order [`Build`]'s pools and scenarios are.
const FUNCTIONS: [&str; 2] = [catalog::EPHEMERAL_KEY.name, catalog::TRANSFER.name];

/// A stack of `name` for part 3 (no fault proxy, no process yet), the main stack's variables
/// and `env` on top.
async fn stack(
    bin_dir: &Path,
    name: &'static str,
    env_extra: Vec<(String, String)>,
) -> Result<HarnessStack, BenchError> {
    let env = [
        ("RUST_LOG", "info"),
        ("KILL_SWITCH_CACHE_SECONDS", "5"),
        ("SECRETS_TTL_SECONDS", "300"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()));
    HarnessStack::start(stack::Options {
        bin_dir,
        transfer_instances: 0,
        session_instances: Some(0),
        fault_proxy: false,
        env: env.into_iter().chain(env_extra).collect(),
        name,
    })
    .await
    .map_err(|e| BenchError::Setup(format!("part 3's {name} stack: {e}")))
}

/// Both functions on a stack of their own, with each function's scenarios (the
/// first is its typical request, the one a cold process serves first).
struct Build {
    stack: HarnessStack,
    /// In the order of [`FUNCTIONS`].
    pools: [Arc<Pool>; 2],
    scenarios: [Vec<Scenario>; 2],
}

impl Build {
    async fn start(bin_dir: &Path, name: &'static str) -> Result<Self, BenchError> {
        let stack = stack(bin_dir, name, limits().env().to_vec()).await?;
        let session = stack.ephemeral_key.clone().ok_or_else(|| {
            BenchError::Setup(format!("part 3's {name} stack has no ephemeral-key"))
        })?;
        let fixture = stack
            .seed(name, &[1_000_000_000_000, 0])
            .await
            .map_err(|e| BenchError::Setup(e.to_string()))?;
        let auth = format!("Bearer {}", fixture.token);
        let account = format!("/accounts/{}", fixture.accounts[0]);
        let [new, again] = new_and_replay(&fixture, REPLAY);
        let transfer_scenarios = vec![
            new,
            again,
            Scenario::new(
                "`GET /accounts/{id}`",
                200,
                Arc::new(move |_| HttpEvent::get(&account).header("authorization", &auth)),
            ),
            not_found(),
        ];
        let session_scenarios = vec![
            Scenario::new(
                SESSION,
                200,
                Arc::new(|_| HttpEvent::post("/session").json(&serde_json::json!({}))),
            ),
            not_found(),
        ];
        Ok(Self {
            pools: [session, stack.transfer.clone()],
            scenarios: [session_scenarios, transfer_scenarios],
            stack,
        })
    }
}

/// One function: [`COLD_STARTS`] cold starts (a fresh process each: its init, its first
/// request, its peak; then killed), then one long-lived process through every scenario, and
/// its peak.
async fn function(
    build: &Build,
    which: usize,
    binary: &Path,
    n: usize,
) -> Result<FunctionFigures, BenchError> {
    let (name, scenarios) = (FUNCTIONS[which], &build.scenarios[which]);
    let pool: &Pool = &build.pools[which];
    println!("part 3: {name}: {COLD_STARTS} cold starts");
    let (mut init_ms, mut first_ms, mut cold_peak_mib) = (Vec::new(), Vec::new(), 0.0_f64);
    for i in 0..COLD_STARTS {
        let t = Instant::now();
        let pid = pool.spawn_instance().await?;
        init_ms.push(ms(t.elapsed()));
        first_ms.push(invoke(pool, &scenarios[0], usize::MAX - i).await?);
        cold_peak_mib = cold_peak_mib.max(peak_mib(pid)?);
        pool.kill(pid).await?;
    }
    println!("part 3: {name}: {WARMUP} warm-up + {n} requests per scenario in one process");
    let pid = pool.spawn_instance().await?;
    let mut warm = Vec::new();
    for scenario in scenarios {
        warm.push((scenario.name, warm_latency(pool, scenario, n).await?));
    }
    let warm_peak_mib = peak_mib(pid)?;
    pool.stop().await;
    let size = std::fs::metadata(binary).map_err(BenchError::io(binary.display()))?;
    let peak_mib = cold_peak_mib.max(warm_peak_mib);
    Ok(FunctionFigures {
        name,
        size_mib: size.len() as f64 / (1024.0 * 1024.0),
        init: Quantiles::of(&init_ms),
        first_scenario: scenarios[0].name,
        first_median: quantile(&first_ms, 0.5),
        cold_peak_mib,
        warm_peak_mib,
        warm_requests: scenarios.len() * (n + WARMUP),
        warm,
        peak_mb: peak_mib * 1024.0 * 1024.0 / 1e6,
        peak_mib,
    })
}

/// `POST /transfers` of 1 between the fixture's two accounts under key `<run>-<i>` as the
/// new-key scenario, and the very same requests again as the scenario `replay` (answered
/// `Idempotent-Replayed`).
fn new_and_replay(fixture: &stack::Seeded, replay: &'static str) -> [Scenario; 2] {
    let auth = format!("Bearer {}", fixture.token);
    let (from, to) = (fixture.accounts[0].clone(), fixture.accounts[1].clone());
    let run_id = random_hex(4);
    let event: Event = Arc::new(move |i| {
        HttpEvent::post("/transfers")
            .header("authorization", &auth)
            .header("idempotency-key", &format!("{run_id}-{i}"))
            .json(&serde_json::json!({"from": from, "to": to, "amount": 1, "memo": format!("bench {i}")}))
    });
    [
        Scenario::new(NEW_TRANSFER, 201, event.clone()),
        Scenario {
            replayed: true,
            ..Scenario::new(replay, 201, event)
        },
    ]
}

/// [`WARMUP`] requests, then `n` timed, in the function's one warm process.
async fn warm_latency(
    function: &Pool,
    scenario: &Scenario,
    n: usize,
) -> Result<Quantiles, BenchError> {
    for i in 0..WARMUP {
        invoke(function, scenario, 1_000_000 + i).await?;
    }
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        lat.push(invoke(function, scenario, i).await?);
    }
    Ok(Quantiles::of(&lat))
}

/// One variant stack: with `replay`, a transfer process sends the new-key requests (untimed)
/// and then times their replays; then an ephemeral-key process has one session admitted from an
/// address and times the refusals of the sessions after it (scenario `refused`).
async fn run_variant(
    binaries: &Binaries,
    n: usize,
    v: &VariantStack,
) -> Result<Vec<Variant>, BenchError> {
    let (name, replay, refused) = (v.name, v.replay, v.refused);
    let extra: Vec<(String, String)> = v
        .env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let env = variant_limits()
        .env()
        .into_iter()
        .chain(extra.iter().cloned());
    let stack = stack(&binaries.dir, name, env.collect()).await?;
    let described = match extra.is_empty() {
        true => "none".to_string(),
        false => extra
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", "),
    };
    let mut out = Vec::new();
    if replay {
        let fixture = stack
            .seed(name, &[1_000_000_000_000, 0])
            .await
            .map_err(|e| BenchError::Setup(e.to_string()))?;
        let [new, again] = new_and_replay(&fixture, REPLAY_UNCACHED);
        stack.transfer.spawn_instance().await?;
        warm_latency(&stack.transfer, &new, n).await?;
        out.push(Variant {
            function: catalog::TRANSFER.name,
            name: REPLAY_UNCACHED,
            env: described.clone(),
            warm: warm_latency(&stack.transfer, &again, n).await?,
        });
    }
    let session = stack
        .ephemeral_key
        .clone()
        .ok_or_else(|| BenchError::Setup(format!("the {name} stack has no ephemeral-key")))?;
    let post: Event = Arc::new(|_| {
        HttpEvent::post("/session")
            .from_ip("198.51.100.20")
            .json(&serde_json::json!({}))
    });
    let (first, refusals) = (
        Scenario::new(SESSION, 200, post.clone()),
        Scenario::new(refused, 429, post),
    );
    session.spawn_instance().await?;
    invoke(&session, &first, 0).await?;
    out.push(Variant {
        function: catalog::EPHEMERAL_KEY.name,
        name: refused,
        env: described,
        warm: warm_latency(&session, &refusals, n).await?,
    });
    stack.stop(false).await;
    Ok(out)
}

/// A `GET` of a route neither function has: the router's 404, which comes before the kill
/// switch and the limits, so no DynamoDB call.
fn not_found() -> Scenario {
    Scenario::new(
        "`GET /nope` (404)",
        404,
        Arc::new(|_| HttpEvent::get("/nope")),
    )
}

/// Sends request `i` of `scenario`, checks the answer, and returns its latency (ms).
async fn invoke(function: &Pool, scenario: &Scenario, i: usize) -> Result<f64, BenchError> {
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

/// Peak resident set size of process `pid` so far, in MiB.
fn peak_mib(pid: u32) -> Result<f64, BenchError> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(BenchError::io(&path))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb as f64 / 1024.0)
        .ok_or_else(|| BenchError::Setup(format!("no VmHWM in {path}")))
}
