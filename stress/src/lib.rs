//! The stress harness: replay, drill and bench in one crate that owns its stack.
//!
//! Everything but DynamoDB Local runs in this process or as its children, so the drivers arm
//! faults, kill and restart functions and count requests directly, with no file handshakes:
//!
//! - [`lambda`]: a Lambda runtime API emulator (hyper), a pool of function processes per
//!   function (spawn, SIGKILL, restart), `invoke` with a timeout, and an HTTP front (an API
//!   Gateway stand-in) for HTTP clients such as Schemathesis. Events are built by the one
//!   Lambda event builder, `tollgate_tests::events`.
//! - [`replay`]: a day of hostile transfer traffic through the fault proxy, then a
//!   reconciliation of DynamoDB against the log.
//! - [`drill`]: attack drills against the rate limits in `cloudfront` mode.
//! - [`bench`]: the figures in `docs/benchmarks.md`.
//! - [`report`]: the reports' prose is in `templates/*.md`, rendered with minijinja.
//!
//! The fault proxy and the OpenAI stand-in come from `tollgate-tests` too: one of each.

pub mod bench;
pub mod drill;
pub mod lambda;
pub mod replay;
pub mod report;

use clap::{Parser, Subcommand};

/// The harness's command line (`cargo xtask replay|drill|bench` pass their arguments here).
#[derive(Debug, Parser)]
#[command(
    name = "tollgate-stress",
    about = "Replay, drill and bench: Tollgate under load and faults"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// A day of hostile transfer traffic with faults and kills, then a reconciliation.
    Replay(replay::Options),
    /// Attack drills against the rate limits, with and without the block cache.
    Drill(drill::Options),
    /// The figures in docs/benchmarks.md.
    Bench(bench::Options),
}

/// Any failure of a run: a violation found, or a stack that would not work.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Runs one subcommand.
pub async fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Replay(o) => replay::run(o).await,
        Command::Drill(o) => drill::run(o).await,
        Command::Bench(o) => bench::run(o).await,
    }
}
