//! `cargo xtask bench`: Tollgate's idempotency against AWS Lambda Powertools for Python, and the
//! limiter against a bare conditional `UpdateItem`, side by side on one DynamoDB Local.
//!
//! xtask installs what the run needs (DynamoDB Local as `setup` does; a separate venv with
//! pinned Powertools and boto3), builds the driver (`tests/bench`, a `[[bench]]` target of
//! `tollgate-tests`, never built by `cargo test`) with the `bench-fast` profile, starts DynamoDB
//! Local in memory, and runs the driver, which runs the Python side itself and writes the report.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use crate::dynamodb_local::{self, Storage};
use crate::util::{self, info, step, Result};

const USAGE: &str = "\
Usage: cargo xtask bench [--n <requests>] [--report <file.md>]

Part 1: idempotency, Tollgate's Ledger::transfer against AWS Lambda
Powertools for Python's @idempotent_function (DynamoDB persistence layer)
doing the same transaction: DynamoDB requests per new request and per
duplicate, latency at concurrency 1 and 16. Part 2: RateLimiter::check
against a bare conditional UpdateItem from the same client, and DynamoDB
requests per rejection with and without the block cache. One DynamoDB Local
(in memory), --n requests per phase (default 400); writes docs/benchmarks.md
unless --report says otherwise.";

/// The profile the driver is built with (root `Cargo.toml`).
const PROFILE: &str = "bench-fast";

/// The Python side's packages, pinned; installed into `<cache>/bench-venv`.
const PYTHON_PACKAGES: &[(&str, &str)] =
    &[("aws-lambda-powertools", "3.37.0"), ("boto3", "1.44.8")];

const MARKER: &str = ".tollgate-installed";

pub fn run(args: &[String]) -> Result {
    let mut n = 400usize;
    let mut report = util::workspace_root().join("docs").join("benchmarks.md");
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--n" => {
                n = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&v| v > 0)
                    .ok_or(USAGE)?
            }
            "--report" => report = std::path::absolute(args.next().ok_or(USAGE)?)?,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            _ => return Err(format!("unexpected argument `{arg}`\n{USAGE}").into()),
        }
    }

    step("setup");
    let dist = crate::setup::dynamodb_local()?;
    let python = bench_venv()?;

    step("bench: build");
    let cargo_bench = || {
        let mut cmd = util::cargo();
        cmd.args([
            "bench",
            "-p",
            "tollgate-tests",
            "--bench",
            "bench",
            "--profile",
            PROFILE,
        ]);
        cmd
    };
    util::run(cargo_bench().arg("--no-run"))?;

    step("bench: dynamodb-local");
    let log = util::cache_dir()?
        .join("logs")
        .join("dynamodb-local-bench.log");
    let ddb = dynamodb_local::start(&dist, &Storage::InMemory, None, &log)?;
    info(format!("{} (log: {})", ddb.endpoint, ddb.log.display()));

    step("bench: run");
    let first_line = |cmd: &mut Command| {
        util::capture(cmd)
            .map(|o| {
                let text = if o.stdout.is_empty() {
                    o.stderr
                } else {
                    o.stdout
                };
                String::from_utf8_lossy(&text)
                    .lines()
                    .next()
                    .unwrap_or("unknown")
                    .trim()
                    .to_string()
            })
            .unwrap_or_else(|| "unknown".into())
    };
    let rustc = first_line(
        Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into())).arg("-V"),
    );
    let java = first_line(Command::new(crate::setup::java()).arg("-version"));
    let date = first_line(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]));
    let ddb_version = dist.version().unwrap_or_else(|e| format!("unknown ({e})"));
    let mut command = "cargo xtask bench".to_string();
    if n != 400 {
        command.push_str(&format!(" --n {n}"));
    }
    let result = util::run(
        cargo_bench()
            .env("DYNAMODB_ENDPOINT", &ddb.endpoint)
            .env("AWS_ENDPOINT_URL_DYNAMODB", &ddb.endpoint)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_PROFILE")
            .env("RUST_LOG", "off")
            .env("BENCH_N", n.to_string())
            .env("BENCH_PYTHON", &python)
            .env(
                "BENCH_SCRIPT",
                util::workspace_root()
                    .join("bench")
                    .join("powertools_transfer.py"),
            )
            .env("BENCH_REPORT", &report)
            .env("BENCH_DATE", date)
            .env("BENCH_MACHINE_RUSTC", rustc)
            .env(
                "BENCH_MACHINE_PROFILE",
                format!("`{PROFILE}` (release, lto = false, codegen-units = 16, incremental)"),
            )
            .env(
                "BENCH_MACHINE_DYNAMODB_LOCAL",
                format!("{ddb_version} (in memory)"),
            )
            .env("BENCH_MACHINE_JAVA", java)
            .env("BENCH_MACHINE_COMMAND", command),
    );
    step("bench: stop");
    drop(ddb);
    result
}

/// `<cache>/bench-venv` with [`PYTHON_PACKAGES`]; returns its `python3`.
fn bench_venv() -> Result<PathBuf> {
    let venv = util::cache_dir()?.join("bench-venv");
    let python = venv.join("bin").join("python3");
    let pins: Vec<String> = PYTHON_PACKAGES
        .iter()
        .map(|(name, version)| format!("{name}=={version}"))
        .collect();
    let spec = pins.join(" ");
    if python.is_file() && fs::read_to_string(venv.join(MARKER)).is_ok_and(|s| s.trim() == spec) {
        info(format!("{spec}: already installed"));
        return Ok(python);
    }
    if !python.is_file() {
        info(format!("creating venv {}", venv.display()));
        util::run(
            Command::new("python3")
                .args(["-m", "venv", "--clear"])
                .arg(&venv),
        )?;
    }
    info(format!("{spec}: installing"));
    util::run(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                "--quiet",
            ])
            .args(&pins),
    )?;
    fs::write(venv.join(MARKER), &spec)?;
    Ok(python)
}
