//! The stress harness: replay, drill and bench in one crate that owns its stack, so the drivers
//! arm faults, kill and restart functions and count requests by calling them, with no file
//! handshakes. Only DynamoDB Local runs outside this process and its children.
//!
//! What is here is what only this project needs: a reconciliation of DynamoDB against an
//! independent ledger of a day of traffic ([`replay`]), attack drills that assert exact
//! admissions per key ([`drill`]), and a Lambda runtime emulator whose pool can SIGKILL one
//! process mid-invocation ([`lambda`]; no local Lambda tool does). The rest is done by the tools
//! made for it: Schemathesis, `hdrhistogram`, `plotters` ([`plot`]), `fastrand`, `minijinja`
//! ([`report`]), and `tollgate-tests`' fault proxy, OpenAI stand-in and event builder.

pub mod bench;
pub mod drill;
pub mod lambda;
pub mod limits;
pub mod plot;
pub mod replay;
pub mod report;
pub mod stack;

/// The workspace (`tollgate_tests::workspace_root`, found when the harness runs): where
/// `openapi.yaml`, the Powertools script and `docs/` (the reports' default homes) are.
pub use tollgate_tests::workspace_root;

use clap::{Parser, Subcommand};

/// The harness's command line (`cargo xtask replay|drill|bench` pass their arguments here).
#[derive(Debug, Parser)]
#[command(
    name = "tollgate-stress",
    about = "Replay, drill and bench: Tollgate under load and faults"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand takes.
#[derive(Debug, clap::Args)]
pub struct Global {
    /// Where the function binaries (`transfer`, `ephemeral-key`) are; by default beside this
    /// binary (cargo builds them into the same directory).
    #[arg(long, global = true, env = "TOLLGATE_STRESS_BIN_DIR")]
    pub bin_dir: Option<std::path::PathBuf>,
}

impl Global {
    /// `--bin-dir`, or the directory of this binary.
    pub fn bin_dir(&self) -> Result<std::path::PathBuf, Error> {
        if let Some(dir) = &self.bin_dir {
            return Ok(dir.clone());
        }
        let exe = std::env::current_exe()?;
        Ok(exe
            .parent()
            .ok_or("this binary has no directory")?
            .to_path_buf())
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// A day of hostile transfer traffic with faults and kills, then a reconciliation.
    #[command(long_about = replay::LONG_ABOUT)]
    Replay(replay::Options),
    /// Attack drills against the rate limits, with and without the block cache.
    #[command(long_about = drill::LONG_ABOUT)]
    Drill(drill::Options),
    /// The figures in docs/benchmarks.md.
    Bench(bench::Options),
}

/// Wall-clock milliseconds since the epoch: the functions count their rate limits on this
/// clock, so an admission happened between its request's sending and its answer.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Sleeps until [`now_ms`] reaches `ms` (at once if it has).
pub async fn sleep_until(ms: u64) {
    let wait = ms.saturating_sub(now_ms());
    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
}

/// Any failure of a run: a violation found, or a stack that would not work.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Runs one subcommand.
pub async fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Replay(o) => replay::run(&cli.global, o).await,
        Command::Drill(o) => drill::run(&cli.global, o).await,
        Command::Bench(o) => bench::run(&cli.global, o).await,
    }
}
