//! Project chores for Tollgate, run as `cargo xtask <command>` (see the
//! alias in `.cargo/config.toml`). Written in Rust rather than shell so it
//! works the same on every machine and is checked by the compiler; kept free
//! of dependencies so it builds in seconds.

mod bench_tools;
mod browser;
mod dev;
mod dynamodb_local;
mod http;
mod json;
mod lock;
mod openai_standin;
mod processes;
mod setup;
mod signal;
mod stress;
mod test;
mod util;

use std::process::ExitCode;

const USAGE: &str = "\
Usage: cargo xtask <command> [options]

Commands:
  setup       Install the tools tests need (DynamoDB Local, cargo-lambda,
              zig, cfn-lint) at pinned versions into the cache dir
  dynamodb [--port <port>] [--db-path <dir>]
              Run DynamoDB Local (in memory unless --db-path) on a free port
              until Ctrl-C; prints DYNAMODB_ENDPOINT=http://127.0.0.1:<port>
  dev [--persist <dir>] [--port <port>] [--no-reload]
              The local stack: DynamoDB Local (in memory unless --persist),
              tables, a demo client and accounts, the voice demo page with
              /api on one origin, an OpenAI stand-in (client secrets and
              WebRTC calls) when OPENAI_API_KEY is unset, and both functions
              under `cargo lambda watch`; writes .dev/stack.json and prints
              the page URL and curl lines; Ctrl-C stops everything
  test [--no-lint] [--no-e2e] [--no-browser] [--no-replay] [--no-drill] [-- <cargo test args>]
              setup, cargo fmt --check, clippy (skipped with --no-lint),
              cargo test --workspace against a fresh in-memory DynamoDB Local,
              the web client's type check and unit tests, then the
              end-to-end tests against a private dev stack (skipped with
              --no-e2e), the browser tests in headless Chromium (skipped
              with --no-browser), a 2,000-request replay (skipped with
              --no-replay) and the short drills (skipped with --no-drill)
  screenshots  the browser tests, keeping a picture of the demo page in
              each state in docs/screenshots/
  replay [--seed <n>] [--requests <n>] [--report <file.md>] [...]
              a day of hostile transfer traffic (50,000 requests by
              default) through the functions, with DynamoDB faults and
              process kills, reconciled against an independent ledger;
              non-zero exit on any violation (`replay --help` for more;
              replay, drill and bench run the `tollgate-stress` harness)
  drill [--short] [--report <file.md>]
              attack drills against the rate limits (cloudfront mode):
              admitted vs limit per key, DynamoDB requests per rejection
              with and without the block cache; the full run writes
              docs/drill.md (`drill --help` for more)
  bench [--n <requests>] [--part <1-4>]... [--report <file.md>] [--debug]
              idempotency against Powertools for Python, the limiter
              against a bare UpdateItem, the release binaries under the
              harness's runtime-API emulator (cold start, latency, memory,
              size), and Schemathesis against openapi.yaml through its HTTP
              front; writes docs/benchmarks.md; --debug is a smoke run on
              debug builds (`bench --help` for more)
  help        Show this text

Environment:
  TOLLGATE_CACHE_DIR  where tools, venv and logs live
                      (default: $HOME/.cache/tollgate)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (command, rest) = match args.split_first() {
        Some((command, rest)) => (command.as_str(), rest),
        None => ("help", &[][..]),
    };
    let result = match command {
        "setup" => setup::run(rest),
        "dynamodb" => dynamodb_local::run(rest),
        "dev" => dev::run(rest),
        "test" => test::run(rest),
        "replay" | "drill" | "bench" => stress::run(command, rest),
        "screenshots" => browser::screenshots(rest),
        "help" | "-h" | "--help" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        other => {
            eprintln!("error: unknown command `{other}`\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            // 128 + SIGINT, as a shell reports an interrupted command.
            ExitCode::from(if signal::received() { 130 } else { 1 })
        }
    }
}
