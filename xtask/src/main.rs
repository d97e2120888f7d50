//! Project chores for Tollgate, run as `cargo xtask <command>` (see the
//! alias in `.cargo/config.toml`). Written in Rust rather than shell so it
//! works the same on every machine and is checked by the compiler; kept free
//! of dependencies so it builds in seconds.

mod dynamodb_local;
mod setup;
mod signal;
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
  test [--no-lint] [-- <cargo test args>]
              setup, cargo fmt --check, clippy (skipped with --no-lint), then
              cargo test --workspace against a fresh in-memory DynamoDB Local
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
        "test" => test::run(rest),
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
