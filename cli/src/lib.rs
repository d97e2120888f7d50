//! `tollgate`: the operator CLI for the Tollgate functions' DynamoDB state.
//!
//! | command | module | what it does |
//! |---|---|---|
//! | `clients create` | `cmd/clients.rs` | a client and its bearer token, shown once |
//! | `accounts create/show/deposit` | `cmd/accounts.rs` | accounts through the transfer function's ledger |
//! | `kill-switch on/off/status` | `cmd/kill_switch.rs` | a function's off switch |
//! | `limits show/reset` | `cmd/limits.rs` | one rate-limit counter of the current window |
//! | `idempotency show` | `cmd/idempotency.rs` | the live record under an idempotency key |
//! | `tables create` | `cmd/tables.rs` | the template's tables, in DynamoDB Local |
//! | `catalog` | `cmd/catalog.rs` | the functions, tables and limits variables, for tools that cannot link the library |
//!
//! Every command goes through the library's stores ([`tollgate`], [`transfer::ledger`]), so the
//! CLI writes exactly the items the functions read; tables are read from `template.yaml` and
//! created by [`tollgate_template`]. Where it connects is [`connect`]'s business; function and
//! table names are [`tollgate_functions::catalog`]'s.
//!
//! [`run`] is the whole CLI as a function: arguments and a [`Context`] in, an [`Output`] (exit
//! status, stdout, stderr) out. `main.rs` only prints that, and tests call [`run`] in process.

mod cmd;
pub mod connect;
mod error;
mod output;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use tollgate::clock::{SharedClock, SystemClock};
use tollgate::config::Env;

pub use error::CliError;
pub use output::Output;

/// Operate the Tollgate functions' state: clients, accounts, kill switches, rate-limit counters,
/// idempotency records and local tables.
///
/// Finds the local stack through .dev/stack.json (this directory or a parent), else the stack
/// `cargo xtask deploy` recorded in .dev/deployed.json (its region, profile and table names);
/// otherwise uses the same environment as the functions (AWS credentials and region, DYNAMODB_ENDPOINT, table
/// name variables such as CLIENTS_TABLE; TRANSFER_IDEMPOTENCY_TABLE and
/// SESSION_IDEMPOTENCY_TABLE name the two idempotency tables). Rate limits are not taken from
/// that environment but from what each function published in the control table (or --limits).
#[derive(Debug, Parser)]
#[command(name = "tollgate", version)]
struct Cli {
    /// Print exactly one JSON object on stdout.
    #[arg(long, global = true)]
    json: bool,

    /// The local stack's description (default: the nearest .dev/stack.json).
    #[arg(long, global = true, value_name = "PATH")]
    stack_file: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// API clients and their bearer tokens.
    #[command(subcommand)]
    Clients(cmd::clients::Command),
    /// Accounts of the transfer function.
    #[command(subcommand)]
    Accounts(cmd::accounts::Command),
    /// A function's kill switch: when on, every request gets 403 with the operator's message.
    #[command(subcommand)]
    KillSwitch(cmd::kill_switch::Command),
    /// Rate-limit counters of the current window.
    #[command(subcommand)]
    Limits(cmd::limits::Command),
    /// Records stored under idempotency keys.
    #[command(subcommand)]
    Idempotency(cmd::idempotency::Command),
    /// The DynamoDB tables of template.yaml (for DynamoDB Local).
    #[command(subcommand)]
    Tables(cmd::tables::Command),
    /// The functions (name, idempotency route, limits variable and default) and the tables
    /// (variable and default name); with --json, one object for tools such as xtask.
    Catalog,
}

/// What an invocation runs in: the environment it reads settings from, the directory it
/// resolves paths and finds the stack file from, and the clock that places rate-limit windows.
#[derive(Debug, Clone)]
pub struct Context {
    pub env: Env,
    pub cwd: PathBuf,
    pub clock: SharedClock,
}

impl Context {
    /// `env` and `cwd`, with the system clock.
    pub fn new(env: Env, cwd: impl Into<PathBuf>) -> Self {
        Self {
            env,
            cwd: cwd.into(),
            clock: Arc::new(SystemClock),
        }
    }

    /// The process's environment and working directory.
    pub fn from_process() -> Result<Self, CliError> {
        let cwd = std::env::current_dir()
            .map_err(|e| CliError::new(format!("cannot read the working directory: {e}")))?;
        Ok(Self::new(Env::from_process(), cwd))
    }

    /// The same context with another clock (tests place windows with a manual clock).
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }
}

/// Runs one command line (without the program name) and returns what it printed.
pub async fn run<I, T>(ctx: &Context, args: I) -> Output
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let argv = std::iter::once(OsString::from("tollgate")).chain(args.into_iter().map(Into::into));
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => return Output::clap(e),
    };
    // Facts of the code, not of a stack: no stack file or DynamoDB needed.
    if let Command::Catalog = cli.command {
        return Output::reply(cmd::catalog::run(), cli.json);
    }
    let target = match connect::resolve(&ctx.env, &ctx.cwd, cli.stack_file.as_deref()) {
        Ok(target) => target,
        Err(e) => return Output::error(&e),
    };
    let mut output = match execute(ctx, &cli, &target).await {
        Ok(reply) => Output::reply(reply, cli.json),
        Err(e) => Output::error(&e),
    };
    // Real money may be behind a deployed stack: say which one, before anything else.
    if let connect::Target::Deployed(d) = &target {
        output.stderr.insert_str(0, &d.describe());
    }
    output
}

async fn execute(
    ctx: &Context,
    cli: &Cli,
    target: &connect::Target,
) -> Result<output::Reply, CliError> {
    let env = match target {
        connect::Target::Deployed(d) => d.env(&ctx.env),
        _ => ctx.env.clone(),
    };
    let deps = cmd::Deps {
        ddb: connect::dynamodb(target, &env).await,
        env: &env,
        clock: ctx.clock.clone(),
        cwd: &ctx.cwd,
        target,
    };
    match &cli.command {
        Command::Clients(c) => cmd::clients::run(c, &deps).await,
        Command::Accounts(c) => cmd::accounts::run(c, &deps).await,
        Command::KillSwitch(c) => cmd::kill_switch::run(c, &deps).await,
        Command::Limits(c) => cmd::limits::run(c, &deps).await,
        Command::Idempotency(c) => cmd::idempotency::run(c, &deps).await,
        Command::Tables(c) => cmd::tables::run(c, &deps).await,
        Command::Catalog => Ok(cmd::catalog::run()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arguments_are_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[tokio::test]
    async fn usage_errors_exit_2_and_help_exits_0() {
        let ctx = Context::new(Env::default(), std::env::temp_dir());
        let out = run(&ctx, ["accounts", "frobnicate"]).await;
        assert_eq!(out.code, 2);
        assert!(out.stderr.starts_with("error: "), "{}", out.stderr);
        let out = run(&ctx, ["--help"]).await;
        assert_eq!(out.code, 0);
        assert!(out.stdout.contains("kill-switch"), "{}", out.stdout);
    }
}
