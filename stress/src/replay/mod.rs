//! `replay`: a day of hostile transfer traffic through the real functions. (Work in progress.)

use std::path::PathBuf;

/// What to replay (the same options and defaults as `cargo xtask replay` had).
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Seed of the generated day.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// At least this many requests.
    #[arg(long, default_value_t = 50_000)]
    pub requests: usize,
    /// Accounts (at least two per client).
    #[arg(long, default_value_t = 1_000)]
    pub accounts: usize,
    /// Clients.
    #[arg(long, default_value_t = 50, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub clients: usize,
    /// Requests in flight.
    #[arg(long, default_value_t = 24, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub concurrency: usize,
    /// `transfer` processes.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub instances: u32,
    /// SIGKILLs of a transfer process, each followed by a restart.
    #[arg(long, default_value_t = 2)]
    pub kills: usize,
    /// About this share of the requests gets a fault armed.
    #[arg(long, default_value_t = 0.03)]
    pub fault_rate: f64,
    /// Also write the report to this file.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Damage the ledger in DynamoDB before reconciling: the run must then fail.
    #[arg(long)]
    pub sabotage: bool,
}

pub async fn run(_o: Options) -> Result<(), crate::Error> {
    Err("replay: not implemented yet".into())
}
