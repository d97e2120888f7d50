//! What the CLI and the functions see: the user's variables untouched, the stack's wiring always
//! ours, dev defaults for the rest.

use std::collections::BTreeMap;
use std::process::Command;

use crate::util::{self, anyhow, Result};

/// The environment for the CLI and the functions: the user's, plus the stack's wiring (always
/// ours: [`util::local_aws`] with our DynamoDB Local) and dev defaults for what the user left
/// unset.
pub struct Env {
    /// Our DynamoDB Local.
    endpoint: String,
    set: BTreeMap<String, String>,
}

/// The user's value of `key`; empty counts as unset, as the functions read it.
pub fn user(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.trim().is_empty())
}

impl Env {
    /// The user's environment with the stack's DynamoDB Local at `endpoint`.
    pub fn new(endpoint: &str) -> Self {
        let endpoint = endpoint.into();
        Self {
            endpoint,
            set: BTreeMap::new(),
        }
    }

    /// The value the children will see.
    pub fn get(&self, key: &str) -> Option<String> {
        self.set.get(key).cloned().or_else(|| user(key))
    }

    pub fn set(&mut self, key: &str, value: &str) {
        self.set.insert(key.into(), value.into());
    }

    /// Sets `key` unless the user did.
    pub fn unless_set(&mut self, key: &str, value: &str) {
        if user(key).is_none() {
            self.set(key, value);
        }
    }

    /// The user's `INTERNAL_TOKEN`, or a fresh random one for this run;
    /// `None` if the user keeps it in SSM.
    pub fn internal_token(&mut self) -> Result<Option<String>> {
        if user("INTERNAL_TOKEN").is_some() || user("INTERNAL_TOKEN_PARAM").is_some() {
            return Ok(user("INTERNAL_TOKEN"));
        }
        // From the OS's generator only: a token made of the clock and pid could be guessed.
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| anyhow!("no OS randomness for a token: {e}"))?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let token = format!("dev-{hex}");
        self.set("INTERNAL_TOKEN", &token);
        Ok(Some(token))
    }

    pub fn apply(&self, cmd: &mut Command) {
        util::local_aws(cmd, &self.endpoint);
        cmd.envs(&self.set);
    }
}
