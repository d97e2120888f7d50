//! `cargo xtask replay`: a day of hostile transfer traffic through the real functions, with
//! faults between them and DynamoDB, process kills, and a reconciliation (`tests/replay`).
//!
//! Who does what: the driver (the `replay` test of `tollgate-tests`, `#[ignore]`d) owns the
//! traffic, the fault proxy (`tests/support/fault_proxy.rs`, in process, so it arms faults as
//! the traffic goes), the kills and the reconciliation. xtask owns the stack. The proxy must run
//! before the functions start (their `DYNAMODB_ENDPOINT` is read at cold start) and must know
//! DynamoDB Local's address, so:
//!
//! 1. xtask picks DynamoDB Local's port and starts the driver with it;
//! 2. the driver starts its proxy and writes its endpoint to `proxy` in the run's directory;
//! 3. xtask starts the dev stack (in memory, private ports) with the functions (only) pointed
//!    at the proxy, generous `TRANSFER_RATE_LIMITS`, and several `transfer` instances, and
//!    writes the stack file the driver waits for;
//! 4. when the driver has SIGKILLed a `transfer` process it writes `restart-N`; cargo-lambda
//!    1.9.2 never restarts a dead function (invocations then wait for it for ever), so xtask
//!    restarts `cargo lambda watch` on the same port and answers `restarted-N`;
//! 5. the driver's exit status is the verdict; xtask stops everything either way.

use std::path::PathBuf;
use std::time::Instant;

use crate::dev;
use crate::setup::Tools;
use crate::util::{info, step, Result};
use crate::{processes, proxied, signal};

const USAGE: &str = "\
Usage: cargo xtask replay [--seed <n>] [--requests <n>] [--accounts <n>]
                          [--clients <n>] [--concurrency <n>] [--instances <n>]
                          [--kills <n>] [--fault-rate <p>] [--report <file.md>]
                          [--sabotage]

Replays a day of transfer traffic generated from the seed (default 1):
at least --requests requests (default 50000) over --accounts accounts
(default 1000) of --clients clients (default 50), with lost responses and
retries under the same key (some much later), 2-5 concurrent duplicates,
keys reused with a changed body, insufficient funds, bad input and invalid
tokens. Through the real functions under `cargo lambda watch` (--instances
transfer processes, default 4; --concurrency requests in flight, default 24),
with a fault proxy between them and DynamoDB Local (a fault armed for about
--fault-rate of the requests, default 0.03: dropped requests, responses
dropped after commit, 500s, delays below and past the SDK's timeout,
throttling, and for transactions TransactionInProgress, a TransactionConflict
on the debited account and IdempotentParameterMismatch), and
--kills SIGKILLs of a transfer process (default 2), each followed by a
restart. Then reconciles DynamoDB, read directly, against a ledger computed
from the log; prints a report (also to --report), exits non-zero on any
violation. --sabotage damages the ledger in DynamoDB before reconciling
(copies one transfer record, deletes another, raises one balance), to show
that the checks fail.";

/// What to replay.
#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    pub requests: usize,
    pub accounts: usize,
    pub clients: usize,
    pub concurrency: usize,
    pub instances: u32,
    pub kills: usize,
    pub fault_rate: f64,
    pub report: Option<PathBuf>,
    /// Damage the ledger before reconciling: the run must then fail.
    pub sabotage: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            seed: 1,
            requests: 50_000,
            accounts: 1_000,
            clients: 50,
            concurrency: 24,
            instances: 4,
            kills: 2,
            fault_rate: 0.03,
            report: None,
            sabotage: false,
        }
    }
}

/// The size `cargo xtask test` runs.
pub fn ci() -> Options {
    Options {
        requests: 2_000,
        accounts: 200,
        kills: 1,
        ..Options::default()
    }
}

pub fn run(args: &[String]) -> Result {
    let mut o = Options::default();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = || -> Result<&String> { Ok(args.next().ok_or(USAGE)?) };
        fn parse<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T> {
            v.parse()
                .map_err(|_| format!("invalid {flag} `{v}`\n{USAGE}").into())
        }
        match arg.as_str() {
            "--seed" => o.seed = parse(arg, value()?)?,
            "--requests" => o.requests = parse(arg, value()?)?,
            "--accounts" => o.accounts = parse(arg, value()?)?,
            "--clients" => o.clients = parse(arg, value()?)?,
            "--concurrency" => o.concurrency = parse(arg, value()?)?,
            "--instances" => o.instances = parse(arg, value()?)?,
            "--kills" => o.kills = parse(arg, value()?)?,
            "--fault-rate" => o.fault_rate = parse(arg, value()?)?,
            "--report" => o.report = Some(std::path::absolute(value()?)?),
            "--sabotage" => o.sabotage = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            _ => return Err(format!("unexpected argument `{arg}`\n{USAGE}").into()),
        }
    }
    if o.clients == 0 || o.accounts < 2 * o.clients || o.concurrency == 0 || o.instances == 0 {
        return Err(format!(
            "need at least one client, two accounts per client, and a concurrency and instance count of at least 1\n{USAGE}"
        )
        .into());
    }
    step("setup");
    let tools = crate::setup::all()?;
    replay(&tools, &o)
}

/// Builds and runs the driver against a private stack; Err on any violation.
pub fn replay(tools: &Tools, o: &Options) -> Result {
    signal::install();
    processes::become_subreaper();
    let started = Instant::now();
    let run = proxied::Run::new("replay")?;
    step("replay: build");
    run.build_driver()?;

    step("replay: driver");
    let mut cmd = run.driver("REPLAY");
    cmd.env("REPLAY_SEED", o.seed.to_string())
        .env("REPLAY_REQUESTS", o.requests.to_string())
        .env("REPLAY_ACCOUNTS", o.accounts.to_string())
        .env("REPLAY_CLIENTS", o.clients.to_string())
        .env("REPLAY_CONCURRENCY", o.concurrency.to_string())
        .env("REPLAY_INSTANCES", o.instances.to_string())
        .env("REPLAY_KILLS", o.kills.to_string())
        .env("REPLAY_FAULT_RATE", o.fault_rate.to_string())
        .env("REPLAY_SABOTAGE", if o.sabotage { "1" } else { "0" });
    match &o.report {
        Some(path) => cmd.env("REPLAY_REPORT", path),
        None => cmd.env_remove("REPLAY_REPORT"),
    };
    let mut driver = processes::spawn("replay driver", &mut cmd)?;
    let proxy = run.wait_for_proxy(&mut driver)?;

    step("replay: stack");
    let opts = run.stack_options(
        &proxy,
        // The replay tests transfers, not limits.
        vec![(
            "TRANSFER_RATE_LIMITS".into(),
            "ip=10000000/1m,client=10000000/1m".into(),
        )],
        Some(o.instances),
    );
    let mut stack = dev::start(tools, &opts, None)?;
    info(format!(
        "functions at {} (log: {})",
        stack.info.transfer_url,
        stack.functions_log.display()
    ));

    step("replay: traffic");
    // The driver asks for a restart after each process it kills.
    let result = run
        .supervise(&mut driver, &mut stack, &[])
        .and_then(|status| {
            if status.success() {
                Ok(())
            } else {
                Err(format!(
                    "the replay found violations or failed ({status}); see its report above"
                )
                .into())
            }
        });
    step("replay: stop");
    stack.stop();
    drop(stack);
    drop(driver);
    info(format!(
        "replay took {:.1}s",
        started.elapsed().as_secs_f32()
    ));
    run.finish(&result);
    result
}
