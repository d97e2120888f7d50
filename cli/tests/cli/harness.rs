//! One CLI per test: fresh tables named from a unique prefix, a stack file for DynamoDB Local in
//! a directory of its own, the table variables set, and a manual clock.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use aws_sdk_dynamodb::Client;
use serde_json::Value;
use tollgate::clock::ManualClock;
use tollgate::config::Env;
use tollgate_cli::{Context, Output};
use tollgate_functions::catalog::{Table, TABLES};
use tollgate_template::{self as template, TableDef};
use tollgate_tests::{dynamo, manual_clock};

/// The project's SAM template.
pub fn template_path() -> PathBuf {
    tollgate_tests::workspace_root().join("template.yaml")
}

/// The template's table definitions.
pub fn table_defs() -> Vec<TableDef> {
    let text = std::fs::read_to_string(template_path()).expect("template.yaml is readable");
    template::table_definitions(&text).expect("template.yaml defines its tables")
}

/// A prefix no other test (in this or another test process) uses.
pub fn unique_prefix() -> String {
    format!("cli-{}", dynamo::unique_prefix())
}

/// Table names under `prefix`, by logical id, and the variables naming them.
pub fn prefixed_names(prefix: &str) -> (HashMap<&'static str, String>, Vec<(String, String)>) {
    let names: HashMap<_, _> = TABLES
        .iter()
        .map(|t| (t.logical_id, format!("{prefix}-{}", t.default)))
        .collect();
    let env = TABLES
        .iter()
        .map(|t: &Table| (t.variable.to_string(), names[t.logical_id].clone()))
        .collect();
    (names, env)
}

/// A directory with `.dev/stack.json` pointing at DynamoDB Local; removed on drop.
pub struct StackDir(pub PathBuf);

impl StackDir {
    pub fn new(prefix: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("tollgate-{prefix}"));
        std::fs::create_dir_all(dir.join(".dev")).unwrap();
        let stack = serde_json::json!({
            "ephemeral_key_url": "http://127.0.0.1:1/",
            "transfer_url": "http://127.0.0.1:1/",
            "dynamodb_endpoint": dynamo::endpoint(),
            "demo": {},
        });
        std::fs::write(dir.join(".dev/stack.json"), stack.to_string()).unwrap();
        Self(dir)
    }
}

impl Drop for StackDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct TestCli {
    pub ddb: Client,
    pub clock: ManualClock,
    pub tables: HashMap<&'static str, String>,
    pub ctx: Context,
    _dir: StackDir,
}

impl TestCli {
    pub async fn new() -> Self {
        Self::with_env(&[]).await
    }

    /// With extra variables (limits, for example) on top of the table names.
    pub async fn with_env(extra: &[(&str, &str)]) -> Self {
        let (ddb, _) = dynamo::client();
        let prefix = unique_prefix();
        let (tables, env_pairs) = prefixed_names(&prefix);
        for def in table_defs() {
            template::create_table(&ddb, &tables[def.logical_id.as_str()], &def)
                .await
                .unwrap_or_else(|e| panic!("create {}: {e}", def.logical_id));
        }
        let mut env = Env::from_pairs(env_pairs);
        for (k, v) in extra {
            env.set(*k, *v);
        }
        let dir = StackDir::new(&prefix);
        let (clock, shared) = manual_clock();
        let ctx = Context::new(env, &dir.0).with_clock(shared);
        Self {
            ddb,
            clock,
            tables,
            ctx,
            _dir: dir,
        }
    }

    /// The test's name for a template table.
    pub fn table(&self, logical_id: &str) -> &str {
        &self.tables[logical_id]
    }

    /// Runs a command line (without the program name).
    pub async fn run(&self, args: &[&str]) -> Output {
        tollgate_cli::run(&self.ctx, args.iter().copied()).await
    }

    /// Runs a command with `--json` that must succeed; its one JSON object.
    pub async fn json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        let out = self.run(&args).await;
        assert_eq!(out.code, 0, "{args:?} failed: {}", out.stderr);
        assert!(
            out.stderr.is_empty(),
            "{args:?} wrote to stderr: {}",
            out.stderr
        );
        single_object(&out.stdout)
    }

    /// Runs a command that must fail with status 1 and one `error:` line; that line.
    pub async fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert_eq!(out.code, 1, "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?} printed {:?}", out.stdout);
        one_error_line(&out.stderr)
    }
}

/// `stdout` is exactly one line holding one JSON object.
pub fn single_object(stdout: &str) -> Value {
    let line = stdout
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("no final newline: {stdout:?}"));
    assert!(!line.contains('\n'), "more than one line: {stdout:?}");
    let value: Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout:?}"));
    assert!(value.is_object(), "not an object: {stdout:?}");
    value
}

/// `stderr` is one line starting `error: `; that line.
pub fn one_error_line(stderr: &str) -> String {
    let line = stderr
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("no final newline: {stderr:?}"));
    assert!(!line.contains('\n'), "more than one line: {stderr:?}");
    assert!(line.starts_with("error: "), "{stderr:?}");
    line.to_string()
}

/// The object's keys, sorted.
pub fn keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    keys
}

/// A shared clock handle for library calls made beside the CLI.
pub fn shared(clock: &ManualClock) -> tollgate::clock::SharedClock {
    Arc::new(clock.clone())
}
