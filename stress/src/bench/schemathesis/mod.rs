//! Part 4: Schemathesis against `openapi.yaml`, through the harness's HTTP front
//! ([`crate::lambda::Front`]) to the function processes, from its checked-in configuration and
//! hooks (`bench/schemathesis/`), summarised from its own JSON run report. How it is run, and
//! why, is `templates/bench-schemathesis.md`'s prose; what matters for the code:
//!
//! - Three runs, one per kind of caller (`--include-tag`), the operator's last (it flips kill
//!   switches). What changes from run to run (base URL, credentials, accounts, report path)
//!   reaches the files through environment variables, so no command line or file holds a
//!   secret; the figures are checked for the secrets before they are returned.
//! - The goals are read from Schemathesis' failure codes ([`Goal`]); a function's panic, which
//!   a 5xx alone may not show, from its log ([`stack`]).
//! - A run none of whose positive cases an operation accepted tested only the way in (its
//!   credentials or data did not work): it fails the bench rather than report "no failures".

mod stack;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::binaries::Binaries;
use super::report::version;
use super::{workspace_root, BenchError};
use crate::limits::Limits;

/// The limits the functions run with here (see the template).
fn limits() -> Limits {
    Limits::new(
        "ip=100000/1h,global=100000/1d",
        "ip=100000/1m,client=100000/1m",
    )
}

/// The checked-in files, under the workspace root.
const CONFIG: &str = "bench/schemathesis/schemathesis.toml";
const HOOKS: &str = "bench/schemathesis/hooks.py";

/// The kinds of caller, in the order they run: each name is its operations' tag in
/// `openapi.yaml`; the bank client's run gets the stack's accounts.
const CALLERS: [&str; 3] = ["session", "transfers", "operator"];

/// Which goal a failure code of Schemathesis (`schemathesis explain <code>`) counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    /// ST101, ST102: a 5xx.
    No5xx,
    /// ST103 to ST111, ST204, ST205: a response `openapi.yaml` does not allow (status,
    /// content type, headers, body, 405 and `Allow`).
    Schema,
    /// The rest (the document's precision, stateful and auth checks): reported only.
    Reported,
}

impl Goal {
    pub fn of(code: &str) -> Goal {
        match code.strip_prefix("ST").and_then(|n| n.parse::<u16>().ok()) {
            Some(101 | 102) => Goal::No5xx,
            Some(103..=111 | 204 | 205) => Goal::Schema,
            _ => Goal::Reported,
        }
    }
}

/// The part of Schemathesis' JSON run report (`[reports.json]`) read here. Every field is
/// defaulted: one a later Schemathesis drops makes a smaller report, not a failed run.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RunReport {
    complete: bool,
    stop_reason: String,
    /// How Schemathesis was invoked, sanitized.
    command: String,
    seed: Option<u64>,
    exit_code: i32,
    test_cases: TestCases,
    failures: Vec<FailureGroup>,
    errors: Vec<FailureGroup>,
    /// Operation → phase → how its positive cases were answered.
    valid_rates: BTreeMap<String, BTreeMap<String, ValidRate>>,
    /// Warning kind → the operations it names.
    warnings: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct TestCases {
    pub generated: u64,
    pub with_failures: u64,
}

/// Schemathesis' failures (or errors) of one kind (its code and title), over a run.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct FailureGroup {
    pub code: String,
    pub title: String,
    pub count: u64,
    pub operations: Vec<String>,
}

/// How an operation answered its schema-valid cases in one phase.
#[derive(Debug, Default, Clone, Copy, Deserialize, Serialize)]
#[serde(default)]
pub struct ValidRate {
    pub accepted: u64,
    /// 404: the addressed resource does not exist.
    pub unreachable: u64,
    pub conflicts: u64,
    pub rejected: u64,
}

/// One operation's positive cases over the phases of a run.
#[derive(Debug, Serialize)]
pub struct Acceptance {
    pub run: &'static str,
    pub operation: String,
    #[serde(flatten)]
    pub rate: ValidRate,
}

/// One Schemathesis run, as its JSON report tells it.
#[derive(Debug, Serialize)]
pub struct Run {
    pub name: &'static str,
    /// Schemathesis' own rendering of its command line, paths from the workspace root.
    pub command: String,
    pub seconds: f64,
    pub exit: i32,
    pub test_cases: TestCases,
    /// Schemathesis' summary of its failures, one group per code, with the goal it counts
    /// against.
    pub failures: Vec<(FailureGroup, Goal)>,
    /// Errors (requests it could not complete, a document it could not use), `title ×count`.
    pub errors: Vec<String>,
    /// Its warnings, `kind: operations`.
    pub warnings: Vec<String>,
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
    pub seconds: f64,
    pub runs: Vec<Run>,
    pub acceptance: Vec<Acceptance>,
    /// Test cases with a 5xx, and the panics the functions logged.
    pub server_errors: u64,
    pub panics: usize,
    pub errors: usize,
    pub no_5xx: bool,
    /// Failure groups against the schema goal.
    pub schema_failures: usize,
}

pub async fn run(binaries: &Binaries, cli: &Path) -> Result<Schemathesis, BenchError> {
    for key in ["OPENAI_API_KEY", "OPENAI_API_KEY_PARAM"] {
        if std::env::var(key).is_ok_and(|v| !v.trim().is_empty()) {
            return Err(BenchError::Setup(format!(
                "part 4 sends a few hundred POST /session requests and must not mint real, billed client secrets: unset {key} (the local stand-in is used then)"
            )));
        }
    }
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
    let mut figures = Schemathesis {
        // `schemathesis, version 4.32.5` and `Python 3.11.7`: the last word.
        version: last_word(version(Command::new(cli).arg("--version"))),
        python: last_word(version(
            Command::new(cli.with_file_name("python3")).arg("--version"),
        )),
        functions_profile: binaries.profile.clone(),
        config,
        limits: limits(),
        ..Schemathesis::default()
    };
    for caller in CALLERS {
        println!("part 4: schemathesis ({caller})");
        let url = match caller {
            "transfers" => &stack.transfer_url,
            _ => &stack.session_url,
        };
        let mut cmd = Command::new(cli);
        cmd.arg("--config-file")
            .arg(&config_path)
            .arg("run")
            .arg(workspace_root().join("openapi.yaml"))
            .args(["--include-tag", caller])
            .current_dir(&dir)
            .env_remove("SCHEMATHESIS_HOOKS")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("TOLLGATE_BENCH_HOOKS", workspace_root().join(HOOKS))
            .env("TOLLGATE_BENCH_DIR", &dir)
            .env("TOLLGATE_BENCH_RUN", caller)
            .env("TOLLGATE_BENCH_BASE_URL", url)
            // The config sends each credential only where its caller would.
            .env("TOLLGATE_BENCH_BEARER", &stack.token)
            .env("TOLLGATE_BENCH_INTERNAL_TOKEN", &stack.internal_token);
        if caller == "transfers" {
            cmd.env("TOLLGATE_BENCH_PAYER", &stack.accounts[0])
                .env("TOLLGATE_BENCH_PAYEE", &stack.accounts[1]);
        }
        let dir = dir.clone();
        // Schemathesis runs for a while; the front and the pool keep serving meanwhile.
        let (seconds, report) =
            tokio::task::spawn_blocking(move || schemathesis(cmd, &dir, caller))
                .await
                .map_err(|e| BenchError::Setup(format!("the Schemathesis task: {e}")))??;
        figures.add(caller, seconds, report);
    }
    figures.panics = stack.stop().await;
    figures.no_5xx = figures.server_errors == 0 && figures.panics == 0 && figures.errors == 0;
    let text = serde_json::to_string(&figures).unwrap_or_default();
    if secrets.iter().any(|s| text.contains(s.as_str())) {
        return Err(BenchError::Setup(format!(
            "a credential would reach part 4's report; Schemathesis' files are in {}",
            dir.display()
        )));
    }
    if figures.no_5xx && figures.schema_failures == 0 {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!(
            "!!! part 4: {} test cases with a 5xx, {} panics logged, {} kinds of error, {} schema failure groups; Schemathesis' logs and reports are in {}",
            figures.server_errors, figures.panics, figures.errors, figures.schema_failures, dir.display()
        );
    }
    Ok(figures)
}

impl Schemathesis {
    /// Adds the report of the run of caller `name`, which took `seconds`, to the figures.
    fn add(&mut self, name: &'static str, seconds: f64, report: RunReport) {
        let failures: Vec<(FailureGroup, Goal)> = (report.failures.into_iter())
            .map(|g| {
                let goal = Goal::of(&g.code);
                (g, goal)
            })
            .collect();
        for (group, goal) in &failures {
            match goal {
                Goal::No5xx => self.server_errors += group.count,
                Goal::Schema => self.schema_failures += 1,
                Goal::Reported => {}
            }
        }
        for (operation, phases) in report.valid_rates {
            let mut rate = ValidRate::default();
            for r in phases.values() {
                rate.accepted += r.accepted;
                rate.unreachable += r.unreachable;
                rate.conflicts += r.conflicts;
                rate.rejected += r.rejected;
            }
            let run = name;
            self.acceptance.push(Acceptance {
                run,
                operation,
                rate,
            });
        }
        let errors = report
            .errors
            .iter()
            .map(|e| format!("{} ×{}", e.title, e.count));
        // Every warning kind is listed, most with no operation.
        let warnings = report.warnings.iter().filter(|(_, ops)| !ops.is_empty());
        let warnings = warnings.map(|(kind, ops)| format!("{kind}: {}", ops.join(", ")));
        let run = Run {
            name,
            command: report.command.replacen("st ", "schemathesis ", 1),
            seconds,
            exit: report.exit_code,
            test_cases: report.test_cases,
            failures,
            errors: errors.collect(),
            warnings: warnings.collect(),
        };
        self.seed = self.seed.or(report.seed);
        self.generated += run.test_cases.generated;
        self.seconds += seconds;
        self.errors += run.errors.len();
        self.runs.push(run);
    }
}

fn last_word(line: String) -> String {
    line.rsplit(' ').next().unwrap_or("unknown").to_string()
}

/// Runs one caller's Schemathesis and reads its report; returns how long it took, and the report
/// with the command's paths relative to the workspace.
fn schemathesis(
    mut cmd: Command,
    dir: &Path,
    caller: &'static str,
) -> Result<(f64, RunReport), BenchError> {
    let log = dir.join(format!("{caller}.log"));
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
    println!("part 4: {caller} in {seconds:.0}s ({status})");
    let broken = |what: String| {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        BenchError::Schemathesis {
            caller,
            what,
            tail: lines[lines.len().saturating_sub(30)..].join("\n"),
        }
    };
    let path = dir.join(format!("{caller}.json"));
    let text =
        std::fs::read_to_string(&path).map_err(|e| broken(format!("wrote no JSON report: {e}")))?;
    let mut report: RunReport =
        serde_json::from_str(&text).map_err(|e| broken(format!("wrote a bad JSON report: {e}")))?;
    if !report.complete {
        let reason = &report.stop_reason;
        return Err(broken(format!("did not complete (stop reason {reason})")));
    }
    proves_something(&report).map_err(broken)?;
    // Paths in the report are the reader's: the checkout is not.
    let root = workspace_root();
    for prefix in [root.clone(), root.canonicalize().unwrap_or(root)] {
        report.command = report
            .command
            .replace(&format!("{}/", prefix.display()), "");
    }
    Ok((seconds, report))
}

/// Err unless every operation but the preflights (405 here: CORS is off) accepted one of its
/// schema-valid cases: a run that never did tested only the way in (401s, 400s), and its "no
/// failures" would mean nothing.
fn proves_something(report: &RunReport) -> Result<(), String> {
    if report.test_cases.generated == 0 || report.valid_rates.is_empty() {
        return Err("tested nothing".into());
    }
    for (operation, phases) in &report.valid_rates {
        let accepted: u64 = phases.values().map(|r| r.accepted).sum();
        if accepted == 0 && !operation.starts_with("OPTIONS ") {
            return Err(format!(
                "never had a schema-valid case of {operation} accepted ({phases:?}), so the run proves nothing"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_codes_count_against_their_goal() {
        assert_eq!(Goal::of("ST101"), Goal::No5xx);
        assert_eq!(Goal::of("ST108"), Goal::Schema);
        assert_eq!(Goal::of("ST205"), Goal::Schema);
        assert_eq!(Goal::of("ST112"), Goal::Reported);
        assert_eq!(Goal::of("X108"), Goal::Reported);
        assert_eq!(Goal::of("ST202"), Goal::Reported);
        assert_eq!(Goal::of("ST401"), Goal::Reported);
    }

    #[test]
    fn a_run_with_an_operation_that_accepted_nothing_proves_nothing() {
        let report = |accepted: u64| -> RunReport {
            serde_json::from_value(serde_json::json!({
                "complete": true, "test_cases": {"generated": 10}, "unknown": 1,
                "valid_rates": {
                    "OPTIONS /session": {"examples": {"rejected": 3}},
                    "POST /session": {"examples": {"accepted": accepted, "rejected": 2},
                                      "fuzzing": {"accepted": 0}},
                },
            }))
            .unwrap()
        };
        assert!(proves_something(&report(1)).is_ok());
        let err = proves_something(&report(0)).unwrap_err();
        assert!(err.contains("POST /session"), "{err}");
        assert!(proves_something(&RunReport::default()).is_err());
    }

    /// A report with a 5xx, a schema failure, an error and warnings: each reaches the
    /// figures and the rendered part, through the branches a clean run never renders.
    #[test]
    fn a_failing_run_is_counted_and_rendered() {
        let report: RunReport = serde_json::from_value(serde_json::json!({
            "complete": true, "seed": 7, "test_cases": {"generated": 12, "with_failures": 3},
            "failures": [
                {"code": "ST101", "title": "Server error", "count": 2, "operations": ["POST /session"]},
                {"code": "ST108", "title": "Response violates schema", "count": 1, "operations": ["POST /session"]},
                {"code": "ST202", "title": "Schema-valid request rejected", "count": 4, "operations": ["POST /session"]},
            ],
            "errors": [{"title": "Network Error", "count": 1}],
            "valid_rates": {"POST /session": {"examples": {"accepted": 3, "rejected": 1}}},
            "warnings": {"missing_auth": [], "low_valid_rate": ["POST /session"]},
        }))
        .unwrap();
        let mut figures = Schemathesis {
            limits: limits(),
            ..Schemathesis::default()
        };
        figures.add("session", 1.0, report);
        assert_eq!(
            (
                figures.server_errors,
                figures.schema_failures,
                figures.errors
            ),
            (2, 1, 1)
        );
        assert_eq!((figures.seed, figures.generated), (Some(7), 12));
        assert_eq!(figures.acceptance[0].rate.accepted, 3);
        let template = include_str!("../../../templates/bench-schemathesis.md");
        let context = serde_json::json!({ "schemathesis": figures });
        let text = crate::report::render("part 4", template, &[], context).unwrap();
        for expected in [
            "| session | ST101 Server error | 2 | `POST /session` | **no 5xx** |",
            "|  | ST108 Response violates schema | 1 | `POST /session` | **schema** |",
            "|  | ST202 Schema-valid request rejected | 4 | `POST /session` | reported only |",
            "- session: error Network Error ×1; warning low_valid_rate: POST /session\n\n### Interp",
            "2 test cases got a 5xx",
            "1 kinds of response did not match",
        ] {
            assert!(text.contains(expected), "{expected:?} not in:\n{text}");
        }
    }
}
