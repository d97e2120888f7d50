//! The stack a run owns, beside DynamoDB Local (whose endpoint comes in `DYNAMODB_ENDPOINT`,
//! as for `cargo test`): its own tables (exactly as `template.yaml` defines them, under a
//! fresh prefix), the fault proxy between the functions and DynamoDB Local (unless the run
//! measures the functions themselves: [`Options::fault_proxy`]), the OpenAI stand-in, and each
//! function's pool of processes.
//!
//! The proxy is up before any function starts (a function reads `DYNAMODB_ENDPOINT` at cold
//! start), and everything is in this process: a run arms faults, kills and restarts functions
//! by calling them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use secrecy::ExposeSecret;
use tollgate::clock::SystemClock;
use tollgate::config::Env;
use tollgate_functions::catalog;
use tollgate_functions::serve::GuardedFunction as _;
use tollgate_tests::dynamo::{self, Tables};
use tollgate_tests::fault_proxy::FaultProxy;
use tollgate_tests::openai::{Answer, OpenAiStandIn};

use crate::lambda::{self, Pool, PoolSpec};

/// The invocation timeout the functions run with (the drivers' own timeouts are shorter or
/// equal).
const INVOCATION_TIMEOUT: Duration = Duration::from_secs(30);

/// What to start.
pub struct Options<'a> {
    /// Where the function binaries (`transfer`, `ephemeral-key`) are.
    pub bin_dir: &'a Path,
    /// `transfer` processes.
    pub transfer_instances: usize,
    /// Also the `ephemeral-key` function, with this many processes, and the OpenAI stand-in.
    pub session_instances: Option<usize>,
    /// The functions reach DynamoDB Local through the fault proxy (replay, drill: faults are
    /// armed there); `false`: directly, with no proxy at all (the bench times the functions,
    /// not a proxy's hop).
    pub fault_proxy: bool,
    /// Variables for both functions, on top of the stack's wiring.
    pub env: Vec<(String, String)>,
    /// The run's name, for its log directory.
    pub name: &'static str,
}

/// A running stack.
pub struct HarnessStack {
    /// DynamoDB Local, directly (not through the proxy): setup and reconciliation.
    pub ddb: Client,
    /// Between the functions and DynamoDB Local; `None` without [`Options::fault_proxy`].
    pub proxy: Option<Arc<FaultProxy>>,
    pub tables: Tables,
    /// The functions' `INTERNAL_TOKEN`, random for the run.
    pub internal_token: String,
    pub transfer: Arc<Pool>,
    pub ephemeral_key: Option<Arc<Pool>>,
    /// The functions' logs (one file per function).
    pub logs: PathBuf,
    _openai: Option<OpenAiStandIn>,
}

/// A stack that would not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no function binary at {0} (build it, or pass --bin-dir)")]
    NoBinary(String),
    #[error("cannot create the log directory {path}: {source}")]
    Logs {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Function(#[from] lambda::Error),
    #[error("cannot seed a client and its accounts: {0}")]
    Seed(String),
}

/// A client with accounts, made with the transfer function's own stores.
pub struct Seeded {
    pub client_id: String,
    /// Its bearer token.
    pub token: String,
    /// In the order of the balances asked for.
    pub accounts: Vec<String>,
}

impl HarnessStack {
    pub async fn start(o: Options<'_>) -> Result<HarnessStack, Error> {
        let upstream = dynamo::endpoint();
        let (ddb, _) = dynamo::client_at(&upstream);
        let tables = Tables::create(&ddb).await;
        let proxy = match o.fault_proxy {
            true => Some(Arc::new(FaultProxy::start(&upstream).await)),
            false => None,
        };
        let endpoint = proxy.as_ref().map_or(upstream.clone(), |p| p.endpoint());
        eprintln!(
            "{}: functions -> {endpoint} -> DynamoDB Local {upstream}",
            o.name
        );
        let logs =
            std::env::temp_dir().join(format!("tollgate-stress-{}-{}", o.name, std::process::id()));
        std::fs::create_dir_all(&logs).map_err(|source| Error::Logs {
            path: logs.display().to_string(),
            source,
        })?;
        let internal_token = format!("stress-{}", tollgate::ids::random_hex(16));
        let mut env = vec![
            ("DYNAMODB_ENDPOINT".to_string(), endpoint.clone()),
            ("AWS_ENDPOINT_URL_DYNAMODB".to_string(), endpoint),
            ("AWS_ACCESS_KEY_ID".to_string(), "test".to_string()),
            ("AWS_SECRET_ACCESS_KEY".to_string(), "test".to_string()),
            ("AWS_REGION".to_string(), "us-east-1".to_string()),
            ("AWS_EC2_METADATA_DISABLED".to_string(), "true".to_string()),
            ("RUST_LOG".to_string(), "warn".to_string()),
            ("INTERNAL_TOKEN".to_string(), internal_token.clone()),
        ];
        env.extend(tables.env_pairs());
        let openai = if o.session_instances.is_some() {
            let standin = OpenAiStandIn::start(Answer::Secret {
                expires_at: 4_000_000_000,
            })
            .await;
            env.push(("OPENAI_BASE_URL".into(), standin.server.uri()));
            env.push(("OPENAI_API_KEY".into(), "sk-stress-stand-in".into()));
            Some(standin)
        } else {
            None
        };
        env.extend(o.env);
        let spec = |name: &str| -> Result<PoolSpec, Error> {
            let binary = o.bin_dir.join(name);
            if !binary.is_file() {
                return Err(Error::NoBinary(binary.display().to_string()));
            }
            Ok(PoolSpec {
                name: name.to_string(),
                binary,
                env: env.clone(),
                log: Some(logs.join(format!("{name}.log"))),
                timeout: INVOCATION_TIMEOUT,
            })
        };
        let transfer = Pool::start(spec(catalog::TRANSFER.name)?, o.transfer_instances).await?;
        let ephemeral_key = match o.session_instances {
            Some(n) => Some(Pool::start(spec(catalog::EPHEMERAL_KEY.name)?, n).await?),
            None => None,
        };
        Ok(HarnessStack {
            ddb,
            proxy,
            tables,
            internal_token,
            transfer,
            ephemeral_key,
            logs,
            _openai: openai,
        })
    }

    /// A client named `name` with one account (in JPY) per balance, written directly (not
    /// through the proxy) with the transfer function's own stores.
    pub async fn seed(&self, name: &str, balances: &[u64]) -> Result<Seeded, Error> {
        let seed = |e: &dyn std::fmt::Display| Error::Seed(e.to_string());
        let app = transfer::App::from_env(
            &Env::from_pairs(self.tables.env_pairs()),
            self.ddb.clone(),
            None,
            Arc::new(SystemClock),
        )
        .map_err(|e| seed(&e))?;
        let client = app.clients.create(name).await.map_err(|e| seed(&e))?;
        let mut accounts = Vec::new();
        for &balance in balances {
            let account = app
                .ledger
                .create_account(&client.client_id, balance, "JPY")
                .await
                .map_err(|e| seed(&e))?;
            accounts.push(account.account_id);
        }
        Ok(Seeded {
            token: client.token.expose_secret().to_string(),
            client_id: client.client_id,
            accounts,
        })
    }

    /// Stops the functions; keeps the logs when the run failed, removes them otherwise.
    pub async fn stop(self, failed: bool) {
        self.transfer.stop().await;
        if let Some(f) = &self.ephemeral_key {
            f.stop().await;
        }
        if failed {
            eprintln!("function logs kept in {}", self.logs.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.logs);
        }
    }
}
