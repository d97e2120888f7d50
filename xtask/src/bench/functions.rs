//! Part 3: each function's release binary run as Lambda runs it, under a minimal runtime API
//! ([`super::runtime_api`]), against the benchmark's DynamoDB Local and the local OpenAI
//! stand-in.
//!
//! - **Cold start**: from just before the process is spawned until its first
//!   `GET …/invocation/next` (the runtime is initialised: configuration read, SDK clients
//!   built), then the first request's latency in that fresh process (new connections to
//!   DynamoDB and, for `POST /session`, the upstream). [`COLD_STARTS`] fresh processes each.
//! - **Warm latency**: one long-lived process per function; from the moment an event is
//!   written to the function's poll until its response has been read, per request.
//! - **Peak memory**: `VmHWM` (peak resident set) from `/proc/<pid>/status` once the process
//!   has served everything, the figure Lambda's `Max Memory Used` reports.
//! - **Size**: the binary Lambda would run (`bootstrap`), as built by the `release` profile.
//!
//! Each request's answer is checked (status code, and `Idempotent-Replayed` on replays): a
//! benchmark that timed errors would be measuring the wrong thing, so a wrong answer fails it.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::runtime_api::{Call, Poll, RuntimeApi};
use super::Section;
use crate::json::{self, Value};
use crate::util::{self, info, Result};
use crate::{dev, openai_standin};

/// Fresh processes per function for the cold-start figures.
const COLD_STARTS: usize = 15;
/// Requests per scenario before the measured ones, in the warm process.
const WARM_UP: usize = 20;
/// How long the function gets for anything (start, one request).
const TIMEOUT: Duration = Duration::from_secs(30);
/// The goal for peak memory, in MB (10^6 bytes, the stricter reading); the template gives each
/// function 128 MB.
const MEMORY_GOAL_MB: f64 = 32.0;
/// Limits far above what the benchmark sends: it measures the limiter's work, not its refusals.
const SESSION_LIMITS: &str = "ip=100000000/1d,global=100000000/1d";
const TRANSFER_LIMITS: &str = "ip=100000000/1d,client=100000000/1d";
/// Every event comes from this address (TEST-NET-3), as a function URL reports its caller.
const SOURCE_IP: &str = "203.0.113.10";

/// The two release binaries.
pub struct Binaries {
    pub ephemeral_key: PathBuf,
    pub transfer: PathBuf,
}

/// `cargo build --release` of both functions, for the host. Lambda runs them for arm64, built
/// by `cargo lambda build --release --arm64` (same profile, other target); this machine's
/// toolchain has no aarch64 standard library and cannot download one, so the host build it is.
pub fn build() -> Result<Binaries> {
    let mut bins = util::cargo_build_bins(
        &["--release", "-p", "ephemeral-key", "-p", "transfer"],
        &["ephemeral-key", "transfer"],
    )?;
    let transfer = bins.pop().ok_or("no transfer binary")?;
    let ephemeral_key = bins.pop().ok_or("no ephemeral-key binary")?;
    Ok(Binaries {
        ephemeral_key,
        transfer,
    })
}

/// One kind of request and the status it must get.
struct Scenario {
    name: &'static str,
    expect: u16,
    replayed: bool,
    /// The event for the `i`-th request of this scenario.
    event: Box<dyn Fn(usize) -> Result<String>>,
}

/// The figures for one function.
struct Figures {
    name: &'static str,
    size: u64,
    init_ms: Vec<f64>,
    first_ms: Vec<f64>,
    first_scenario: &'static str,
    cold_peak_kb: Vec<u64>,
    warm: Vec<(&'static str, Vec<f64>)>,
    warm_peak_kb: u64,
}

/// Runs both functions, `n` measured warm requests per scenario, against DynamoDB Local at
/// `endpoint` (tables are created from the template).
pub fn run(binaries: &Binaries, endpoint: &str, n: usize) -> Result<Section> {
    let logs = util::cache_dir()?.join("logs");
    fs::create_dir_all(&logs)?;

    info("tables and a client with two accounts, through the operator CLI");
    let cli = dev::build_cli()?;
    let env = |cmd: &mut Command| {
        super::aws_env(cmd, endpoint);
    };
    let template = util::workspace_root().join("template.yaml");
    dev::run_cli(
        &cli,
        &env,
        &["tables", "create", "--template"],
        &[template.as_os_str()],
    )?;
    let client: dev::NewClient =
        dev::cli_json(&cli, &env, &["clients", "create", "--name", "bench"])?;
    let (token, client_id) = (client.token, client.client_id);
    let mut accounts = Vec::new();
    for balance in ["1000000000000", "0"] {
        let account: dev::Account = dev::cli_json(
            &cli,
            &env,
            &[
                "accounts",
                "create",
                "--client",
                &client_id,
                "--balance",
                balance,
                "--currency",
                "JPY",
            ],
        )?;
        accounts.push(account.account_id);
    }
    let standin = openai_standin::start(false)?;

    let base_env: Vec<(String, String)> = vec![
        ("RUST_LOG".into(), "info".into()),
        ("INTERNAL_TOKEN".into(), util::random_hex(16)?),
        ("KILL_SWITCH_CACHE_SECONDS".into(), "5".into()),
        ("SECRETS_TTL_SECONDS".into(), "300".into()),
    ];
    let session_env = {
        let mut env = base_env.clone();
        env.extend([
            ("SESSION_RATE_LIMITS".into(), SESSION_LIMITS.into()),
            ("OPENAI_API_KEY".into(), "sk-local-stand-in".into()),
            ("OPENAI_BASE_URL".into(), standin.base_url.clone()),
        ]);
        env
    };
    let transfer_env = {
        let mut env = base_env;
        env.push(("TRANSFER_RATE_LIMITS".into(), TRANSFER_LIMITS.into()));
        env
    };

    let auth = format!("Bearer {token}");
    // The replay scenario sends the very requests the new-key scenario sent before it.
    let run_id = util::random_hex(4)?;
    let new_transfer = || new_transfer(&auth, &accounts[0], &accounts[1], &run_id);
    let account = format!("/accounts/{}", accounts[0]);
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
            event: Box::new(move |_| event("GET", &account, &[("authorization", &auth)], None)),
        },
        not_found(),
    ];
    let session_scenarios = vec![
        Scenario {
            name: "`POST /session` (upstream: the local stand-in)",
            expect: 200,
            replayed: false,
            event: Box::new(|_| {
                event(
                    "POST",
                    "/session",
                    &[("content-type", "application/json")],
                    Some("{}"),
                )
            }),
        },
        not_found(),
    ];

    let mut figures = Vec::new();
    for (name, binary, env, scenarios) in [
        (
            "ephemeral-key",
            &binaries.ephemeral_key,
            &session_env,
            &session_scenarios,
        ),
        (
            "transfer",
            &binaries.transfer,
            &transfer_env,
            &transfer_scenarios,
        ),
    ] {
        let log = logs.join(format!("bench-{name}.log"));
        fs::write(&log, "")?;
        let function = Function {
            name,
            binary,
            endpoint,
            env,
            log: &log,
        };
        info(format!("{name}: {COLD_STARTS} cold starts"));
        // Each function's first scenario is its typical request.
        let cold_scenario = &scenarios[0];
        let mut init_ms = Vec::new();
        let mut first_ms = Vec::new();
        let mut cold_peak_kb = Vec::new();
        for i in 0..COLD_STARTS {
            let mut process = function.start()?;
            init_ms.push(ms(process.first_poll_at - process.spawned_at));
            let latency = process.invoke(cold_scenario, usize::MAX - i)?;
            first_ms.push(latency);
            cold_peak_kb.push(process.peak_kb()?);
        }
        info(format!(
            "{name}: {WARM_UP} warm-up + {n} requests per scenario in one process"
        ));
        let mut process = function.start()?;
        let mut warm = Vec::new();
        for scenario in scenarios {
            for i in 0..WARM_UP {
                process.invoke(scenario, 1_000_000 + i)?;
            }
            let mut lat = Vec::with_capacity(n);
            for i in 0..n {
                lat.push(process.invoke(scenario, i)?);
            }
            warm.push((scenario.name, lat));
        }
        let warm_peak_kb = process.peak_kb()?;
        drop(process);
        figures.push(Figures {
            name,
            size: fs::metadata(binary)?.len(),
            init_ms,
            first_ms,
            first_scenario: cold_scenario.name,
            cold_peak_kb,
            warm,
            warm_peak_kb,
        });
    }
    drop(standin);
    Ok(report(&figures, n))
}

/// `POST /transfers` of 1 JPY from `from` to `to`: request `i` under key `<run_id>-<i>`, so
/// sending `i` again is a replay.
fn new_transfer(
    auth: &str,
    from: &str,
    to: &str,
    run_id: &str,
) -> Box<dyn Fn(usize) -> Result<String>> {
    let (auth, from, to, run_id) = (
        auth.to_string(),
        from.to_string(),
        to.to_string(),
        run_id.to_string(),
    );
    Box::new(move |i| {
        event(
            "POST",
            "/transfers",
            &[
                ("authorization", &auth),
                ("idempotency-key", &format!("{run_id}-{i}")),
                ("content-type", "application/json"),
            ],
            Some(&format!(
                r#"{{"from":"{from}","to":"{to}","amount":1,"memo":"bench {i}"}}"#
            )),
        )
    })
}

/// A `GET` of a route neither function has: the router's 404, which comes before the kill
/// switch and the limits, so no DynamoDB call.
fn not_found() -> Scenario {
    Scenario {
        name: "`GET /nope` (404)",
        expect: 404,
        replayed: false,
        event: Box::new(|_| event("GET", "/nope", &[], None)),
    }
}

/// A function URL (payload 2.0) event, as Lambda delivers it.
fn event(method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> Result<String> {
    let mut h = vec![(
        "host".to_string(),
        json::string("bench.lambda-url.us-east-1.on.aws"),
    )];
    h.extend(
        headers
            .iter()
            .map(|(k, v)| (k.to_string(), json::string(*v))),
    );
    let headers = Value::Object(h.into_iter().collect());
    let http = json::object([
        ("method", json::string(method)),
        ("path", json::string(path)),
        ("protocol", json::string("HTTP/1.1")),
        ("sourceIp", json::string(SOURCE_IP)),
        ("userAgent", json::string("tollgate-bench")),
    ]);
    let context = json::object([
        ("accountId", json::string("123456789012")),
        ("apiId", json::string("bench")),
        (
            "domainName",
            json::string("bench.lambda-url.us-east-1.on.aws"),
        ),
        ("domainPrefix", json::string("bench")),
        ("http", http),
        ("requestId", json::string(util::random_hex(8)?)),
        ("routeKey", json::string("$default")),
        ("stage", json::string("$default")),
        ("time", json::string("01/Dec/2026:00:00:00 +0000")),
        (
            "timeEpoch",
            Value::Number((util::unix_now() * 1000).to_string()),
        ),
    ]);
    Ok(json::compact(&json::object([
        ("version", json::string("2.0")),
        ("routeKey", json::string("$default")),
        ("rawPath", json::string(path)),
        ("rawQueryString", json::string("")),
        ("headers", headers),
        ("requestContext", context),
        ("body", body.map_or(Value::Null, json::string)),
        ("isBase64Encoded", Value::Bool(false)),
    ])))
}

/// How to start one function.
struct Function<'a> {
    name: &'static str,
    binary: &'a Path,
    endpoint: &'a str,
    env: &'a [(String, String)],
    log: &'a Path,
}

/// A running function process waiting in its poll.
struct Process {
    child: Child,
    api: RuntimeApi,
    poll: Option<Poll>,
    spawned_at: Instant,
    first_poll_at: Instant,
    log: PathBuf,
}

impl Function<'_> {
    /// Spawns the binary with a Lambda-like environment (nothing of ours but what is set here)
    /// and waits for its first poll.
    fn start(&self) -> Result<Process> {
        let api = RuntimeApi::start()?;
        let mut cmd = Command::new(self.binary);
        cmd.env_clear();
        super::aws_env(&mut cmd, self.endpoint)
            .env("AWS_LAMBDA_RUNTIME_API", &api.address)
            .env("AWS_LAMBDA_FUNCTION_NAME", self.name)
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env(
                "AWS_LAMBDA_LOG_GROUP_NAME",
                format!("/aws/lambda/{}", self.name),
            )
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .env("LAMBDA_TASK_ROOT", "/var/task")
            .env("TZ", ":UTC");
        for (key, value) in self.env {
            cmd.env(key, value);
        }
        let log = fs::OpenOptions::new().append(true).open(self.log)?;
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let spawned_at = Instant::now();
        let child = cmd
            .spawn()
            .map_err(|e| format!("could not start {}: {e}", self.binary.display()))?;
        let mut process = Process {
            child,
            api,
            poll: None,
            spawned_at,
            first_poll_at: spawned_at,
            log: self.log.to_path_buf(),
        };
        let (at, poll) = process.wait_poll()?;
        process.first_poll_at = at;
        process.poll = Some(poll);
        Ok(process)
    }
}

impl Process {
    fn wait_poll(&mut self) -> Result<(Instant, Poll)> {
        match self.api.next(TIMEOUT).map_err(|e| self.failed(e))? {
            (at, Call::Poll(poll)) => Ok((at, poll)),
            (_, Call::Error { id, body }) => Err(self.failed(format!(
                "the function reported an error{}: {}",
                if id.is_empty() {
                    " while starting".to_string()
                } else {
                    format!(" for {id}")
                },
                String::from_utf8_lossy(&body)
            ))),
            (_, Call::Response { id, .. }) => {
                Err(self.failed(format!("a response for {id}, which nobody asked for")))
            }
        }
    }

    /// Sends request `i` of `scenario`, checks the answer, and returns its latency (ms).
    fn invoke(&mut self, scenario: &Scenario, i: usize) -> Result<f64> {
        let poll = self.poll.take().ok_or("the function is not waiting")?;
        let id = format!("bench-{}", util::random_hex(8)?);
        let sent = poll.deliver(&id, &(scenario.event)(i)?)?;
        let (at, call) = self.api.next(TIMEOUT).map_err(|e| self.failed(e))?;
        let body = match call {
            Call::Response { id: got, body } if got == id => body,
            Call::Response { id: got, .. } => {
                return Err(format!("the response for {got} came while {id} was expected").into())
            }
            Call::Error { body, .. } => {
                return Err(self.failed(format!(
                    "{}: the function reported an error: {}",
                    scenario.name,
                    String::from_utf8_lossy(&body)
                )))
            }
            Call::Poll(_) => return Err(self.failed("the function polled again without answering")),
        };
        let latency = ms(at - sent);
        let answer = json::parse(&String::from_utf8_lossy(&body))
            .map_err(|e| format!("{}: the response is not JSON: {e}", scenario.name))?;
        let status = answer.get("statusCode").and_then(Value::as_u64);
        let replayed = answer
            .get("headers")
            .and_then(|h| h.str_field("idempotent-replayed"))
            == Some("true");
        if status != Some(u64::from(scenario.expect)) || replayed != scenario.replayed {
            return Err(format!(
                "{}: expected {}{}, got {}",
                scenario.name,
                scenario.expect,
                if scenario.replayed { " (replayed)" } else { "" },
                json::compact(&answer)
            )
            .into());
        }
        let (_, poll) = self.wait_poll()?;
        self.poll = Some(poll);
        Ok(latency)
    }

    /// Peak resident set size so far, in KiB.
    fn peak_kb(&self) -> Result<u64> {
        let status = fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| "no VmHWM in /proc/<pid>/status".into())
    }

    /// `msg` with the end of the function's log.
    fn failed(&self, msg: impl std::fmt::Display) -> Box<dyn std::error::Error> {
        format!(
            "{msg}; last lines of {}:\n{}",
            self.log.display(),
            util::tail(&self.log, 15)
        )
        .into()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Median and 90th percentile (nearest rank).
fn stats(values: &[f64]) -> (f64, f64) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    (rank(0.5), rank(0.9))
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

fn report(figures: &[Figures], n: usize) -> Section {
    let mut md = String::from("## 3. The functions' release binaries\n\n");
    let _ = writeln!(
        md,
        "Each function's `release` binary (thin LTO, codegen-units 1, symbols stripped; built for \
         this machine's x86_64 by `cargo build --release -p ephemeral-key -p transfer`, where a \
         deploy builds the same profile for arm64 with `cargo lambda build --release --arm64`, \
         which this machine cannot: its toolchain has no aarch64 standard library), \
         started as Lambda starts a custom runtime: a clean environment with \
         `AWS_LAMBDA_RUNTIME_API` pointing at a minimal runtime-API emulator in xtask \
         (`xtask/src/bench/runtime_api.rs`), the template's settings (`RUST_LOG=info`, logs \
         to a file), DynamoDB Local above, and for `ephemeral-key` the local OpenAI stand-in as \
         upstream with the API key in `OPENAI_API_KEY` (in AWS it comes from SSM on the first \
         request, one call more). Rate limits are set far above the traffic \
         (`{SESSION_LIMITS}`, `{TRANSFER_LIMITS}`) so every request does the limiter's full \
         work and is admitted; every answer is checked (status, and `Idempotent-Replayed` on \
         replays). DynamoDB Local has served parts 1 and 2 by then, so its JVM is warm; run \
         alone (`--part 3`), the first-request figures come out several times higher.\n"
    );
    let _ = writeln!(
        md,
        "- **init**: process spawn until its first `GET /2018-06-01/runtime/invocation/next` \
         (configuration read, SDK clients built), {COLD_STARTS} fresh processes;\n\
         - **first request**: that process's first request, on new connections;\n\
         - **warm**: one process, {WARM_UP} warm-up requests then {n} measured per scenario, \
         from the event written to the function's poll until its response was read;\n\
         - **peak memory**: `VmHWM` from `/proc/<pid>/status` (what Lambda reports as \
         *Max Memory Used*), after the process served everything.\n"
    );
    let _ = writeln!(
        md,
        "| function | binary size (MiB) | init median (ms) | init p90 (ms) | first request | first request median (ms) | peak memory, cold processes (MiB, max) | peak memory, warm process (MiB) | requests the warm process served |\n|---|---|---|---|---|---|---|---|---|"
    );
    for f in figures {
        let (im, i90) = stats(&f.init_ms);
        let (fm, _) = stats(&f.first_ms);
        let cold_peak = f.cold_peak_kb.iter().copied().max().unwrap_or(0);
        let _ = writeln!(
            md,
            "| `{}` | {} | {:.1} | {:.1} | {} | {:.2} | {} | {} | {} |",
            f.name,
            mib(f.size),
            im,
            i90,
            f.first_scenario,
            fm,
            mib(cold_peak * 1024),
            mib(f.warm_peak_kb * 1024),
            f.warm.len() * (n + WARM_UP)
        );
    }
    let _ = writeln!(
        md,
        "\nWarm latency per request (ms):\n\n| function | request | median | p90 |\n|---|---|---|---|"
    );
    for f in figures {
        for (name, lat) in &f.warm {
            let (m, p90) = stats(lat);
            let _ = writeln!(md, "| `{}` | {name} | {m:.2} | {p90:.2} |", f.name);
        }
    }
    let _ = writeln!(
        md,
        "\nThe 404 rows are the function's own overhead, with no DynamoDB call: routing answers \
         before the kill switch or any limit is consulted, so they hold event parsing, \
         routing, the problem+json body, the EMF metric and the log line. Every other row is \
         mostly DynamoDB Local's time (and the stand-in's, for `POST /session`), as in parts \
         1 and 2."
    );
    let goals = figures
        .iter()
        .map(|f| {
            let peak_kb = f
                .cold_peak_kb
                .iter()
                .copied()
                .max()
                .unwrap_or(0)
                .max(f.warm_peak_kb);
            let peak_mb = peak_kb as f64 * 1024.0 / 1e6;
            format!(
                "- `{}` peak memory under {MEMORY_GOAL_MB} MB: {} ({peak_mb:.1} MB = {} MiB at most, in any process).",
                f.name,
                if peak_mb < MEMORY_GOAL_MB {
                    "**met**"
                } else {
                    "**not met**"
                },
                mib(peak_kb * 1024)
            )
        })
        .collect();
    Section {
        markdown: md,
        goals,
        versions: vec![(
            "cargo profile, part 3".into(),
            "`release` (thin LTO, codegen-units = 1, strip = symbols), x86_64-unknown-linux-gnu"
                .into(),
        )],
    }
}
