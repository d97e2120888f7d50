//! `cargo xtask bench`: the figures in `docs/benchmarks.md`, from one run.
//!
//! 1. Tollgate's idempotency against AWS Lambda Powertools for Python, and 2. the limiter
//!    against a bare conditional `UpdateItem`, side by side on one DynamoDB Local: the driver
//!    (`tests/bench`, a `[[bench]]` target of `tollgate-tests`, never built by `cargo test`),
//!    built with the `bench-fast` profile, runs the Python side itself and writes these
//!    sections and their goals.
//! 3. Each function's release binary under a minimal Lambda runtime API ([`functions`]), on
//!    the same DynamoDB Local.
//! 4. Schemathesis against `openapi.yaml` on a local stack ([`api`]).
//!
//! xtask installs what the run needs (DynamoDB Local as `setup` does; separate venvs with the
//! pinned Python packages), then puts the parts together into one report: the driver's
//! sections, then parts 3 and 4, then every part's goals.

mod api;
mod functions;
mod runtime_api;

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

use crate::dynamodb_local::{self, Storage};
use crate::util::{self, info, step, Result};

const USAGE: &str = "\
Usage: cargo xtask bench [--n <requests>] [--part <1-4>]... [--report <file.md>]

Part 1: idempotency, Tollgate's Ledger::transfer against AWS Lambda
Powertools for Python's @idempotent_function (DynamoDB persistence layer)
doing the same transaction: DynamoDB requests per new request and per
duplicate, latency at concurrency 1 and 16. Part 2: RateLimiter::check
against a bare conditional UpdateItem from the same client, and DynamoDB
requests per rejection with and without the block cache. Part 3: each
function's release binary under a minimal Lambda runtime API: cold start,
warm latency, peak memory, size. Part 4: Schemathesis against openapi.yaml
on a local stack.

One DynamoDB Local (in memory) for parts 1 to 3; --n requests per phase
(default 400). All parts write docs/benchmarks.md unless --report says
otherwise; with --part (repeatable; 1 and 2 always run together) only those
parts run and the report goes to stdout, or to --report.";

/// The profile the driver is built with (root `Cargo.toml`).
const PROFILE: &str = "bench-fast";

/// The Python side's packages, pinned; installed into `<cache>/bench-venv`.
const PYTHON_PACKAGES: &[(&str, &str)] =
    &[("aws-lambda-powertools", "3.37.0"), ("boto3", "1.44.8")];

/// A part's contribution to the report.
pub struct Section {
    /// Markdown, starting with its `## n. …` heading.
    pub markdown: String,
    /// Lines for the report's Goals list (`- …`).
    pub goals: Vec<String>,
    /// Rows for the "Machine and versions" table.
    pub versions: Vec<(String, String)>,
}

pub fn run(args: &[String]) -> Result {
    let mut n = 400usize;
    let mut report = None;
    let mut parts = BTreeSet::new();
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
            "--part" => {
                let part: u8 = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|p| (1..=4).contains(p))
                    .ok_or(USAGE)?;
                // The driver measures parts 1 and 2 in one run.
                parts.insert(if part == 2 { 1 } else { part });
            }
            "--report" => report = Some(std::path::absolute(args.next().ok_or(USAGE)?)?),
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            _ => return Err(format!("unexpected argument `{arg}`\n{USAGE}").into()),
        }
    }
    let all = parts.is_empty();
    if all {
        parts.extend([1, 3, 4]);
        report.get_or_insert_with(|| util::workspace_root().join("docs").join("benchmarks.md"));
    }

    step("setup");
    let tools = crate::setup::all()?;
    let dist = &tools.dynamodb_local;
    let python = if parts.contains(&1) {
        Some(venv("bench-venv", PYTHON_PACKAGES)?)
    } else {
        None
    };

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
    if parts.contains(&1) {
        util::run(cargo_bench().arg("--no-run"))?;
    }
    let binaries = if parts.contains(&3) {
        Some(functions::build()?)
    } else {
        None
    };

    step("bench: dynamodb-local");
    let log = util::cache_dir()?
        .join("logs")
        .join("dynamodb-local-bench.log");
    let ddb = dynamodb_local::start(dist, &Storage::InMemory, None, &log)?;
    info(format!("{} (log: {})", ddb.endpoint, ddb.log.display()));

    let date = util::first_line(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]));
    let mut sections = Vec::new();

    // Parts 1 and 2: the driver writes its sections (and the report's head) to a file of its own.
    let driver_report = util::cache_dir()?.join("logs").join("bench-driver.md");
    if let Some(python) = &python {
        step("bench: parts 1 and 2");
        let rustc = util::first_line(
            Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into())).arg("-V"),
        );
        let java = util::first_line(Command::new(crate::setup::java()).arg("-version"));
        let ddb_version = dist.version().unwrap_or_else(|e| format!("unknown ({e})"));
        let mut command = "cargo xtask bench".to_string();
        if n != 400 {
            command.push_str(&format!(" --n {n}"));
        }
        let _ = fs::remove_file(&driver_report);
        let mut driver = cargo_bench();
        util::run(
            aws_env(&mut driver, &ddb.endpoint)
                .env("RUST_LOG", "off")
                .env("BENCH_N", n.to_string())
                .env("BENCH_PYTHON", python)
                .env(
                    "BENCH_SCRIPT",
                    util::workspace_root()
                        .join("bench")
                        .join("powertools_transfer.py"),
                )
                .env("BENCH_REPORT", &driver_report)
                .env("BENCH_DATE", &date)
                .env("BENCH_MACHINE_RUSTC", rustc)
                .env(
                    "BENCH_MACHINE_PROFILE",
                    format!(
                        "`{PROFILE}` for parts 1 and 2 (release, lto = false, codegen-units = 16, incremental)"
                    ),
                )
                .env(
                    "BENCH_MACHINE_DYNAMODB_LOCAL",
                    format!("{ddb_version} (in memory)"),
                )
                .env("BENCH_MACHINE_JAVA", java)
                .env("BENCH_ORDER", order(&parts))
                .env("BENCH_MACHINE_COMMAND", command),
        )?;
    }

    if let Some(binaries) = &binaries {
        step("bench: part 3");
        sections.push(functions::run(binaries, &ddb.endpoint, n)?);
    }
    step("bench: stop dynamodb-local");
    drop(ddb);

    if parts.contains(&4) {
        step("bench: part 4");
        sections.push(api::run(&tools)?);
    }

    let text = if python.is_some() {
        let driver = fs::read_to_string(&driver_report).map_err(|e| {
            format!(
                "the driver wrote no report to {}: {e}",
                driver_report.display()
            )
        })?;
        assemble(&driver, &sections)?
    } else {
        fragments(&sections)
    };
    match report {
        Some(path) => {
            fs::write(&path, &text)?;
            info(format!("report written to {}", path.display()));
        }
        None => println!("\n{text}"),
    }
    Ok(())
}

/// How the run went, for the report's first paragraph.
fn order(parts: &BTreeSet<u8>) -> String {
    let mut order = String::from(
        "on one DynamoDB Local, in the order part 1 (Tollgate, then Powertools), then part 2",
    );
    if parts.contains(&3) {
        order.push_str(", then part 3");
    }
    if parts.contains(&4) {
        order.push_str("; part 4 then ran on a local stack of its own");
    }
    order
}

/// Dummy credentials and the endpoint of our DynamoDB Local, nothing real.
pub fn aws_env<'a>(cmd: &'a mut Command, endpoint: &str) -> &'a mut Command {
    cmd.env("DYNAMODB_ENDPOINT", endpoint)
        .env("AWS_ENDPOINT_URL_DYNAMODB", endpoint);
    util::dummy_aws(cmd);
    cmd
}

const GOALS: &str = "\n## Goals\n";

/// The driver's report with the other sections inserted before its Goals, their goals after
/// its own, and their version rows at the end of its table.
fn assemble(driver: &str, sections: &[Section]) -> Result<String> {
    let (body, goals) = driver
        .split_once(GOALS)
        .ok_or("the driver's report has no Goals section")?;
    let table_end = body
        .find("\n\nReproduce:")
        .ok_or("the driver's report has no versions table")?;
    let mut out = body[..table_end].to_string();
    for s in sections {
        for (k, v) in &s.versions {
            out.push_str(&format!("\n| {k} | {v} |"));
        }
    }
    out.push_str(&body[table_end..]);
    for s in sections {
        out.push_str(&format!("\n{}", s.markdown.trim_end()));
        out.push('\n');
    }
    out.push_str(GOALS);
    out.push_str(goals);
    for s in sections {
        for g in &s.goals {
            out.push_str(g);
            out.push('\n');
        }
    }
    Ok(out)
}

/// Sections on their own (`--part` without 1 and 2).
fn fragments(sections: &[Section]) -> String {
    let mut out = String::new();
    for s in sections {
        out.push_str(s.markdown.trim_end());
        out.push_str("\n\n");
        for (k, v) in &s.versions {
            out.push_str(&format!("- {k}: {v}\n"));
        }
        for g in &s.goals {
            out.push_str(g);
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

/// `<cache>/<name>`, a venv holding exactly `packages` (name, version), so pins never clash
/// with the tools' venv or each other; returns its `python3`.
pub fn venv(name: &str, packages: &[(&str, &str)]) -> Result<PathBuf> {
    crate::setup::venv_with(&util::cache_dir()?.join(name), packages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assemble_puts_each_part_where_it_belongs() {
        let driver = "# Benchmarks\n\n| | |\n|---|---|\n| rustc | 1 |\n\nReproduce: `x`\n\n## 1. One\n\ntext\n\n## Goals\n\n- one: **met**\n";
        let part = Section {
            markdown: "## 3. Three\n\nmore\n".into(),
            goals: vec!["- three: **met**".into()],
            versions: vec![("tool".into(), "2".into())],
        };
        let text = assemble(driver, &[part]).unwrap();
        assert_eq!(
            text,
            "# Benchmarks\n\n| | |\n|---|---|\n| rustc | 1 |\n| tool | 2 |\n\nReproduce: `x`\n\n## 1. One\n\ntext\n\n## 3. Three\n\nmore\n\n## Goals\n\n- one: **met**\n- three: **met**\n"
        );
        assert!(assemble("no goals here", &[]).is_err());
    }
}
