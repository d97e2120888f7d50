//! Part 4: Schemathesis against `openapi.yaml` on a local stack.
//!
//! The integration tests check every response *they* provoke against `openapi.yaml`; this part
//! lets a tool that knows nothing of our code generate the requests instead (schema examples,
//! boundary values, schema-violating data, random bytes, other methods, request chains), so
//! the document is tested against inputs nobody thought of. It runs against the same private
//! stack as `cargo xtask test`'s end-to-end step: debug builds under `cargo lambda watch`,
//! DynamoDB Local in memory, the OpenAI stand-in.
//!
//! Choices worth knowing:
//!
//! - Three Schemathesis runs, one per kind of caller, each with only the headers that caller
//!   really sends: the browser (`POST /session`, no credentials), a bank client
//!   (`/transfers`, `/accounts`, the demo's bearer token) and the operator
//!   (`/internal/kill-switch`, the internal token). The operator run goes last because it
//!   flips kill switches, which would turn every later answer into 403 `service_disabled`.
//! - Secrets reach Schemathesis through environment variables that its config file names
//!   (`${…}`), so no command line, config file or report holds one, and its own output
//!   sanitization hides the two credential headers (but not `Idempotency-Key`, which a
//!   reproduction needs).
//! - The limits are raised for this stack: every request comes from 127.0.0.1, so the
//!   default `ip=10/1h` on `POST /session` would answer all but ten with 429 and hide the
//!   200 path. 429s are conformance-checked by the integration tests instead.
//! - A Schemathesis hook replaces, in memory only, the document's example account ids with
//!   the demo's two accounts, so the examples reach a 201 and the stateful phase can follow
//!   the 201's `Location` to `GET /transfers/{id}`; random ids would only ever meet 404.
//! - `cargo lambda watch` answers some inputs itself, without invoking a function (a
//!   non-UTF-8 JSON body, a header byte outside ASCII): a bare 500 with no `X-Request-Id`.
//!   Every response of ours carries `X-Request-Id`, so such answers are told apart, reported,
//!   and kept out of the goals, which are about the functions. A function that panics is
//!   caught through its log instead.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use super::Section;
use crate::dev::{self, Hooks, Options, Stack};
use crate::dynamodb_local::Storage;
use crate::json::{self, Value};
use crate::setup::Tools;
use crate::util::{self, info, step, Result};

/// Schemathesis, pinned: the current release when this part was written; it runs on
/// Python 3.10 and newer.
const SCHEMATHESIS: &str = "4.32.5";
/// Test cases per operation and phase: about a minute for all three runs on 2 cores.
const MAX_EXAMPLES: u32 = 100;
/// Hypothesis' seed, so a run can be repeated (the stack's ids and timings still differ).
const SEED: u64 = 20_251_201;

/// The limits this stack runs with (see the module docs).
const SESSION_RATE_LIMITS: &str = "ip=100000/1h,global=100000/1d";
const TRANSFER_RATE_LIMITS: &str = "ip=100000/1m,client=100000/1m";

/// Variables Schemathesis' config files read the credentials from.
const BEARER_VAR: &str = "TOLLGATE_BENCH_BEARER";
const INTERNAL_VAR: &str = "TOLLGATE_BENCH_INTERNAL_TOKEN";

/// The body `cargo lambda watch` sends when it cannot turn a request into an event.
const EMULATOR_500: &str =
    r#"{"type":"https://httpstatuses.com/500","status":500,"title":"Internal Server Error"}"#;

/// Checks whose failure means a response `openapi.yaml` does not allow.
const SCHEMA_CHECKS: &[&str] = &[
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "unsupported_method",
    "allow_header_conformance",
];

/// What each check asks of our API, for the report.
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

/// One kind of caller: which operations, at which URL, with which credentials.
struct Caller {
    name: &'static str,
    tag: &'static str,
    base_url: String,
    /// The `.dev/env` variable with the base URL, for reproductions.
    url_var: &'static str,
    /// Header name, the variable carrying its value, and how a reproduction writes it.
    credential: Option<(&'static str, &'static str, String, &'static str)>,
    /// Whether the demo-account hook applies.
    demo_hook: bool,
}

pub fn run(tools: &Tools) -> Result<Section> {
    for key in ["OPENAI_API_KEY", "OPENAI_API_KEY_PARAM"] {
        if std::env::var(key).is_ok_and(|v| !v.trim().is_empty()) {
            return Err(format!(
                "part 4 sends a few hundred POST /session requests and must not mint real, billed client secrets: unset {key} (the local stand-in is used then)"
            )
            .into());
        }
    }
    let python = super::venv("schemathesis-venv", &[("schemathesis", SCHEMATHESIS)])?;
    let cli = python.with_file_name("schemathesis");
    let python_version = util::first_line(Command::new(&python).arg("--version"));

    let state_dir = util::cache_dir()?.join("bench-api");
    let _ = fs::remove_dir_all(state_dir.join("schemathesis"));
    step("bench: part 4 stack");
    let stack = dev::start(
        tools,
        &Options {
            state_dir: state_dir.clone(),
            storage: Storage::InMemory,
            invoke_port: None,
            reload: false,
            interactive: false,
            hooks: Hooks {
                function_env: vec![
                    ("SESSION_RATE_LIMITS".into(), SESSION_RATE_LIMITS.into()),
                    ("TRANSFER_RATE_LIMITS".into(), TRANSFER_RATE_LIMITS.into()),
                ],
                ..Hooks::default()
            },
        },
        None,
    )?;
    // `stack` is dropped (everything stopped) on every way out of here.
    let result = test(&stack, &cli, &state_dir.join("schemathesis"));
    step("bench: part 4 stop");
    let functions_log = stack.functions_log.clone();
    drop(stack);
    let (outcomes, panics) = match result {
        Ok(outcomes) => (outcomes, count_panics(&functions_log)),
        Err(e) => {
            info(format!("logs kept in {}", state_dir.join("logs").display()));
            return Err(e);
        }
    };
    let section = report(&outcomes, panics, &python_version);
    shout(&outcomes, panics);
    Ok(section)
}

fn test(stack: &Stack, cli: &Path, dir: &Path) -> Result<Vec<Outcome>> {
    if !stack.info.openai_stand_in {
        return Err("the stack is not using the local OpenAI stand-in; part 4 will not call the real OpenAI".into());
    }
    let internal = stack.info.internal_token.clone().ok_or(
        "the stack's internal token lives in SSM (INTERNAL_TOKEN_PARAM); part 4 needs it in INTERNAL_TOKEN",
    )?;
    fs::create_dir_all(dir)?;
    let demo = &stack.info.demo;
    let hook = dir.join("demo_accounts.py");
    fs::write(&hook, hook_source(&demo.accounts[0], &demo.accounts[1]))?;
    let callers = [
        Caller {
            name: "session",
            tag: "session",
            base_url: stack.info.ephemeral_key_url.clone(),
            url_var: "SESSION_URL",
            credential: None,
            demo_hook: false,
        },
        Caller {
            name: "transfers",
            tag: "transfers",
            base_url: stack.info.transfer_url.clone(),
            url_var: "TRANSFER_URL",
            credential: Some((
                "Authorization",
                BEARER_VAR,
                demo.token.clone(),
                "Bearer $TOKEN",
            )),
            demo_hook: true,
        },
        Caller {
            name: "operator",
            tag: "operator",
            base_url: stack.info.ephemeral_key_url.clone(),
            url_var: "SESSION_URL",
            credential: Some((
                "X-Internal-Token",
                INTERNAL_VAR,
                internal,
                "$INTERNAL_TOKEN",
            )),
            demo_hook: false,
        },
    ];
    let mut outcomes = Vec::new();
    for caller in &callers {
        step(&format!("bench: part 4 schemathesis ({})", caller.name));
        outcomes.push(schemathesis(cli, dir, &hook, caller)?);
    }
    Ok(outcomes)
}

/// The hook: the demo's accounts as the document's examples, in memory only.
fn hook_source(payer: &str, payee: &str) -> String {
    format!(
        r#"# Written by `cargo xtask bench --part 4`. Replaces, in the schema Schemathesis loaded
# (never in openapi.yaml), the example account ids with this stack's demo accounts, so the
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
        payer = json::quote(payer),
        payee = json::quote(payee),
    )
}

/// The config file of one run: credentials by variable, sanitization of exactly those.
fn config_source(caller: &Caller, hook: &Path) -> String {
    let mut out = String::new();
    if caller.demo_hook {
        let _ = writeln!(out, "hooks = {}", json::quote(&hook.display().to_string()));
    }
    out.push_str("continue-on-failure = true\n");
    if let Some((name, var, _, _)) = &caller.credential {
        let value = if *name == "Authorization" {
            format!("Bearer ${{{var}}}")
        } else {
            format!("${{{var}}}")
        };
        let _ = writeln!(out, "headers = {{ {name} = {} }}", json::quote(&value));
    }
    out.push_str(
        "\n[output.sanitization]\n\
         keys-to-sanitize = [\"authorization\", \"x-internal-token\"]\n\
         sensitive-markers = [\"authorization\", \"internal-token\", \"secret\"]\n",
    );
    out
}

/// What one Schemathesis run found.
struct Outcome {
    name: &'static str,
    tag: &'static str,
    command: String,
    config: String,
    seconds: f64,
    exit: String,
    generated: u64,
    calls: u64,
    /// `METHOD /path` → status → count (`None`: no response).
    statuses: BTreeMap<String, BTreeMap<Option<u16>, u64>>,
    /// check → (evaluated, failed).
    checks: BTreeMap<String, (u64, u64)>,
    failures: Vec<Finding>,
    errors: Vec<String>,
    /// Responses `cargo lambda watch` made itself (see the module docs).
    emulator_5xx: u64,
    /// 5xx that carried `X-Request-Id`: a function's.
    function_5xx: u64,
}

/// Failed checks on one operation with one kind of response (status, problem code, origin).
struct Finding {
    /// Check name → Schemathesis' failure title and message (first case).
    checks: BTreeMap<String, (String, String)>,
    /// The failing cases.
    cases: BTreeSet<String>,
    operation: String,
    status: Option<u16>,
    /// The problem `code` of the first response, when it was ours.
    problem: Option<String>,
    detail: Option<String>,
    from_emulator: bool,
    phase: String,
    /// The first failing case, the one [`Finding::reproduction`] sends.
    case: String,
    reproduction: String,
}

impl Finding {
    fn has_check(&self, names: &[&str]) -> bool {
        self.checks.keys().any(|c| names.contains(&c.as_str()))
    }

    fn check_names(&self) -> String {
        self.checks
            .iter()
            .map(|(name, (title, _))| format!("`{name}` ({title})"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn schemathesis(cli: &Path, dir: &Path, hook: &Path, caller: &Caller) -> Result<Outcome> {
    let config = dir.join(format!("{}.toml", caller.name));
    let config_text = config_source(caller, hook);
    fs::write(&config, &config_text)?;
    let ndjson = dir.join(format!("{}.ndjson", caller.name));
    let summary = dir.join(format!("{}.json", caller.name));
    let log = dir.join(format!("{}.log", caller.name));
    let openapi = util::workspace_root().join("openapi.yaml");
    let max_examples = MAX_EXAMPLES.to_string();
    let seed = SEED.to_string();
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
        max_examples,
        "--seed".into(),
        seed,
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
    let mut cmd = Command::new(cli);
    cmd.args(&args)
        .current_dir(dir)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env_remove("SCHEMATHESIS_HOOKS")
        .stdin(Stdio::null());
    // One handle for both streams, so they interleave as on a terminal.
    let out = fs::File::create(&log)?;
    cmd.stdout(out.try_clone()?).stderr(out);
    if let Some((_, var, value, _)) = &caller.credential {
        cmd.env(var, value);
    }
    let started = Instant::now();
    let status = cmd
        .status()
        .map_err(|e| format!("could not start {}: {e}", cli.display()))?;
    let seconds = started.elapsed().as_secs_f64();
    info(format!(
        "{} in {seconds:.0}s ({status}; log: {})",
        caller.name,
        log.display()
    ));
    let home = util::cache_dir()?;
    let shown = |s: &str| s.replace(&home.display().to_string(), "~/.cache/tollgate");
    let command = format!(
        "schemathesis {}",
        args.iter()
            .map(|a| shown(&a.replace(&util::workspace_root().display().to_string(), ".")))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let broken = |what: String| -> Box<dyn std::error::Error> {
        format!(
            "Schemathesis ({}) {what}; its output:\n{}",
            caller.name,
            util::tail(&log, 30)
        )
        .into()
    };
    let summary_json = fs::read_to_string(&summary)
        .map_err(|e| broken(format!("wrote no report to {}: {e}", summary.display())))?;
    let summary_json = json::parse(&summary_json).map_err(|e| broken(e.to_string()))?;
    if summary_json.get("complete") != Some(&Value::Bool(true)) {
        return Err(broken(format!(
            "did not complete (stop reason {})",
            summary_json.str_field("stop_reason").unwrap_or("unknown")
        )));
    }
    let generated = summary_json
        .get("test_cases")
        .and_then(|t| t.get("generated"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let errors = summary_json
        .get("errors")
        .and_then(Value::as_array)
        .unwrap_or_default()
        .iter()
        .map(|e| {
            format!(
                "{} ×{}",
                e.str_field("title").unwrap_or("?"),
                e.get("count").and_then(Value::as_u64).unwrap_or(0)
            )
        })
        .collect();
    let text = fs::read_to_string(&ndjson)
        .map_err(|e| broken(format!("wrote no events to {}: {e}", ndjson.display())))?;
    let mut outcome = Outcome {
        name: caller.name,
        tag: caller.tag,
        command: shown(&command),
        config: config_text,
        seconds,
        exit: status.to_string(),
        generated,
        calls: 0,
        statuses: BTreeMap::new(),
        checks: BTreeMap::new(),
        failures: Vec::new(),
        errors,
        emulator_5xx: 0,
        function_5xx: 0,
    };
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let event = json::parse(line).map_err(|e| broken(format!("wrote bad NDJSON: {e}")))?;
        if let Some(recorder) = event
            .get("ScenarioFinished")
            .and_then(|s| s.get("recorder"))
        {
            scenario(recorder, caller, &mut outcome);
        }
    }
    if outcome.calls == 0 {
        return Err(broken("made no API call".into()));
    }
    // A run that never got one 2xx tested only the way in (401s, 400s): its credentials or
    // data did not work, and "no failures" would mean nothing.
    for op in operations(caller.tag) {
        let ok = outcome
            .statuses
            .get(*op)
            .is_some_and(|s| s.keys().any(|s| s.is_some_and(|s| (200..300).contains(&s))));
        if !ok {
            return Err(broken(format!(
                "never got a 2xx from {op} (statuses: {:?}), so the run proves nothing",
                outcome.statuses.get(*op)
            )));
        }
    }
    Ok(outcome)
}

/// Adds one finished scenario's calls, checks and failures.
fn scenario(recorder: &Value, caller: &Caller, out: &mut Outcome) {
    let empty = BTreeMap::new();
    let members = |key: &str| match recorder.get(key) {
        Some(Value::Object(m)) => m,
        _ => &empty,
    };
    let cases = members("cases");
    let interactions = members("interactions");
    for (id, interaction) in interactions {
        let operation =
            operation_of(cases.get(id).and_then(|c| c.get("value"))).unwrap_or_else(|| "?".into());
        let response = response_of(Some(interaction));
        let status = status_of(response);
        out.calls += 1;
        *out.statuses
            .entry(operation)
            .or_default()
            .entry(status)
            .or_default() += 1;
        if let (Some(status), Some(response)) = (status, response) {
            if status >= 500 {
                if from_emulator(response) {
                    out.emulator_5xx += 1;
                } else {
                    out.function_5xx += 1;
                }
            }
        }
    }
    for (id, checks) in members("checks") {
        for check in checks.as_array().unwrap_or_default() {
            let name = check.str_field("name").unwrap_or("?").to_string();
            let failed = check.str_field("status") == Some("failure");
            let entry = out.checks.entry(name.clone()).or_default();
            entry.0 += 1;
            if !failed {
                continue;
            }
            entry.1 += 1;
            let failure = check
                .get("failure_info")
                .and_then(|f| f.get("failure"))
                .cloned()
                .unwrap_or(Value::Null);
            let case = cases.get(id).and_then(|c| c.get("value"));
            let interaction = interactions.get(id);
            let response = response_of(interaction);
            let status = status_of(response);
            let emulator = response.is_some_and(from_emulator);
            let problem = response
                .and_then(|r| r.get("content"))
                .and_then(|c| c.str_field("$base64"))
                .and_then(base64)
                .and_then(|b| json::parse(&String::from_utf8_lossy(&b)).ok())
                .filter(|_| !emulator);
            let operation = operation_of(case)
                .or_else(|| failure.str_field("operation").map(str::to_string))
                .unwrap_or_else(|| "?".into());
            let title = format!(
                "{} {}",
                failure.str_field("code").unwrap_or(""),
                failure.str_field("title").unwrap_or("")
            )
            .trim()
            .to_string();
            let message = failure
                .str_field("message")
                .unwrap_or("")
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            let problem_code = problem
                .as_ref()
                .and_then(|p| p.str_field("code"))
                .map(str::to_string);
            if let Some(existing) = out.failures.iter_mut().find(|f| {
                f.operation == operation
                    && f.status == status
                    && f.problem == problem_code
                    && f.from_emulator == emulator
            }) {
                existing.cases.insert(id.clone());
                existing.checks.entry(name).or_insert((title, message));
                continue;
            }
            out.failures.push(Finding {
                checks: BTreeMap::from([(name, (title, message))]),
                cases: BTreeSet::from([id.clone()]),
                operation,
                status,
                detail: problem
                    .as_ref()
                    .and_then(|p| p.str_field("detail"))
                    .map(str::to_string),
                problem: problem_code,
                from_emulator: emulator,
                phase: case
                    .and_then(|v| v.get("meta"))
                    .and_then(|m| m.get("phase"))
                    .and_then(|p| p.str_field("name"))
                    .unwrap_or("?")
                    .to_string(),
                case: id.clone(),
                reproduction: interaction
                    .map(|i| curl(i, caller))
                    .unwrap_or_else(|| "(no request recorded)".into()),
            });
        }
    }
}

/// `METHOD /path` of a recorded case.
fn operation_of(case: Option<&Value>) -> Option<String> {
    let case = case?;
    Some(format!(
        "{} {}",
        case.str_field("method").unwrap_or("?"),
        case.str_field("path").unwrap_or("?")
    ))
}

/// The response of a recorded interaction, if one came.
fn response_of(interaction: Option<&Value>) -> Option<&Value> {
    interaction?.get("response").filter(|r| **r != Value::Null)
}

fn status_of(response: Option<&Value>) -> Option<u16> {
    response?
        .get("status_code")
        .and_then(Value::as_u64)
        .map(|s| s as u16)
}

/// Whether `cargo lambda watch` answered without invoking a function: no `X-Request-Id`
/// (every function response has one) and its own generic 500 body.
fn from_emulator(response: &Value) -> bool {
    let has_request_id = response
        .get("headers")
        .is_some_and(|h| h.get("x-request-id").is_some() || h.get("X-Request-Id").is_some());
    let body = response
        .get("content")
        .and_then(|c| c.str_field("$base64"))
        .and_then(base64)
        .unwrap_or_default();
    !has_request_id && body == EMULATOR_500.as_bytes()
}

/// A `curl` line that sends the recorded request again, against the `.dev/env` variables
/// of `cargo xtask dev` (`source .dev/env` first), with credentials as variables.
fn curl(interaction: &Value, caller: &Caller) -> String {
    let Some(request) = interaction.get("request") else {
        return "(no request recorded)".into();
    };
    let method = request.str_field("method").unwrap_or("GET");
    let uri = request.str_field("uri").unwrap_or("");
    let path = uri.strip_prefix(&caller.base_url).unwrap_or(uri);
    let mut line = format!(
        "curl -sS -i -X {method} \"${}\"{}",
        caller.url_var,
        shell_quote(path.as_bytes())
    );
    if let Some(Value::Object(headers)) = request.get("headers") {
        for (name, values) in headers {
            for value in values.as_array().unwrap_or_default() {
                let value = value.as_str().unwrap_or("");
                match &caller.credential {
                    Some((cred, _, _, shown)) if cred.eq_ignore_ascii_case(name) => {
                        let _ = write!(line, " -H \"{name}: {shown}\"");
                    }
                    _ => {
                        // requests sends header values as Latin-1.
                        let bytes: Vec<u8> = if value.chars().all(|c| (c as u32) < 256) {
                            value.chars().map(|c| c as u8).collect()
                        } else {
                            value.as_bytes().to_vec()
                        };
                        let mut header = format!("{name}: ").into_bytes();
                        header.extend(bytes);
                        let _ = write!(line, " -H {}", shell_quote(&header));
                    }
                }
            }
        }
    }
    if let Some(body) = request
        .get("body")
        .and_then(|b| b.str_field("$base64"))
        .and_then(base64)
    {
        if std::str::from_utf8(&body).is_ok() {
            let _ = write!(line, " --data-binary {}", shell_quote(&body));
        } else {
            line = format!(
                "printf {} | {line} --data-binary @-",
                shell_quote(
                    body.iter()
                        .map(|b| format!("\\{b:03o}"))
                        .collect::<String>()
                        .as_bytes()
                )
            );
        }
    }
    line
}

/// Quotes bytes for bash: as `cargo xtask dev` quotes when printable ASCII, else `$'…'`
/// escapes.
fn shell_quote(bytes: &[u8]) -> String {
    if bytes.iter().all(|b| (0x20..0x7f).contains(b)) {
        return dev::sh(&String::from_utf8_lossy(bytes));
    }
    let mut out = String::from("$'");
    for &b in bytes {
        match b {
            b'\'' => out.push_str("\\'"),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push('\'');
    out
}

/// Standard base64 (with padding), as Schemathesis records bodies; `None` if malformed.
fn base64(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let mut buf = 0u32;
    let mut bits = 0;
    for c in text.bytes().filter(|&c| c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        buf = (buf << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buf >> bits) as u8);
        }
    }
    Some(out)
}

/// Panics in the functions' log: a crash the emulator may have turned into a bare 5xx.
fn count_panics(log: &Path) -> usize {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("panicked at"))
        .count()
}

/// Failures that count against the goals.
fn schema_failures(outcomes: &[Outcome]) -> Vec<&Finding> {
    outcomes
        .iter()
        .flat_map(|o| &o.failures)
        .filter(|f| !f.from_emulator && f.has_check(SCHEMA_CHECKS))
        .collect()
}

/// Prints what went wrong where nobody can miss it.
fn shout(outcomes: &[Outcome], panics: usize) {
    let function_5xx: u64 = outcomes.iter().map(|o| o.function_5xx).sum();
    let schema = schema_failures(outcomes);
    let others: Vec<&Finding> = outcomes
        .iter()
        .flat_map(|o| &o.failures)
        .filter(|f| f.from_emulator || !f.has_check(SCHEMA_CHECKS))
        .collect();
    if function_5xx > 0 || panics > 0 || !schema.is_empty() {
        eprintln!("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
        eprintln!(
            "!!! part 4: {function_5xx} 5xx from the functions, {panics} panics in their log, {} schema failure groups",
            schema.len()
        );
        for f in &schema {
            eprintln!(
                "!!!   {} on {} ({} cases): {}",
                f.check_names(),
                f.operation,
                f.cases.len(),
                f.reproduction
            );
        }
        eprintln!("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
    }
    for f in others {
        info(format!(
            "part 4 finding (see the report): {} on {} → {} ×{}{}",
            f.check_names(),
            f.operation,
            f.status.map_or("no response".into(), |s| s.to_string()),
            f.cases.len(),
            if f.from_emulator {
                " (cargo lambda watch itself)"
            } else {
                ""
            }
        ));
    }
}

/// Why a non-goal check's failure is what our contract says, where we know.
fn interpretation(f: &Finding) -> &'static str {
    if f.from_emulator {
        return "`cargo lambda watch` answered itself, without invoking a function (its generic `text/plain` 500, no `X-Request-Id`, which every function response carries): it cannot put a non-UTF-8 `application/json` body or a non-ASCII header byte into a function-URL event. Not a response of ours. Locally, the same kind of body sent as `application/octet-stream` does reach the function and gets 400; how a real function URL delivers such bytes is not tested here.";
    }
    let detail = f.detail.as_deref().unwrap_or("");
    let accepted_only = f.checks.keys().all(|c| c == "positive_data_acceptance");
    match f.problem.as_deref() {
        _ if !accepted_only => "Not explained by the contract: look at it.",
        Some("invalid_request") if detail.contains("Idempotency-Key") => {
            "`IdempotencyKey` allows 257 characters so that the quoted form (`\"…\"`) of a 255-character key fits, so a bare key of 256 or 257 characters is schema-valid, yet over the contract's 255: a documented 400. Likewise a schema-valid value may be a list of keys (a bare value with a `,`) or, on `POST /session`, a quoted key with fewer than 16 characters inside its quotes: documented 400s too. The schema is looser than the rule its description states, not wrong about any response."
        }
        Some("invalid_request") if detail.contains("voice") => {
            "Any string is schema-valid for `voice`, but only `REALTIME_VOICES` (deployment configuration, default `marin,cedar`) is accepted, which the document states in prose because the list is configuration. A documented 400."
        }
        Some("invalid_request") if detail.contains("different") => {
            "Schema-valid, but `from` equals `to`: a rule JSON Schema cannot state, and the contract's 400."
        }
        Some("invalid_request") => {
            "A documented 400 for a rule the schema does not state; see the `detail`."
        }
        Some("idempotency_key_reused") => {
            "Schemathesis sent the same `Idempotency-Key` (the document's example key) with another body: the contract's 422 `idempotency_key_reused`, exactly what keys are for."
        }
        Some("insufficient_funds" | "currency_mismatch") => {
            "A business outcome the contract documents for valid requests (402/422), stored under the key."
        }
        _ => "Not explained by the contract: look at it.",
    }
}

fn report(outcomes: &[Outcome], panics: usize, python_version: &str) -> Section {
    let mut md = String::new();
    let mut w = |s: String| {
        md.push_str(&s);
        md.push('\n');
    };
    let calls: u64 = outcomes.iter().map(|o| o.calls).sum();
    let generated: u64 = outcomes.iter().map(|o| o.generated).sum();
    let function_5xx: u64 = outcomes.iter().map(|o| o.function_5xx).sum();
    let emulator_5xx: u64 = outcomes.iter().map(|o| o.emulator_5xx).sum();
    let seconds: f64 = outcomes.iter().map(|o| o.seconds).sum();
    let errors: Vec<String> = outcomes
        .iter()
        .flat_map(|o| o.errors.iter().map(move |e| format!("{}: {e}", o.name)))
        .collect();
    let schema = schema_failures(outcomes);

    w("## 4. Schemathesis against openapi.yaml".into());
    w(String::new());
    w(format!(
        "[Schemathesis](https://schemathesis.readthedocs.io) {SCHEMATHESIS} generated requests from `openapi.yaml` alone (its examples, boundary values, schema-violating and random data, undocumented methods, and chains of calls) and checked every answer against the document. It ran against a private local stack, as `cargo xtask test`'s end-to-end step starts it: debug builds of both functions under `cargo lambda watch`, DynamoDB Local in memory, the local OpenAI stand-in (fake client secrets). {generated} test cases, {calls} API calls, {seconds:.0} s on this machine."
    ));
    w(String::new());
    w("How it was run:".into());
    w(String::new());
    w("- Three runs, one per kind of caller, each sending only what that caller sends: the browser (`POST /session`, tag `session`, no credentials), a bank client (tag `transfers`, `Authorization: Bearer` with the demo client's token) and the operator (tag `operator`, `X-Internal-Token`). The operator run is last because it flips kill switches.".into());
    w(format!("- Limits raised for this stack: `SESSION_RATE_LIMITS={SESSION_RATE_LIMITS}`, `TRANSFER_RATE_LIMITS={TRANSFER_RATE_LIMITS}`. All local traffic comes from 127.0.0.1, so the default `ip=10/1h` would have answered all but ten session requests with 429 and the client layer (60/min) most transfers; 429s were therefore not exercised here (the integration tests check theirs against `openapi.yaml`)."));
    w("- A Schemathesis hook replaces, in memory only, the document's example account ids with the demo's payer and payee, so the examples reach a 201 and the stateful phase follows its `Location` to `GET /transfers/{id}`. Random account ids only ever meet 404.".into());
    w(format!("- `--checks all`, `--max-examples {MAX_EXAMPLES}` per operation and phase, `--seed {SEED}`, one worker, `continue-on-failure`; all four phases (examples, coverage, fuzzing, stateful). Credentials come from environment variables the config files name, and Schemathesis' sanitization hides them."));
    w(String::new());
    w("```sh".into());
    for o in outcomes {
        w(format!("# {} ({:.0} s, {})", o.name, o.seconds, o.exit));
        w(o.command.clone());
    }
    w("```".into());
    w(String::new());
    for o in outcomes {
        w(format!("`{}.toml`:", o.name));
        w(String::new());
        w("```toml".into());
        w(o.config.trim_end().to_string());
        w("```".into());
        w(String::new());
    }

    w("### Calls and status codes".into());
    w(String::new());
    w("| run | operation | test cases | API calls | status codes (count) |".into());
    w("|---|---|---|---|---|".into());
    for o in outcomes {
        let mut first = true;
        let (documented, others): (Vec<_>, Vec<_>) =
            o.statuses.iter().partition(|(op, _)| documented(op, o.tag));
        let mut rows: Vec<(String, BTreeMap<Option<u16>, u64>)> = documented
            .into_iter()
            .map(|(op, s)| (format!("`{op}`"), s.clone()))
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
            rows.push((
                format!(
                    "other methods on these paths ({})",
                    methods.into_iter().collect::<Vec<_>>().join(", ")
                ),
                merged,
            ));
        }
        for (op, statuses) in rows {
            let calls: u64 = statuses.values().sum();
            let codes = statuses
                .iter()
                .map(|(s, n)| match s {
                    Some(s) => format!("{s} ×{n}"),
                    None => format!("no response ×{n}"),
                })
                .collect::<Vec<_>>()
                .join(", ");
            w(format!(
                "| {} | {op} | {} | {calls} | {codes} |",
                if first { o.name } else { "" },
                if first {
                    o.generated.to_string()
                } else {
                    String::new()
                }
            ));
            first = false;
        }
    }
    w(String::new());
    w("Each test case is one call (a stateful scenario's steps count one each). `cargo lambda watch` runs with `--disable-cors`, so `OPTIONS` reaches the functions: with `CORS_ALLOWED_ORIGINS` empty (this stack) a preflight gets the documented 405; the functions answer 405 to every other undocumented method.".into());
    w(String::new());

    w("### Checks".into());
    w(String::new());
    w("| check | what it asks of our API | evaluated | failed | counts toward |".into());
    w("|---|---|---|---|---|".into());
    let mut names: BTreeSet<&str> = CHECKS.iter().map(|(n, _)| *n).collect();
    for o in outcomes {
        names.extend(o.checks.keys().map(String::as_str));
    }
    let order: Vec<&str> = CHECKS
        .iter()
        .map(|(n, _)| *n)
        .chain(
            names
                .iter()
                .copied()
                .filter(|n| !CHECKS.iter().any(|(c, _)| c == n)),
        )
        .collect();
    for name in order {
        let (evaluated, failed) = outcomes
            .iter()
            .filter_map(|o| o.checks.get(name))
            .fold((0, 0), |(a, b), (e, f)| (a + e, b + f));
        let meaning = CHECKS
            .iter()
            .find(|(n, _)| *n == name)
            .map_or("", |(_, m)| m);
        let goal = if name == "not_a_server_error" {
            "no 5xx"
        } else if SCHEMA_CHECKS.contains(&name) {
            "schema"
        } else {
            "reported only"
        };
        w(format!(
            "| `{name}` | {meaning} | {evaluated} | {failed} | {goal} |"
        ));
    }
    w(String::new());
    w("`negative_data_rejection` and `positive_data_acceptance` test the document's precision rather than its truth. The first sends data the schema forbids and fails if the API accepts it: a failure would mean `openapi.yaml` is stricter than the functions (or the functions too lax). The second sends schema-valid data and fails on a 400/402/422: for us that flags rules JSON Schema cannot express (`from` ≠ `to`, the configured voice allowlist, a key already used with another body, the balance), all of which the contract documents as 4xx. So failures of the second kind are listed below with their reason, and do not count against the goals; any other kind would.".into());
    w(String::new());

    w("### Findings".into());
    w(String::new());
    let all: Vec<(&Outcome, &Finding)> = outcomes
        .iter()
        .flat_map(|o| o.failures.iter().map(move |f| (o, f)))
        .collect();
    if all.is_empty() {
        w("Schemathesis reported no failure.".into());
        w(String::new());
    }
    for (i, (o, f)) in all.iter().enumerate() {
        let answer = match (f.status, &f.problem) {
            (Some(s), Some(code)) => format!("{s} `{code}`"),
            (Some(s), None) => s.to_string(),
            (None, _) => "no response".into(),
        };
        let goal = if f.from_emulator {
            "not a function's response"
        } else if f.has_check(&["not_a_server_error"]) {
            "**counts against \"no 5xx\"**"
        } else if f.has_check(SCHEMA_CHECKS) {
            "**counts against the schema goal**"
        } else {
            "reported only"
        };
        let messages = f
            .checks
            .values()
            .filter(|(_, m)| !m.is_empty())
            .map(|(_, m)| format!("\"{m}\""))
            .collect::<Vec<_>>()
            .join("; ");
        let n = f.cases.len();
        w(format!(
            "{}. {} on `{}` ({} run, first in the {} phase): answered {answer}, {n} case{}; {goal}.{}{}",
            i + 1,
            f.check_names(),
            f.operation,
            o.name,
            f.phase,
            if n == 1 { "" } else { "s" },
            if messages.is_empty() {
                String::new()
            } else {
                format!(" Schemathesis: {messages}.")
            },
            f.detail
                .as_ref()
                .map(|d| format!(" Our `detail`: \"{d}\"."))
                .unwrap_or_default()
        ));
        w(String::new());
        w(format!("   {}", interpretation(f)));
        w(String::new());
        w(format!(
            "   Reproduce (case `{}`, after `source .dev/env` with `cargo xtask dev` running):",
            f.case
        ));
        w(String::new());
        w("   ```sh".into());
        w(format!("   {}", f.reproduction));
        w("   ```".into());
        w(String::new());
    }
    if !errors.is_empty() {
        w(format!(
            "Errors (requests Schemathesis could not complete): {}.",
            errors.join("; ")
        ));
        w(String::new());
    }

    w("### Interpretation".into());
    w(String::new());
    let mut verdict = Vec::new();
    if function_5xx == 0 && panics == 0 && errors.is_empty() {
        verdict.push(format!(
            "No function answered 5xx in {calls} calls, and their log shows no panic."
        ));
    } else {
        verdict.push(format!(
            "The functions answered {function_5xx} 5xx and logged {panics} panics; {} requests got no answer. Each is a bug to fix.",
            errors.len()
        ));
    }
    if emulator_5xx > 0 {
        verdict.push(format!(
            "{emulator_5xx} 500s came from `cargo lambda watch` itself, for inputs it cannot turn into a function-URL event (non-UTF-8 JSON bodies, non-ASCII header bytes); no function ran for them. Locally such a body sent as `application/octet-stream` reaches the function and gets 400; what a real function URL does with those bytes is not tested here."
        ));
    }
    if schema.is_empty() {
        verdict.push("Every response of the functions matched `openapi.yaml`: documented status, content type, required headers and body schema, 405 with the documented `Allow`.".into());
    } else {
        verdict.push(format!(
            "{} kinds of response did not match `openapi.yaml` (listed above): the document or the code is wrong.",
            schema.len()
        ));
    }
    verdict.push("What this does not cover: 429 (limits raised), the 503 and 500 paths (the stand-in and DynamoDB Local do not fail here; the integration tests' stand-ins, the replay and the drills provoke them), CloudFront mode (`CLIENT_IP_SOURCE=peer` here), the kill switch's 403 on the public routes (the operator run comes last), and a second client, so `object_level_authorization` had nothing to compare.".into());
    w(verdict.join(" "));
    w(String::new());

    let emulator_note = if emulator_5xx > 0 {
        format!("; {emulator_5xx} 500s from `cargo lambda watch` itself, not a function")
    } else {
        String::new()
    };
    let goals = vec![
        format!(
            "- No 5xx from the functions under Schemathesis: **{}** ({function_5xx} 5xx with `X-Request-Id` in {calls} calls, {panics} panics logged{emulator_note})",
            if function_5xx == 0 && panics == 0 && errors.is_empty() { "met" } else { "not met" }
        ),
        format!(
            "- No response that breaks openapi.yaml's schema: **{}** ({} kinds of failure on a function's response among {} of Schemathesis' status, content-type, header, body, 405 and `Allow` checks{})",
            if schema.is_empty() { "met" } else { "not met" },
            schema.len(),
            outcomes
                .iter()
                .flat_map(|o| &o.checks)
                .filter(|(n, _)| SCHEMA_CHECKS.contains(&n.as_str()))
                .map(|(_, (e, _))| e)
                .sum::<u64>(),
            if emulator_5xx > 0 {
                "; the content-type and header failures in the table above are those 500s of `cargo lambda watch`"
            } else {
                ""
            }
        ),
    ];
    Section {
        markdown: md,
        goals,
        versions: vec![
            ("Schemathesis".into(), SCHEMATHESIS.into()),
            (
                "Python (Schemathesis venv)".into(),
                python_version.trim_start_matches("Python ").to_string(),
            ),
        ],
    }
}

/// Whether `op` (`METHOD /path`) is an operation of `tag`'s run, not a probe of another method.
fn documented(op: &str, tag: &str) -> bool {
    operations(tag).contains(&op)
}

/// The operations `openapi.yaml` tags with `tag`.
fn operations(tag: &str) -> &'static [&'static str] {
    match tag {
        "session" => &["POST /session"],
        "transfers" => &[
            "POST /transfers",
            "GET /transfers/{id}",
            "GET /accounts/{id}",
        ],
        "operator" => &["GET /internal/kill-switch", "PUT /internal/kill-switch"],
        _ => &[],
    }
}
