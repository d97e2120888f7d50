//! The running local stack, as `cargo xtask dev` (or the e2e step of `cargo xtask test`)
//! describes it in its stack file.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};

use serde::Deserialize;

/// What the tests need from the stack file (it holds more; serde skips the rest).
#[derive(Debug, Clone, Deserialize)]
pub struct StackFile {
    pub ephemeral_key_url: String,
    pub transfer_url: String,
    /// The page (its `/api` proxies to the functions), with a query for the page.
    #[serde(default)]
    pub web_url: String,
    #[serde(default)]
    pub openai_stand_in: bool,
    #[serde(default)]
    pub internal_token: Option<String>,
    pub demo: Demo,
}

/// The demo client the stack seeded: its bearer token and its accounts.
#[derive(Debug, Clone, Deserialize)]
pub struct Demo {
    pub token: String,
    /// Payer first.
    pub accounts: Vec<String>,
}

/// `TOLLGATE_STACK_FILE`, else `<repo>/.dev/stack.json`.
pub fn stack_file() -> PathBuf {
    match std::env::var_os("TOLLGATE_STACK_FILE").filter(|v| !v.is_empty()) {
        Some(path) => PathBuf::from(path),
        None => tollgate_tests::workspace_root().join(".dev/stack.json"),
    }
}

/// The stack, read once per test binary.
pub fn stack() -> &'static StackFile {
    static STACK: OnceLock<StackFile> = OnceLock::new();
    STACK.get_or_init(|| {
        let path = stack_file();
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "cannot read the stack file {} ({e}): start the stack with `cargo xtask dev`, \
                 or run these tests with `cargo xtask test`, which starts its own",
                path.display()
            )
        });
        let stack: StackFile = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not a stack file: {e}", path.display()));
        assert!(
            stack.demo.accounts.len() >= 2,
            "{} lists fewer than two demo accounts",
            path.display()
        );
        stack
    })
}

/// Tests that call `POST /session` or move the demo accounts' money hold this, so a kill
/// switch flipped by one test is never seen by another running at the same time, and a balance
/// one test reads is not moved by another (the README's examples use the demo accounts too).
pub fn session_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A key no earlier run used, so runs against a long-lived dev stack never replay each other.
pub fn unique_key(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{prefix}-{nanos:x}-{}", std::process::id())
}
