//! The demo client and its two accounts, made through the operator CLI (so the data is exactly
//! what an operator would make), and kept beside a persistent database for the next start.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::env::Env;
use crate::dynamodb_local::Storage;
use crate::util::{self, info, write_private, Result};

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

/// What `tollgate --json clients create` prints.
#[derive(Debug, Deserialize)]
struct NewClient {
    client_id: String,
    token: String,
}

/// What `tollgate --json accounts create|show` prints (the part read here).
#[derive(Debug, Deserialize)]
struct Account {
    account_id: String,
    #[serde(default)]
    client_id: Option<String>,
}

/// `cargo build -p tollgate-cli`; returns the `tollgate` binary's path.
pub fn build_cli() -> Result<PathBuf> {
    let mut bins = util::cargo_build_bins(&["-p", "tollgate-cli"], &["tollgate"])?;
    Ok(bins.remove(0))
}

/// Runs the CLI with `env` from the workspace root;
/// returns its stdout, or an error with its stderr.
pub fn run_cli(cli: &Path, env: &Env, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new(cli);
    cmd.args(args);
    env.apply(&mut cmd);
    cmd.current_dir(util::workspace_root()).stdin(Stdio::null());
    let shown = util::display(&cmd);
    let out = cmd
        .output()
        .map_err(|e| format!("could not run `{shown}`: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("`{shown}` failed ({}): {}", out.status, stderr.trim()).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `tollgate --json <args>`, its one JSON object read as a `T`.
fn cli_json<T: DeserializeOwned>(cli: &Path, env: &Env, args: &[&str]) -> Result<T> {
    let out = run_cli(cli, env, &[&["--json"], args].concat())?;
    serde_json::from_str(out.trim()).map_err(|e| {
        let args = args.join(" ");
        format!("`tollgate {args}` printed no JSON of the expected shape ({e}): {out}").into()
    })
}

/// The demo client and accounts: reused from a persistent database when
/// they are still there, else created.
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
    let client: NewClient = cli_json(cli, env, &["clients", "create", "--name", DEMO_CLIENT_NAME])?;
    let mut accounts = Vec::new();
    for balance in DEMO_BALANCES.map(|b| b.to_string()) {
        let (id, currency) = (client.client_id.as_str(), DEMO_CURRENCY);
        let args = ["accounts", "create", "--client", id, "--balance", &balance];
        let args = [&args[..], &["--currency", currency]].concat();
        accounts.push(cli_json::<Account>(cli, env, &args)?.account_id);
    }
    let demo = Demo {
        client_id: client.client_id,
        token: client.token,
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
        let shown = cli_json::<Account>(cli, env, &["accounts", "show", account]);
        shown.is_ok_and(|a| a.client_id.as_deref() == Some(&demo.client_id))
    };
    (demo.accounts.len() == DEMO_BALANCES.len() && demo.accounts.iter().all(owned)).then_some(demo)
}
