//! Part 4: Schemathesis against `openapi.yaml`, through the harness's HTTP front
//! ([`crate::lambda::Front`]) to the function processes, from its checked-in configuration and
//! hooks (`bench/schemathesis/`). How it is run, and why, is `templates/bench-schemathesis.md`'s
//! prose; what matters for the code:
//!
//! - Three runs, one per kind of caller (`--include-tag`), the operator's last (it flips kill
//!   switches). What changes from run to run (base URL, credentials, accounts, report paths)
//!   reaches the files through environment variables, so no command line or file holds a
//!   secret; the figures are checked for the secrets before they are returned.
//! - A 5xx without `X-Request-Id` came from the front, not a function, and is kept out of the
//!   goals; a function's panic is caught through its log ([`stack`]).
//! - The verdict, test cases, command, seed, request errors and Schemathesis' failure summary
//!   come from its JSON run report. No summary report counts calls per status, evaluations per
//!   check or responses by header, so those come from its NDJSON events ([`findings`]), which
//!   also group the failed checks by our answer's problem code (Schemathesis groups by its
//!   failure title, which cannot tell a documented 400 from an unexplained one) with a `curl`
//!   line against `cargo xtask dev` (its own has the front's URL and `[Filtered]` credentials).

mod findings;
mod reports;
mod stack;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::Serialize;

use self::findings::{counts, Finding, Reproduce, Tally, SCHEMA_CHECKS};
use self::reports::{FailureGroup, NdjsonEvent, RunReport};
use super::binaries::Binaries;
use super::report::version;
use super::{workspace_root, BenchError};
use crate::limits::Limits;

/// The limits the functions run with here (see the module docs).
fn limits() -> Limits {
    Limits::new(
        "ip=100000/1h,global=100000/1d",
        "ip=100000/1m,client=100000/1m",
    )
}

/// The checked-in files, under the workspace root.
const CONFIG: &str = "bench/schemathesis/schemathesis.toml";
const HOOKS: &str = "bench/schemathesis/hooks.py";

/// One kind of caller: which operations (its name is their tag in `openapi.yaml`), and how to
/// reproduce.
struct Caller {
    name: &'static str,
    reproduce: Reproduce,
    /// Whether the hook gets the stack's accounts.
    accounts: bool,
}

/// One row of the calls table.
#[derive(Debug, Serialize)]
pub struct OperationRow {
    /// The run's name on its first row only.
    pub run: String,
    /// The run's generated test cases, on its first row only.
    pub generated: Option<u64>,
    /// `METHOD /path`, or `None` for the row of undocumented methods.
    pub operation: Option<String>,
    /// The undocumented methods probed, for that row.
    pub methods: Vec<String>,
    pub calls: u64,
    /// (status or `None` for no response, count).
    pub statuses: Vec<(Option<u16>, u64)>,
}

/// One row of the checks table (the template says what each check asks).
#[derive(Debug, Serialize)]
pub struct CheckRow {
    pub name: String,
    pub evaluated: u64,
    pub failed: u64,
    /// `no_5xx`, `schema` or `reported`.
    pub counts: &'static str,
}

/// A finding and the run it came from.
#[derive(Debug, Serialize)]
pub struct RunFinding {
    pub run: &'static str,
    #[serde(flatten)]
    pub finding: Finding,
}

/// One Schemathesis run, as its JSON report tells it.
#[derive(Debug, Serialize)]
pub struct Run {
    pub name: &'static str,
    /// Schemathesis' own rendering of its command line, paths from the workspace root.
    pub command: String,
    pub seconds: f64,
    pub exit: i32,
    pub seed: Option<u64>,
    pub generated: u64,
    /// Schemathesis' summary of its failures, one group per failure title.
    pub failures: Vec<FailureGroup>,
}

/// Part 4's figures.
#[derive(Debug, Default, Serialize)]
pub struct Schemathesis {
    /// `schemathesis --version`'s (the pin is in `xtask/src/stress.rs`).
    pub version: String,
    pub python: String,
    pub functions_profile: String,
    /// `bench/schemathesis/schemathesis.toml` as run.
    pub config: String,
    pub seed: Option<u64>,
    pub limits: Limits,
    pub generated: u64,
    pub calls: u64,
    pub seconds: f64,
    pub runs: Vec<Run>,
    pub operations: Vec<OperationRow>,
    pub checks: Vec<CheckRow>,
    /// Every finding of the three runs, in order.
    pub findings: Vec<RunFinding>,
    /// Requests Schemathesis could not complete, `run: title ×count`.
    pub errors: Vec<String>,
    /// Operations the document kept Schemathesis from testing: (operation, type, message).
    pub untestable: BTreeSet<(String, String, String)>,
    pub function_5xx: u64,
    pub front_5xx: u64,
    pub panics: usize,
    pub no_5xx: bool,
    pub schema_failures: usize,
    pub schema_evaluations: u64,
}

pub async fn run(binaries: &Binaries, cli: &Path) -> Result<Schemathesis, BenchError> {
    for key in ["OPENAI_API_KEY", "OPENAI_API_KEY_PARAM"] {
        if std::env::var(key).is_ok_and(|v| !v.trim().is_empty()) {
            return Err(BenchError::Setup(format!(
                "part 4 sends a few hundred POST /session requests and must not mint real, billed client secrets: unset {key} (the local stand-in is used then)"
            )));
        }
    }
    let python = version(Command::new(cli.with_file_name("python3")).arg("--version"));
    let reported = version(Command::new(cli).arg("--version"));
    let dir = std::env::temp_dir().join(format!(
        "tollgate-bench-schemathesis-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(BenchError::io(dir.display()))?;
    let config_path = workspace_root().join(CONFIG);
    let config = std::fs::read_to_string(&config_path).map_err(BenchError::io(CONFIG))?;

    let mut env = vec![("RUST_LOG".into(), "info".into())];
    env.extend(limits().env());
    let stack = stack::Functions::start(binaries, env).await?;
    let secrets = [stack.token.clone(), stack.internal_token.clone()];
    // What every run gets; the config sends each credential only where its caller would.
    let env: Vec<(&str, PathBuf)> = vec![
        ("TOLLGATE_BENCH_HOOKS", workspace_root().join(HOOKS)),
        ("TOLLGATE_BENCH_DIR", dir.clone()),
        ("TOLLGATE_BENCH_BEARER", stack.token.clone().into()),
        (
            "TOLLGATE_BENCH_INTERNAL_TOKEN",
            stack.internal_token.clone().into(),
        ),
        ("TOLLGATE_BENCH_PAYER", stack.accounts[0].clone().into()),
        ("TOLLGATE_BENCH_PAYEE", stack.accounts[1].clone().into()),
    ];
    let callers = [
        Caller {
            name: "session",
            reproduce: Reproduce {
                base_url: stack.session_url.clone(),
                url_var: "SESSION_URL",
                credential: None,
            },
            accounts: false,
        },
        Caller {
            name: "transfers",
            reproduce: Reproduce {
                base_url: stack.transfer_url.clone(),
                url_var: "TRANSFER_URL",
                credential: Some(("Authorization", "Bearer $TOKEN")),
            },
            accounts: true,
        },
        Caller {
            name: "operator",
            reproduce: Reproduce {
                base_url: stack.session_url.clone(),
                url_var: "SESSION_URL",
                credential: Some(("X-Internal-Token", "$INTERNAL_TOKEN")),
            },
            accounts: false,
        },
    ];
    let mut runs = Vec::new();
    for caller in callers {
        println!("part 4: schemathesis ({})", caller.name);
        let mut cmd = Command::new(cli);
        cmd.arg("--config-file")
            .arg(&config_path)
            .arg("run")
            .arg(workspace_root().join("openapi.yaml"))
            .args(["--include-tag", caller.name])
            .current_dir(&dir)
            .env_remove("SCHEMATHESIS_HOOKS")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("TOLLGATE_BENCH_BASE_URL", &caller.reproduce.base_url)
            .env("TOLLGATE_BENCH_RUN", caller.name)
            .envs(
                env.iter()
                    .filter(|(k, _)| caller.accounts || !k.contains("_PAY"))
                    .map(|(k, v)| (*k, v)),
            );
        let dir = dir.clone();
        // Schemathesis runs for a while; the front and the pool keep serving meanwhile.
        let ran = tokio::task::spawn_blocking(move || schemathesis(cmd, &dir, caller))
            .await
            .map_err(|e| BenchError::Setup(format!("the Schemathesis task: {e}")))??;
        runs.push(ran);
    }
    let panics = stack.stop().await;
    let mut figures = summarise(runs, panics);
    figures.python = python.trim_start_matches("Python ").to_string();
    figures.version = reported
        .rsplit(' ')
        .next()
        .unwrap_or("unknown")
        .trim_start_matches('v')
        .to_string();
    figures.functions_profile = binaries.profile.clone();
    figures.config = config;
    let text = serde_json::to_string(&figures).unwrap_or_default();
    if secrets.iter().any(|s| text.contains(s.as_str())) {
        return Err(BenchError::Setup(format!(
            "a credential would reach part 4's report; Schemathesis' files are in {}",
            dir.display()
        )));
    }
    if figures.errors.is_empty() && figures.no_5xx {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!(
            "part 4: Schemathesis' logs and reports kept in {}",
            dir.display()
        );
    }
    Ok(figures)
}

/// Runs one caller's Schemathesis and reads its reports.
fn schemathesis(
    mut cmd: Command,
    dir: &Path,
    caller: Caller,
) -> Result<(Run, Tally, Vec<String>), BenchError> {
    let file = |ext: &str| dir.join(format!("{}.{ext}", caller.name));
    let log = file("log");
    let out = std::fs::File::create(&log).map_err(BenchError::io(log.display()))?;
    let err = out.try_clone().map_err(BenchError::io(log.display()))?;
    // One file for both streams, so they interleave as on a terminal.
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let started = Instant::now();
    let status = cmd.status().map_err(BenchError::io(format!(
        "could not start {}",
        cmd.get_program().to_string_lossy()
    )))?;
    let seconds = started.elapsed().as_secs_f64();
    println!("part 4: {} in {seconds:.0}s ({status})", caller.name);
    let broken = |what: String| {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        BenchError::Schemathesis {
            caller: caller.name,
            what,
            tail: lines[lines.len().saturating_sub(30)..].join("\n"),
        }
    };
    let read = |ext: &str| {
        std::fs::read_to_string(file(ext))
            .map_err(|e| broken(format!("wrote no {ext} report: {e}")))
    };
    let report: RunReport = serde_json::from_str(&read("json")?)
        .map_err(|e| broken(format!("wrote a bad JSON report: {e}")))?;
    if !report.complete {
        return Err(broken(format!(
            "did not complete (stop reason {})",
            report.stop_reason
        )));
    }
    let mut tally = Tally::default();
    for line in read("ndjson")?.lines().filter(|l| !l.trim().is_empty()) {
        let event: NdjsonEvent =
            serde_json::from_str(line).map_err(|e| broken(format!("wrote bad NDJSON: {e}")))?;
        if let Some(finished) = event.scenario_finished {
            tally.add(&finished.recorder, &caller.reproduce);
        }
        if let Some(e) = event.non_fatal_error {
            let text = |at: &str| e.pointer(at).and_then(|v| v.as_str()).unwrap_or("");
            if text("/value/type") == "InvalidSchema" {
                let (label, message) = (text("/label"), text("/value/message"));
                let error = (label.into(), "InvalidSchema".into(), message.into());
                tally.untestable.insert(error);
            }
        }
    }
    if tally.statuses.is_empty() {
        return Err(broken("made no API call".into()));
    }
    // A run that never got one 2xx tested only the way in (401s, 400s): its credentials or
    // data did not work, and "no failures" would mean nothing.
    // (A preflight gets 405 here: CORS is off.)
    for op in tally
        .operations
        .iter()
        .filter(|op| !op.starts_with("OPTIONS "))
    {
        let statuses = tally.statuses.get(op);
        if !statuses.is_some_and(|s| s.keys().any(|s| s.is_some_and(|s| (200..300).contains(&s)))) {
            return Err(broken(format!(
                "never got a 2xx from {op} (statuses: {statuses:?}), so the run proves nothing"
            )));
        }
    }
    // Paths in the report are the reader's: the checkout is not.
    let root = workspace_root();
    let mut command = report.command;
    for prefix in [root.clone(), root.canonicalize().unwrap_or(root)] {
        command = command.replace(&format!("{}/", prefix.display()), "");
    }
    // A schema error is the document's (listed from the events), not a request's.
    let errors = report
        .errors
        .iter()
        .filter(|e| e.title != "Schema Error")
        .map(|e| format!("{}: {} ×{}", caller.name, e.title, e.count))
        .collect();
    let run = Run {
        name: caller.name,
        command: command.replacen("st ", "schemathesis ", 1),
        seconds,
        exit: report.exit_code,
        seed: report.seed,
        generated: report
            .test_cases
            .get("generated")
            .and_then(|g| g.as_u64())
            .unwrap_or(0),
        failures: report.failures,
    };
    Ok((run, tally, errors))
}

/// The report's figures from the three runs.
fn summarise(runs: Vec<(Run, Tally, Vec<String>)>, panics: usize) -> Schemathesis {
    let mut operations = Vec::new();
    let mut checks: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut findings = Vec::new();
    let mut figures = Schemathesis {
        limits: limits(),
        panics,
        ..Schemathesis::default()
    };
    for (run, tally, errors) in runs {
        let (documented, others): (Vec<_>, Vec<_>) = tally
            .statuses
            .iter()
            .partition(|(op, _)| tally.operations.contains(*op));
        let row = |operation: Option<String>, methods, statuses: BTreeMap<Option<u16>, u64>| {
            OperationRow {
                run: String::new(),
                generated: None,
                operation,
                methods,
                calls: statuses.values().sum(),
                statuses: statuses.into_iter().collect(),
            }
        };
        let mut rows: Vec<OperationRow> = documented
            .into_iter()
            .map(|(op, s)| row(Some(op.clone()), Vec::new(), s.clone()))
            .collect();
        if !others.is_empty() {
            let mut methods = BTreeSet::new();
            let mut merged = BTreeMap::new();
            for (op, s) in others {
                methods.insert(op.split(' ').next().unwrap_or("?").to_string());
                for (status, n) in s {
                    *merged.entry(*status).or_default() += n;
                }
            }
            rows.push(row(None, methods.into_iter().collect(), merged));
        }
        if let Some(first) = rows.first_mut() {
            first.run = run.name.to_string();
            first.generated = Some(run.generated);
        }
        figures.calls += rows.iter().map(|r| r.calls).sum::<u64>();
        operations.extend(rows);
        for (name, (evaluated, failed)) in &tally.checks {
            let entry = checks.entry(name.clone()).or_default();
            entry.0 += evaluated;
            entry.1 += failed;
        }
        figures.function_5xx += tally.function_5xx;
        figures.front_5xx += tally.front_5xx;
        figures.untestable.extend(tally.untestable);
        figures.errors.extend(errors);
        figures.generated += run.generated;
        figures.seconds += run.seconds;
        findings.extend(tally.findings.into_iter().map(|finding| RunFinding {
            run: run.name,
            finding,
        }));
        figures.runs.push(run);
    }
    // The goals' checks first, in the template's order; any other after, by name.
    let rank = |name: &str| match counts(name) {
        "no_5xx" => 0,
        "schema" => 1 + SCHEMA_CHECKS.iter().position(|c| *c == name).unwrap_or(0),
        _ => SCHEMA_CHECKS.len() + 1,
    };
    let mut checks: Vec<CheckRow> = checks
        .into_iter()
        .map(|(name, (evaluated, failed))| CheckRow {
            counts: counts(&name),
            name,
            evaluated,
            failed,
        })
        .collect();
    checks.sort_by_key(|c| rank(&c.name));
    figures.schema_evaluations = checks
        .iter()
        .filter(|c| c.counts == "schema")
        .map(|c| c.evaluated)
        .sum();
    figures.seed = figures.runs.first().and_then(|r| r.seed);
    // A finding on a function's response with any schema check failed, 5xx or not.
    figures.schema_failures = findings
        .iter()
        .filter(|f| !f.finding.from_front && f.finding.checks.keys().any(|c| counts(c) == "schema"))
        .count();
    figures.no_5xx = figures.function_5xx == 0 && panics == 0 && figures.errors.is_empty();
    figures.operations = operations;
    figures.checks = checks;
    figures.findings = findings;
    if !figures.no_5xx || figures.schema_failures > 0 {
        eprintln!(
            "!!! part 4: {} 5xx from the functions, {panics} panics in their log, {} unanswered, {} schema failure groups",
            figures.function_5xx,
            figures.errors.len(),
            figures.schema_failures
        );
        for f in figures
            .findings
            .iter()
            .filter(|f| matches!(f.finding.counts, "schema" | "no_5xx"))
        {
            eprintln!(
                "!!!   {:?} on {}: {}",
                f.finding.checks.keys(),
                f.finding.operation,
                f.finding.reproduction
            );
        }
    }
    figures
}
