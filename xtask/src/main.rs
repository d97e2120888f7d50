//! Project chores for Tollgate, run as `cargo xtask <command>` (see the alias in
//! `.cargo/config.toml`). Written in Rust rather than shell so it works the same on every
//! machine and is checked by the compiler. It depends on a few small crates (see its
//! `Cargo.toml`), never on the AWS SDK or a workspace crate, so it builds in seconds, first.
//!
//! One module per command: [`setup`] (the system prerequisites, then pinned tools into the
//! cache dir), [`dynamodb_local`] (DynamoDB Local from its jar, and `cargo xtask dynamodb`),
//! [`dev`] (the local stack and its `.dev/stack.json`, with [`front`] before the functions:
//! requests as API Gateway presents them), [`test`] (the whole check CI runs), [`deploy`] (the stack on AWS, recorded for the CLI) and [`browser`] (the web client's
//! checks and `screenshots`). Beneath them: [`processes`] (helper process trees that stop
//! without leftovers), [`lock`] (one `dev` per state directory), [`signal`] (Ctrl-C recorded,
//! not fatal) and [`util`] (paths, commands, probes). `replay`, `drill` and `bench` run the
//! `tollgate-stress` harness ([`stress`], with the bench's Python venvs).

mod browser;
mod deploy;
mod dev;
mod dynamodb_local;
mod front;
mod lock;
mod package;
mod processes;
mod setup;
mod signal;
#[cfg(test)]
mod stand_in;
mod stress;
mod test;
mod util;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Tollgate's chores: tools, DynamoDB Local, the dev stack, the full test run",
    after_help = "Environment:\n  TOLLGATE_CACHE_DIR  where tools, venv and logs live (default: $HOME/.cache/tollgate)"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install what `dev` and `test` need: the missing system prerequisites (Java 17+, Node and
    /// npm, Python with venv, curl, Chromium; with apt-get as root, else one sentence naming the
    /// command), then DynamoDB Local, cargo-lambda, zig, cfn-lint, sam and the web packages at
    /// pinned versions into the cache dir
    Setup,
    /// Run DynamoDB Local (in memory unless --db-path) on a free port until Ctrl-C; prints
    /// DYNAMODB_ENDPOINT=http://127.0.0.1:<port>
    Dynamodb(dynamodb_local::Args),
    /// The local stack: DynamoDB Local, tables, a demo client and accounts, the voice demo page
    /// with /api on one origin, an OpenAI stand-in when OPENAI_API_KEY is unset, and both
    /// functions under `cargo lambda watch`; writes .dev/stack.json and prints the page URL and
    /// curl lines; Ctrl-C stops everything
    Dev(dev::Args),
    /// setup, fmt, clippy, the guard crate's msrv/package/doc checks, cargo test --workspace
    /// against a fresh DynamoDB Local, the web client's checks, then e2e, browser, a
    /// 2,000-request replay and the short drills
    Test(test::Args),
    /// The stack on AWS: the SSM parameters checked, sam build, sam deploy, the page uploaded and
    /// invalidated, the URLs printed and the outputs recorded in .dev/deployed.json for the
    /// `tollgate` CLI (the first time asks four questions)
    Deploy(deploy::Args),
    /// The browser tests, keeping a picture of the demo page in each state in docs/screenshots/
    Screenshots,
    /// A day of hostile transfer traffic through the functions, with DynamoDB faults and process
    /// kills, reconciled against an independent ledger (`replay --help` for more)
    #[command(disable_help_flag = true)]
    Replay(Passed),
    /// Attack drills against the rate limits; the full run writes docs/drill.md
    /// (`drill --help` for more)
    #[command(disable_help_flag = true)]
    Drill(Passed),
    /// Idempotency and the limiter against baselines, the release binaries under a runtime-API
    /// emulator, Schemathesis; writes docs/benchmarks.md (`bench --help` for more)
    #[command(disable_help_flag = true)]
    Bench(Passed),
}

/// Arguments handed as they are to a command that reads its own.
#[derive(clap::Args)]
struct Passed {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

fn main() -> ExitCode {
    let Some(command) = Cli::parse().command else {
        let _ = Cli::command().print_help();
        return ExitCode::SUCCESS;
    };
    let result = match command {
        Cmd::Setup => setup::run(),
        Cmd::Dynamodb(args) => dynamodb_local::run(args),
        Cmd::Dev(args) => dev::run(args),
        Cmd::Test(args) => test::run(args),
        Cmd::Deploy(args) => deploy::run(args),
        Cmd::Screenshots => browser::screenshots(),
        Cmd::Replay(passed) => stress::run("replay", &passed.args),
        Cmd::Drill(passed) => stress::run("drill", &passed.args),
        Cmd::Bench(passed) => stress::run("bench", &passed.args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            // 128 + SIGINT, as a shell reports an interrupted command.
            ExitCode::from(if signal::received() { 130 } else { 1 })
        }
    }
}
