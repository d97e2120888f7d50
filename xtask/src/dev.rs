//! `cargo xtask dev`: the whole stack on this machine, ready to `curl` and to open in a browser.
//!
//! DynamoDB Local → tables and a demo client with two accounts (through the operator CLI, so
//! the data is made exactly as an operator would make it) → the browser page's dev server
//! (`web/dev/server.cjs`: the page with `/api` on one origin, and the OpenAI stand-in that
//! mints client secrets and answers WebRTC calls, used when there is no `OPENAI_API_KEY`) →
//! both functions under one `cargo lambda watch`, behind the front ([`crate::front`]) → a probe
//! of each part through the front → the stack file
//! (`.dev/stack.json`, a [`StackFile`]), `.dev/env` and ready-to-paste `curl` lines (the text of
//! `templates/dev-banner.txt`). Ctrl-C or SIGTERM stops everything it started, in reverse
//! order, and removes the stack file.
//!
//! [`with_private_stack`] is the same stack for `cargo xtask test`'s e2e and browser steps.
//!
//! Choices worth knowing:
//!
//! - One `cargo lambda watch` serves both binaries, each at
//!   `http://127.0.0.1:<port>/lambda-url/<binary>/…`. cargo-lambda strips
//!   `/lambda-url/<binary>` before building the function-URL event, so the
//!   functions see `/session`, `/transfers`, … and `BASE_PATH` stays empty.
//! - What the stack publishes (the stack file's URLs, `.dev/env`, the page's `/api`) is the
//!   front's port, never cargo-lambda's: the front joins repeated header fields as API
//!   Gateway's payload 2.0 does, which cargo-lambda does not (it keeps the first field), so a
//!   local answer is the deployed one. cargo-lambda listens on a port of its own, unpublished.
//! - The functions are built *before* `cargo lambda watch` starts, with the
//!   same `cargo build --bin <name>` cargo-lambda runs (one package per
//!   invocation, so features unify the same way and nothing is rebuilt):
//!   compile errors show up in the terminal and fail the start at once,
//!   instead of as a hanging first request.
//! - Variables the user set are passed through untouched (`RUST_LOG`,
//!   `INTERNAL_TOKEN`, table names, limits, `OPENAI_*`, …); only unset ones
//!   get dev defaults. The exceptions are the stack's own wiring, which is
//!   always ours: `DYNAMODB_ENDPOINT` (our DynamoDB Local) and dummy AWS
//!   credentials and region (real ones are never sent anywhere, not even to
//!   a local port), with the instance-metadata lookup off.
//! - `--persist DIR` keeps DynamoDB's data in DIR and the demo credentials
//!   beside it (`DIR/tollgate-demo.json`): tokens are stored hashed, so the
//!   demo token can only be shown again if we keep it. Next start with the
//!   same DIR reuses the demo when its accounts still exist, otherwise seeds
//!   a new one. Tables that exist are left alone by `tables create`.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tollgate_catalog::{self as catalog, Function};

use crate::dynamodb_local::{self, DynamoDbLocal, Storage};
use crate::front::Front;
use crate::lock::Lock;
use crate::setup::Tools;
use crate::util::{self, info, interrupted, step, Result};
use crate::{processes, signal};

/// How long the functions get to answer after `cargo lambda watch` started.
/// They are prebuilt, so this is normally a few seconds; the margin covers a
/// rebuild by cargo-lambda on a busy 2-core machine.
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// How long one probe may wait for its answer. Short, so Ctrl-C during
/// startup is noticed soon; a probe that times out is simply sent again.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `cargo lambda watch` gets to stop its functions before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long the page's dev server gets to answer.
const WEB_READY_TIMEOUT: Duration = Duration::from_secs(20);

/// The demo data: a client, and opening balances of a payer and a payee.
const DEMO_CLIENT_NAME: &str = "demo";
const DEMO_CURRENCY: &str = "JPY";
const DEMO_BALANCES: [u64; 2] = [100_000, 0];
/// File beside a persistent database holding the demo's credentials.
const DEMO_FILE: &str = "tollgate-demo.json";
/// Placed in the OpenAI key variable when the stand-in runs: obviously fake.
const STAND_IN_API_KEY: &str = "sk-local-stand-in";
/// The ready-to-paste lines; `{{name}}` marks a value.
const BANNER: &str = include_str!("../templates/dev-banner.txt");

/// `cargo xtask dev`'s options (its summary is in `main.rs`).
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Variables you set (RUST_LOG, INTERNAL_TOKEN, OPENAI_API_KEY, OPENAI_BASE_URL, table names, limits, ...) reach both functions unchanged."
)]
pub struct Args {
    /// Keep DynamoDB's data (and the demo credentials) in DIR across restarts
    /// [default: in memory]
    #[arg(long, value_name = "DIR")]
    persist: Option<PathBuf>,
    /// Port of the functions' URLs [default: a free one]
    #[arg(long)]
    port: Option<u16>,
    /// Do not rebuild and restart functions on code changes
    #[arg(long)]
    no_reload: bool,
}

/// How to start a stack.
#[derive(Debug, Clone)]
pub struct Options {
    /// Holds the lock, the stack file and the logs.
    pub state_dir: PathBuf,
    pub storage: Storage,
    /// The port of the functions' URLs (the front's; `cargo lambda watch` gets a free one
    /// behind it); `None` picks a free one.
    pub invoke_port: Option<u16>,
    /// Rebuild and restart a function when its code changes. Off for test
    /// runs, so an edit during the run cannot restart a function mid-test.
    pub reload: bool,
    /// Variables only the functions see (the browser tests' limits).
    pub function_env: Vec<(String, String)>,
}

/// The demo client and its accounts (payer first); also the demo file of `--persist`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Demo {
    pub client_id: String,
    pub token: String,
    pub accounts: Vec<String>,
}

/// `.dev/stack.json`: how tools and tests find the running stack (the contract's fields,
/// plus what the e2e and browser tests read). Written once every part answers.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StackFile {
    pub ephemeral_key_url: String,
    pub transfer_url: String,
    /// The page, same-origin with the API under `/api`; its `config.json` (served by the dev
    /// server) names the Realtime origin: the stand-in when it runs.
    pub web_url: String,
    pub dynamodb_endpoint: String,
    pub openai_stand_in: bool,
    /// `None` when the user keeps it in SSM (`INTERNAL_TOKEN_PARAM`).
    pub internal_token: Option<String>,
    pub demo: Demo,
    pub web: Web,
}

/// The rest of what the page's dev server serves.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Web {
    /// The same page from a second origin with no API of its own (cross-origin tests).
    pub second_url: String,
    /// The OpenAI origin the page calls for WebRTC (the stand-in, or api.openai.com).
    pub realtime_url: String,
}

/// What `tollgate --json clients create` prints.
#[derive(Debug, Deserialize)]
struct NewClient {
    client_id: String,
    token: String,
}

/// What `tollgate --json accounts create|show` prints (the part read here).
#[derive(Debug, Deserialize)]
struct Account {
    account_id: String,
    #[serde(default)]
    client_id: Option<String>,
}

/// A running stack. Dropping it stops every part (the front first, then the functions, then
/// the page's server, then DynamoDB Local) and removes the stack file.
pub struct Stack {
    pub info: StackFile,
    pub stack_file: PathBuf,
    pub functions_log: PathBuf,
    front: Option<Front>,
    functions: Option<processes::Tree>,
    web: Option<processes::Tree>,
    ddb: Option<DynamoDbLocal>,
    lock: Option<Lock>,
}

/// The shell file beside the stack file: `source .dev/env` gives the README's examples their
/// variables.
pub fn env_file(stack_file: &Path) -> PathBuf {
    stack_file.with_file_name("env")
}

/// Takes the state directory's lock (`dev.lock`): one stack per state directory.
pub fn lock(state_dir: &Path) -> Result<Lock> {
    Lock::acquire(&state_dir.join("dev.lock"), "`cargo xtask dev`")
}

/// Starts everything and returns once every part answers and the stack file
/// is written. Takes the lock unless the caller already holds it.
pub fn start(tools: &Tools, opts: &Options, lock: Option<Lock>) -> Result<Stack> {
    signal::install();
    fs::create_dir_all(&opts.state_dir)?;
    let state_dir = std::path::absolute(&opts.state_dir)?;
    let lock = match lock {
        Some(lock) => lock,
        None => self::lock(&state_dir)?,
    };
    // We hold the lock, so any stack file here describes a stack that is gone.
    let stack_file = state_dir.join("stack.json");
    let _ = fs::remove_file(&stack_file);
    let logs = state_dir.join("logs");
    fs::create_dir_all(&logs)?;

    let invoke_port = match opts.invoke_port {
        Some(port) if !util::port_is_free(port) => {
            return Err(format!(
                "port {port} is already in use: pick another with `--port <port>` (or leave it out for a free one), or stop the program listening on it."
            )
            .into())
        }
        Some(port) => port,
        // The OS picks one as the front binds it.
        None => 0,
    };
    let mut stack = Stack::new(stack_file, logs.join("functions.log"), Some(lock));
    // cargo-lambda's own port: only the front talks to it.
    let lambda_port = util::free_port()?;
    let front = Front::start(invoke_port, &format!("http://127.0.0.1:{lambda_port}"))?;
    let front_url = front.url();
    stack.front = Some(front);

    step("dynamodb-local");
    let ddb = dynamodb_local::start(
        &tools.dynamodb_local,
        &opts.storage,
        None,
        &logs.join("dynamodb-local.log"),
    )?;
    info(format!("{} ({})", ddb.endpoint, opts.storage));
    stack.info.dynamodb_endpoint = ddb.endpoint.clone();
    stack.ddb = Some(ddb);
    interrupted()?;

    step("build");
    let cli = build_cli()?;
    let url = |f: &Function| format!("{front_url}/lambda-url/{}", f.name);
    stack.info.ephemeral_key_url = url(&catalog::EPHEMERAL_KEY);
    stack.info.transfer_url = url(&catalog::TRANSFER);
    for function in catalog::FUNCTIONS {
        util::run(util::cargo().args(["build", "--bin", function.name]))?;
        interrupted()?;
    }

    let mut env = Env {
        endpoint: stack.info.dynamodb_endpoint.clone(),
        ..Env::default()
    };
    env.unless_set("RUST_LOG", "info");
    stack.info.internal_token = env.internal_token()?;

    step("tables");
    let template = util::workspace_root().join("template.yaml");
    let template = template.to_str().ok_or("the workspace path is not UTF-8")?;
    let out = run_cli(&cli, &env, &["tables", "create", "--template", template])?;
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        info(line.trim_end());
    }
    interrupted()?;

    step("demo data");
    stack.info.demo = demo(&cli, &env, &opts.storage)?;
    let demo = &stack.info.demo;
    info(format!(
        "client {} with accounts {}",
        demo.client_id,
        demo.accounts.join(", ")
    ));

    step("page and openai");
    let real_openai = user("OPENAI_API_KEY").is_some() || user("OPENAI_API_KEY_PARAM").is_some();
    stack.web = Some(start_web(
        tools,
        &front_url,
        real_openai,
        &logs,
        &mut stack.info,
    )?);
    // The page's second origin may call the API (a cross-origin app); `localhost` for the
    // same port is another origin, and is not listed.
    let second = stack.info.web.second_url.trim_end_matches('/');
    env.unless_set("CORS_ALLOWED_ORIGINS", second);
    if real_openai {
        info(format!(
            "OPENAI_API_KEY is set: client secrets come from {} with your key (from OpenAI they are real, and billed)",
            env.get("OPENAI_BASE_URL")
                .unwrap_or_else(|| "https://api.openai.com".into())
        ));
    } else {
        let url = stack.info.web.realtime_url.clone();
        env.set("OPENAI_BASE_URL", &url);
        env.set("OPENAI_API_KEY", STAND_IN_API_KEY);
        info(format!(
            "OPENAI_API_KEY is not set: client secrets are FAKE (ek_local_…) and WebRTC calls end at a local peer that echoes your microphone, both from a stand-in at {url}"
        ));
        stack.info.openai_stand_in = true;
    }

    step("functions");
    let log = fs::File::create(&stack.functions_log)?;
    let mut cmd = Command::new(tools.venv_bin.join("cargo-lambda"));
    cmd.args(["lambda", "watch", "--invoke-address", "127.0.0.1"])
        .args(["--invoke-port", &lambda_port.to_string()])
        // No CORS layer of its own: a browser sees the functions' CORS, as on a function URL.
        .arg("--disable-cors");
    if !opts.reload {
        cmd.arg("--ignore-changes");
    }
    env.apply(&mut cmd);
    cmd.envs(opts.function_env.iter().map(|(k, v)| (k, v)))
        .current_dir(util::workspace_root())
        .env("PATH", util::path_with(&tools.venv_bin)?)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    stack.functions = Some(processes::spawn("cargo lambda watch", &mut cmd)?);
    let reloading = if opts.reload {
        ", reloading on code changes"
    } else {
        ""
    };
    info(format!(
        "cargo lambda watch on 127.0.0.1:{lambda_port}{reloading}, behind the front at {front_url}, which joins repeated header fields as API Gateway does (log: {})",
        stack.functions_log.display()
    ));
    stack.wait_ready()?;

    let json = serde_json::to_string_pretty(&stack.info)?;
    write_private(&stack.stack_file, &json)?;
    let shell = stack.info.to_shell(&stack.stack_file);
    write_private(&env_file(&stack.stack_file), &shell)?;
    Ok(stack)
}

impl Stack {
    /// A stack with nothing started yet.
    fn new(stack_file: PathBuf, functions_log: PathBuf, lock: Option<Lock>) -> Stack {
        Stack {
            info: StackFile::default(),
            stack_file,
            functions_log,
            front: None,
            functions: None,
            web: None,
            ddb: None,
            lock,
        }
    }

    /// Probes each function until it answers. The transfer function is asked
    /// for the demo payer's balance (proves tables, seed and token); the
    /// session function for a session with the internal token when the
    /// stand-in runs (proves the upstream path, costs no `ip` quota), else
    /// for its kill switch (no paid call to the real OpenAI at start).
    fn wait_ready(&mut self) -> Result {
        let deadline = Instant::now() + READY_TIMEOUT;
        let info = self.info.clone();
        let bearer = format!("Bearer {}", info.demo.token);
        let balance = format!("{}/accounts/{}", info.transfer_url, info.demo.accounts[0]);
        self.wait_for(catalog::TRANSFER.name, deadline, || {
            let headers = [("Authorization", bearer.as_str())];
            util::request("GET", &balance, &headers, None, PROBE_TIMEOUT)
        })?;
        let token = info.internal_token.as_deref();
        let mut headers = vec![("Content-Type", "application/json")];
        headers.extend(token.map(|token| ("X-Internal-Token", token)));
        let (method, path, body) = match info.openai_stand_in && token.is_some() {
            true => ("POST", "/session", Some("{}")),
            false => ("GET", "/internal/kill-switch", None),
        };
        let url = format!("{}{path}", info.ephemeral_key_url);
        self.wait_for(catalog::EPHEMERAL_KEY.name, deadline, || {
            util::request(method, &url, &headers, body, PROBE_TIMEOUT)
        })
    }

    /// Repeats `probe` until the function gives an answer below 500, then
    /// reports it; fails early on what the log shows cannot recover.
    fn wait_for(
        &mut self,
        name: &str,
        deadline: Instant,
        probe: impl Fn() -> Result<util::Answer>,
    ) -> Result {
        let (started, log) = (Instant::now(), self.functions_log.clone());
        let mut last = String::new();
        let ready = util::poll(deadline, Duration::from_millis(250), || {
            self.check_alive()?;
            if let Some(problem) = fatal_log_line(&log) {
                let log = log.display();
                return Err(format!("{name} cannot start: {problem}\n(full log: {log})").into());
            }
            match probe() {
                // Our functions answer JSON (or problem+json) to everything;
                // cargo-lambda's own refusals (unknown function: 404) do not.
                Ok(r) if r.status < 500 && r.content_type.contains("json") => return Ok(Some(r)),
                Ok(r) => last = format!("HTTP {}: {}", r.status, r.body),
                Err(e) => last = e.to_string(),
            }
            Ok(None)
        })?;
        let Some(r) = ready else {
            return Err(format!(
                "{name} did not answer within {}s (last: {last}); last lines of {}:\n{}",
                READY_TIMEOUT.as_secs(),
                log.display(),
                util::tail(&log, 20)
            )
            .into());
        };
        let secs = started.elapsed().as_secs_f32();
        match r.status {
            200 => info(format!("{name}: ready ({secs:.1}s)")),
            status => info(format!(
                "{name}: answers, but with {status} ({secs:.1}s): {}",
                r.body
            )),
        }
        Ok(())
    }

    /// Err if a part of the stack exited on its own.
    pub fn check_alive(&mut self) -> Result {
        if let Some(ddb) = self.ddb.as_mut() {
            ddb.check_alive()?;
        }
        if let Some(functions) = self.functions.as_mut() {
            functions.check_alive(&self.functions_log)?;
        }
        Ok(())
    }

    /// Stops every part, removes the stack file and releases the lock. Idempotent.
    pub fn stop(&mut self) {
        // The stack file goes first: from here on nothing should use it.
        let _ = fs::remove_file(&self.stack_file);
        let _ = fs::remove_file(env_file(&self.stack_file));
        // No new request reaches the functions once they start stopping.
        drop(self.front.take());
        for mut tree in [self.functions.take(), self.web.take()]
            .into_iter()
            .flatten()
        {
            tree.stop(STOP_GRACE);
        }
        drop(self.ddb.take());
        drop(self.lock.take());
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs `test` against a stack of its own: what `cargo xtask dev` starts, in memory, on free
/// ports, with its lock, stack file and logs in `<cache>/<name>/<pid>`. So it neither collides
/// with nor refuses because of a developer's running `cargo xtask dev` (whose state is the
/// repository's `.dev/`). Functions do not reload on code changes: an edit during the run must
/// not restart them mid-test. Everything is stopped whether the test passes or not; the state
/// directory (logs) is kept only when something failed, and removed by a later run once nothing
/// holds its lock.
pub fn with_private_stack(
    tools: &Tools,
    name: &str,
    function_env: Vec<(String, String)>,
    test: impl FnOnce(&Stack) -> Result,
) -> Result {
    let runs = util::cache_dir()?.join(name);
    for dir in fs::read_dir(&runs).into_iter().flatten().flatten() {
        let dir = dir.path();
        // A directory whose lock is free belongs to a run that has ended.
        if dir.is_dir() && Lock::acquire(&dir.join("dev.lock"), "a test stack").is_ok() {
            let _ = fs::remove_dir_all(&dir);
        }
    }
    let state_dir = runs.join(std::process::id().to_string());
    step(&format!("{name}: stack"));
    let opts = Options {
        state_dir: state_dir.clone(),
        storage: Storage::InMemory,
        invoke_port: None,
        reload: false,
        function_env,
    };
    let result = start(tools, &opts, None).and_then(|stack| {
        step(&format!("{name}: test"));
        let result = test(&stack);
        step(&format!("{name}: stop"));
        drop(stack);
        result
    });
    match &result {
        Ok(()) => drop(fs::remove_dir_all(&state_dir)),
        Err(_) => info(format!(
            "{name} logs kept in {}",
            state_dir.join("logs").display()
        )),
    }
    result
}

impl StackFile {
    /// `export` lines for the README's examples: `SESSION_URL`, `TRANSFER_URL`, `TOKEN`,
    /// `FROM`, `TO`, `INTERNAL_TOKEN` and `TOLLGATE_STACK_FILE` (which the CLI reads).
    fn to_shell(&self, stack_file: &Path) -> String {
        let stack_file = fs::canonicalize(stack_file).unwrap_or_else(|_| stack_file.to_path_buf());
        let mut vars = vec![
            ("SESSION_URL", self.ephemeral_key_url.clone()),
            ("TRANSFER_URL", self.transfer_url.clone()),
            ("TOKEN", self.demo.token.clone()),
            ("FROM", self.demo.accounts[0].clone()),
            ("TO", self.demo.accounts[1].clone()),
            ("TOLLGATE_STACK_FILE", stack_file.display().to_string()),
        ];
        vars.extend(self.internal_token.clone().map(|t| ("INTERNAL_TOKEN", t)));
        let mut out = String::from("# Written by `cargo xtask dev`; removed when it stops.\n");
        for (name, value) in vars {
            out.push_str(&format!("export {name}={}\n", sh(&value)));
        }
        out
    }
}

/// Starts `web/dev/server.cjs` on free ports: the page with `/api` proxied to the functions
/// through the front at `functions`, the page again on a second origin, and the OpenAI
/// stand-in (used unless `real_openai`). Returns once the page answers, with its URLs written
/// into `info`.
fn start_web(
    tools: &Tools,
    functions: &str,
    real_openai: bool,
    logs: &Path,
    info: &mut StackFile,
) -> Result<processes::Tree> {
    let (page, second, realtime) = (util::free_port()?, util::free_port()?, util::free_port()?);
    let log_path = logs.join("web.log");
    let log = fs::File::create(&log_path)?;
    let mut cmd = Command::new("node");
    cmd.arg(util::workspace_root().join("web/dev/server.cjs"))
        .args(["--port", &page.to_string()])
        .args(["--second-port", &second.to_string()])
        .args(["--realtime-port", &realtime.to_string()])
        .args(["--functions", functions])
        .env("NODE_PATH", &tools.web_modules)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // The page's config.json names the Realtime origin it sends the secrets to: OpenAI when the
    // functions mint real secrets, else the stand-in (the server's default).
    if real_openai {
        cmd.args(["--realtime-origin", "https://api.openai.com"]);
    }
    let mut tree = processes::spawn("web dev server", &mut cmd)?;
    let control = format!("http://127.0.0.1:{page}/_dev/log");
    let deadline = Instant::now() + WEB_READY_TIMEOUT;
    let ready = util::poll(deadline, Duration::from_millis(100), || {
        tree.check_alive(&log_path)?;
        let answer = util::request("GET", &control, &[], None, PROBE_TIMEOUT);
        Ok(answer.is_ok_and(|r| r.status == 200).then_some(()))
    })?;
    if ready.is_none() {
        let log = log_path.display();
        return Err(format!("the web dev server did not answer (log: {log})").into());
    }
    let realtime_url = match real_openai {
        true => "https://api.openai.com".to_string(),
        false => format!("http://127.0.0.1:{realtime}"),
    };
    info.web_url = format!("http://127.0.0.1:{page}/");
    info.web = Web {
        second_url: format!("http://127.0.0.1:{second}/"),
        realtime_url,
    };
    let log = log_path.display();
    crate::util::info(format!("page at {} (log: {log})", info.web_url));
    Ok(tree)
}

/// `cargo build -p tollgate-cli`; returns the `tollgate` binary's path.
pub fn build_cli() -> Result<PathBuf> {
    let mut bins = util::cargo_build_bins(&["-p", "tollgate-cli"], &["tollgate"])?;
    Ok(bins.remove(0))
}

/// Runs the CLI with `env` from the workspace root;
/// returns its stdout, or an error with its stderr.
fn run_cli(cli: &Path, env: &Env, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new(cli);
    cmd.args(args);
    env.apply(&mut cmd);
    cmd.current_dir(util::workspace_root()).stdin(Stdio::null());
    let shown = util::display(&cmd);
    let out = cmd
        .output()
        .map_err(|e| format!("could not run `{shown}`: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("`{shown}` failed ({}): {}", out.status, stderr.trim()).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `tollgate --json <args>`, its one JSON object read as a `T`.
fn cli_json<T: DeserializeOwned>(cli: &Path, env: &Env, args: &[&str]) -> Result<T> {
    let out = run_cli(cli, env, &[&["--json"], args].concat())?;
    serde_json::from_str(out.trim()).map_err(|e| {
        let args = args.join(" ");
        format!("`tollgate {args}` printed no JSON of the expected shape ({e}): {out}").into()
    })
}

/// The demo client and accounts: reused from a persistent database when
/// they are still there, else created.
fn demo(cli: &Path, env: &Env, storage: &Storage) -> Result<Demo> {
    let saved = match storage {
        Storage::Dir(dir) => Some(dir.join(DEMO_FILE)),
        Storage::InMemory => None,
    };
    if let Some(path) = &saved {
        if let Some(demo) = saved_demo(cli, env, path) {
            info(format!("reusing the demo saved in {}", path.display()));
            return Ok(demo);
        }
    }
    let client: NewClient = cli_json(cli, env, &["clients", "create", "--name", DEMO_CLIENT_NAME])?;
    let mut accounts = Vec::new();
    for balance in DEMO_BALANCES.map(|b| b.to_string()) {
        let (id, currency) = (client.client_id.as_str(), DEMO_CURRENCY);
        let args = ["accounts", "create", "--client", id, "--balance", &balance];
        let args = [&args[..], &["--currency", currency]].concat();
        accounts.push(cli_json::<Account>(cli, env, &args)?.account_id);
    }
    let demo = Demo {
        client_id: client.client_id,
        token: client.token,
        accounts,
    };
    if let Some(path) = &saved {
        write_private(path, &serde_json::to_string_pretty(&demo)?)?;
    }
    Ok(demo)
}

/// A saved demo whose accounts still exist with the same owner.
fn saved_demo(cli: &Path, env: &Env, path: &Path) -> Option<Demo> {
    let demo: Demo = serde_json::from_str(&fs::read_to_string(path).ok()?).ok()?;
    let owned = |account: &String| {
        let shown = cli_json::<Account>(cli, env, &["accounts", "show", account]);
        shown.is_ok_and(|a| a.client_id.as_deref() == Some(&demo.client_id))
    };
    (demo.accounts.len() == DEMO_BALANCES.len() && demo.accounts.iter().all(owned)).then_some(demo)
}

/// A line of the functions' log that means waiting longer is pointless.
fn fatal_log_line(log: &Path) -> Option<String> {
    const FATAL: [&str; 3] = [
        "bad configuration",
        "error: could not compile",
        "Address already in use",
    ];
    let text = fs::read_to_string(log).ok()?;
    let line = text.lines().find(|l| FATAL.iter().any(|f| l.contains(f)))?;
    Some(line.trim().to_string())
}

/// Writes a file only the owner can read (it holds tokens), atomically, so
/// a reader never sees half of it.
fn write_private(path: &Path, text: &str) -> Result {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true).mode(0o600);
    let mut file = options
        .open(&tmp)
        .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    file.write_all(text.as_bytes())?;
    drop(file);
    fs::rename(&tmp, path)?;
    Ok(())
}

/// The environment for the CLI and the functions: the user's, plus the stack's wiring (always
/// ours: [`util::local_aws`] with our DynamoDB Local, dummy credentials and region) and dev
/// defaults for what the user left unset.
#[derive(Default)]
struct Env {
    /// Our DynamoDB Local.
    endpoint: String,
    set: BTreeMap<String, String>,
}

/// The user's value of `key`; empty counts as unset, as the functions read it.
fn user(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.trim().is_empty())
}

impl Env {
    /// The value the children will see.
    fn get(&self, key: &str) -> Option<String> {
        self.set.get(key).cloned().or_else(|| user(key))
    }

    fn set(&mut self, key: &str, value: &str) {
        self.set.insert(key.into(), value.into());
    }

    /// Sets `key` unless the user did.
    fn unless_set(&mut self, key: &str, value: &str) {
        if user(key).is_none() {
            self.set(key, value);
        }
    }

    /// The user's `INTERNAL_TOKEN`, or a fresh random one for this run;
    /// `None` if the user keeps it in SSM.
    fn internal_token(&mut self) -> Result<Option<String>> {
        if user("INTERNAL_TOKEN").is_some() || user("INTERNAL_TOKEN_PARAM").is_some() {
            return Ok(user("INTERNAL_TOKEN"));
        }
        // From the OS's generator only: a token made of the clock and pid could be guessed.
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| format!("no OS randomness for a token: {e}"))?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let token = format!("dev-{hex}");
        self.set("INTERNAL_TOKEN", &token);
        Ok(Some(token))
    }

    fn apply(&self, cmd: &mut Command) {
        if !self.endpoint.is_empty() {
            util::local_aws(cmd, &self.endpoint);
        }
        cmd.envs(&self.set);
    }
}

/// Copies what the functions log to the terminal (stderr), from the moment it is opened (once
/// the stack is ready): a developer watching `cargo xtask dev` wants to see requests and
/// rebuilds, not cargo's build chatter from before, nor cargo-lambda's internal bookkeeping
/// (see [`echo_worthy`]). [`run`]'s wait loop pumps it, so it falls silent before the stack
/// stops and cargo-lambda's shutdown chatter stays in the log.
struct Echo {
    log: PathBuf,
    /// Where the next line starts: a half-written line is left for the next call.
    offset: u64,
}

impl Echo {
    fn open(log: &Path) -> Result<Echo> {
        let offset = fs::metadata(log)?.len();
        Ok(Echo {
            log: log.into(),
            offset,
        })
    }

    /// Shows the whole lines written since the last call.
    fn pump(&mut self) {
        let mut text = Vec::new();
        let read = fs::File::open(&self.log).and_then(|mut file| {
            file.seek(SeekFrom::Start(self.offset))?;
            file.read_to_end(&mut text)
        });
        let whole = text
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |end| end + 1);
        if read.is_ok() && whole > 0 {
            self.offset += whole as u64;
            let lines = String::from_utf8_lossy(&text[..whole]);
            lines
                .lines()
                .filter_map(echo_worthy)
                .for_each(|l| eprintln!("{l}"));
        }
    }
}

/// The line to show for a line of the functions' log, if any. cargo-lambda
/// logs each file event and process start as one huge `Debug` dump; those
/// are dropped, and any other line is cut at a readable length.
fn echo_worthy(line: &str) -> Option<String> {
    const NOISE: &[&str] = &[
        "action constructed",
        "outcome resolved",
        "spawning command",
        "process group spawned",
        "run{config=",
        "waiting on process group",
        "propagating graceful exit",
    ];
    const MAX: usize = 400;
    let line = line.trim_end();
    if line.is_empty() || NOISE.iter().any(|n| line.contains(n)) {
        return None;
    }
    if line.len() <= MAX {
        return Some(line.to_string());
    }
    let cut = (0..=MAX).rev().find(|&i| line.is_char_boundary(i));
    Some(format!("{}…", &line[..cut.unwrap_or(0)]))
}

/// Quotes a value for a POSIX shell (`shlex`); the values quoted here (URLs, tokens, ids,
/// headers) never hold the one thing it refuses, a NUL byte.
pub fn sh(value: &str) -> String {
    shlex::try_quote(value)
        .expect("a value to quote holds no NUL byte")
        .into_owned()
}

/// The ready-to-paste commands: [`BANNER`] rendered (minijinja) with the stack's facts; `sh`
/// quotes a value for the shell, `label` pads `name:` so the URLs line up.
fn banner(stack: &Stack) -> Result<String> {
    let (info, session) = (&stack.info, catalog::EPHEMERAL_KEY);
    let demo = &info.demo;
    let body = serde_json::json!({"from": demo.accounts[0], "to": demo.accounts[1], "amount": 2500, "memo": "demo"});
    let mut jinja = minijinja::Environment::new();
    jinja.set_keep_trailing_newline(true);
    jinja.set_trim_blocks(true);
    jinja.add_filter("sh", |value: String| sh(&value));
    jinja.add_filter("label", |name: String| {
        format!("{:<16}", format!("{name}:"))
    });
    let context = minijinja::context! {
        info, session, transfer => catalog::TRANSFER,
        session_limits => user(session.limits_variable).unwrap_or(session.default_limits.into()),
        body => body.to_string(), key => format!("demo-{}", util::unix_now()),
        currency => DEMO_CURRENCY, stack_file => stack.stack_file,
        env_file => env_file(&stack.stack_file), functions_log => stack.functions_log,
    };
    Ok(jinja.render_str(BANNER, context)?)
}

/// `cargo xtask dev`.
pub fn run(args: Args) -> Result {
    let storage = match args.persist {
        Some(dir) => Storage::Dir(std::path::absolute(dir)?),
        None => Storage::InMemory,
    };
    let reload = !args.no_reload;
    if let (Storage::Dir(dir), true) = (&storage, reload) {
        warn_if_watched(dir);
    }
    let started = Instant::now();
    let opts = Options {
        state_dir: util::workspace_root().join(".dev"),
        storage,
        invoke_port: args.port,
        reload,
        function_env: Vec::new(),
    };
    // Refuse a second start before spending time on setup.
    let lock = lock(&opts.state_dir)?;
    step("setup");
    let tools = crate::setup::all(crate::setup::Need::STACK)?;
    let mut stack = start(&tools, &opts, Some(lock))?;
    info(format!(
        "started in {:.1}s",
        started.elapsed().as_secs_f32()
    ));
    let mut echo = Echo::open(&stack.functions_log)?;
    print!("{}", banner(&stack)?);
    let _ = std::io::stdout().flush();

    let result = loop {
        echo.pump();
        if signal::received() {
            break Ok(());
        }
        if let Err(e) = stack.check_alive() {
            break Err(e);
        }
        sleep(Duration::from_millis(200));
    };
    step("stopping");
    stack.stop();
    match processes::leftovers() {
        left if left.is_empty() => info("everything stopped; stack file removed, lock released"),
        left => info(format!("still running: {left:?}")),
    }
    result
}

/// `cargo lambda watch` restarts the functions when a file it watches
/// changes, and it watches the repository minus what git ignores. A database
/// kept there would restart them on every write.
fn warn_if_watched(dir: &Path) {
    let root = util::workspace_root();
    if !dir.starts_with(&root) {
        return;
    }
    let mut git = Command::new("git");
    git.args(["check-ignore", "-q"]).arg(dir).current_dir(&root);
    let ignored = git.stdout(Stdio::null()).stderr(Stdio::null()).status();
    if ignored.is_ok_and(|s| !s.success()) {
        info(format!(
            "warning: {} is inside the repository and not git-ignored, so every database write restarts the functions; use a directory under .dev/ or outside the repository, or --no-reload",
            dir.display()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting() {
        assert_eq!(sh("http://127.0.0.1:9/x"), "http://127.0.0.1:9/x");
        assert_eq!(sh("a b"), "'a b'");
        assert_eq!(sh("it's"), r#""it's""#);
        assert_eq!(sh(""), "''");
    }

    #[test]
    fn echo_drops_cargo_lambda_bookkeeping() {
        assert_eq!(
            echo_worthy(r#"{"level":"INFO","message":"kill switch on"}"#).as_deref(),
            Some(r#"{"level":"INFO","message":"kill switch on"}"#)
        );
        assert_eq!(
            echo_worthy(" INFO action constructed action=Action { events: [] }"),
            None
        );
        assert!(echo_worthy(&"é".repeat(300)).unwrap().ends_with('…'));
    }

    #[test]
    fn banner_fills_every_value() {
        let mut stack = Stack::new("/s/stack.json".into(), "/l".into(), None);
        stack.info = StackFile {
            ephemeral_key_url: "http://127.0.0.1:9/lambda-url/s".into(),
            transfer_url: "http://127.0.0.1:9/lambda-url/t".into(),
            internal_token: Some("dev-1".into()),
            demo: Demo {
                client_id: "cl_1".into(),
                token: "tok en".into(),
                accounts: vec!["acc_1".into(), "acc_2".into()],
            },
            ..StackFile::default()
        };
        let (session, transfer) = (catalog::EPHEMERAL_KEY, catalog::TRANSFER);
        let text = banner(&stack).unwrap();
        assert!(!text.contains("{{"), "{text}");
        assert!(text.contains("-H 'Authorization: Bearer tok en'"), "{text}");
        assert!(
            text.contains(r#"-d '{"amount":2500,"from":"acc_1","memo":"demo","to":"acc_2"}'"#),
            "{text}"
        );
        assert!(text.contains("-H 'X-Internal-Token: dev-1'"), "{text}");
        let name = session.name;
        let disable = format!(r#"-d '{{"function":"{name}","enabled":false}}'"#);
        assert!(text.contains(&disable), "{text}");
        assert!(
            text.contains(&format!("kill-switch off --function {name}\n")),
            "{text}"
        );
        let limits = user(session.limits_variable).unwrap_or(session.default_limits.into());
        let (route, variable) = (session.route, session.limits_variable);
        let limited = format!("\n{route} is limited to {limits} ({variable}), ");
        assert!(text.contains(&limited), "{text}");
        let label = format!("{:<16}", format!("{}:", transfer.name));
        let line = format!("\n{label}http://127.0.0.1:9/lambda-url/t\n");
        assert!(text.contains(&line), "{text}");
        assert!(text.contains("source /s/env "), "{text}");
    }

    #[test]
    fn stack_file_has_the_contract_fields() {
        let v = serde_json::to_value(StackFile::default()).unwrap();
        for key in [
            "ephemeral_key_url",
            "transfer_url",
            "web_url",
            "dynamodb_endpoint",
            "demo",
        ] {
            assert!(v.get(key).is_some(), "{key} missing from {v}");
        }
        assert!(
            v["web"]["second_url"].is_string() && v["demo"]["accounts"].is_array(),
            "{v}"
        );
    }
}
