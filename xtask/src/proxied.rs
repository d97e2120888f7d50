//! What `replay` and `drill` share: a run directory, a driver (an `#[ignore]`d test of
//! `tollgate-tests`) that owns a proxy between the functions and DynamoDB Local, and a dev stack
//! whose functions talk to DynamoDB through that proxy.
//!
//! The proxy lives in the driver (it is the tests' `FaultProxy`), so it must be up before the
//! functions start: xtask picks DynamoDB Local's port, starts the driver, waits for the driver
//! to write the proxy's address to `<dir>/proxy`, then starts the stack pointed at it. Later
//! requests from the driver (restart the functions, …) are files in the same directory.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, ExitStatus};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::dev::{self, Hooks};
use crate::dynamodb_local::Storage;
use crate::util::{self, info, Result};
use crate::{processes, signal};

/// How long the driver may take to compile and bring its proxy up.
const PROXY_WAIT: Duration = Duration::from_secs(300);

/// One run's directory, stack file and DynamoDB Local port.
pub struct Run {
    pub dir: PathBuf,
    pub stack_file: PathBuf,
    pub ddb_port: u16,
    /// `replay` or `drill`: the test binary, the test's name and the run directory's parent.
    name: &'static str,
}

impl Run {
    /// A fresh directory under the cache, named by this process.
    pub fn new(name: &'static str) -> Result<Self> {
        let dir = util::cache_dir()?
            .join(name)
            .join(std::process::id().to_string());
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        Ok(Self {
            stack_file: dev::stack_file(&dir),
            ddb_port: util::free_port()?,
            dir,
            name,
        })
    }

    /// Builds the driver without running it, so compile errors show before anything starts.
    pub fn build_driver(&self) -> Result {
        util::run(util::cargo().args([
            "test",
            "-q",
            "-p",
            "tollgate-tests",
            "--test",
            self.name,
            "--no-run",
        ]))
    }

    /// The driver's command: `<PREFIX>_DIR`, `<PREFIX>_UPSTREAM` (DynamoDB Local) and
    /// `TOLLGATE_STACK_FILE` set, with dummy AWS credentials for its own DynamoDB calls.
    pub fn driver(&self, env_prefix: &str) -> Command {
        let mut cmd = util::cargo();
        cmd.args(["test", "-q", "-p", "tollgate-tests", "--test", self.name])
            .args(["--", "--ignored", "--nocapture", "--exact", self.name])
            .env(format!("{env_prefix}_DIR"), &self.dir)
            .env(
                format!("{env_prefix}_UPSTREAM"),
                format!("http://127.0.0.1:{}", self.ddb_port),
            )
            .env("TOLLGATE_STACK_FILE", &self.stack_file);
        util::dummy_aws(&mut cmd);
        cmd
    }

    /// Waits until the driver's proxy is up; its `http://127.0.0.1:PORT`.
    pub fn wait_for_proxy(&self, driver: &mut processes::Tree) -> Result<String> {
        let proxy_file = self.dir.join("proxy");
        let deadline = Instant::now() + PROXY_WAIT;
        loop {
            if let Ok(endpoint) = fs::read_to_string(&proxy_file) {
                let proxy = endpoint.trim().to_string();
                info(format!(
                    "proxy {proxy} in front of DynamoDB Local on port {}",
                    self.ddb_port
                ));
                return Ok(proxy);
            }
            if let Some(status) = driver.try_wait()? {
                return Err(format!(
                    "the {} driver exited before its proxy was up ({status})",
                    self.name
                )
                .into());
            }
            if signal::received() {
                return Err("interrupted".into());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the {} driver's proxy did not come up within {} s",
                    self.name,
                    PROXY_WAIT.as_secs()
                )
                .into());
            }
            sleep(Duration::from_millis(50));
        }
    }

    /// Dev-stack options: in memory on this run's DynamoDB port, no reload, the functions'
    /// DynamoDB behind `proxy`, plus `function_env`.
    pub fn stack_options(
        &self,
        proxy: &str,
        function_env: Vec<(String, String)>,
        concurrency: Option<u32>,
    ) -> dev::Options {
        let mut env = vec![
            ("DYNAMODB_ENDPOINT".to_string(), proxy.to_string()),
            ("AWS_ENDPOINT_URL_DYNAMODB".to_string(), proxy.to_string()),
            ("RUST_LOG".to_string(), "warn".to_string()),
        ];
        env.extend(function_env);
        dev::Options {
            state_dir: self.dir.clone(),
            storage: Storage::InMemory,
            invoke_port: None,
            reload: false,
            interactive: false,
            hooks: Hooks {
                dynamodb_port: Some(self.ddb_port),
                function_env: env,
                concurrency,
            },
        }
    }

    /// Waits for the driver to exit. Meanwhile, whenever it writes `restart-N` (N = 1, 2, …;
    /// the file may hold a note, e.g. the pid it killed), restarts the functions with
    /// `restart_env` on top of their variables and answers `restarted-N` with `ok` or the error.
    pub fn supervise(
        &self,
        driver: &mut processes::Tree,
        stack: &mut dev::Stack,
        restart_env: &[(String, String)],
    ) -> Result<ExitStatus> {
        let mut restarts = 0;
        loop {
            if let Some(status) = driver.try_wait()? {
                return Ok(status);
            }
            if signal::received() {
                return Err("interrupted".into());
            }
            let request = self.dir.join(format!("restart-{}", restarts + 1));
            if request.exists() {
                restarts += 1;
                let note = fs::read_to_string(&request).unwrap_or_default();
                info(format!(
                    "the {} driver asks for a restart of the functions{}",
                    self.name,
                    match note.trim() {
                        "" => String::new(),
                        n => format!(" ({n})"),
                    }
                ));
                let t = Instant::now();
                let answer = match stack.restart_functions_with(restart_env) {
                    Ok(()) => {
                        info(format!(
                            "functions answer again after {:.1}s",
                            t.elapsed().as_secs_f32()
                        ));
                        "ok".to_string()
                    }
                    Err(e) => format!("restart failed: {e}"),
                };
                let tmp = self.dir.join("restarted.tmp");
                fs::write(&tmp, answer)?;
                fs::rename(&tmp, self.dir.join(format!("restarted-{restarts}")))?;
            }
            sleep(Duration::from_millis(50));
        }
    }

    /// Keeps the directory's logs when the run failed, removes it otherwise.
    pub fn finish(&self, result: &Result) {
        match result {
            Ok(()) => {
                let _ = fs::remove_dir_all(&self.dir);
            }
            Err(_) => info(format!(
                "{} logs kept in {}",
                self.name,
                self.dir.join("logs").display()
            )),
        }
    }
}
