//! `cargo xtask dev`: the whole stack on this machine, ready to `curl` and to open in a browser.
//!
//! DynamoDB Local → tables and a demo client with two accounts (through the operator CLI, so
//! the data is made exactly as an operator would make it) → the browser page's dev server
//! (`web/dev/server.cjs`: the page with `/api` on one origin, and the OpenAI stand-in that
//! mints client secrets and answers WebRTC calls, used when there is no `OPENAI_API_KEY`) →
//! both functions under one `cargo lambda watch` → a probe of each part → the stack file
//! (`.dev/stack.json`, a [`StackFile`]), `.dev/env` and ready-to-paste `curl` lines (the text of
//! `templates/dev-banner.txt`). Ctrl-C or SIGTERM stops everything it started, in reverse
//! order, and removes the stack file.
//!
//! [`start`] is also what `cargo xtask test` uses for its end-to-end and browser steps, with
//! state directories of their own, so a developer's running `dev` and a test run never share
//! ports, files or a lock.
//!
//! Choices worth knowing:
//!
//! - One `cargo lambda watch` serves both binaries, each at
//!   `http://127.0.0.1:<port>/lambda-url/<binary>/…`. cargo-lambda strips
//!   `/lambda-url/<binary>` before building the function-URL event, so the
//!   functions see `/session`, `/transfers`, … and `BASE_PATH` stays empty.
//! - The functions are built *before* `cargo lambda watch` starts, with the
//!   same `cargo build --bin <name>` cargo-lambda runs (one package per
//!   invocation, so features unify the same way and nothing is rebuilt):
//!   compile errors show up in the terminal and fail the start at once,
//!   instead of as a hanging first request.
//! - Variables the user set are passed through untouched (`RUST_LOG`,
//!   `INTERNAL_TOKEN`, table names, limits, `OPENAI_*`, …); only unset ones
//!   get dev defaults. The exceptions are the stack's own wiring, which is
//!   always ours: `DYNAMODB_ENDPOINT` (our DynamoDB Local) and dummy AWS
//!   credentials (real ones are never sent anywhere, not even to a local
//!   port), with the instance-metadata lookup off.
//! - `--persist DIR` keeps DynamoDB's data in DIR and the demo credentials
//!   beside it (`DIR/tollgate-demo.json`): tokens are stored hashed, so the
//!   demo token can only be shown again if we keep it. Next start with the
//!   same DIR reuses the demo when its accounts still exist, otherwise seeds
//!   a new one. Tables that exist are left alone by `tables create`.

use std::fs;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, sleep, JoinHandle};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::dynamodb_local::{self, DynamoDbLocal, Storage};
use crate::lock::Lock;
use crate::setup::Tools;
use crate::util::{self, info, step, Result};
use crate::{processes, signal};

/// The function binaries (and `cargo lambda watch` function names).
const EPHEMERAL_KEY: &str = "ephemeral-key";
const TRANSFER: &str = "transfer";
/// The CLI's package and binary.
const CLI_PACKAGE: &str = "tollgate-cli";
const CLI_BIN: &str = "tollgate";

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

/// The demo data.
const DEMO_CLIENT_NAME: &str = "demo";
const DEMO_CURRENCY: &str = "JPY";
/// Opening balances: a payer and a payee.
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
    /// `cargo lambda watch`'s port; `None` picks a free one.
    pub invoke_port: Option<u16>,
    /// Rebuild and restart a function when its code changes. Off for test
    /// runs, so an edit during the run cannot restart a function mid-test.
    pub reload: bool,
    /// Interactive use: copy the functions' log to the terminal once the stack is ready.
    pub interactive: bool,
    /// What the browser tests change; the default changes nothing.
    pub hooks: Hooks,
}

/// Hooks into the stack: variables only the functions see (the browser tests' limits).
#[derive(Debug, Clone, Default)]
pub struct Hooks {
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
    /// The page, same-origin with the API under `/api` (with `?realtime=` pointing at the
    /// stand-in when it runs).
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
pub struct NewClient {
    pub client_id: String,
    pub token: String,
}

/// What `tollgate --json accounts create|show` prints (the part read here).
#[derive(Debug, Deserialize)]
pub struct Account {
    pub account_id: String,
    #[serde(default)]
    pub client_id: Option<String>,
}

/// A running stack. Dropping it stops every part (functions first, then
/// the page's server, then DynamoDB Local) and removes the stack file.
pub struct Stack {
    pub info: StackFile,
    pub stack_file: PathBuf,
    pub functions_log: PathBuf,
    functions: Option<processes::Tree>,
    web: Option<processes::Tree>,
    ddb: Option<DynamoDbLocal>,
    echo: Option<Echo>,
    lock: Option<Lock>,
}

/// Paths inside the state directory.
pub fn stack_file(state_dir: &Path) -> PathBuf {
    state_dir.join("stack.json")
}

/// The shell file beside the stack file: `source .dev/env` gives the README's examples their
/// variables.
pub fn env_file(stack_file: &Path) -> PathBuf {
    stack_file.with_file_name("env")
}

pub fn lock_file(state_dir: &Path) -> PathBuf {
    state_dir.join("dev.lock")
}

/// Takes the state directory's lock: one stack per state directory.
pub fn lock(state_dir: &Path) -> Result<Lock> {
    Lock::acquire(&lock_file(state_dir), "`cargo xtask dev`")
}

/// Starts everything and returns once every part answers and the stack file
/// is written. Takes the lock unless the caller already holds it.
pub fn start(tools: &Tools, opts: &Options, lock: Option<Lock>) -> Result<Stack> {
    signal::install();
    processes::become_subreaper();
    fs::create_dir_all(&opts.state_dir)?;
    let state_dir = std::path::absolute(&opts.state_dir)?;
    let lock = match lock {
        Some(lock) => lock,
        None => self::lock(&state_dir)?,
    };
    // We hold the lock, so any stack file here describes a stack that is gone.
    let stack_file = stack_file(&state_dir);
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
        None => util::free_port()?,
    };

    let mut stack = Stack {
        info: StackFile {
            ephemeral_key_url: format!("http://127.0.0.1:{invoke_port}/lambda-url/{EPHEMERAL_KEY}"),
            transfer_url: format!("http://127.0.0.1:{invoke_port}/lambda-url/{TRANSFER}"),
            ..StackFile::default()
        },
        stack_file,
        functions_log: logs.join("functions.log"),
        functions: None,
        web: None,
        ddb: None,
        echo: None,
        lock: Some(lock),
    };

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
    for bin in [EPHEMERAL_KEY, TRANSFER] {
        util::run(util::cargo().args(["build", "--bin", bin]))?;
        interrupted()?;
    }

    let mut env: Env = Default::default();
    env.stack_wiring(&stack.info.dynamodb_endpoint);
    env.default("RUST_LOG", "info");
    stack.info.internal_token = env.internal_token()?;

    step("tables");
    let template = util::workspace_root().join("template.yaml");
    let out = run_cli(
        &cli,
        &|cmd| env.apply(cmd),
        &["tables", "create", "--template"],
        &[template.as_os_str()],
    )?;
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        info(line.trim_end());
    }
    interrupted()?;

    step("demo data");
    stack.info.demo = demo(&cli, &env, &opts.storage)?;
    info(format!(
        "client {} with accounts {}",
        stack.info.demo.client_id,
        stack.info.demo.accounts.join(", ")
    ));

    step("page and openai");
    let real_openai = env.user_has("OPENAI_API_KEY") || env.user_has("OPENAI_API_KEY_PARAM");
    let tree = start_web(tools, invoke_port, real_openai, &logs, &mut stack.info)?;
    stack.web = Some(tree);
    // The page's second origin may call the API (a cross-origin app); `localhost` for the
    // same port is another origin, and is not listed.
    env.default(
        "CORS_ALLOWED_ORIGINS",
        stack.info.web.second_url.trim_end_matches('/'),
    );
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
    fs::File::create(&stack.functions_log)?;
    stack.functions = Some({
        let (venv_bin, log_path) = (&tools.venv_bin, &stack.functions_log);
        let (reload, hooks) = (opts.reload, &opts.hooks);
        {
            let mut cmd = Command::new(venv_bin.join("cargo-lambda"));
            cmd.args(["lambda", "watch", "--invoke-address", "127.0.0.1"])
                .args(["--invoke-port", &invoke_port.to_string()])
                // No CORS layer of its own: a browser sees the functions' CORS, as on a function URL.
                .arg("--disable-cors");
            if !reload {
                cmd.arg("--ignore-changes");
            }
            env.apply(&mut cmd);
            for (key, value) in &hooks.function_env {
                cmd.env(key, value);
            }
            let log = fs::OpenOptions::new().append(true).open(log_path)?;
            cmd.current_dir(util::workspace_root())
                .env("PATH", util::path_with(venv_bin)?)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log);
            processes::spawn("cargo lambda watch", &mut cmd)?
        }
    });
    info(format!(
        "cargo lambda watch on 127.0.0.1:{invoke_port}{} (log: {})",
        if opts.reload {
            ", reloading on code changes"
        } else {
            ""
        },
        stack.functions_log.display()
    ));
    stack.wait_ready()?;

    write_private(
        &stack.stack_file,
        &serde_json::to_string_pretty(&stack.info)?,
    )?;
    write_private(
        &env_file(&stack.stack_file),
        &stack.info.to_shell(&stack.stack_file),
    )?;
    if opts.interactive {
        stack.echo = Some(Echo::start(&stack.functions_log)?);
    }
    Ok(stack)
}

/// Err if Ctrl-C or SIGTERM arrived: the caller unwinds and `Stack` cleans up.
fn interrupted() -> Result {
    if signal::received() {
        Err("interrupted".into())
    } else {
        Ok(())
    }
}

impl Stack {
    /// Probes each function until it answers. The transfer function is asked
    /// for the demo payer's balance (proves tables, seed and token); the
    /// ephemeral-key function for a session with the internal token when the
    /// stand-in runs (proves the upstream path, costs no `ip` quota), else
    /// for its kill switch (no paid call to the real OpenAI at start).
    fn wait_ready(&mut self) -> Result {
        let deadline = Instant::now() + READY_TIMEOUT;
        let token = self.info.internal_token.clone();
        let bearer = format!("Bearer {}", self.info.demo.token);
        let transfer = format!(
            "{}/accounts/{}",
            self.info.transfer_url, self.info.demo.accounts[0]
        );
        let headers = [("Authorization", bearer.as_str())];
        self.wait_for(TRANSFER, deadline, || {
            util::request("GET", &transfer, &headers, None, PROBE_TIMEOUT)
        })?;
        let mut headers = vec![("Content-Type", "application/json")];
        if let Some(token) = token.as_deref() {
            headers.push(("X-Internal-Token", token));
        }
        let (method, path, body) = if self.info.openai_stand_in && token.is_some() {
            ("POST", "/session", Some("{}"))
        } else {
            ("GET", "/internal/kill-switch", None)
        };
        let url = format!("{}{path}", self.info.ephemeral_key_url);
        self.wait_for(EPHEMERAL_KEY, deadline, || {
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
        let started = Instant::now();
        let mut last;
        loop {
            interrupted()?;
            self.check_alive()?;
            if let Some(problem) = fatal_log_line(&self.functions_log) {
                return Err(format!(
                    "{name} cannot start: {problem}\n(full log: {})",
                    self.functions_log.display()
                )
                .into());
            }
            match probe() {
                // Our functions answer JSON (or problem+json) to everything;
                // cargo-lambda's own refusals (unknown function: 404) do not.
                Ok(r) if r.status < 500 && r.content_type.contains("json") => {
                    let secs = started.elapsed().as_secs_f32();
                    if r.status == 200 {
                        info(format!("{name}: ready ({secs:.1}s)"));
                    } else {
                        info(format!(
                            "{name}: answers, but with {} ({secs:.1}s): {}",
                            r.status, r.body
                        ));
                    }
                    return Ok(());
                }
                Ok(r) => last = format!("HTTP {}: {}", r.status, r.body),
                Err(e) => last = e.to_string(),
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{name} did not answer within {}s (last: {last}); last lines of {}:\n{}",
                    READY_TIMEOUT.as_secs(),
                    self.functions_log.display(),
                    util::tail(&self.functions_log, 20)
                )
                .into());
            }
            sleep(Duration::from_millis(250));
        }
    }

    /// Err if a part of the stack exited on its own.
    pub fn check_alive(&mut self) -> Result {
        if let Some(ddb) = self.ddb.as_mut() {
            if let Some(status) = ddb.try_wait()? {
                return Err(format!(
                    "DynamoDB Local exited unexpectedly ({status}); last lines of {}:\n{}",
                    ddb.log.display(),
                    util::tail(&ddb.log, 20)
                )
                .into());
            }
        }
        if let Some(functions) = self.functions.as_mut() {
            if let Some(status) = functions.try_wait()? {
                return Err(format!(
                    "cargo lambda watch exited unexpectedly ({status}); last lines of {}:\n{}",
                    self.functions_log.display(),
                    util::tail(&self.functions_log, 20)
                )
                .into());
            }
        }
        Ok(())
    }

    /// Stops every part, removes the stack file and releases the lock. Idempotent.
    pub fn stop(&mut self) {
        // The stack file goes first: from here on nothing should use it.
        let _ = fs::remove_file(&self.stack_file);
        let _ = fs::remove_file(env_file(&self.stack_file));
        // Echo off first: cargo-lambda's shutdown chatter stays in the log.
        drop(self.echo.take());
        if let Some(mut functions) = self.functions.take() {
            functions.stop(STOP_GRACE);
        }
        if let Some(mut web) = self.web.take() {
            web.stop(STOP_GRACE);
        }
        if let Some(mut ddb) = self.ddb.take() {
            ddb.stop();
        }
        drop(self.lock.take());
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.stop();
    }
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
        if let Some(token) = &self.internal_token {
            vars.push(("INTERNAL_TOKEN", token.clone()));
        }
        let mut out = String::from("# Written by `cargo xtask dev`; removed when it stops.\n");
        for (name, value) in vars {
            out.push_str(&format!("export {name}={}\n", sh(&value)));
        }
        out
    }
}

/// Starts `web/dev/server.cjs` on free ports: the page with `/api` proxied to the functions at
/// `invoke_port`, the page again on a second origin, and the OpenAI stand-in (used unless
/// `real_openai`). Returns once the page answers, with its URLs written into `info`.
fn start_web(
    tools: &Tools,
    invoke_port: u16,
    real_openai: bool,
    logs: &Path,
    info: &mut StackFile,
) -> Result<processes::Tree> {
    let (page, second, realtime) = (util::free_port()?, util::free_port()?, util::free_port()?);
    let log_path = logs.join("web.log");
    let log = fs::File::create(&log_path)?;
    let server = util::workspace_root().join("web/dev/server.cjs");
    let mut cmd = Command::new("node");
    cmd.arg(&server)
        .args(["--port", &page.to_string()])
        .args(["--second-port", &second.to_string()])
        .args(["--realtime-port", &realtime.to_string()])
        .args(["--functions", &format!("http://127.0.0.1:{invoke_port}")])
        .env("NODE_PATH", &tools.web_modules)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    let mut tree = processes::spawn("web dev server", &mut cmd)?;
    let control = format!("http://127.0.0.1:{page}/_dev/log");
    let deadline = Instant::now() + WEB_READY_TIMEOUT;
    loop {
        interrupted()?;
        if let Some(status) = tree.try_wait()? {
            return Err(format!(
                "the web dev server exited ({status}); last lines of {}:\n{}",
                log_path.display(),
                util::tail(&log_path, 20)
            )
            .into());
        }
        let answer = util::request("GET", &control, &[], None, PROBE_TIMEOUT);
        if answer.is_ok_and(|r| r.status == 200) {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the web dev server did not answer (log: {})",
                log_path.display()
            )
            .into());
        }
        sleep(Duration::from_millis(100));
    }
    let (realtime_url, query) = match real_openai {
        true => ("https://api.openai.com".to_string(), String::new()),
        false => {
            let url = format!("http://127.0.0.1:{realtime}");
            (url.clone(), format!("?realtime={url}"))
        }
    };
    info.web_url = format!("http://127.0.0.1:{page}/{query}");
    info.web = Web {
        second_url: format!("http://127.0.0.1:{second}/"),
        realtime_url,
    };
    crate::util::info(format!(
        "page at {} (log: {})",
        info.web_url,
        log_path.display()
    ));
    Ok(tree)
}

/// `cargo build -p tollgate-cli`; returns the binary's path.
pub fn build_cli() -> Result<PathBuf> {
    let mut bins = util::cargo_build_bins(&["-p", CLI_PACKAGE], &[CLI_BIN])?;
    Ok(bins.remove(0))
}

/// Runs the CLI with `env` from the workspace root;
/// returns its stdout, or an error with its stderr.
pub fn run_cli(
    cli: &Path,
    env: &dyn Fn(&mut Command),
    args: &[&str],
    more: &[&std::ffi::OsStr],
) -> Result<String> {
    let mut cmd = Command::new(cli);
    cmd.args(args).args(more);
    env(&mut cmd);
    cmd.current_dir(util::workspace_root()).stdin(Stdio::null());
    let out = cmd
        .output()
        .map_err(|e| format!("could not run `{}`: {e}", util::display(&cmd)))?;
    if !out.status.success() {
        return Err(format!(
            "`{}` failed ({}): {}",
            util::display(&cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `tollgate --json <args>`, its one JSON object read as a `T`.
pub fn cli_json<T: DeserializeOwned>(
    cli: &Path,
    env: &dyn Fn(&mut Command),
    args: &[&str],
) -> Result<T> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = run_cli(cli, env, &all, &[])?;
    serde_json::from_str(out.trim()).map_err(|e| {
        format!(
            "`tollgate {}` printed no JSON of the expected shape ({e}): {out}",
            args.join(" ")
        )
        .into()
    })
}

/// The demo client and accounts: reused from a persistent database when
/// they are still there, else created.
fn demo(cli: &Path, env: &Env, storage: &Storage) -> Result<Demo> {
    let env = &|cmd: &mut Command| env.apply(cmd);
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
    for balance in DEMO_BALANCES {
        let balance = balance.to_string();
        let args = [
            "accounts",
            "create",
            "--client",
            &client.client_id,
            "--balance",
            &balance,
            "--currency",
            DEMO_CURRENCY,
        ];
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
fn saved_demo(cli: &Path, env: &dyn Fn(&mut Command), path: &Path) -> Option<Demo> {
    let demo: Demo = serde_json::from_str(&fs::read_to_string(path).ok()?).ok()?;
    if demo.accounts.len() != DEMO_BALANCES.len() {
        return None;
    }
    for account in &demo.accounts {
        let shown: Account = cli_json(cli, env, &["accounts", "show", account]).ok()?;
        if shown.client_id.as_deref() != Some(&demo.client_id) {
            return None;
        }
    }
    Some(demo)
}

/// A line of the functions' log that means waiting longer is pointless.
fn fatal_log_line(log: &Path) -> Option<String> {
    let text = fs::read_to_string(log).ok()?;
    text.lines()
        .find(|line| {
            line.contains("bad configuration")
                || line.contains("error: could not compile")
                || line.contains("Address already in use")
        })
        .map(|line| line.trim().to_string())
}

/// Writes a file only the owner can read (it holds tokens), atomically, so
/// a reader never sees half of it.
fn write_private(path: &Path, text: &str) -> Result {
    let tmp = path.with_extension("tmp");
    {
        let mut options = fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options
            .open(&tmp)
            .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
        file.write_all(text.as_bytes())?;
    }
    fs::rename(&tmp, path)?;
    Ok(())
}

/// The environment for the CLI and the functions: the user's, plus the
/// stack's wiring and dev defaults for what the user left unset.
#[derive(Default)]
struct Env {
    set: Vec<(String, String)>,
    remove: Vec<&'static str>,
}

impl Env {
    /// Whether the user set `key` (empty counts as unset, as the functions
    /// read it).
    fn user_has(&self, key: &str) -> bool {
        std::env::var(key).is_ok_and(|v| !v.trim().is_empty())
    }

    /// The value the children will see.
    fn get(&self, key: &str) -> Option<String> {
        match self.set.iter().rev().find(|(k, _)| k == key) {
            Some((_, v)) => Some(v.clone()),
            None => std::env::var(key).ok().filter(|v| !v.trim().is_empty()),
        }
    }

    fn set(&mut self, key: &str, value: &str) {
        self.set.push((key.to_string(), value.to_string()));
    }

    /// Sets `key` unless the user did.
    fn default(&mut self, key: &str, value: &str) {
        if !self.user_has(key) {
            self.set(key, value);
        }
    }

    /// What always points at this stack: our DynamoDB Local, with dummy
    /// credentials, and no lookups of real ones (profile, instance metadata).
    fn stack_wiring(&mut self, endpoint: &str) {
        self.set("DYNAMODB_ENDPOINT", endpoint);
        self.set("AWS_ENDPOINT_URL_DYNAMODB", endpoint);
        self.set("AWS_ACCESS_KEY_ID", "test");
        self.set("AWS_SECRET_ACCESS_KEY", "test");
        self.set("AWS_EC2_METADATA_DISABLED", "true");
        self.default("AWS_REGION", "us-east-1");
        self.remove.extend(["AWS_SESSION_TOKEN", "AWS_PROFILE"]);
    }

    /// The user's `INTERNAL_TOKEN`, or a fresh random one for this run;
    /// `None` if the user keeps it in SSM.
    fn internal_token(&mut self) -> Result<Option<String>> {
        if self.user_has("INTERNAL_TOKEN") {
            return Ok(std::env::var("INTERNAL_TOKEN").ok());
        }
        if self.user_has("INTERNAL_TOKEN_PARAM") {
            return Ok(None);
        }
        let token = format!("dev-{}", util::random_hex(16)?);
        self.set("INTERNAL_TOKEN", &token);
        Ok(Some(token))
    }

    fn apply(&self, cmd: &mut Command) {
        for key in &self.remove {
            cmd.env_remove(key);
        }
        for (key, value) in &self.set {
            cmd.env(key, value);
        }
    }
}

/// Copies what the functions log to the terminal (stderr), from the moment
/// the stack is ready: a developer watching `cargo xtask dev` wants to see
/// requests and rebuilds, not cargo's build chatter from before, nor
/// cargo-lambda's internal bookkeeping (see [`echo_worthy`]).
struct Echo {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Echo {
    fn start(log: &Path) -> Result<Echo> {
        let mut file = fs::File::open(log)?;
        file.seek(SeekFrom::End(0))?;
        let mut reader = BufReader::new(file);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = thread::spawn(move || {
            // A line is shown once it is whole; a half-written one waits for its end.
            let mut line = Vec::new();
            while !stopped.load(Ordering::SeqCst) {
                match reader.read_until(b'\n', &mut line) {
                    Ok(_) if line.ends_with(b"\n") => {
                        if let Some(shown) = echo_worthy(String::from_utf8_lossy(&line).trim_end())
                        {
                            eprintln!("{shown}");
                        }
                        line.clear();
                    }
                    _ => sleep(Duration::from_millis(200)),
                }
            }
        });
        Ok(Echo {
            stop,
            thread: Some(thread),
        })
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
    if line.is_empty() || NOISE.iter().any(|n| line.contains(n)) {
        return None;
    }
    if line.len() <= MAX {
        return Some(line.to_string());
    }
    let mut cut = MAX;
    while !line.is_char_boundary(cut) {
        cut -= 1;
    }
    Some(format!("{}…", &line[..cut]))
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Quotes a value for a POSIX shell (`shlex`); the values quoted here (URLs, tokens, ids,
/// headers) never hold the one thing it refuses, a NUL byte.
pub fn sh(value: &str) -> String {
    shlex::try_quote(value)
        .expect("a value to quote holds no NUL byte")
        .into_owned()
}

/// The ready-to-paste commands: [`BANNER`] with its `{{name}}`s filled in.
fn banner(info: &StackFile, stack_file: &Path, functions_log: &Path) -> String {
    let (ek, demo) = (&info.ephemeral_key_url, &info.demo);
    let auth = sh(&format!("Authorization: Bearer {}", demo.token));
    let key = sh(&format!("Idempotency-Key: demo-{}", util::unix_now()));
    let body = serde_json::json!({"from": demo.accounts[0], "to": demo.accounts[1], "amount": 2500, "memo": "demo"});
    let transfer = format!(
        "curl -sS -i -X POST {}/transfers -H {auth} -H {key} -H 'Content-Type: application/json' -d {}",
        info.transfer_url,
        sh(&body.to_string())
    );
    let kill_switch_api = match &info.internal_token {
        Some(token) => format!(
            "# or through the API, with the internal token\ncurl -sS -X PUT {ek}/internal/kill-switch -H {} -H 'Content-Type: application/json' -d '{{\"function\":\"ephemeral-key\",\"enabled\":false}}'\n",
            sh(&format!("X-Internal-Token: {token}"))
        ),
        None => String::new(),
    };
    let (page_calls, secrets) = match info.openai_stand_in {
        true => (
            "its calls end at the local stand-in, which echoes your microphone",
            "FAKE secrets from the local OpenAI stand-in",
        ),
        false => (
            "real Realtime calls, billed",
            "REAL secrets from OpenAI, billed to your key",
        ),
    };
    let values = [
        ("page_calls", page_calls.to_string()),
        ("web_url", info.web_url.clone()),
        ("secrets", secrets.to_string()),
        ("ek", ek.clone()),
        ("tr", info.transfer_url.clone()),
        ("currency", DEMO_CURRENCY.to_string()),
        ("transfer", transfer),
        ("from", demo.accounts[0].clone()),
        ("auth", auth),
        ("kill_switch_api", kill_switch_api),
        ("dynamodb", info.dynamodb_endpoint.clone()),
        (
            "internal_token",
            info.internal_token
                .clone()
                .unwrap_or_else(|| "from SSM (INTERNAL_TOKEN_PARAM)".into()),
        ),
        ("token", demo.token.clone()),
        ("stack_file", stack_file.display().to_string()),
        ("env_file", env_file(stack_file).display().to_string()),
        ("functions_log", functions_log.display().to_string()),
    ];
    values
        .iter()
        .fold(BANNER.to_string(), |text, (name, value)| {
            text.replace(&format!("{{{{{name}}}}}"), value)
        })
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
        interactive: true,
        hooks: Hooks::default(),
    };
    // Refuse a second start before spending time on setup.
    let lock = lock(&opts.state_dir)?;
    step("setup");
    let tools = crate::setup::all()?;
    let mut stack = start(&tools, &opts, Some(lock))?;
    info(format!(
        "started in {:.1}s",
        started.elapsed().as_secs_f32()
    ));
    print!(
        "{}",
        banner(&stack.info, &stack.stack_file, &stack.functions_log)
    );
    let _ = std::io::stdout().flush();

    let result = loop {
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
    let left = processes::leftovers();
    if left.is_empty() {
        info("everything stopped; stack file removed, lock released");
    } else {
        info(format!("still running: {left:?}"));
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
    let ignored = Command::new("git")
        .arg("check-ignore")
        .arg("-q")
        .arg(dir)
        .current_dir(&root)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success());
    if let Ok(false) = ignored {
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
        let info = StackFile {
            ephemeral_key_url: "http://127.0.0.1:9/lambda-url/ephemeral-key".into(),
            transfer_url: "http://127.0.0.1:9/lambda-url/transfer".into(),
            internal_token: Some("dev-1".into()),
            demo: Demo {
                client_id: "cl_1".into(),
                token: "tok en".into(),
                accounts: vec!["acc_1".into(), "acc_2".into()],
            },
            ..StackFile::default()
        };
        let text = banner(&info, Path::new("/s/stack.json"), Path::new("/l"));
        assert!(!text.contains("{{"), "{text}");
        assert!(text.contains("-H 'Authorization: Bearer tok en'"), "{text}");
        assert!(
            text.contains(r#"-d '{"amount":2500,"from":"acc_1","memo":"demo","to":"acc_2"}'"#),
            "{text}"
        );
        assert!(text.contains("-H 'X-Internal-Token: dev-1'"), "{text}");
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
