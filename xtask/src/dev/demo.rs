//! The demo client and its two accounts, made through the operator CLI (so the data is exactly
//! what an operator would make), and kept beside a persistent database for the next start.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::env::Env;
use crate::dynamodb_local::Storage;
use crate::util::{self, info, write_private, CmdExt, Context, Result};

/// The demo data: a client, and opening balances of a payer and a payee.
const DEMO_CLIENT_NAME: &str = "demo";
pub const DEMO_CURRENCY: &str = "JPY";
const DEMO_BALANCES: [u64; 2] = [100_000, 0];
/// File beside a persistent database holding the demo's credentials.
const DEMO_FILE: &str = "tollgate-demo.json";

/// The demo client and its accounts (payer first); also the demo file of `--persist`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Demo {
    pub client_id: String,
    pub token: String,
    pub accounts: Vec<String>,
}

/// `cargo build -p tollgate-cli`; returns the `tollgate` binary's path.
pub fn build_cli() -> Result<PathBuf> {
    let mut bins = util::build_bins(util::cargo(), &["-p", "tollgate-cli"], &["tollgate"])?;
    Ok(bins.remove(0))
}

/// Runs the CLI with `env` from the workspace root; returns its stdout, or an error with its
/// stderr.
pub fn run_cli(cli: &Path, env: &Env, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new(cli);
    env.apply(cmd.args(args));
    cmd.current_dir(util::workspace_root())
        .stdin(Stdio::null())
        .read()
}

/// `tollgate --json <args>`: the one JSON object it prints.
fn cli_json(cli: &Path, env: &Env, args: &[&str]) -> Result<Value> {
    let out = run_cli(cli, env, &[&["--json"], args].concat())?;
    let what = || format!("`tollgate {}` printed no JSON: {out}", args.join(" "));
    serde_json::from_str(out.trim()).with_context(what)
}

/// A string field of what the CLI printed.
fn field(object: &Value, key: &str) -> Result<String> {
    let value = object[key].as_str().map(String::from);
    value.with_context(|| format!("the CLI printed no {key:?}: {object}"))
}

/// The demo client and accounts: reused from a persistent database when they are still there,
/// else created.
pub fn seed(cli: &Path, env: &Env, storage: &Storage) -> Result<Demo> {
    let saved = match storage {
        Storage::Dir(dir) => Some(dir.join(DEMO_FILE)),
        Storage::InMemory => None,
    };
    if let Some(path) = &saved {
        if let Some(demo) = saved_demo(cli, env, path) {
            info(format!("reusing the demo saved in {}", path.display()));
            return Ok(demo);
        }
    }
    let client = cli_json(cli, env, &["clients", "create", "--name", DEMO_CLIENT_NAME])?;
    let client_id = field(&client, "client_id")?;
    let mut accounts = Vec::new();
    for balance in DEMO_BALANCES.map(|b| b.to_string()) {
        let args = [
            "accounts",
            "create",
            "--client",
            &client_id,
            "--balance",
            &balance,
        ];
        let args = [&args[..], &["--currency", DEMO_CURRENCY]].concat();
        accounts.push(field(&cli_json(cli, env, &args)?, "account_id")?);
    }
    let token = field(&client, "token")?;
    let demo = Demo {
        client_id,
        token,
        accounts,
    };
    if let Some(path) = &saved {
        write_private(path, &serde_json::to_string_pretty(&demo)?)?;
    }
    Ok(demo)
}

/// A saved demo whose accounts still exist with the same owner.
fn saved_demo(cli: &Path, env: &Env, path: &Path) -> Option<Demo> {
    let demo: Demo = serde_json::from_str(&fs::read_to_string(path).ok()?).ok()?;
    let owned = |account: &String| {
        let shown = cli_json(cli, env, &["accounts", "show", account]);
        shown.is_ok_and(|a| a["client_id"] == *demo.client_id)
    };
    (demo.accounts.len() == DEMO_BALANCES.len() && demo.accounts.iter().all(owned)).then_some(demo)
}
