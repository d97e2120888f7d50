//! `cargo xtask test`: the full check CI runs, runnable locally as is.
//!
//! setup (in a thread, while these compile:) `cargo fmt --check` → clippy → the guard crate's
//! msrv, features, doc and package checks ([`crate::package`]) → DynamoDB Local → `cargo test` →
//! the web client's `tsc` and `node --test` → end-to-end tests against a
//! private dev stack → browser tests in headless Chromium against another
//! (skipped with `--no-browser`), and beside those two a 2,000-request replay
//! (`cargo xtask replay`, skipped with `--no-replay`), whose output follows theirs → the short
//! attack drills, alone (`cargo xtask drill --short`, skipped with `--no-drill`).
//! A failing step does not stop the run: one pass reports everything that
//! is wrong. The exit status is non-zero if any step failed.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::dynamodb_local::{self, Storage};
use crate::setup::{Need, Tools};
use crate::util::{self, bail, info, step, CmdExt, Result};
use crate::{browser, dev, package, processes, setup, signal, stress};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Skip `cargo fmt --check`, clippy and the guard crate's msrv, features, doc and package
    /// checks
    #[arg(long)]
    no_lint: bool,
    /// Skip the end-to-end tests against a private dev stack
    #[arg(long)]
    no_e2e: bool,
    /// Skip the browser tests in headless Chromium
    #[arg(long)]
    no_browser: bool,
    /// Skip the 2,000-request replay
    #[arg(long)]
    no_replay: bool,
    /// Skip the short drills
    #[arg(long)]
    no_drill: bool,
    /// Arguments for `cargo test` (`--workspace` unless they name a package with `-p`)
    #[arg(last = true, value_name = "CARGO TEST ARGS")]
    test_args: Vec<String>,
}

pub fn run(args: Args) -> Result {
    // The system prerequisites and the pinned tools are installed while the lints compile:
    // the lints need only cargo, and on a cold machine each takes a minute or two (Chromium
    // from apt, the venv, the npm packages; the SDK checked). A missing prerequisite still
    // stops the run before any test: the steps after the lints wait for the setup.
    step("setup (alongside the lints)");
    let setup_started = Instant::now();
    let mut needs = Need::ALL.to_vec();
    needs.retain(|&n| n != Need::Chromium || !args.no_browser);
    let setup = std::thread::spawn(move || {
        let tools = setup::all(&needs);
        let secs = setup_started.elapsed().as_secs_f32();
        info(format!("setup took {secs:.1}s"));
        tools
    });
    let failed = Mutex::new(Vec::new());
    // Runs a step unless it is off or Ctrl-C arrived, and says how long it took (so a slow CI
    // run shows where its time went); a failure is reported right away and recorded, and the
    // run carries on.
    let check = |name: &'static str, on: bool, f: &dyn Fn() -> Result| {
        if !on || signal::received() {
            return;
        }
        let started = Instant::now();
        let result = f();
        let secs = started.elapsed().as_secs_f32();
        info(format!("{name} step took {secs:.1}s"));
        if let Err(e) = result {
            eprintln!("error: {e:#}");
            failed.lock().unwrap().push(name);
        }
    };
    let cargo = |args: &str| util::cargo().args(args.split(' ')).run();
    check("fmt", !args.no_lint, &|| {
        step("fmt");
        cargo("fmt --all -- --check")
    });
    check("clippy", !args.no_lint, &|| {
        step("clippy");
        cargo("clippy --workspace --all-targets -- -D warnings")
    });
    // The guard crate as a published crate would be checked ([`package`]).
    check("msrv", !args.no_lint, &|| {
        step("msrv: tollgate's dependencies against its rust-version");
        package::msrv()
    });
    check("features", !args.no_lint, &|| {
        step("features: tollgate with no feature, each alone, the gate's, warnings denied");
        package::features()
    });
    check("doc", !args.no_lint, &|| {
        step("doc: cargo doc -p tollgate, warnings denied");
        package::doc()
    });
    check("package", !args.no_lint, &|| {
        step("package: cargo package -p tollgate, the packed crate checked alone");
        package::package()
    });
    // Every step from here on needs the tools: without them the run ends with what failed.
    let installed = setup.join();
    let installed = installed.unwrap_or_else(|_| bail!("the installing thread panicked"));
    let Ok(tools) = installed.inspect_err(|e| eprintln!("error: setup: {e:#}")) else {
        failed.lock().unwrap().push("setup");
        bail!("failed: {}", failed.lock().unwrap().join(", "));
    };
    check("test", true, &|| workspace_tests(&tools, &args.test_args));
    check("web", true, &|| {
        step("web: tsc and unit tests");
        browser::unit(&tools)
    });
    // The replay spends most of its time waiting (paced traffic), as do the e2e and browser
    // tests: it runs beside them, on a stack of its own, its output kept in a file and shown
    // after theirs, so neither is cut into the other. The drills then run alone: their boundary
    // bursts time requests to a fraction of a 5 s window, which they miss on a busy machine (run
    // beside the other three, a burst's requests were answered late and the drill failed).
    let logs = util::cache_dir()?.join("logs");
    fs::create_dir_all(&logs)?;
    let replay_log = logs.join("test-replay.out");
    let _ = fs::remove_file(&replay_log);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            // A 2,000-request day of hostile transfer traffic, reconciled (`cargo xtask replay`).
            check("replay", !args.no_replay, &|| {
                beside("replay", stress::REPLAY_CI, &replay_log)
            })
        });
        check("e2e", !args.no_e2e, &|| end_to_end(&tools));
        check("browser", !args.no_browser, &|| {
            browser::browser(&tools, None)
        });
    });
    if let Ok(output) = fs::read_to_string(&replay_log) {
        step("replay: its output (it ran beside e2e and browser)");
        eprint!("{output}");
    }
    // Attack drills against the limits, short windows (`cargo xtask drill --short`).
    check("drill", !args.no_drill, &|| {
        step("drill");
        stress::stress(&tools, "drill", stress::DRILL_CI)
    });

    util::interrupted()?;
    let failed = failed.into_inner().unwrap();
    if !failed.is_empty() {
        bail!("failed: {}", failed.join(", "));
    }
    step("all steps passed");
    Ok(())
}

/// `cargo test <args>` against a DynamoDB Local of its own: in memory and on a fresh port, so
/// every run starts from empty tables and cannot collide with a `cargo xtask dynamodb` left
/// running. `--workspace` unless `args` name a package: with it, `-p` would narrow nothing.
fn workspace_tests(tools: &Tools, args: &[String]) -> Result {
    step("dynamodb-local");
    let log = util::cache_dir()?.join("logs/dynamodb-local-test.log");
    let ddb = dynamodb_local::start(&tools.dynamodb_local, &Storage::InMemory, None, &log)?;
    info(format!("{} (log: {})", ddb.endpoint, ddb.log.display()));
    step("test");
    let mut cmd = util::cargo();
    cmd.arg("test");
    if !names_package(args) {
        cmd.arg("--workspace");
    }
    cmd.args(args);
    // Many integration tests wait (DynamoDB Local, the fault proxy's delays, real windows), and
    // libtest runs one thread per core: 2 here. The 228 integration tests took 71 s with 8
    // threads against 84 s with 2 in a quiet CI run, and 83 s against 357 s on a machine busy
    // with other builds. A `RUST_TEST_THREADS` of the user's wins.
    if std::env::var_os("RUST_TEST_THREADS").is_none() {
        cmd.env("RUST_TEST_THREADS", "8");
    }
    // Real credentials from the environment or ~/.aws are never sent anywhere.
    util::local_aws(&mut cmd, &ddb.endpoint);
    // Tests shell out to cargo-lambda and cfn-lint from the venv.
    let result = cmd.env("PATH", util::path_with(&tools.venv_bin)?).run();
    step("dynamodb-local: stop");
    result
}

/// `cargo xtask <name> <args>` as a child of its own, its output (the build's, the harness's
/// progress and report) written to `log`; Err when it fails. A process tree
/// ([`processes::spawn`]): Ctrl-C, or xtask dying, stops it and everything it started.
fn beside(name: &'static str, args: &[&str], log: &Path) -> Result {
    step(&format!(
        "{name}: started beside e2e and browser, output in {}",
        log.display()
    ));
    let out = fs::File::create(log)?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg(name).args(args).stdin(Stdio::null());
    cmd.stdout(out.try_clone()?).stderr(out);
    let mut tree = processes::spawn(name, &mut cmd)?;
    let hour = Instant::now() + Duration::from_secs(3600);
    match util::poll(hour, Duration::from_millis(200), || tree.try_wait())? {
        Some(status) if status.success() => Ok(()),
        Some(status) => bail!("`{}` failed ({status})", cmd.display()),
        None => bail!("`{}` still ran after an hour", cmd.display()),
    }
}

/// Whether cargo's own arguments (those before a `--`) name a package: `-p X`, `-pX`,
/// `--package X`, `--package=X`.
fn names_package(args: &[String]) -> bool {
    let mut own = args.iter().take_while(|a| *a != "--");
    own.any(|a| a.starts_with("-p") || a.starts_with("--package"))
}

/// The end-to-end tests (`tests/e2e`) against a private stack ([`dev::with_private_stack`]).
fn end_to_end(tools: &Tools) -> Result {
    dev::with_private_stack(tools, "e2e", Vec::new(), |stack| {
        let mut cmd = util::cargo();
        cmd.args("test -p tollgate-tests --test e2e -- --ignored".split(' '));
        cmd.env("TOLLGATE_STACK_FILE", &stack.stack_file).run()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_package_drops_workspace() {
        let names =
            |args: &str| names_package(&args.split(' ').map(String::from).collect::<Vec<_>>());
        assert!(names("-p tollgate-tests --test integration transfer::"));
        assert!(names("--package=xtask") && names("-pxtask") && names("--package xtask"));
        assert!(!names("--test integration transfer::"));
        assert!(!names("-- -p"), "a test binary's argument names no package");
    }
}
