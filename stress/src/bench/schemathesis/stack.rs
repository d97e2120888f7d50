//! The functions part 4 calls: the harness's stack ([`crate::stack`]: its own tables, the
//! OpenAI stand-in, one process of each function, with the fault proxy in front of DynamoDB
//! Local arming no fault), a client with a payer and a payee made with the transfer function's
//! own stores, and the HTTP front serving each function at `/lambda-url/<function>` (the paths
//! `cargo xtask dev` serves them at).

use super::super::binaries::Binaries;
use super::BenchError;
use crate::lambda::Front;
use crate::stack::{self, HarnessStack};

/// As `cargo xtask dev` seeds its demo payer.
const PAYER_BALANCE: u64 = 100_000;

pub struct Functions {
    pub session_url: String,
    pub transfer_url: String,
    pub token: String,
    pub internal_token: String,
    /// Payer, payee.
    pub accounts: [String; 2],
    stack: HarnessStack,
    _front: Front,
}

impl Functions {
    pub async fn start(
        binaries: &Binaries,
        env: Vec<(String, String)>,
    ) -> Result<Self, BenchError> {
        let setup = |e: &dyn std::fmt::Display| BenchError::Setup(format!("part 4's stack: {e}"));
        let stack = HarnessStack::start(stack::Options {
            bin_dir: &binaries.dir,
            transfer_instances: 1,
            session_instances: Some(1),
            fault_proxy: true,
            env,
            name: "bench",
        })
        .await
        .map_err(|e| setup(&e))?;
        let seeded = stack
            .seed("bench", &[PAYER_BALANCE, 0])
            .await
            .map_err(|e| setup(&e))?;
        let session = stack
            .ephemeral_key
            .clone()
            .ok_or_else(|| BenchError::Setup("part 4's stack has no ephemeral-key".into()))?;
        let front = Front::start(vec![
            ("/lambda-url/ephemeral-key".into(), session),
            ("/lambda-url/transfer".into(), stack.transfer.clone()),
        ])
        .await
        .map_err(BenchError::io("the HTTP front"))?;
        let url = front.url();
        Ok(Self {
            session_url: format!("{url}/lambda-url/ephemeral-key"),
            transfer_url: format!("{url}/lambda-url/transfer"),
            token: seeded.token,
            internal_token: stack.internal_token.clone(),
            accounts: [seeded.accounts[0].clone(), seeded.accounts[1].clone()],
            stack,
            _front: front,
        })
    }

    /// Stops the functions; the panics their logs show.
    pub async fn stop(self) -> usize {
        let panics = std::fs::read_dir(&self.stack.logs)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| {
                std::fs::read_to_string(entry.path())
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| l.contains("panicked at"))
                    .count()
            })
            .sum();
        self.stack.stop(panics > 0).await;
        panics
    }
}
