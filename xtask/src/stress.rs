//! `cargo xtask replay|drill|bench`: the chore around the stress harness (`stress/`, the
//! `tollgate-stress` binary), which owns everything else: its tables, the fault proxy, the
//! OpenAI stand-in, the function processes under its Lambda runtime API, the traffic, the
//! checks and the report.
//!
//! Here: install the tools, build the function binaries and the harness (debug for replay
//! and drill; for bench the functions in `release` and the harness in `bench-fast`, so the
//! timings mean something, and the bench's Python tools from [`bench_args`]), start
//! DynamoDB Local in memory, run `tollgate-stress <command> <arguments>` with
//! `DYNAMODB_ENDPOINT` and dummy AWS credentials (as `cargo test` gets them), stop DynamoDB
//! Local. The arguments are the harness's (`cargo xtask replay --help` shows its help).

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::Command;

use crate::dynamodb_local::{self, Dist, Storage};
use crate::setup::{self, Need, Tools};
use crate::util::{self, info, step, CmdExt, Context, Result};

/// What `cargo xtask test` replays: 2,000 requests over 200 accounts, one kill.
pub const REPLAY_CI: &[&str] = &["--requests", "2000", "--accounts", "200", "--kills", "1"];
/// What `cargo xtask test` drills.
pub const DRILL_CI: &[&str] = &["--short"];

/// Part 1's Python side (`bench/powertools_transfer.py`): AWS Lambda Powertools for Python
/// and boto3; installed into `<cache>/bench-venv`.
const POWERTOOLS: &[(&str, &str)] = &[("aws-lambda-powertools", "3.37.0"), ("boto3", "1.44.8")];

/// Part 4's Schemathesis, the current release when that part was written (Python 3.10+);
/// installed into `<cache>/schemathesis-venv`.
const SCHEMATHESIS: &[(&str, &str)] = &[("schemathesis", "4.32.5")];

/// `cargo xtask <command> <args>` for `replay`, `drill` and `bench`.
pub fn run(command: &str, args: &[String]) -> Result {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        let (stress, _) = build(command, false)?;
        return Command::new(stress).arg(command).arg("--help").run();
    }
    step("setup");
    stress(&setup::all(Need::STACK)?, command, args)
}

/// `-p <function>` for each function, and their names.
fn functions() -> (Vec<&'static str>, Vec<&'static str>) {
    let names: Vec<&str> = tollgate_catalog::FUNCTIONS.iter().map(|f| f.name).collect();
    (names.iter().flat_map(|name| ["-p", name]).collect(), names)
}

/// Builds the harness and the functions; returns the harness and the functions' directory.
/// The bench's functions as a deploy builds them (`release`), its driver optimised but cheaper
/// to build (`bench-fast`); `bench --debug` (and `--help`) is a smoke run on debug builds.
/// Otherwise one build of all, so features unify as in `cargo xtask test`'s other steps.
fn build(command: &str, release: bool) -> Result<(PathBuf, PathBuf)> {
    step(&format!("{command}: build"));
    let (packages, names) = functions();
    let (functions, stress) = if release {
        let functions = [&["--release"], &packages[..]].concat();
        let functions = util::build_bins(util::cargo(), &functions, &names[..1])?;
        let harness = ["--profile", "bench-fast", "-p", "tollgate-stress"];
        let stress = util::build_bins(util::cargo(), &harness, &["tollgate-stress"])?;
        (functions, stress)
    } else {
        let all = [&packages[..], &["-p", "tollgate-stress"]].concat();
        let mut bins = util::build_bins(util::cargo(), &all, &[names[0], "tollgate-stress"])?;
        let stress = bins.split_off(1);
        (bins, stress)
    };
    let bin_dir = functions[0]
        .parent()
        .context("a function binary has no directory")?;
    Ok((stress[0].clone(), bin_dir.into()))
}

/// Builds and runs `tollgate-stress <command> <args>` against a fresh in-memory DynamoDB
/// Local; Err when the harness fails (a violation, or a stack that would not work).
pub fn stress<S: AsRef<OsStr>>(tools: &Tools, command: &str, args: &[S]) -> Result {
    let debug = args.iter().any(|a| a.as_ref() == "--debug");
    let release = command == "bench" && !debug;
    let (stress, bin_dir) = build(command, release)?;
    step(&format!("{command}: dynamodb-local"));
    let log = util::cache_dir()?.join(format!("logs/dynamodb-local-{command}.log"));
    let ddb = dynamodb_local::start(&tools.dynamodb_local, &Storage::InMemory, None, &log)?;
    info(format!("{} (log: {})", ddb.endpoint, ddb.log.display()));

    step(command);
    let mut cmd = Command::new(&stress);
    cmd.arg("--bin-dir").arg(&bin_dir).arg(command).args(args);
    if command == "bench" {
        cmd.args(bench_args(&tools.dynamodb_local)?);
    }
    util::local_aws(&mut cmd, &ddb.endpoint);
    cmd.run()
}

/// Installs the bench's venvs, each its own under the cache dir so pins never clash (a marker
/// check when they are current), and returns the options that tell `tollgate-stress bench`
/// where they are and which DynamoDB Local and Java run (facts its report states).
fn bench_args(dynamodb_local: &Dist) -> Result<Vec<OsString>> {
    let venv = |name: &str, packages| setup::venv_with(&util::cache_dir()?.join(name), packages);
    let python = venv("bench-venv", POWERTOOLS)?;
    let schemathesis = venv("schemathesis-venv", SCHEMATHESIS)?.with_file_name("schemathesis");
    let version = dynamodb_local
        .version()
        .unwrap_or_else(|e| format!("unknown ({e})"));
    let java = util::first_line(Command::new(setup::java()).arg("-version"));
    Ok(vec![
        "--powertools-python".into(),
        python.into(),
        "--schemathesis".into(),
        schemathesis.into(),
        "--dynamodb-local".into(),
        version.into(),
        "--java".into(),
        java.unwrap_or_else(|| "unknown".into()).into(),
    ])
}
