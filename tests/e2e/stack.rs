//! The running local stack, as `cargo xtask dev` (or the e2e step of `cargo xtask test`)
//! describes it in its stack file.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// What the tests need from the stack file.
#[derive(Debug, Clone)]
pub struct Stack {
    pub ephemeral_key_url: String,
    pub transfer_url: String,
    pub openai_stand_in: bool,
    pub internal_token: Option<String>,
    pub demo_token: String,
    /// Payer first.
    pub demo_accounts: Vec<String>,
}

/// `TOLLGATE_STACK_FILE`, else `<repo>/.dev/stack.json`.
pub fn stack_file() -> PathBuf {
    match std::env::var_os("TOLLGATE_STACK_FILE").filter(|v| !v.is_empty()) {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("tests/ lives in the repository")
            .join(".dev")
            .join("stack.json"),
    }
}

/// The stack, read once per test binary.
pub fn stack() -> &'static Stack {
    static STACK: OnceLock<Stack> = OnceLock::new();
    STACK.get_or_init(|| {
        let path = stack_file();
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "cannot read the stack file {} ({e}): start the stack with `cargo xtask dev`, \
                 or run these tests with `cargo xtask test`, which starts its own",
                path.display()
            )
        });
        let v: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
        let string = |v: &serde_json::Value, key: &str| -> String {
            v[key]
                .as_str()
                .unwrap_or_else(|| panic!("{} has no string `{key}`", path.display()))
                .to_string()
        };
        let demo = &v["demo"];
        let demo_accounts: Vec<String> = demo["accounts"]
            .as_array()
            .unwrap_or_else(|| panic!("{} has no demo.accounts", path.display()))
            .iter()
            .map(|a| a.as_str().expect("account ids are strings").to_string())
            .collect();
        assert!(
            demo_accounts.len() >= 2,
            "{} lists fewer than two demo accounts",
            path.display()
        );
        Stack {
            ephemeral_key_url: string(&v, "ephemeral_key_url"),
            transfer_url: string(&v, "transfer_url"),
            openai_stand_in: v["openai_stand_in"].as_bool().unwrap_or(false),
            internal_token: v["internal_token"].as_str().map(str::to_string),
            demo_token: string(demo, "token"),
            demo_accounts,
        }
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
