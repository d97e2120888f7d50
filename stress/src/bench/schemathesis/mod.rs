//! Part 4: Schemathesis against `openapi.yaml`, through the harness's HTTP front.
//!
//! The integration tests check every response *they* provoke against `openapi.yaml`; this part
//! lets a tool that knows nothing of our code generate the requests instead (schema examples,
//! boundary values, schema-violating data, random bytes, other methods, request chains), so
//! the document is tested against inputs nobody thought of. Schemathesis speaks HTTP, so it
//! calls the front ([`crate::lambda::Front`], an API Gateway stand-in), which turns each request
//! into an event with the one event builder and invokes the function's processes in the pool,
//! under the runtime API emulator, as Lambda would.
//!
//! Choices worth knowing:
//!
//! - Three Schemathesis runs, one per kind of caller, each with only the headers that caller
//!   really sends: the browser (`POST /session`, no credentials), a bank client
//!   (`/transfers`, `/accounts`, a client's bearer token) and the operator
//!   (`/internal/kill-switch`, the internal token). The operator run goes last because it
//!   flips kill switches, which would turn every later answer into 403 `service_disabled`.
//! - Secrets reach Schemathesis through environment variables that its config file names
//!   (`${…}`), so no command line, config file or report holds one, and its own output
//!   sanitization hides the two credential headers (but not `Idempotency-Key`, which a
//!   reproduction needs).
//! - The limits are raised: every request comes from one address, so the default `ip=10/1h`
//!   on `POST /session` would answer all but ten with 429 and hide the 200 path. 429s are
//!   conformance-checked by the integration tests instead.
//! - A Schemathesis hook replaces, in memory only, the document's example account ids with
//!   the stack's two accounts, so the examples reach a 201 and the stateful phase can follow
//!   the 201's `Location` to `GET /transfers/{id}`; random ids would only ever meet 404.
//! - Every response of a function carries `X-Request-Id`; a 5xx without one came from the
//!   front, not a function, and is reported apart and kept out of the goals. A function that
//!   panics is caught through its log.

mod findings;
mod record;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::Serialize;

use self::findings::{schema_failures, Caller, Credential, Finding, Outcome, SCHEMA_CHECKS};
use self::record::{Event, Summary};
use super::binaries::Binaries;
use super::report::version;
use super::{workspace_root, BenchError};
use crate::limits::Limits;

/// Test cases per operation and phase: about a minute for all three runs on 2 cores.
const MAX_EXAMPLES: u32 = 100;
/// Hypothesis' seed, so a run can be repeated (ids and timings still differ).
const SEED: u64 = 20_251_201;

/// The limits the functions run with here (see the module docs).
fn limits() -> Limits {
    Limits::new(
        "ip=100000/1h,global=100000/1d",
        "ip=100000/1m,client=100000/1m",
    )
}

/// Variables Schemathesis' config files read the credentials from.
const BEARER_VAR: &str = "TOLLGATE_BENCH_BEARER";
const INTERNAL_VAR: &str = "TOLLGATE_BENCH_INTERNAL_TOKEN";

/// What each check asks of our API, for the report, in the report's order.
const CHECKS: &[(&str, &str)] = &[
    ("not_a_server_error", "no 5xx"),
    (
        "status_code_conformance",
        "the status is one the operation documents",
    ),
    (
        "content_type_conformance",
        "the `Content-Type` is the documented one for that status",
    ),
    (
        "response_headers_conformance",
        "documented required headers are present and match their schemas",
    ),
    (
        "response_schema_conformance",
        "the body matches the documented schema",
    ),
    (
        "unsupported_method",
        "a method the path does not document gets 405",
    ),
    (
        "allow_header_conformance",
        "a 405 carries `Allow` with the documented methods",
    ),
    (
        "negative_data_rejection",
        "schema-invalid input gets a 4xx, never a 2xx",
    ),
    (
        "positive_data_acceptance",
        "schema-valid input gets 2xx (or 401/403/404/409/429/5xx)",
    ),
    (
        "missing_required_header",
        "a request without a required header (`Idempotency-Key`) gets 4xx",
    ),
    (
        "ignored_auth",
        "a request without or with wrong credentials gets 401, not data",
    ),
    (
        "use_after_free",
        "a deleted resource stays gone (we delete nothing)",
    ),
    (
        "ensure_resource_availability",
        "a created resource can be read back (`Location` → `GET /transfers/{id}`)",
    ),
    (
        "object_level_authorization",
        "one caller cannot read another's resources (needs a second caller: not configured)",
    ),
    ("max_response_time", "no response time limit was configured"),
];

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

/// One row of the checks table.
#[derive(Debug, Serialize)]
pub struct CheckRow {
    pub name: String,
    pub meaning: &'static str,
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

/// Part 4's figures.
#[derive(Debug, Serialize)]
pub struct Schemathesis {
    /// `schemathesis --version`'s (the pin is in `xtask/src/stress.rs`).
    pub version: String,
    pub python: String,
    pub functions_profile: String,
    pub max_examples: u32,
    pub seed: u64,
    pub limits: Limits,
    pub generated: u64,
    pub calls: u64,
    pub seconds: f64,
    pub outcomes: Vec<Outcome>,
    pub operations: Vec<OperationRow>,
    pub checks: Vec<CheckRow>,
    /// Every finding of the three runs, in order.
    pub findings: Vec<RunFinding>,
    pub errors: Vec<String>,
    /// Operations the document kept Schemathesis from testing: (operation, type, message).
    pub untestable: Vec<(String, String, String)>,
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
    let version = reported
        .rsplit(' ')
        .next()
        .unwrap_or("unknown")
        .trim_start_matches('v');
    let dir = std::env::temp_dir().join(format!(
        "tollgate-bench-schemathesis-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(BenchError::io(dir.display()))?;

    let mut env = vec![("RUST_LOG".into(), "info".into())];
    env.extend(limits().env());
    let stack = stack::Functions::start(binaries, env).await?;
    let hook = dir.join("demo_accounts.py");
    std::fs::write(&hook, hook_source(&stack.accounts[0], &stack.accounts[1]))
        .map_err(BenchError::io(hook.display()))?;
    let callers = [
        Caller {
            name: "session",
            tag: "session",
            base_url: stack.session_url.clone(),
            url_var: "SESSION_URL",
            credential: None,
            demo_hook: false,
        },
        Caller {
            name: "transfers",
            tag: "transfers",
            base_url: stack.transfer_url.clone(),
            url_var: "TRANSFER_URL",
            credential: Some(Credential {
                header: "Authorization",
                var: BEARER_VAR,
                scheme: "Bearer ",
                value: stack.token.clone(),
                shown: "$TOKEN",
            }),
            demo_hook: true,
        },
        Caller {
            name: "operator",
            tag: "operator",
            base_url: stack.session_url.clone(),
            url_var: "SESSION_URL",
            credential: Some(Credential {
                header: "X-Internal-Token",
                var: INTERNAL_VAR,
                scheme: "",
                value: stack.internal_token.clone(),
                shown: "$INTERNAL_TOKEN",
            }),
            demo_hook: false,
        },
    ];
    let mut outcomes = Vec::new();
    for caller in &callers {
        println!("part 4: schemathesis ({})", caller.name);
        let (cli, dir, hook, caller) = (cli.to_owned(), dir.clone(), hook.clone(), caller.clone());
        // Schemathesis runs for a while; the front and the pool keep serving meanwhile.
        let outcome = tokio::task::spawn_blocking(move || schemathesis(&cli, &dir, &hook, &caller))
            .await
            .map_err(|e| BenchError::Setup(format!("the Schemathesis task: {e}")))??;
        outcomes.push(outcome);
    }
    let panics = stack.stop().await;
    let unanswered: usize = outcomes.iter().map(|o| o.errors.len()).sum();
    let mut figures = summarise(outcomes, panics, python, binaries.profile.clone());
    figures.version = version.to_string();
    if unanswered == 0 && figures.no_5xx {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!(
            "part 4: Schemathesis' logs and reports kept in {}",
            dir.display()
        );
    }
    Ok(figures)
}

/// The hook: the stack's accounts as the document's examples, in memory only.
fn hook_source(payer: &str, payee: &str) -> String {
    let quote = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    format!(
        r#"# Written by `cargo xtask bench --part 4`. Replaces, in the schema Schemathesis loaded
# (never in openapi.yaml), the example account ids with this stack's accounts, so the
# examples reach a 201 and the stateful phase can follow its Location.
import schemathesis

PAYER = {payer}
PAYEE = {payee}


@schemathesis.hook
def before_load_schema(context, raw_schema):
    schemas = raw_schema["components"]["schemas"]
    schemas["AccountId"]["examples"] = [PAYER, PAYEE]
    schemas["TransferRequest"]["examples"] = [
        {{"from": PAYER, "to": PAYEE, "amount": 2500, "memo": "rent"}}
    ]
    for parameter in raw_schema["paths"]["/accounts/{{id}}"]["get"]["parameters"]:
        if parameter["name"] == "id":
            parameter["schema"]["examples"] = [PAYER, PAYEE]
"#,
        payer = quote(payer),
        payee = quote(payee),
    )
}

/// The config file of one run: credentials by variable, sanitization of exactly those.
fn config_source(caller: &Caller, hook: &Path) -> String {
    let quote = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    let mut out = String::new();
    if caller.demo_hook {
        let _ = writeln!(out, "hooks = {}", quote(&hook.display().to_string()));
    }
    out.push_str("continue-on-failure = true\n");
    if let Some(c) = &caller.credential {
        let value = format!("{}${{{}}}", c.scheme, c.var);
        let _ = writeln!(out, "headers = {{ {} = {} }}", c.header, quote(&value));
    }
    out.push_str(
        "\n[output.sanitization]\n\
         keys-to-sanitize = [\"authorization\", \"x-internal-token\"]\n\
         sensitive-markers = [\"authorization\", \"internal-token\", \"secret\"]\n",
    );
    out
}

/// The last `n` lines of a file.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// One Schemathesis run against `caller`'s operations.
fn schemathesis(
    cli: &Path,
    dir: &Path,
    hook: &Path,
    caller: &Caller,
) -> Result<Outcome, BenchError> {
    let config = dir.join(format!("{}.toml", caller.name));
    let config_text = config_source(caller, hook);
    std::fs::write(&config, &config_text).map_err(BenchError::io(config.display()))?;
    let ndjson = dir.join(format!("{}.ndjson", caller.name));
    let summary = dir.join(format!("{}.json", caller.name));
    let log = dir.join(format!("{}.log", caller.name));
    let openapi = workspace_root().join("openapi.yaml");
    let args: Vec<String> = vec![
        "--config-file".into(),
        config.display().to_string(),
        "run".into(),
        openapi.display().to_string(),
        "--url".into(),
        caller.base_url.clone(),
        "--include-tag".into(),
        caller.tag.into(),
        "--checks".into(),
        "all".into(),
        "--max-examples".into(),
        MAX_EXAMPLES.to_string(),
        "--seed".into(),
        SEED.to_string(),
        "--workers".into(),
        "1".into(),
        "--generation-database".into(),
        "none".into(),
        "--no-color".into(),
        "--report".into(),
        "ndjson,json".into(),
        "--report-ndjson-path".into(),
        ndjson.display().to_string(),
        "--report-json-path".into(),
        summary.display().to_string(),
    ];
    let out = std::fs::File::create(&log).map_err(BenchError::io(log.display()))?;
    let err = out.try_clone().map_err(BenchError::io(log.display()))?;
    let mut cmd = Command::new(cli);
    cmd.args(&args)
        .current_dir(dir)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env_remove("SCHEMATHESIS_HOOKS")
        .stdin(Stdio::null())
        // One file for both streams, so they interleave as on a terminal.
        .stdout(out)
        .stderr(err);
    if let Some(c) = &caller.credential {
        cmd.env(c.var, &c.value);
    }
    let started = Instant::now();
    let status = cmd
        .status()
        .map_err(BenchError::io(format!("could not start {}", cli.display())))?;
    let seconds = started.elapsed().as_secs_f64();
    println!("part 4: {} in {seconds:.0}s ({status})", caller.name);
    let broken = |what: String| BenchError::Schemathesis {
        caller: caller.name,
        what,
        tail: tail(&log, 30),
    };
    // Paths in the report are the reader's: the temporary directory and the checkout are not.
    let root = workspace_root()
        .canonicalize()
        .unwrap_or_else(|_| workspace_root());
    let shown = |a: &str| {
        a.replace(&dir.display().to_string(), ".")
            .replace(&root.display().to_string(), ".")
    };
    let command = format!(
        "schemathesis {}",
        args.iter().map(|a| shown(a)).collect::<Vec<_>>().join(" ")
    );
    let summary_text = std::fs::read_to_string(&summary)
        .map_err(|e| broken(format!("wrote no report to {}: {e}", summary.display())))?;
    let summary: Summary = serde_json::from_str(&summary_text)
        .map_err(|e| broken(format!("wrote a bad summary: {e}")))?;
    if !summary.complete {
        return Err(broken(format!(
            "did not complete (stop reason {})",
            summary.stop_reason.as_deref().unwrap_or("unknown")
        )));
    }
    let events = std::fs::read_to_string(&ndjson)
        .map_err(|e| broken(format!("wrote no events to {}: {e}", ndjson.display())))?;
    let mut outcome = Outcome {
        name: caller.name,
        tag: caller.tag,
        command,
        config: shown(&config_text),
        seconds,
        exit: status.to_string(),
        generated: summary.test_cases.generated,
        // A schema error is the document's (listed from the events below), not a request's.
        errors: summary
            .errors
            .iter()
            .filter(|e| e.title != "Schema Error")
            .map(|e| format!("{} ×{}", e.title, e.count))
            .collect(),
        ..Outcome::default()
    };
    for line in events.lines().filter(|l| !l.trim().is_empty()) {
        let event: Event =
            serde_json::from_str(line).map_err(|e| broken(format!("wrote bad NDJSON: {e}")))?;
        if let Some(finished) = event.scenario_finished {
            outcome.add(&finished.recorder, caller);
        }
        if let Some(e) = event
            .non_fatal_error
            .filter(|e| e.value.kind == "InvalidSchema")
        {
            outcome
                .untestable
                .insert((e.label, e.value.kind, e.value.message));
        }
    }
    if outcome.calls == 0 {
        return Err(broken("made no API call".into()));
    }
    // A run that never got one 2xx tested only the way in (401s, 400s): its credentials or
    // data did not work, and "no failures" would mean nothing.
    // (A preflight gets 405 here: CORS is off.)
    for op in operations_of(caller.tag)
        .iter()
        .filter(|op| !op.starts_with("OPTIONS "))
    {
        let statuses = outcome.statuses.get(*op);
        let ok =
            statuses.is_some_and(|s| s.keys().any(|s| s.is_some_and(|s| (200..300).contains(&s))));
        if !ok {
            return Err(broken(format!(
                "never got a 2xx from {op} (statuses: {statuses:?}), so the run proves nothing"
            )));
        }
    }
    Ok(outcome)
}

/// The report's figures from the three runs.
fn summarise(
    mut outcomes: Vec<Outcome>,
    panics: usize,
    python: String,
    profile: String,
) -> Schemathesis {
    let mut operations = Vec::new();
    for o in &outcomes {
        let (documented, others): (Vec<_>, Vec<_>) = o
            .statuses
            .iter()
            .partition(|(op, _)| operations_of(o.tag).contains(&op.as_str()));
        let mut rows: Vec<OperationRow> = documented
            .into_iter()
            .map(|(op, s)| OperationRow {
                run: String::new(),
                generated: None,
                operation: Some(op.clone()),
                methods: Vec::new(),
                calls: s.values().sum(),
                statuses: s.iter().map(|(k, v)| (*k, *v)).collect(),
            })
            .collect();
        if !others.is_empty() {
            let mut methods = BTreeSet::new();
            let mut merged: BTreeMap<Option<u16>, u64> = BTreeMap::new();
            for (op, s) in others {
                methods.insert(op.split(' ').next().unwrap_or("?").to_string());
                for (status, n) in s {
                    *merged.entry(*status).or_default() += n;
                }
            }
            rows.push(OperationRow {
                run: String::new(),
                generated: None,
                operation: None,
                methods: methods.into_iter().collect(),
                calls: merged.values().sum(),
                statuses: merged.into_iter().collect(),
            });
        }
        if let Some(first) = rows.first_mut() {
            first.run = o.name.to_string();
            first.generated = Some(o.generated);
        }
        operations.extend(rows);
    }

    let mut names: BTreeSet<&str> = CHECKS.iter().map(|(n, _)| *n).collect();
    for o in &outcomes {
        names.extend(o.checks.keys().map(String::as_str));
    }
    let order = CHECKS.iter().map(|(n, _)| *n).chain(
        names
            .iter()
            .copied()
            .filter(|n| !CHECKS.iter().any(|(c, _)| c == n)),
    );
    let checks = order
        .map(|name| {
            let (evaluated, failed) = outcomes
                .iter()
                .filter_map(|o| o.checks.get(name))
                .fold((0, 0), |(a, b), (e, f)| (a + e, b + f));
            CheckRow {
                name: name.to_string(),
                meaning: CHECKS
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map_or("", |(_, m)| m),
                evaluated,
                failed,
                counts: if name == "not_a_server_error" {
                    "no_5xx"
                } else if SCHEMA_CHECKS.contains(&name) {
                    "schema"
                } else {
                    "reported"
                },
            }
        })
        .collect();

    let errors: Vec<String> = outcomes
        .iter()
        .flat_map(|o| o.errors.iter().map(move |e| format!("{}: {e}", o.name)))
        .collect();
    let function_5xx = outcomes.iter().map(|o| o.function_5xx).sum();
    let untestable = outcomes
        .iter()
        .flat_map(|o| o.untestable.iter().cloned())
        .collect();
    let schema_failures = schema_failures(&outcomes).len();
    shout(&outcomes, function_5xx, panics, &errors);
    let findings = outcomes
        .iter_mut()
        .flat_map(|o| {
            let run = o.name;
            o.failures
                .drain(..)
                .map(move |finding| RunFinding { run, finding })
        })
        .collect();
    Schemathesis {
        version: String::new(),
        python: python.trim_start_matches("Python ").to_string(),
        functions_profile: profile,
        max_examples: MAX_EXAMPLES,
        seed: SEED,
        limits: limits(),
        generated: outcomes.iter().map(|o| o.generated).sum(),
        calls: outcomes.iter().map(|o| o.calls).sum(),
        seconds: outcomes.iter().map(|o| o.seconds).sum(),
        operations,
        checks,
        findings,
        no_5xx: function_5xx == 0 && panics == 0 && errors.is_empty(),
        errors,
        untestable,
        function_5xx,
        front_5xx: outcomes.iter().map(|o| o.front_5xx).sum(),
        panics,
        schema_failures,
        schema_evaluations: outcomes
            .iter()
            .flat_map(|o| &o.checks)
            .filter(|(n, _)| SCHEMA_CHECKS.contains(&n.as_str()))
            .map(|(_, (e, _))| e)
            .sum(),
        outcomes,
    }
}

/// Prints what went wrong where nobody can miss it.
fn shout(outcomes: &[Outcome], function_5xx: u64, panics: usize, errors: &[String]) {
    let schema: Vec<&Finding> = schema_failures(outcomes);
    if function_5xx > 0 || panics > 0 || !errors.is_empty() || !schema.is_empty() {
        eprintln!(
            "!!! part 4: {function_5xx} 5xx from the functions, {panics} panics in their log, {} unanswered, {} schema failure groups",
            errors.len(),
            schema.len()
        );
        for f in schema {
            eprintln!(
                "!!!   {} on {} ({} cases): {}",
                f.check_names, f.operation, f.case_count, f.reproduction
            );
        }
    }
}

/// The operations `openapi.yaml` tags with `tag`, the CORS preflights last.
fn operations_of(tag: &str) -> &'static [&'static str] {
    match tag {
        "session" => &["POST /session", "OPTIONS /session"],
        "transfers" => &[
            "POST /transfers",
            "GET /transfers/{id}",
            "GET /accounts/{id}",
            "OPTIONS /transfers",
            "OPTIONS /transfers/{id}",
            "OPTIONS /accounts/{id}",
        ],
        "operator" => &[
            "GET /internal/kill-switch",
            "PUT /internal/kill-switch",
            "OPTIONS /internal/kill-switch",
        ],
        _ => &[],
    }
}

mod stack;
