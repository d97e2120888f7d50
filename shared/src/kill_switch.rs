//! A per-function off switch an operator can flip without a deploy.
//!
//! The flag lives in the control table. Each process caches it for at most
//! `KILL_SWITCH_CACHE_SECONDS`, so a flip applies everywhere within that time while a warm
//! request pays no read. When the flag cannot be read and nothing is cached, requests are refused
//! with 503: a switch that fails open would not be a switch.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;

use crate::clock::{SharedClock, UnixMillis};

/// The functions a kill switch exists for.
pub const FUNCTIONS: &[&str] = &["ephemeral-key", "transfer"];

/// The message shown when the switch is on and the operator gave none.
pub const DEFAULT_MESSAGE: &str = "This service is temporarily disabled.";
/// Longest operator message accepted.
pub const MAX_MESSAGE_CHARS: usize = 500;

/// The switch as stored. `enabled` means the switch is ON: the function refuses requests.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SwitchState {
    pub function: String,
    pub enabled: bool,
    pub message: String,
}

/// Why a request may not proceed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KillSwitchError {
    /// The operator turned the function off; `message` is theirs, shown as `detail`.
    #[error("kill switch is on")]
    Disabled { message: String },
    /// The flag could not be read and nothing is cached: fail closed.
    #[error("kill switch state unknown")]
    Unavailable { retry_after: u64 },
}

/// The control table could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("control table {operation} failed")]
pub struct ControlStoreError {
    operation: &'static str,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

/// An operator's request that cannot be stored as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("message longer than {MAX_MESSAGE_CHARS} characters")]
pub struct MessageTooLong;

#[derive(Debug, Clone)]
struct Cached {
    read_at_ms: UnixMillis,
    state: SwitchState,
}

/// Reads and writes kill switches in the control table (partition key `pk`).
#[derive(Debug)]
pub struct KillSwitch {
    ddb: Client,
    table: String,
    clock: SharedClock,
    max_age: Duration,
    cache: tokio::sync::Mutex<HashMap<String, Cached>>,
}

impl KillSwitch {
    pub fn new(
        ddb: Client,
        table: impl Into<String>,
        clock: SharedClock,
        max_age: Duration,
    ) -> Self {
        Self {
            ddb,
            table: table.into(),
            clock,
            max_age,
            cache: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Ok when `function` may serve requests.
    pub async fn check(&self, function: &str) -> Result<(), KillSwitchError> {
        let now = self.clock.now_ms();
        let mut cache = self.cache.lock().await;
        let cached = cache.get(function).cloned();
        let state = match cached {
            Some(c) if now.saturating_sub(c.read_at_ms) < self.max_age.as_millis() as u64 => {
                c.state
            }
            _ => match self.status(function).await {
                Ok(state) => {
                    cache.insert(
                        function.to_string(),
                        Cached {
                            read_at_ms: now,
                            state: state.clone(),
                        },
                    );
                    state
                }
                Err(error) => match cached {
                    Some(c) => {
                        tracing::warn!(error = %error, function, "kill switch unreadable; using the last known state");
                        c.state
                    }
                    None => {
                        tracing::error!(error = %error, function, "kill switch unreadable and not cached; refusing requests");
                        return Err(KillSwitchError::Unavailable {
                            retry_after: self.max_age.as_secs().max(1),
                        });
                    }
                },
            },
        };
        if state.enabled {
            tracing::info!(
                decision = "rejected",
                layer = "kill_switch",
                function,
                "kill switch on"
            );
            return Err(KillSwitchError::Disabled {
                message: state.message,
            });
        }
        Ok(())
    }

    /// The stored state, read now (strongly consistent). Absent means off.
    pub async fn status(&self, function: &str) -> Result<SwitchState, ControlStoreError> {
        let out = self
            .ddb
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(key(function)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| ControlStoreError {
                operation: "read",
                source: Box::new(e),
            })?;
        let item = out.item();
        let enabled = item
            .and_then(|i| i.get("enabled"))
            .and_then(|v| v.as_bool().ok())
            .copied()
            .unwrap_or(false);
        let message = item
            .and_then(|i| i.get("message"))
            .and_then(|v| v.as_s().ok())
            .cloned()
            .unwrap_or_default();
        Ok(SwitchState {
            function: function.to_string(),
            enabled,
            message,
        })
    }

    /// Turns the switch on or off. An empty message when turning on stores [`DEFAULT_MESSAGE`].
    pub async fn set(
        &self,
        function: &str,
        enabled: bool,
        message: Option<&str>,
    ) -> Result<Result<SwitchState, MessageTooLong>, ControlStoreError> {
        let message = message.map(str::trim).unwrap_or_default();
        if message.chars().count() > MAX_MESSAGE_CHARS {
            return Ok(Err(MessageTooLong));
        }
        let message = match (enabled, message.is_empty()) {
            (true, true) => DEFAULT_MESSAGE.to_string(),
            _ => message.to_string(),
        };
        self.ddb
            .put_item()
            .table_name(&self.table)
            .item("pk", AttributeValue::S(key(function)))
            .item("enabled", AttributeValue::Bool(enabled))
            .item("message", AttributeValue::S(message.clone()))
            .item(
                "updated_at",
                AttributeValue::N((self.clock.now_ms() / 1000).to_string()),
            )
            .send()
            .await
            .map_err(|e| ControlStoreError {
                operation: "write",
                source: Box::new(e),
            })?;
        // This process applies its own flip at once; others within the cache time.
        self.cache.lock().await.remove(function);
        Ok(Ok(SwitchState {
            function: function.to_string(),
            enabled,
            message,
        }))
    }
}

fn key(function: &str) -> String {
    format!("kill-switch#{function}")
}
