//! `cargo xtask dev`: the whole stack on this machine, ready to `curl` and to open in a browser
//! (the README lists its steps). [`with_private_stack`] is the same stack for `cargo xtask
//! test`'s e2e and browser steps.
//!
//! One file per concern: [`stack`] (start, probe and stop the parts, the stack file), [`demo`]
//! (the demo client and accounts, through the operator CLI, so the data is made exactly as an
//! operator would make it), [`env`] (what the CLI and the functions see), [`echo`] (the
//! functions' log on the terminal) and [`banner`] (the ready-to-paste lines); this file is the
//! command.
//!
//! Choices worth knowing:
//!
//! - One `cargo lambda watch` serves both binaries, each at
//!   `http://127.0.0.1:<port>/lambda-url/<binary>/…`. cargo-lambda strips `/lambda-url/<binary>`
//!   before building the function-URL event, so the functions see `/session`, `/transfers`, …
//!   and `BASE_PATH` stays empty.
//! - What the stack publishes (the stack file's URLs, `.dev/env`, the page's `/api`) is the
//!   front's port, never cargo-lambda's: the front joins repeated header fields as API
//!   Gateway's payload 2.0 does, which cargo-lambda does not (it keeps the first field), so a
//!   local answer is the deployed one.
//! - The functions are built *before* `cargo lambda watch` starts, with the same `cargo build
//!   --bin <name>` cargo-lambda runs (one package per invocation, so features unify the same
//!   way and nothing is rebuilt): compile errors fail the start at once, instead of showing as
//!   a hanging first request.
//! - Variables the user set reach the functions untouched; only unset ones get dev defaults.
//!   The stack's own wiring is always ours: `DYNAMODB_ENDPOINT` and dummy AWS credentials
//!   (real ones are never sent anywhere, not even to a local port).
//! - `--persist DIR` keeps the demo credentials beside the data (`DIR/tollgate-demo.json`):
//!   tokens are stored hashed, so the demo token can only be shown again if we keep it. The
//!   next start with the same DIR reuses the demo when its accounts still exist.

mod banner;
mod demo;
mod echo;
mod env;
mod stack;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

pub use self::demo::build_cli;
pub use self::stack::{with_private_stack, Options};
use crate::dynamodb_local::Storage;
use crate::util::{self, info, step, Result};
use crate::{processes, signal};

/// `cargo xtask dev`'s options (its summary is in `main.rs`).
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Variables you set (RUST_LOG, INTERNAL_TOKEN, OPENAI_API_KEY, OPENAI_BASE_URL, table names, limits, ...) reach both functions unchanged."
)]
pub struct Args {
    /// Keep DynamoDB's data (and the demo credentials) in DIR across restarts
    /// [default: in memory]
    #[arg(long, value_name = "DIR")]
    persist: Option<PathBuf>,
    /// Port of the functions' URLs [default: a free one]
    #[arg(long)]
    port: Option<u16>,
    /// Do not rebuild and restart functions on code changes
    #[arg(long)]
    no_reload: bool,
}

pub fn run(args: Args) -> Result {
    let storage = match args.persist {
        Some(dir) => Storage::Dir(std::path::absolute(dir)?),
        None => Storage::InMemory,
    };
    let reload = !args.no_reload;
    if let (Storage::Dir(dir), true) = (&storage, reload) {
        warn_if_watched(dir);
    }
    let started = Instant::now();
    let opts = Options {
        state_dir: util::workspace_root().join(".dev"),
        storage,
        invoke_port: args.port,
        reload,
        function_env: Vec::new(),
    };
    // Refuse a second start before spending time on setup.
    let lock = stack::lock(&opts.state_dir)?;
    step("setup");
    let tools = crate::setup::all(crate::setup::Need::STACK)?;
    let mut stack = stack::start(&tools, &opts, Some(lock))?;
    let secs = started.elapsed().as_secs_f32();
    info(format!("started in {secs:.1}s"));
    let mut echo = echo::Echo::open(&stack.functions_log)?;
    print!("{}", banner::banner(&stack)?);
    let _ = std::io::stdout().flush();

    let result = loop {
        echo.pump();
        if signal::received() {
            break Ok(());
        }
        if let Err(e) = stack.check_alive() {
            break Err(e);
        }
        sleep(Duration::from_millis(200));
    };
    step("stopping");
    stack.stop();
    match processes::leftovers() {
        left if left.is_empty() => info("everything stopped; stack file removed, lock released"),
        left => info(format!("still running: {left:?}")),
    }
    result
}

/// `cargo lambda watch` restarts the functions when a file it watches changes, and it watches
/// the repository minus what git ignores. A database kept there would restart them on every
/// write.
fn warn_if_watched(dir: &Path) {
    let root = util::workspace_root();
    if !dir.starts_with(&root) {
        return;
    }
    let mut git = Command::new("git");
    git.args(["check-ignore", "-q"]).arg(dir).current_dir(&root);
    let ignored = git.stdout(Stdio::null()).stderr(Stdio::null()).status();
    if ignored.is_ok_and(|s| !s.success()) {
        info(format!(
            "warning: {} is inside the repository and not git-ignored, so every database write restarts the functions; use a directory under .dev/ or outside the repository, or --no-reload",
            dir.display()
        ));
    }
}
