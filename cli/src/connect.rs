//! Which DynamoDB the CLI talks to.
//!
//! 1. The local stack. `cargo xtask dev` writes `.dev/stack.json`; when it exists in the working
//!    directory or a parent (or `--stack-file` names one), its `dynamodb_endpoint` is used with
//!    dummy credentials (`test`/`test`, `us-east-1`): DynamoDB Local accepts any, and an
//!    operator's real AWS profile should never be sent to a local port. An explicit
//!    `DYNAMODB_ENDPOINT` replaces the file's endpoint.
//! 2. The deployed stack. `cargo xtask deploy` records `.dev/deployed.json` (stack name, region,
//!    profile, outputs); when no local stack is running, the nearest one is used: that region and
//!    profile, and the table names from the stack's outputs (`ClientsTableName`, …) for every
//!    table variable the shell does not set. The CLI says on stderr which stack it talks to.
//! 3. Otherwise the functions' own environment: [`tollgate::aws::load_config`] (region and
//!    credentials the standard way) and [`tollgate::aws::dynamodb`] (`DYNAMODB_ENDPOINT`
//!    honoured), so the CLI reaches exactly what the functions would in that shell.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_dynamodb::Client;
use serde::Deserialize;
use tollgate::config::Env;
use tollgate_functions::catalog;

use crate::error::CliError;

/// Where the local stack describes itself, relative to the directory it was started in.
pub const STACK_FILE: &str = ".dev/stack.json";
/// Where `cargo xtask deploy` records the deployed stack, relative to the workspace root.
pub const DEPLOYED_FILE: &str = ".dev/deployed.json";
/// Region and credentials for DynamoDB Local.
const LOCAL_REGION: &str = "us-east-1";
const LOCAL_KEY: &str = "test";

/// The DynamoDB to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The local stack's DynamoDB Local, with dummy credentials.
    Local {
        endpoint: String,
        stack_file: PathBuf,
    },
    /// The stack `cargo xtask deploy` recorded: its region and profile, its tables.
    Deployed(Deployed),
    /// The functions' environment: SDK credentials and region, `DYNAMODB_ENDPOINT` when set.
    Environment { endpoint: Option<String> },
}

/// The fields of `.dev/deployed.json` the CLI reads (the file has more).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Deployed {
    pub stack_name: String,
    pub region: String,
    #[serde(default)]
    pub profile: Option<String>,
    /// The stack's outputs: `<logical id>Name` gives each table's name.
    #[serde(default)]
    pub outputs: BTreeMap<String, String>,
    /// The file it was read from.
    #[serde(skip)]
    pub file: PathBuf,
}

impl Deployed {
    /// `env` with each table variable it leaves unset taken from the stack's outputs.
    pub fn env(&self, env: &Env) -> Env {
        let mut env = env.clone();
        for table in catalog::TABLES {
            let output = self.outputs.get(&format!("{}Name", table.logical_id));
            if let (None, Some(name)) = (env.get(table.variable), output) {
                env.set(table.variable, name);
            }
        }
        env
    }

    /// The line that says which stack the CLI talks to.
    pub fn describe(&self) -> String {
        let profile = self
            .profile
            .as_deref()
            .map(|p| format!(", profile {p}"))
            .unwrap_or_default();
        format!(
            "tollgate: stack {} in {}{profile} (from {})\n",
            self.stack_name,
            self.region,
            self.file.display()
        )
    }
}

impl Target {
    /// Whether this target is something other than the regional AWS endpoint.
    pub fn is_local(&self) -> bool {
        match self {
            Target::Local { .. } => true,
            Target::Deployed(_) => false,
            Target::Environment { endpoint } => endpoint.is_some(),
        }
    }
}

/// The fields of `.dev/stack.json` the CLI reads (the file has more).
#[derive(Debug, Deserialize)]
struct StackFile {
    dynamodb_endpoint: String,
}

/// The nearest `.dev/stack.json` in `cwd` or its parents.
pub fn find_stack_file(cwd: &Path) -> Option<PathBuf> {
    find(cwd, STACK_FILE)
}

fn find(cwd: &Path, file: &str) -> Option<PathBuf> {
    cwd.ancestors()
        .map(|dir| dir.join(file))
        .find(|path| path.is_file())
}

/// Decides the target: `explicit` (`--stack-file`, relative to `cwd`), else
/// `TOLLGATE_STACK_FILE`, else a discovered local stack file, else a discovered deployment
/// record, else the environment. A named file must exist and be readable, and may be either a
/// local stack file or a deployment record.
pub fn resolve(env: &Env, cwd: &Path, explicit: Option<&Path>) -> Result<Target, CliError> {
    let stack_file = match (explicit, env.get("TOLLGATE_STACK_FILE")) {
        (Some(path), _) => Some(cwd.join(path)),
        (None, Some(path)) => Some(cwd.join(path.trim())),
        (None, None) => find_stack_file(cwd).or_else(|| find(cwd, DEPLOYED_FILE)),
    };
    let endpoint_var = env.get("DYNAMODB_ENDPOINT").map(|e| e.trim().to_string());
    let Some(stack_file) = stack_file else {
        return Ok(Target::Environment {
            endpoint: endpoint_var,
        });
    };
    let text = std::fs::read_to_string(&stack_file).map_err(|e| {
        CliError::new(format!(
            "cannot read stack file {}: {e}",
            stack_file.display()
        ))
    })?;
    if let Ok(mut deployed) = serde_json::from_str::<Deployed>(&text) {
        deployed.file = stack_file;
        return Ok(Target::Deployed(deployed));
    }
    let stack: StackFile = serde_json::from_str(&text).map_err(|e| {
        CliError::new(format!(
            "stack file {} has no usable dynamodb_endpoint (nor stack_name and region): {e}",
            stack_file.display()
        ))
    })?;
    Ok(Target::Local {
        endpoint: endpoint_var.unwrap_or(stack.dynamodb_endpoint),
        stack_file,
    })
}

/// A stack that is not running, or a region that cannot be reached, should fail fast, not
/// after the SDK's defaults.
fn timeouts() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(2))
        .operation_attempt_timeout(Duration::from_secs(5))
        .build()
}

/// A DynamoDB client for `target`.
pub async fn dynamodb(target: &Target, env: &Env) -> Client {
    match target {
        Target::Local { endpoint, .. } => {
            let config = aws_sdk_dynamodb::Config::builder()
                .behavior_version(BehaviorVersion::latest())
                .region(Region::new(LOCAL_REGION))
                .credentials_provider(Credentials::new(
                    LOCAL_KEY,
                    LOCAL_KEY,
                    None,
                    None,
                    "tollgate-local-stack",
                ))
                .endpoint_url(endpoint)
                .timeout_config(timeouts())
                .build();
            Client::from_conf(config)
        }
        Target::Deployed(d) => {
            let mut loader = aws_config::defaults(BehaviorVersion::latest())
                .region(Region::new(d.region.clone()))
                .timeout_config(timeouts());
            if let Some(profile) = &d.profile {
                loader = loader.profile_name(profile);
            }
            tollgate::aws::dynamodb(&loader.load().await, env)
        }
        Target::Environment { .. } => {
            let sdk = tollgate::aws::load_config().await;
            tollgate::aws::dynamodb(&sdk, env)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "tollgate-cli-connect-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        dir
    }

    #[test]
    fn a_stack_file_in_a_parent_is_found_and_the_variable_wins() {
        let root = temp_dir("parent");
        std::fs::create_dir_all(root.join(".dev")).unwrap();
        std::fs::write(
            root.join(STACK_FILE),
            r#"{"dynamodb_endpoint": "http://127.0.0.1:8000", "transfer_url": "x", "demo": {}}"#,
        )
        .unwrap();
        let cwd = root.join("a/b");
        assert_eq!(
            resolve(&Env::default(), &cwd, None).unwrap(),
            Target::Local {
                endpoint: "http://127.0.0.1:8000".into(),
                stack_file: root.join(STACK_FILE),
            }
        );
        let env = Env::from_pairs([("DYNAMODB_ENDPOINT", "http://127.0.0.1:9000")]);
        assert!(matches!(
            resolve(&env, &cwd, None).unwrap(),
            Target::Local { endpoint, .. } if endpoint == "http://127.0.0.1:9000"
        ));
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn without_a_stack_file_the_environment_is_used() {
        let root = temp_dir("none");
        // Only meaningful when no ancestor of the temp dir has a stack file.
        if find_stack_file(&root).is_none() {
            assert_eq!(
                resolve(&Env::default(), &root, None).unwrap(),
                Target::Environment { endpoint: None }
            );
            assert!(!Target::Environment { endpoint: None }.is_local());
        }
        let err = resolve(&Env::default(), &root, Some(Path::new("missing.json"))).unwrap_err();
        assert!(err.message().contains("missing.json"), "{err}");
        std::fs::write(root.join("bad.json"), "{}").unwrap();
        let err = resolve(&Env::default(), &root, Some(Path::new("bad.json"))).unwrap_err();
        assert!(err.message().contains("dynamodb_endpoint"), "{err}");
        std::fs::remove_dir_all(root).unwrap();
    }
}
