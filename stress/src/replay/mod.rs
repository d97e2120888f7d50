//! `replay`: a day of hostile transfer traffic through the real `transfer` binary, with faults
//! between it and DynamoDB and process kills, then a reconciliation of DynamoDB, read directly,
//! against a ledger computed from the log: [`plan`] (the day, from the seed), [`run`] (the
//! clients, the faults, the kills), [`sequences`] (hostile sequences run on purpose), [`check`]
//! and [`day`] (all of it on one stack, and the figures for `templates/replay.md`).

mod check;
mod day;
mod plan;
mod run;
mod sequences;

use std::path::PathBuf;

use crate::stack::{self, HarnessStack};
use crate::Global;

/// What `--help` says beyond the one-line summary.
pub const LONG_ABOUT: &str =
    "Replays a day of transfer traffic generated from the seed: at least --requests \
requests over --accounts accounts of --clients clients, with lost responses and retries under the \
same key (some much later), 2-5 concurrent duplicates, keys reused with a changed body, \
insufficient funds, bad input and invalid tokens. Through the real transfer binary (--instances \
processes under the harness's Lambda runtime API; --concurrency requests in flight), with a fault \
proxy between it and DynamoDB Local (a fault armed for about --fault-rate of the requests: dropped \
requests, responses dropped after commit, 500s, delays below and past the SDK's timeout, \
throttling, and for transactions TransactionInProgress, a TransactionConflict on the debited \
account and IdempotentParameterMismatch), and --kills SIGKILLs of a transfer process, each \
followed by a new process. Then reconciles DynamoDB, read directly, against a ledger computed \
from the log; prints a report (also to --report), exits non-zero on any violation.";

/// What to replay (the same options and defaults as `cargo xtask replay` always had).
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
    /// SIGKILLs of a transfer process, each followed by a new one.
    #[arg(long, default_value_t = 2)]
    pub kills: usize,
    /// About this share of the requests gets a fault armed.
    #[arg(long, default_value_t = 0.03)]
    pub fault_rate: f64,
    /// Also write the report to this file.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Damage the ledger in DynamoDB before reconciling (copy one transfer record, delete
    /// another, raise one balance), to show that the checks fail.
    #[arg(long)]
    pub sabotage: bool,
}

/// Runs the replay; Err on any violation.
pub async fn run(global: &Global, o: Options) -> Result<(), crate::Error> {
    if o.accounts < 2 * o.clients {
        return Err("need at least two accounts per client (--accounts, --clients)".into());
    }
    let stack = HarnessStack::start(stack::Options {
        bin_dir: &global.bin_dir()?,
        transfer_instances: o.instances as usize,
        session_instances: None,
        fault_proxy: true,
        // Out of the day's way, but a sliding `client` layer with a short window that the
        // sequences fill and cross (`sequences::limits`).
        env: vec![(
            tollgate_functions::catalog::TRANSFER.limits_variable.into(),
            sequences::limits(),
        )],
        name: "replay",
    })
    .await?;
    let figures = day::day(&o, &stack).await;
    let violations = figures.violations;
    crate::report::publish(
        "replay.md",
        include_str!("../../templates/replay.md"),
        &figures,
        o.report.as_deref(),
    )?;
    stack.stop(violations > 0).await;
    if violations > 0 {
        return Err(
            format!("the replay found {violations} violation(s); see the report above").into(),
        );
    }
    Ok(())
}
