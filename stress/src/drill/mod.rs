//! `drill`: attack drills against the rate limits of the real function binaries in `cloudfront`
//! mode, the fault proxy (no fault armed) counting their DynamoDB requests; with the block
//! cache, without it, then with sliding windows and a sharded spend cap ([`drills`]; the prose is
//! `templates/drill.md`, the options' `LONG_ABOUT`).

mod drills;
mod pictures;

use std::path::PathBuf;

use crate::limits::Limits;
use crate::stack::{self, HarnessStack};
use crate::Global;

/// What `--help` says beyond the one-line summary.
pub const LONG_ABOUT: &str =
    "Attack drills against the rate limits of the functions under the harness's \
Lambda runtime API, in `cloudfront` mode, with windows of 10 s (5 s with --short): floods with \
random tokens and with no token, a rotating spoofed X-Forwarded-For, rotating IPv6 addresses \
inside one /64, a stolen client token from rotating addresses, the reconnect loop over three \
windows, internal callers sharing one address, a forged internal token, a burst across a window \
boundary. Reports admitted requests against the configured limit per key, and DynamoDB requests \
per rejected request with and without the block cache (a restart of the functions with \
RATE_LIMIT_BLOCK_CACHE_SIZE=0), then again with sliding windows and a sharded spend cap (another \
restart). Exits non-zero on any violation.";

/// What to drill (the same options as `cargo xtask drill` always had).
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Windows of 5 s instead of 10 s, and no report unless --report (what `cargo xtask test`
    /// runs).
    #[arg(long)]
    pub short: bool,
    /// Where to write the report (default: docs/drill.md, unless --short)
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// Runs the drills; Err on any violation.
pub async fn run(global: &Global, o: Options) -> Result<(), crate::Error> {
    // Short windows keep the CI step quick; 5 s leaves a flood room on a loaded machine.
    let window = if o.short { 5 } else { 10 };
    let settings = drills::Settings {
        short: o.short,
        origin_secret: tollgate::ids::random_hex(16),
        limits: Limits::new(
            format!("ip=5/{window}s,global=100000/1d"),
            format!("ip=20/{window}s,client=5/{window}s"),
        ),
        // The same per-caller limits with sliding windows, and a small sharded spend cap.
        sliding: Limits::new(
            format!(
                "ip=5/{window}s:sliding,global={}/{window}s:shards=4",
                drills::SHARDED_CAP
            ),
            format!("ip=20/{window}s:sliding,client=5/{window}s:sliding"),
        ),
    };
    let mut env = vec![
        ("CLIENT_IP_SOURCE".into(), "cloudfront".into()),
        (
            "ORIGIN_VERIFY_SECRET".into(),
            settings.origin_secret.clone(),
        ),
        ("RATE_LIMIT_BLOCK_CACHE_SIZE".into(), "10000".into()),
    ];
    env.extend(settings.limits.env());
    let stack = HarnessStack::start(stack::Options {
        bin_dir: &global.bin_dir()?,
        transfer_instances: 1,
        session_instances: Some(1),
        fault_proxy: true,
        env,
        name: "drill",
    })
    .await?;

    // The demo client and its account, written directly with the function's own stores.
    let demo = stack.seed("drill-demo", &[100_000]).await?;
    let proxy = stack.proxy.clone().ok_or("the stack has no fault proxy")?;
    let session = stack
        .ephemeral_key
        .clone()
        .ok_or("the stack has no ephemeral-key function")?;
    let target = drills::Target {
        session: session.clone(),
        transfer: stack.transfer.clone(),
        internal_token: stack.internal_token.clone(),
        demo_token: demo.token,
        demo_account: demo.accounts[0].clone(),
    };
    let restart = |env: Vec<(String, String)>| {
        let (stack, session) = (&stack, session.clone());
        async move {
            stack
                .transfer
                .restart(&env)
                .await
                .map_err(|e| e.to_string())?;
            session.restart(&env).await.map_err(|e| e.to_string())
        }
    };
    let figures = drills::run(&settings, &target, &proxy, restart).await;

    let report = o
        .report
        .or_else(|| (!o.short).then(|| crate::workspace_root().join("docs/drill.md")));
    crate::report::publish(
        "drill.md",
        include_str!("../../templates/drill.md"),
        &figures,
        report.as_deref(),
    )?;
    // Beside the report, from the same figures: only a run that writes one draws them.
    if let Some(dir) = report.as_deref().and_then(std::path::Path::parent) {
        for drawn in pictures::draw(&figures, dir)? {
            eprintln!("drill: picture drawn: {}", drawn.display());
        }
    }
    let violations = figures.violations.len();
    stack.stop(violations > 0).await;
    if violations > 0 {
        return Err(format!(
            "the drill found {violations} violation(s):\n{}",
            figures.violations.join("\n")
        )
        .into());
    }
    Ok(())
}
