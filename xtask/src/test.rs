//! `cargo xtask test`: the full check CI runs, runnable locally as is.
//!
//! setup → `cargo fmt --check` → clippy → DynamoDB Local → `cargo test` →
//! the web client's `tsc` and `node --test` → end-to-end tests against a
//! private dev stack → browser tests in headless Chromium against another
//! (skipped with `--no-browser`) → a 2,000-request replay
//! (`cargo xtask replay`, skipped with `--no-replay`) → the short attack drills
//! (`cargo xtask drill --short`, skipped with `--no-drill`).
//! A failing step does not stop the run: one pass reports everything that
//! is wrong. The exit status is non-zero if any step failed.

use std::fs;
use std::path::Path;

use crate::dev;
use crate::dynamodb_local::{self, Storage};
use crate::setup::Tools;
use crate::util::{self, info, step, Result};
use crate::{lock, setup, signal};

const USAGE: &str =
    "Usage: cargo xtask test [--no-lint] [--no-e2e] [--no-browser] [--no-replay] [--no-drill] [-- <cargo test args>]";

pub fn run(args: &[String]) -> Result {
    let mut lint = true;
    let mut e2e = true;
    let mut browser = true;
    let mut replay = true;
    let mut drill = true;
    let mut test_args: &[String] = &[];
    for (i, arg) in args.iter().enumerate() {
        match arg.as_str() {
            "--no-lint" => lint = false,
            "--no-e2e" => e2e = false,
            "--no-browser" => browser = false,
            "--no-replay" => replay = false,
            "--no-drill" => drill = false,
            "--" => {
                test_args = &args[i + 1..];
                break;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            _ => {
                return Err(format!(
                    "unexpected argument `{arg}` (cargo test arguments go after `--`)\n{USAGE}"
                )
                .into())
            }
        }
    }

    step("setup");
    let tools = setup::all()?;

    let mut failed = Vec::new();
    if lint {
        step("fmt");
        check(
            &mut failed,
            "fmt",
            util::run(util::cargo().args(["fmt", "--all", "--", "--check"])),
        );
        step("clippy");
        check(
            &mut failed,
            "clippy",
            util::run(util::cargo().args([
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ])),
        );
    }

    step("dynamodb-local");
    let log = util::cache_dir()?
        .join("logs")
        .join("dynamodb-local-test.log");
    // In memory and on a fresh port: every run starts from empty tables and
    // cannot collide with a `cargo xtask dynamodb` left running.
    let ddb = dynamodb_local::start(&tools.dynamodb_local, &Storage::InMemory, None, &log)?;
    info(format!("{} (log: {})", ddb.endpoint, ddb.log.display()));

    step("test");
    let result = util::run(
        util::cargo()
            .args(["test", "--workspace"])
            .args(test_args)
            .env("DYNAMODB_ENDPOINT", &ddb.endpoint)
            // Also where any SDK client built from the environment alone
            // sends DynamoDB calls: never to real AWS by accident.
            .env("AWS_ENDPOINT_URL_DYNAMODB", &ddb.endpoint)
            // Always dummy credentials and a fixed region, so real ones from
            // the environment or ~/.aws are never sent anywhere, and the SDK
            // does not go looking for others (profile, instance metadata).
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_PROFILE")
            // Tests shell out to cargo-lambda and cfn-lint from the venv.
            .env("PATH", util::path_with(&tools.venv_bin)?),
    );
    check(&mut failed, "test", result);

    step("dynamodb-local: stop");
    drop(ddb);

    if !signal::received() {
        step("web: tsc and unit tests");
        check(&mut failed, "web", crate::browser::unit(&tools));
    }

    if e2e && !signal::received() {
        check(&mut failed, "e2e", end_to_end(&tools));
    }

    if browser && !signal::received() {
        let started = std::time::Instant::now();
        let result = crate::browser::browser(&tools, None);
        info(format!(
            "browser step took {:.1}s",
            started.elapsed().as_secs_f32()
        ));
        check(&mut failed, "browser", result);
    }

    if replay && !signal::received() {
        // A 2,000-request day of hostile transfer traffic, reconciled (`cargo xtask replay`).
        step("replay");
        let started = std::time::Instant::now();
        let result = crate::stress::stress(&tools, "replay", crate::stress::REPLAY_CI);
        info(format!(
            "replay step took {:.1}s",
            started.elapsed().as_secs_f32()
        ));
        check(&mut failed, "replay", result);
    }

    if drill && !signal::received() {
        // Attack drills against the limits, short windows (`cargo xtask drill --short`).
        step("drill");
        let started = std::time::Instant::now();
        let result = crate::stress::stress(&tools, "drill", crate::stress::DRILL_CI);
        info(format!(
            "drill step took {:.1}s",
            started.elapsed().as_secs_f32()
        ));
        check(&mut failed, "drill", result);
    }

    if signal::received() {
        return Err("interrupted".into());
    }
    if failed.is_empty() {
        step("all steps passed");
        Ok(())
    } else {
        Err(format!("failed: {}", failed.join(", ")).into())
    }
}

/// The end-to-end tests (`tests/e2e`) against a stack of their own: what
/// `cargo xtask dev` starts, in memory, on free ports, with its lock, stack
/// file and logs in a state directory of this run under the cache dir. So it
/// neither collides with nor refuses because of a developer's running
/// `cargo xtask dev` (whose state is the repository's `.dev/`). Functions do
/// not reload on code changes here: an edit during the run must not restart
/// them mid-test. Everything is stopped whether the tests pass or not; the
/// state directory (logs) is kept only when something failed.
fn end_to_end(tools: &Tools) -> Result {
    let runs = util::cache_dir()?.join("e2e");
    prune_finished_runs(&runs);
    let state_dir = runs.join(std::process::id().to_string());
    let started = std::time::Instant::now();
    step("e2e: stack");
    let stack = dev::start(
        tools,
        &dev::Options {
            state_dir: state_dir.clone(),
            storage: Storage::InMemory,
            invoke_port: None,
            reload: false,
            interactive: false,
            hooks: dev::Hooks::default(),
            web: false,
        },
        None,
    );
    let result = stack.and_then(|stack| {
        step("e2e: test");
        let result = util::run(
            util::cargo()
                .args([
                    "test",
                    "-p",
                    "tollgate-tests",
                    "--test",
                    "e2e",
                    "--",
                    "--ignored",
                ])
                .env("TOLLGATE_STACK_FILE", &stack.stack_file),
        );
        step("e2e: stop");
        drop(stack);
        info(format!(
            "e2e step took {:.1}s",
            started.elapsed().as_secs_f32()
        ));
        result
    });
    util::tidy_state_dir(&result, &state_dir, "e2e");
    result
}

/// Removes state directories of earlier e2e runs that have finished (their
/// lock is gone or stale), keeping any that still run.
fn prune_finished_runs(runs: &Path) {
    let Ok(entries) = fs::read_dir(runs) else {
        return;
    };
    for dir in entries.filter_map(|e| Some(e.ok()?.path())) {
        if dir.is_dir() && !lock::is_held(&dev::lock_file(&dir)) {
            let _ = fs::remove_dir_all(&dir);
        }
    }
}

/// Records a failed step and reports it right away, then carries on.
fn check(failed: &mut Vec<&'static str>, name: &'static str, result: Result) {
    if let Err(e) = result {
        eprintln!("error: {e}");
        failed.push(name);
    }
}
