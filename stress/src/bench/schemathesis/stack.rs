//! The functions part 4 calls: one process of each binary in the pool, behind the HTTP front
//! at `/lambda-url/<function>` (the paths `cargo xtask dev` serves them at), with tables of
//! their own, a client and two accounts, and the OpenAI stand-in.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::super::binaries::{spec, Binaries, Fixture};
use super::BenchError;
use crate::lambda::{Front, Function};

pub struct Stack {
    pub session_url: String,
    pub transfer_url: String,
    pub token: String,
    pub internal_token: String,
    /// Payer, payee.
    pub accounts: [String; 2],
    functions: Vec<Arc<Function>>,
    logs: Vec<PathBuf>,
    _front: Front,
    _fixture: Fixture,
}

impl Stack {
    pub async fn start(
        binaries: &Binaries,
        session_limits: &str,
        transfer_limits: &str,
        dir: &Path,
    ) -> Result<Self, BenchError> {
        // As `cargo xtask dev` seeds its demo payer.
        let fixture = Fixture::create(100_000).await?;
        let (session_env, transfer_env) = fixture.env((session_limits, transfer_limits));
        let mut functions = Vec::new();
        let mut logs = Vec::new();
        let mut routes = Vec::new();
        for (name, binary, env) in [
            ("ephemeral-key", &binaries.ephemeral_key, session_env),
            ("transfer", &binaries.transfer, transfer_env),
        ] {
            let log = dir.join(format!("{name}.log"));
            let function = Function::start(spec(name, binary, env, log.clone()), 1).await?;
            routes.push((format!("/lambda-url/{name}"), function.clone()));
            functions.push(function);
            logs.push(log);
        }
        let front = Front::start(routes)
            .await
            .map_err(BenchError::io("the HTTP front"))?;
        let url = front.url();
        Ok(Self {
            session_url: format!("{url}/lambda-url/ephemeral-key"),
            transfer_url: format!("{url}/lambda-url/transfer"),
            token: fixture.token.clone(),
            internal_token: fixture.internal_token.clone(),
            accounts: fixture.accounts.clone(),
            functions,
            logs,
            _front: front,
            _fixture: fixture,
        })
    }

    /// Stops the functions; the panics their logs show.
    pub async fn stop(self) -> usize {
        for f in &self.functions {
            f.stop().await;
        }
        self.logs
            .iter()
            .map(|log| {
                std::fs::read_to_string(log)
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| l.contains("panicked at"))
                    .count()
            })
            .sum()
    }
}
