//! A per-function off switch an operator can flip without a deploy.
//!
//! The flag lives in the control table. Each process caches it for at most
//! `KILL_SWITCH_CACHE_SECONDS`, so a flip applies everywhere within that time while a warm
//! request pays no read.
//!
//! When the control table fails (lesson 003):
//! - the last state read keeps serving for the cache time plus `KILL_SWITCH_STALE_SECONDS`
//!   (default 60) after it was read: a brief DynamoDB problem must not take the API down;
//! - after that, or with nothing read yet, requests are refused with 503 and `Retry-After`: a
//!   switch that fails open would not be a switch;
//! - a process reads at most once per cooldown (the cache time, at least 1 s) while reads fail,
//!   and each read is one SDK attempt, so a failing table costs one quick attempt per period per
//!   process instead of a slow retried read per request. Concurrent requests share one read.
//!
//! A stored `enabled` that is not a boolean counts as ON (403 with [`DEFAULT_MESSAGE`]): nobody
//! can say whether `"false"` or `0` was meant as off, and guessing open is the unsafe side.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;

use crate::clock::{retry_after_secs, SharedClock, UnixMillis};
use crate::table::Attributes;

/// The message shown when the switch is on and the operator gave none.
pub const DEFAULT_MESSAGE: &str = "This service is temporarily disabled.";
/// Longest operator message accepted.
pub const MAX_MESSAGE_CHARS: usize = 500;
/// How long past the cache time a last known state serves while reads fail
/// (`KILL_SWITCH_STALE_SECONDS`).
pub const DEFAULT_STALE_WINDOW: Duration = crate::config::DEFAULT_KILL_SWITCH_STALE;
/// The shortest pause between two reads while reads fail.
const MIN_READ_COOLDOWN: Duration = Duration::from_secs(1);

/// The switch as stored. `enabled` means the switch is ON: the function refuses requests.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SwitchState {
    /// The switch's key: the guarded function's name.
    pub function: String,
    /// ON: every request is refused with 403 `service_disabled`.
    pub enabled: bool,
    /// What refused clients are told (the operator's words, at most [`MAX_MESSAGE_CHARS`]).
    pub message: String,
}

/// Why a request may not proceed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KillSwitchError {
    /// The operator turned the function off; `message` is theirs, shown as `detail`.
    #[error("kill switch is on")]
    Disabled {
        /// The operator's message.
        message: String,
    },
    /// The flag could not be read and no state read recently enough is known: fail closed.
    /// `retry_after` is the time until this process reads again.
    #[error("kill switch state unknown")]
    Unavailable {
        /// Seconds until this process reads the switch again.
        retry_after: u64,
    },
}

/// The control table could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("control table {operation} failed")]
pub struct ControlStoreError {
    operation: &'static str,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

/// A flip that was not stored.
#[derive(Debug, thiserror::Error)]
pub enum SetError {
    /// The operator's message is longer than [`MAX_MESSAGE_CHARS`]; nothing was written. The
    /// operator's mistake, not an outage: callers answer it differently.
    #[error("message longer than {MAX_MESSAGE_CHARS} characters")]
    MessageTooLong,
    /// The control table refused or failed the write.
    #[error(transparent)]
    Store(#[from] ControlStoreError),
}

/// What this process knows of one function's switch.
#[derive(Debug, Clone, Default)]
struct Known {
    /// The last state read successfully, and when it was read.
    last_good: Option<(UnixMillis, SwitchState)>,
    /// After a failed read: no read before this time.
    next_read_ms: UnixMillis,
}

/// How many SDK attempts a read gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempts {
    /// The request path: it has a fallback and a cooldown of its own.
    One,
    /// The operator's view: the SDK's retries.
    SdkDefault,
}

/// Reads and writes kill switches in the control table (partition key `pk` unless
/// [`Self::with_attributes`] says otherwise).
#[derive(Debug)]
pub struct KillSwitch {
    ddb: Client,
    table: String,
    attributes: Attributes,
    clock: SharedClock,
    max_age: Duration,
    stale_window: Duration,
    /// Held across a read: concurrent checks wait for one read and use its outcome.
    known: tokio::sync::Mutex<HashMap<String, Known>>,
}

impl KillSwitch {
    /// `max_age` is the cache time; the stale window is [`DEFAULT_STALE_WINDOW`] (see
    /// [`Self::with_stale_window`]).
    pub fn new(
        ddb: Client,
        table: impl Into<String>,
        clock: SharedClock,
        max_age: Duration,
    ) -> Self {
        Self {
            ddb,
            table: table.into(),
            attributes: Attributes::default(),
            clock,
            max_age,
            stale_window: DEFAULT_STALE_WINDOW,
            known: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Keeps the switches under these attribute names: an existing single-table design's key,
    /// sort key and prefix ([`crate::table`]; a switch has no TTL).
    pub fn with_attributes(mut self, attributes: Attributes) -> Self {
        self.attributes = attributes;
        self
    }

    /// How long past the cache time the last state read keeps serving while reads fail.
    pub fn with_stale_window(mut self, stale_window: Duration) -> Self {
        self.stale_window = stale_window;
        self
    }

    /// Ok when `function` may serve requests.
    pub async fn check(&self, function: &str) -> Result<(), KillSwitchError> {
        let state = self.current(function).await?;
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

    /// The state to act on: cached while fresh; else read (unless a failed read is cooling
    /// down); else the last good state while it is young enough; else unknown.
    async fn current(&self, function: &str) -> Result<SwitchState, KillSwitchError> {
        let mut known = self.known.lock().await;
        let known = known.entry(function.to_string()).or_default();
        let now = self.clock.now_ms();
        let age = |read_at: UnixMillis| Duration::from_millis(now.saturating_sub(read_at));
        if let Some((read_at, state)) = &known.last_good {
            if age(*read_at) < self.max_age {
                return Ok(state.clone());
            }
        }
        if now >= known.next_read_ms {
            // Boxed: a read is once per cache period; inline, its SDK future would make every
            // check's future kilobytes long (see `crate::layers`).
            match Box::pin(self.read(function, Attempts::One)).await {
                Ok(state) => {
                    known.last_good = Some((now, state.clone()));
                    known.next_read_ms = 0;
                    return Ok(state);
                }
                Err(error) => {
                    let cooldown = self.max_age.max(MIN_READ_COOLDOWN);
                    known.next_read_ms = now + cooldown.as_millis() as u64;
                    tracing::warn!(
                        error = %error,
                        source = ?std::error::Error::source(&error),
                        function,
                        cooldown_secs = cooldown.as_secs(),
                        "kill switch unreadable; not read again until the cooldown ends"
                    );
                }
            }
        }
        match &known.last_good {
            Some((read_at, state)) if age(*read_at) < self.max_age + self.stale_window => {
                tracing::debug!(
                    function,
                    "kill switch unreadable; using the last known state"
                );
                Ok(state.clone())
            }
            _ => {
                tracing::warn!(
                    function,
                    "kill switch state unknown (unreadable, and no state read recently enough); refusing requests"
                );
                Err(KillSwitchError::Unavailable {
                    retry_after: retry_after_secs(now, known.next_read_ms),
                })
            }
        }
    }

    /// The stored state, read now (strongly consistent). Absent means off.
    pub async fn status(&self, function: &str) -> Result<SwitchState, ControlStoreError> {
        self.read(function, Attempts::SdkDefault).await
    }

    async fn read(
        &self,
        function: &str,
        attempts: Attempts,
    ) -> Result<SwitchState, ControlStoreError> {
        let get = self
            .ddb
            .get_item()
            .table_name(&self.table)
            .set_key(Some(self.attributes.key(&key(function))))
            .consistent_read(true);
        let result = match attempts {
            Attempts::One => {
                get.customize()
                    .config_override(crate::aws::dynamodb_one_attempt())
                    .send()
                    .await
            }
            Attempts::SdkDefault => get.send().await,
        };
        let out = result.map_err(|e| ControlStoreError {
            operation: "read",
            source: Box::new(e),
        })?;
        Ok(parse_state(function, out.item()))
    }

    /// Turns the switch on or off. An empty message when turning on stores [`DEFAULT_MESSAGE`].
    pub async fn set(
        &self,
        function: &str,
        enabled: bool,
        message: Option<&str>,
    ) -> Result<SwitchState, SetError> {
        let message = message.map(str::trim).unwrap_or_default();
        if message.chars().count() > MAX_MESSAGE_CHARS {
            return Err(SetError::MessageTooLong);
        }
        let message = match (enabled, message.is_empty()) {
            (true, true) => DEFAULT_MESSAGE.to_string(),
            _ => message.to_string(),
        };
        self.ddb
            .put_item()
            .table_name(&self.table)
            .set_item(Some(self.attributes.key(&key(function))))
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
        self.known.lock().await.remove(function);
        Ok(SwitchState {
            function: function.to_string(),
            enabled,
            message,
        })
    }
}

fn key(function: &str) -> String {
    format!("kill-switch#{function}")
}

/// The switch from its stored item. No item, or no `enabled`, means off. An `enabled` that is
/// not a boolean counts as on, with the default message, and is logged (by attribute name: the
/// value is whatever someone wrote there).
fn parse_state(function: &str, item: Option<&HashMap<String, AttributeValue>>) -> SwitchState {
    let message = item
        .and_then(|i| i.get("message"))
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default();
    let (enabled, message) = match item.and_then(|i| i.get("enabled")) {
        None => (false, message),
        Some(AttributeValue::Bool(enabled)) => (*enabled, message),
        Some(_) => {
            tracing::error!(
                function,
                attribute = "enabled",
                "kill switch item has a malformed attribute (not a boolean); counting the switch as on until an operator sets it"
            );
            (true, DEFAULT_MESSAGE.to_string())
        }
    };
    SwitchState {
        function: function.to_string(),
        enabled,
        message,
    }
}
