//! The bench's chores: its Python tools, pinned, each in a venv of its own under the cache dir
//! (so pins never clash with the tools' venv or each other), and the facts about the machine's
//! tools the report states. `cargo xtask bench` ([`crate::stress`]) passes them to
//! `tollgate-stress bench` as options; the bench itself is `stress/src/bench/`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

use crate::dynamodb_local::Dist;
use crate::util::{self, Result};

/// Part 1's Python side (`bench/powertools_transfer.py`): AWS Lambda Powertools for Python
/// and boto3; installed into `<cache>/bench-venv`.
const POWERTOOLS: &[(&str, &str)] = &[("aws-lambda-powertools", "3.37.0"), ("boto3", "1.44.8")];

/// Part 4's Schemathesis, the current release when that part was written (Python 3.10+);
/// installed into `<cache>/schemathesis-venv`.
const SCHEMATHESIS: &[(&str, &str)] = &[("schemathesis", "4.32.5")];

/// `<cache>/<name>`, a venv holding exactly `packages`; returns its `python3`.
fn venv(name: &str, packages: &[(&str, &str)]) -> Result<PathBuf> {
    crate::setup::venv_with(&util::cache_dir()?.join(name), packages)
}

/// Installs both venvs (a marker check when they are current) and returns the options that
/// tell `tollgate-stress bench` where they are and which DynamoDB Local and Java run.
pub fn stress_args(dynamodb_local: &Dist) -> Result<Vec<OsString>> {
    let python = venv("bench-venv", POWERTOOLS)?;
    let schemathesis = venv("schemathesis-venv", SCHEMATHESIS)?.with_file_name("schemathesis");
    let version = dynamodb_local
        .version()
        .unwrap_or_else(|e| format!("unknown ({e})"));
    let java = util::first_line(Command::new(crate::setup::java()).arg("-version"));
    Ok(vec![
        "--powertools-python".into(),
        python.into(),
        "--schemathesis".into(),
        schemathesis.into(),
        "--dynamodb-local".into(),
        version.into(),
        "--java".into(),
        java.into(),
    ])
}
