//! `cargo xtask drill`: attack drills against the rate limits of the running stack, in
//! `cloudfront` mode (`tests/drill`).
//!
//! The same split and handshake as `cargo xtask replay` (see `replay.rs`): the driver (the
//! `drill` test of `tollgate-tests`, `#[ignore]`d) owns the traffic and an in-process
//! `FaultProxy` with no fault armed, used only to count the functions' DynamoDB requests per
//! operation; xtask owns the stack.
//!
//! 1. xtask picks DynamoDB Local's port and starts the driver with it;
//! 2. the driver starts its proxy and writes its endpoint to `proxy` in the run's directory;
//! 3. xtask starts the dev stack with the functions (only) pointed at the proxy, in
//!    `cloudfront` mode with a random origin-verify secret, short windows, and writes the stack
//!    file the driver waits for (the internal token is the stack's random one);
//! 4. after the drills with the block cache on, the driver writes `restart-1`; xtask restarts
//!    `cargo lambda watch` with `RATE_LIMIT_BLOCK_CACHE_SIZE=0` and answers `restarted-1`; the
//!    driver repeats the floods without the cache;
//! 5. the driver's exit status is the verdict; xtask stops everything either way.

use std::path::PathBuf;
use std::time::Instant;

use crate::dev;
use crate::setup::Tools;
use crate::util::{self, info, step, Result};
use crate::{processes, proxied, signal};

const USAGE: &str = "\
Usage: cargo xtask drill [--short] [--report <file.md>]

Attack drills against the rate limits of the functions under `cargo lambda
watch`, in `cloudfront` mode, with windows of 10 s (5 s with --short): floods
with random tokens and with no token, a rotating spoofed X-Forwarded-For,
rotating IPv6 addresses inside one /64, a stolen client token from rotating
addresses, the reconnect loop over three windows, internal callers sharing
one address, a forged internal token. Reports admitted requests against the
configured limit per key, and DynamoDB requests per rejected request with
and without the block cache (a restart of the functions with
RATE_LIMIT_BLOCK_CACHE_SIZE=0). Exits non-zero on any violation.
The full run writes docs/drill.md unless --report says otherwise; --short
(what `cargo xtask test` runs) writes no report unless asked.";

/// What to drill.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub short: bool,
    pub report: Option<PathBuf>,
}

/// The size `cargo xtask test` runs.
pub fn ci() -> Options {
    Options {
        short: true,
        report: None,
    }
}

pub fn run(args: &[String]) -> Result {
    let mut o = Options::default();
    let mut report = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--short" => o.short = true,
            "--report" => report = Some(std::path::absolute(args.next().ok_or(USAGE)?)?),
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            _ => return Err(format!("unexpected argument `{arg}`\n{USAGE}").into()),
        }
    }
    o.report = match report {
        Some(path) => Some(path),
        None if !o.short => Some(util::workspace_root().join("docs").join("drill.md")),
        None => None,
    };
    step("setup");
    let tools = crate::setup::all()?;
    drill(&tools, &o)
}

/// Builds and runs the driver against a private stack; Err on any violation.
pub fn drill(tools: &Tools, o: &Options) -> Result {
    signal::install();
    processes::become_subreaper();
    let started = Instant::now();
    let run = proxied::Run::new("drill")?;
    step("drill: build");
    run.build_driver()?;

    // Short windows keep the CI step quick; 5 s leaves a flood room on a loaded machine.
    let window = if o.short { 5 } else { 10 };
    let session_limits = format!("ip=5/{window}s,global=100000/1d");
    let transfer_limits = format!("ip=20/{window}s,client=5/{window}s");
    let origin_secret = util::random_hex(16)?;

    step("drill: driver");
    let mut cmd = run.driver("DRILL");
    cmd.env("DRILL_SHORT", if o.short { "1" } else { "0" })
        .env("DRILL_ORIGIN_SECRET", &origin_secret)
        .env("DRILL_SESSION_LIMITS", &session_limits)
        .env("DRILL_TRANSFER_LIMITS", &transfer_limits);
    match &o.report {
        Some(path) => cmd.env("DRILL_REPORT", path),
        None => cmd.env_remove("DRILL_REPORT"),
    };
    let mut driver = processes::spawn("drill driver", &mut cmd)?;
    let proxy = run.wait_for_proxy(&mut driver)?;

    step("drill: stack");
    let opts = run.stack_options(
        &proxy,
        vec![
            ("CLIENT_IP_SOURCE".into(), "cloudfront".into()),
            ("ORIGIN_VERIFY_SECRET".into(), origin_secret.clone()),
            ("SESSION_RATE_LIMITS".into(), session_limits),
            ("TRANSFER_RATE_LIMITS".into(), transfer_limits),
            ("RATE_LIMIT_BLOCK_CACHE_SIZE".into(), "10000".into()),
        ],
        None,
    );
    let result = dev::start(tools, &opts, None).and_then(|mut stack| {
        step("drill: traffic");
        // The driver asks for one restart: the floods again without the block cache.
        let result = run
            .supervise(
                &mut driver,
                &mut stack,
                &[("RATE_LIMIT_BLOCK_CACHE_SIZE".into(), "0".into())],
            )
            .and_then(|status| {
                if status.success() {
                    Ok(())
                } else {
                    Err(format!(
                        "the drill found violations or failed ({status}); see its report above"
                    )
                    .into())
                }
            });
        step("drill: stop");
        stack.stop();
        result
    });
    drop(driver);
    info(format!(
        "drill took {:.1}s",
        started.elapsed().as_secs_f32()
    ));
    run.finish(&result);
    result
}
