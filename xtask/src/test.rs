//! `cargo xtask test`: the full check CI runs, runnable locally as is.
//!
//! setup → `cargo fmt --check` → clippy → DynamoDB Local → `cargo test`.
//! A failing fmt or clippy step does not stop the run: one pass reports
//! everything that is wrong. The exit status is non-zero if any step failed.

use crate::dynamodb_local::{self, Storage};
use crate::util::{self, info, step, Result};
use crate::{setup, signal};

const USAGE: &str = "Usage: cargo xtask test [--no-lint] [-- <cargo test args>]";

pub fn run(args: &[String]) -> Result {
    let mut lint = true;
    let mut test_args: &[String] = &[];
    for (i, arg) in args.iter().enumerate() {
        match arg.as_str() {
            "--no-lint" => lint = false,
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

/// Records a failed step and reports it right away, then carries on.
fn check(failed: &mut Vec<&'static str>, name: &'static str, result: Result) {
    if let Err(e) = result {
        eprintln!("error: {e}");
        failed.push(name);
    }
}
