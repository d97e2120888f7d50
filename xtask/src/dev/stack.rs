//! Starting the stack's parts in order, probing them until they answer, and stopping them in
//! reverse order; the stack file and `.dev/env` it writes once everything answers.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tollgate_catalog::{self as catalog, Function};

use super::banner::sh;
use super::demo::{self, build_cli, run_cli, Demo};
use super::env::{user, Env};
use crate::dynamodb_local::{self, DynamoDbLocal, Storage};
use crate::front::Front;
use crate::lock::Lock;
use crate::setup::Tools;
use crate::util::{self, bail, info, interrupted, step, write_private, CmdExt, Context, Result};
use crate::{processes, signal};

/// How long the functions get to answer after `cargo lambda watch` started. They are prebuilt,
/// so this is normally a few seconds; the margin covers a rebuild by cargo-lambda on a busy
/// 2-core machine.
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// How long one probe may wait for its answer. Short, so Ctrl-C during startup is noticed
/// soon; a probe that times out is simply sent again.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `cargo lambda watch` gets to stop its functions before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long the page's dev server gets to answer.
const WEB_READY_TIMEOUT: Duration = Duration::from_secs(20);
/// Placed in the OpenAI key variable when the stand-in runs: obviously fake.
const STAND_IN_API_KEY: &str = "sk-local-stand-in";
const OPENAI: &str = "https://api.openai.com";

/// How to start a stack.
#[derive(Debug, Clone)]
pub struct Options {
    /// Holds the lock, the stack file and the logs.
    pub state_dir: PathBuf,
    pub storage: Storage,
    /// The port of the functions' URLs (the front's; `cargo lambda watch` gets a free one
    /// behind it); `None` picks a free one.
    pub invoke_port: Option<u16>,
    /// Rebuild and restart a function when its code changes. Off for test runs, so an edit
    /// during the run cannot restart a function mid-test.
    pub reload: bool,
    /// Variables only the functions see (the browser tests' limits).
    pub function_env: Vec<(String, String)>,
}

/// `.dev/stack.json`: how tools and tests find the running stack (the contract's fields, plus
/// what the e2e and browser tests read). Written once every part answers.
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

/// A running stack. Dropping it stops every part (the front first, then the functions, then
/// the page's server, then DynamoDB Local) and removes the stack file.
#[derive(Default)]
pub struct DevStack {
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

/// Starts everything and returns once every part answers and the stack file is written. Takes
/// the lock unless the caller already holds it.
pub fn start(tools: &Tools, opts: &Options, lock: Option<Lock>) -> Result<DevStack> {
    signal::install();
    fs::create_dir_all(&opts.state_dir)?;
    let state_dir = std::path::absolute(&opts.state_dir)?;
    let lock = lock.map_or_else(|| self::lock(&state_dir), Ok)?;
    // We hold the lock, so any stack file here describes a stack that is gone.
    let stack_file = state_dir.join("stack.json");
    let _ = fs::remove_file(&stack_file);
    let logs = state_dir.join("logs");
    fs::create_dir_all(&logs)?;
    if let Some(port) = opts.invoke_port.filter(|&port| !util::port_is_free(port)) {
        bail!("port {port} is already in use: pick another with `--port <port>` (or leave it out for a free one), or stop the program listening on it.");
    }
    let mut stack = DevStack::default();
    (stack.stack_file, stack.functions_log) = (stack_file, logs.join("functions.log"));
    stack.lock = Some(lock);
    // cargo-lambda's own port: only the front talks to it. The front's port is the published
    // one (0: the OS picks one as the front binds it).
    let lambda_port = util::free_port()?;
    let lambda = format!("http://127.0.0.1:{lambda_port}");
    let front = Front::start(opts.invoke_port.unwrap_or(0), &lambda)?;
    let front_url = stack.front.insert(front).url();

    step("dynamodb-local");
    let ddb_log = logs.join("dynamodb-local.log");
    let ddb = dynamodb_local::start(&tools.dynamodb_local, &opts.storage, None, &ddb_log)?;
    info(format!("{} ({})", ddb.endpoint, opts.storage));
    stack.info.dynamodb_endpoint = stack.ddb.insert(ddb).endpoint.clone();
    interrupted()?;

    step("build");
    let cli = build_cli()?;
    let url = |f: &Function| format!("{front_url}/lambda-url/{}", f.name);
    stack.info.ephemeral_key_url = url(&catalog::EPHEMERAL_KEY);
    stack.info.transfer_url = url(&catalog::TRANSFER);
    for function in catalog::FUNCTIONS {
        util::cargo()
            .args(["build", "--bin", function.name])
            .run()?;
        interrupted()?;
    }

    let mut env = Env::new(&stack.info.dynamodb_endpoint);
    env.unless_set("RUST_LOG", "info");
    stack.info.internal_token = env.internal_token()?;

    step("tables");
    let template = util::workspace_root().join("template.yaml");
    let template = template
        .to_str()
        .context("the workspace path is not UTF-8")?;
    let out = run_cli(&cli, &env, &["tables", "create", "--template", template])?;
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .for_each(|l| info(l.trim_end()));
    interrupted()?;

    step("demo data");
    let demo = demo::seed(&cli, &env, &opts.storage)?;
    info(format!(
        "client {} with accounts {}",
        demo.client_id,
        demo.accounts.join(", ")
    ));
    stack.info.demo = demo;

    step("page and openai");
    stack.start_web(tools, &front_url, &logs, &mut env)?;

    step("functions");
    stack.start_functions(tools, opts, &env, lambda_port, &front_url)?;
    stack.wait_ready()?;

    let json = serde_json::to_string_pretty(&stack.info)?;
    write_private(&stack.stack_file, &json)?;
    let shell = stack.info.to_shell(&stack.stack_file);
    write_private(&env_file(&stack.stack_file), &shell)?;
    Ok(stack)
}

impl DevStack {
    /// Starts both functions under one `cargo lambda watch` on `lambda_port`, behind the front
    /// at `front_url`, with `env` and the options' own variables.
    fn start_functions(
        &mut self,
        tools: &Tools,
        opts: &Options,
        env: &Env,
        lambda_port: u16,
        front_url: &str,
    ) -> Result {
        let log = fs::File::create(&self.functions_log)?;
        let mut cmd = Command::new(tools.venv_bin.join("cargo-lambda"));
        cmd.args(["lambda", "watch", "--invoke-address", "127.0.0.1"])
            .args(["--invoke-port", &lambda_port.to_string()])
            // No CORS layer of its own: a browser sees the functions' CORS, as on a function URL.
            .arg("--disable-cors");
        if !opts.reload {
            cmd.arg("--ignore-changes");
        }
        env.apply(&mut cmd);
        cmd.envs(opts.function_env.iter().cloned())
            .current_dir(util::workspace_root())
            .env("PATH", util::path_with(&tools.venv_bin)?)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        self.functions = Some(processes::spawn("cargo lambda watch", &mut cmd)?);
        let reloading = match opts.reload {
            true => ", reloading on code changes",
            false => "",
        };
        info(format!(
            "cargo lambda watch on 127.0.0.1:{lambda_port}{reloading}, behind the front at {front_url}, which joins repeated header fields as API Gateway does (log: {})",
            self.functions_log.display()
        ));
        Ok(())
    }

    /// Starts `web/dev/server.cjs` on free ports: the page with `/api` proxied to the functions
    /// through the front at `functions`, the page again on a second origin, and the OpenAI
    /// stand-in (used unless the user set an OpenAI key). Returns once the page answers, with
    /// its URLs written into the stack file's fields and the functions' `env` pointed at them.
    fn start_web(&mut self, tools: &Tools, functions: &str, logs: &Path, env: &mut Env) -> Result {
        let real_openai =
            user("OPENAI_API_KEY").is_some() || user("OPENAI_API_KEY_PARAM").is_some();
        let (page, second, realtime) = (util::free_port()?, util::free_port()?, util::free_port()?);
        let log_path = logs.join("web.log");
        let out = fs::File::create(&log_path)?;
        let ports = format!("--port {page} --second-port {second} --realtime-port {realtime}");
        let mut cmd = Command::new("node");
        cmd.arg(util::workspace_root().join("web/dev/server.cjs"))
            .args(ports.split(' '))
            .args(["--functions", functions])
            .env("NODE_PATH", &tools.web_modules)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        // The page's config.json names the Realtime origin it sends the secrets to: OpenAI when
        // the functions mint real secrets, else the stand-in (the server's default).
        if real_openai {
            cmd.args(["--realtime-origin", OPENAI]);
        }
        let tree = processes::spawn("web dev server", &mut cmd)?;
        let tree = self.web.insert(tree);
        let control = format!("http://127.0.0.1:{page}/_dev/log");
        let deadline = Instant::now() + WEB_READY_TIMEOUT;
        let ready = util::poll(deadline, Duration::from_millis(100), || {
            tree.check_alive(&log_path)?;
            let answer = util::request("GET", &control, &[], None, PROBE_TIMEOUT);
            Ok(answer.is_ok_and(|r| r.status == 200).then_some(()))
        })?;
        let log = log_path.display();
        if ready.is_none() {
            bail!("the web dev server did not answer (log: {log})");
        }
        let realtime_url = match real_openai {
            true => OPENAI.to_string(),
            false => format!("http://127.0.0.1:{realtime}"),
        };
        self.info.web_url = format!("http://127.0.0.1:{page}/");
        self.info.web = Web {
            second_url: format!("http://127.0.0.1:{second}/"),
            realtime_url,
        };
        info(format!("page at {} (log: {log})", self.info.web_url));
        // The page's second origin may call the API (a cross-origin app); `localhost` for the
        // same port is another origin, and is not listed.
        let second = self.info.web.second_url.trim_end_matches('/');
        env.unless_set("CORS_ALLOWED_ORIGINS", second);
        if real_openai {
            info(format!(
                "OPENAI_API_KEY is set: client secrets come from {} with your key (from OpenAI they are real, and billed)",
                env.get("OPENAI_BASE_URL").unwrap_or_else(|| OPENAI.into())
            ));
        } else {
            let url = &self.info.web.realtime_url;
            env.set("OPENAI_BASE_URL", url);
            env.set("OPENAI_API_KEY", STAND_IN_API_KEY);
            info(format!(
                "OPENAI_API_KEY is not set: client secrets are FAKE (ek_local_…) and WebRTC calls end at a local peer that echoes your microphone, both from a stand-in at {url}"
            ));
            self.info.openai_stand_in = true;
        }
        Ok(())
    }

    /// Probes each function until it answers. The transfer function is asked for the demo
    /// payer's balance (proves tables, seed and token); the session function for a session with
    /// the internal token when the stand-in runs (proves the upstream path, costs no `ip`
    /// quota), else for its kill switch (no paid call to the real OpenAI at start).
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

    /// Repeats `probe` until the function gives an answer below 500, then reports it; fails
    /// early on what the log shows cannot recover.
    fn wait_for(
        &mut self,
        name: &str,
        deadline: Instant,
        probe: impl Fn() -> Result<util::Answer>,
    ) -> Result {
        let (started, log) = (Instant::now(), self.functions_log.clone());
        let mut last = String::new();
        // Lines of the functions' log that mean waiting longer is pointless.
        const FATAL: [&str; 3] = [
            "bad configuration",
            "error: could not compile",
            "Address already in use",
        ];
        let ready = util::poll(deadline, Duration::from_millis(250), || {
            self.check_alive()?;
            let text = fs::read_to_string(&log).unwrap_or_default();
            if let Some(line) = text.lines().find(|l| FATAL.iter().any(|f| l.contains(f))) {
                bail!(
                    "{name} cannot start: {}\n(full log: {})",
                    line.trim(),
                    log.display()
                );
            }
            match probe() {
                // Our functions answer JSON (or problem+json) to everything; cargo-lambda's
                // own refusals (unknown function: 404) do not.
                Ok(r) if r.status < 500 && r.content_type.contains("json") => return Ok(Some(r)),
                Ok(r) => last = format!("HTTP {}: {}", r.status, r.body),
                Err(e) => last = e.to_string(),
            }
            Ok(None)
        })?;
        let Some(r) = ready else {
            bail!(
                "{name} did not answer within {}s (last: {last}); last lines of {}:\n{}",
                READY_TIMEOUT.as_secs(),
                log.display(),
                util::tail(&log, 20)
            );
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
        match self.functions.as_mut() {
            Some(functions) => functions.check_alive(&self.functions_log),
            None => Ok(()),
        }
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

impl Drop for DevStack {
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
    test: impl FnOnce(&DevStack) -> Result,
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
        let exports = vars
            .iter()
            .map(|(name, value)| format!("export {name}={}\n", sh(value)));
        let head = "# Written by `cargo xtask dev`; removed when it stops.\n";
        std::iter::once(head.to_string()).chain(exports).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let (second, accounts) = (&v["web"]["second_url"], &v["demo"]["accounts"]);
        assert!(second.is_string() && accounts.is_array(), "{v}");
    }
}
