//! `cargo xtask replay|drill|bench`: the chore around the stress harness (`stress/`, the
//! `tollgate-stress` binary), which owns everything else: its tables, the fault proxy, the
//! OpenAI stand-in, the function processes under its Lambda runtime API, the traffic, the
//! checks and the report.
//!
//! Here: install the tools, build the function binaries and the harness (debug for replay
//! and drill; for bench the functions in `release` and the harness in `bench-fast`, so the
//! timings mean something, and the bench's Python tools from [`crate::bench_tools`]), start
//! DynamoDB Local in memory, run `tollgate-stress <command> <arguments>` with
//! `DYNAMODB_ENDPOINT` and dummy AWS credentials (as `cargo test` gets them), stop DynamoDB
//! Local. The arguments are the harness's (`cargo xtask replay --help` shows its help); the
//! one default added here is the full drill's report, `docs/drill.md`.

use std::path::PathBuf;
use std::process::Command;

use crate::dynamodb_local::{self, Storage};
use crate::setup::Tools;
use crate::util::{self, info, step, Result};

/// What `cargo xtask test` replays: 2,000 requests over 200 accounts, one kill.
pub const REPLAY_CI: &[&str] = &["--requests", "2000", "--accounts", "200", "--kills", "1"];
/// What `cargo xtask test` drills.
pub const DRILL_CI: &[&str] = &["--short"];

/// `cargo xtask <command> <args>` for `replay`, `drill` and `bench`.
pub fn run(command: &str, args: &[String]) -> Result {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        let stress = build(command, args)?.stress;
        return util::run(Command::new(stress).arg(command).arg("--help"));
    }
    step("setup");
    let tools = crate::setup::all()?;
    let mut args = args.to_vec();
    let has = |flag: &str, args: &[String]| args.iter().any(|a| a == flag);
    if command == "drill" && !has("--short", &args) && !has("--report", &args) {
        args.push("--report".into());
        let report = util::workspace_root().join("docs/drill.md");
        args.push(report.display().to_string());
    }
    stress(&tools, command, &args)
}

/// Where the built binaries are.
struct Built {
    stress: PathBuf,
    bin_dir: PathBuf,
}

fn build<S: AsRef<std::ffi::OsStr>>(command: &str, run_args: &[S]) -> Result<Built> {
    step(&format!("{command}: build"));
    let catalog = crate::dev::catalog(&crate::dev::build_cli()?)?;
    let names: Vec<&str> = catalog.functions.iter().map(|f| f.name.as_str()).collect();
    let packages: Vec<&str> = names.iter().flat_map(|name| ["-p", name]).collect();
    // The bench's functions as a deploy builds them (`release`), its driver optimised but
    // cheaper to build (`bench-fast`); `bench --debug` is a smoke run on debug builds.
    // (`--help` needs only the harness: a debug build.) Otherwise one build of all, so
    // features unify as in `cargo xtask test`'s other steps.
    let debug = run_args
        .iter()
        .any(|a| ["--debug", "--help", "-h"].contains(&a.as_ref().to_str().unwrap_or("")));
    let (functions, stress) = if command == "bench" && !debug {
        let release = [&["--release"], &packages[..]].concat();
        let functions = util::cargo_build_bins(&release, &names[..1])?;
        let harness = ["--profile", "bench-fast", "-p", "tollgate-stress"];
        (
            functions,
            util::cargo_build_bins(&harness, &["tollgate-stress"])?,
        )
    } else {
        let all = [&packages[..], &["-p", "tollgate-stress"]].concat();
        let mut bins = util::cargo_build_bins(&all, &[names[0], "tollgate-stress"])?;
        (bins.drain(..1).collect(), bins)
    };
    let bin_dir = functions[0]
        .parent()
        .ok_or("a function binary has no directory")?;
    Ok(Built {
        stress: stress[0].clone(),
        bin_dir: bin_dir.to_path_buf(),
    })
}

/// Builds and runs `tollgate-stress <command> <args>` against a fresh in-memory DynamoDB
/// Local; Err when the harness fails (a violation, or a stack that would not work).
pub fn stress<S: AsRef<std::ffi::OsStr>>(tools: &Tools, command: &str, args: &[S]) -> Result {
    let built = build(command, args)?;
    step(&format!("{command}: dynamodb-local"));
    let log = util::cache_dir()?
        .join("logs")
        .join(format!("dynamodb-local-{command}.log"));
    let mut ddb = dynamodb_local::start(&tools.dynamodb_local, &Storage::InMemory, None, &log)?;
    info(format!("{} (log: {})", ddb.endpoint, ddb.log.display()));

    step(command);
    let mut cmd = Command::new(&built.stress);
    cmd.arg("--bin-dir")
        .arg(&built.bin_dir)
        .arg(command)
        .args(args);
    if command == "bench" {
        cmd.args(crate::bench_tools::stress_args(&tools.dynamodb_local)?);
    }
    util::local_aws(&mut cmd, &ddb.endpoint);
    let result = util::run(&mut cmd);
    ddb.stop();
    result
}
