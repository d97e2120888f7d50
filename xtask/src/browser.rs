//! The browser half's checks: the client's type check and unit tests (`web/`), and the browser
//! tests (`web/dev/browser.test.cjs`): Debian's headless Chromium, driven by playwright-core,
//! with fake media devices, against a stack of their own (the functions, DynamoDB Local, the
//! page and the OpenAI stand-in of `web/dev/server.cjs`, as `cargo xtask dev` starts them).
//!
//! `cargo xtask screenshots` runs the same browser tests and keeps a picture of the page in each
//! state under `docs/screenshots/`.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::dev;
use crate::setup::{self, Need, Tools};
use crate::util::{self, info, step, CmdExt, Result};

/// What the browser tests' stack changes: a small `ip` limit for the session function (the third
/// session within an hour is refused; sliding, so a test that runs across the top of the hour,
/// when a fixed window would start counting again, still sees the units it spent), a block
/// cache and kill-switch cache of 0 (each test's reset and flip apply at once), and a short
/// upstream cooldown (the page's 503 waits stay short).
const SESSION_LIMITS: &str = "ip=2/1h:sliding,global=1000/1d";
const STACK_ENV: &[(&str, &str)] = &[
    ("RATE_LIMIT_BLOCK_CACHE_SECONDS", "0"),
    ("KILL_SWITCH_CACHE_SECONDS", "0"),
    ("UPSTREAM_COOLDOWN_SECONDS", "2"),
];

/// `tsc` over the client (JSDoc types, checkJs) and `node --test web/test/`.
pub fn unit(tools: &Tools) -> Result {
    let web = util::workspace_root().join("web");
    let tsc = tools.web_modules.join("typescript/bin/tsc");
    let config = web.join("tsconfig.json");
    Command::new("node").arg(&tsc).arg("-p").arg(config).run()?;
    Command::new("node")
        .arg("--test")
        .arg(web.join("test"))
        .current_dir(&web)
        .run()
}

/// The browser tests against a private stack; with `screenshots`, pictures go there.
pub fn browser(tools: &Tools, screenshots: Option<&Path>) -> Result {
    let chromium = setup::chromium()?;
    let cli = dev::build_cli()?;
    let limits = tollgate_catalog::EPHEMERAL_KEY.limits_variable;
    let vars = STACK_ENV.iter().copied().chain([(limits, SESSION_LIMITS)]);
    let env = vars.map(|(k, v)| (k.to_string(), v.to_string())).collect();
    dev::with_private_stack(tools, "browser", env, |stack| {
        let mut cmd = Command::new("node");
        cmd.args(["--test", "--test-concurrency=1"])
            .arg(util::workspace_root().join("web/dev/browser.test.cjs"))
            .env("NODE_PATH", &tools.web_modules)
            .env("CHROMIUM", &chromium)
            .env("TOLLGATE_STACK_FILE", &stack.stack_file)
            .env("TOLLGATE_CLI", &cli)
            // The CLI resolves a layer's limit from the same variable the function reads.
            .env(limits, SESSION_LIMITS);
        if let Some(dir) = screenshots {
            fs::create_dir_all(dir)?;
            cmd.env("SCREENSHOT_DIR", dir);
        }
        cmd.run()
    })
}

/// `cargo xtask screenshots`: the browser tests, keeping a picture of each state.
pub fn screenshots() -> Result {
    step("setup");
    let tools = setup::all(&[Need::Java, Need::Node, Need::Python, Need::Chromium])?;
    let dir = util::workspace_root().join("docs/screenshots");
    browser(&tools, Some(&dir))?;
    info(format!("screenshots in {}", dir.display()));
    Ok(())
}
