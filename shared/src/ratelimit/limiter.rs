//! The DynamoDB side of the limiter: one conditional `UpdateItem` per layer.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;

use crate::clock::{SharedClock, UnixMillis};

use super::block_cache::BlockCache;
use super::decision::Decision;
use super::spec::{Layer, RateLimit};

const COUNT: &str = "count";

/// How long a full key is remembered per process at most (`RATE_LIMIT_BLOCK_CACHE_SECONDS`).
pub const DEFAULT_BLOCK_CACHE_MAX_AGE: Duration = Duration::from_secs(5);
const EXPIRES_AT: &str = "expires_at";

/// The limiter could not reach or use its table. The request is refused (fail closed: a spend
/// cap that opens when DynamoDB is unwell is no cap).
#[derive(Debug, thiserror::Error)]
#[error("rate-limit store failed during {operation}")]
pub struct LimiterError {
    operation: &'static str,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl LimiterError {
    fn new(
        operation: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            operation,
            source: Box::new(source),
        }
    }
}

/// One layer to check for one request: the limit and the identity it counts (`""` for global).
#[derive(Debug, Clone, Copy)]
pub struct LimitCheck<'a> {
    pub limit: &'a RateLimit,
    pub key: &'a str,
}

/// The outcome of [`RateLimiter::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Admitted,
    /// A layer is full. Nothing was incremented for this request (earlier layers were refunded).
    Rejected(Decision),
}

/// What one request has consumed so far, across calls to [`RateLimiter::check`]: the counters to
/// give back if the request is refused later, and the tightest decision for the response fields.
#[derive(Debug, Default)]
pub struct Admission {
    counted: Vec<String>,
    tightest: Option<Decision>,
    /// The decision of each counter incremented, by key: which layer it belongs to, for
    /// [`RateLimiter::refund_layer`].
    decisions: Vec<(String, Decision)>,
}

impl Admission {
    /// The decision with the fewest requests left, for the `RateLimit` response fields.
    pub fn tightest(&self) -> Option<&Decision> {
        self.tightest.as_ref()
    }

    /// How many counters this request has incremented.
    pub fn counted(&self) -> usize {
        self.counted.len()
    }

    fn note(&mut self, decision: Decision) {
        if self.tightest.is_none_or(|t| decision.is_tighter_than(&t)) {
            self.tightest = Some(decision);
        }
    }

    /// Moves the counters of `layer` into an admission of their own (to refund them), keeping
    /// the others; the tightest decision is then the tightest of those kept.
    fn split_off(&mut self, layer: Layer) -> Admission {
        let layer_of = |pk: &String| {
            self.decisions
                .iter()
                .find(|(counted, _)| counted == pk)
                .map(|(_, d)| d.limit.layer())
        };
        let (taken, kept) = std::mem::take(&mut self.counted)
            .into_iter()
            .partition(|pk| layer_of(pk) == Some(layer));
        self.counted = kept;
        self.tightest = None;
        for (pk, decision) in self.decisions.clone() {
            if self.counted.contains(&pk) {
                self.note(decision);
            }
        }
        Admission {
            counted: taken,
            ..Admission::default()
        }
    }
}

/// A counter as stored: how many requests its current window has admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    pub count: u32,
    pub limit: u32,
    pub window_ends_at: u64,
}

/// Fixed-window limiter over a DynamoDB table with a string partition key `pk`.
#[derive(Debug)]
pub struct RateLimiter {
    ddb: Client,
    table: String,
    scope: String,
    clock: SharedClock,
    blocked: BlockCache,
}

impl RateLimiter {
    /// `scope` (the function name) keeps two functions' counters apart in one table. The
    /// limiter has no block cache (every check asks DynamoDB) until [`Self::with_block_cache`]
    /// gives it one: a function serving floods wants one, a one-off caller (the CLI) does not.
    pub fn new(
        ddb: Client,
        table: impl Into<String>,
        scope: impl Into<String>,
        clock: SharedClock,
    ) -> Self {
        Self {
            ddb,
            table: table.into(),
            scope: scope.into(),
            clock,
            blocked: BlockCache::new(0, DEFAULT_BLOCK_CACHE_MAX_AGE),
        }
    }

    /// Remembers full keys: at most `capacity` keys (0: none), each for at most `max_age`.
    pub fn with_block_cache(mut self, capacity: usize, max_age: Duration) -> Self {
        self.blocked = BlockCache::new(capacity, max_age);
        self
    }

    /// The counter's key for the window holding `now_ms`. The window start is part of the key,
    /// so a stale item from an ended window is never read as the current one, whether or not
    /// DynamoDB's TTL has deleted it yet.
    fn counter_key(
        &self,
        limit: &RateLimit,
        key: &str,
        now_ms: UnixMillis,
    ) -> (String, UnixMillis) {
        let (start, end) = limit.window_at(now_ms);
        let pk = format!(
            "{}#{}#{}#{}#{}",
            self.scope,
            limit.layer(),
            limit.window_secs(),
            key,
            start / 1000
        );
        (pk, end)
    }

    /// Checks `checks` in order, counting this request in each. On the first full layer the
    /// request is rejected, and every counter `admission` holds is given back.
    pub async fn check(
        &self,
        admission: &mut Admission,
        checks: &[LimitCheck<'_>],
    ) -> Result<Verdict, LimiterError> {
        let now_ms = self.clock.now_ms();
        let counters: Vec<_> = checks
            .iter()
            .map(|c| (c, self.counter_key(c.limit, c.key, now_ms)))
            .collect();

        // A key known to be full is refused before any write: a flood costs nothing.
        if let Some(rejection) = counters
            .iter()
            .find_map(|(_, (pk, _))| self.blocked.get(pk, now_ms))
        {
            tracing::info!(decision = "rejected", layer = %rejection.limit.layer(), source = "block_cache", "rate limited");
            self.refund(admission).await;
            return Ok(Verdict::Rejected(rejection));
        }

        for (check, (pk, reset_at_ms)) in counters {
            match self.increment(&pk, check.limit, reset_at_ms, now_ms).await {
                Ok(decision) => {
                    admission.decisions.push((pk.clone(), decision));
                    admission.counted.push(pk);
                    admission.note(decision);
                }
                Err(Increment::Full(decision)) => {
                    tracing::info!(decision = "rejected", layer = %check.limit.layer(), source = "dynamodb", "rate limited");
                    self.blocked.insert(pk, decision);
                    self.refund(admission).await;
                    return Ok(Verdict::Rejected(decision));
                }
                Err(Increment::Store(e)) => {
                    self.refund(admission).await;
                    return Err(e);
                }
            }
        }
        Ok(Verdict::Admitted)
    }

    async fn increment(
        &self,
        pk: &str,
        limit: &RateLimit,
        reset_at_ms: UnixMillis,
        now_ms: UnixMillis,
    ) -> Result<Decision, Increment> {
        let result = self
            .ddb
            .update_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(pk.to_string()))
            .update_expression("ADD #count :one SET #expires = if_not_exists(#expires, :expires)")
            .condition_expression("attribute_not_exists(#count) OR #count < :limit")
            .expression_attribute_names("#count", COUNT)
            .expression_attribute_names("#expires", EXPIRES_AT)
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":limit", AttributeValue::N(limit.limit().to_string()))
            .expression_attribute_values(
                ":expires",
                AttributeValue::N((reset_at_ms / 1000).to_string()),
            )
            .return_values(ReturnValue::UpdatedNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(out) => {
                let count = read_count(out.attributes()).unwrap_or(limit.limit());
                Ok(Decision {
                    limit: *limit,
                    remaining: limit.limit().saturating_sub(count),
                    reset_at_ms,
                    now_ms,
                })
            }
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                // ALL_OLD hands back the full counter with the failure: no second read needed.
                // The reset time follows from the key's window.
                let count = match e.err() {
                    UpdateItemError::ConditionalCheckFailedException(c) => read_count(c.item()),
                    _ => None,
                };
                tracing::debug!(pk, ?count, "counter full");
                Err(Increment::Full(Decision {
                    limit: *limit,
                    remaining: 0,
                    reset_at_ms,
                    now_ms,
                }))
            }
            Err(e) => Err(Increment::Store(LimiterError::new("increment", e))),
        }
    }

    /// Gives back every counter `admission` holds: used when a later layer rejects the request
    /// and when a failure on our side (upstream, secrets, store) means the caller got nothing.
    /// The decrement is conditioned on the count being positive, so it never goes below zero;
    /// a counter from an ended window is left alone (its window already reopened).
    ///
    /// A refund is sent once, never again (one SDK attempt, no resend of ours): `ADD -1` is not
    /// idempotent, so resending one whose answer was lost after it committed would give back a
    /// unit another caller holds. A refund that fails or whose outcome is unknown is logged and
    /// dropped; the unit then stays counted until its window ends, which is the safe side.
    pub async fn refund(&self, admission: &mut Admission) {
        let now_ms = self.clock.now_ms();
        for pk in admission.counted.drain(..) {
            let result = self
                .ddb
                .update_item()
                .table_name(&self.table)
                .key("pk", AttributeValue::S(pk.clone()))
                .update_expression("ADD #count :minus_one")
                .condition_expression("#count > :zero AND #expires > :now")
                .expression_attribute_names("#count", COUNT)
                .expression_attribute_names("#expires", EXPIRES_AT)
                .expression_attribute_values(":minus_one", AttributeValue::N("-1".into()))
                .expression_attribute_values(":zero", AttributeValue::N("0".into()))
                .expression_attribute_values(":now", AttributeValue::N((now_ms / 1000).to_string()))
                .customize()
                .config_override(crate::aws::dynamodb_one_attempt())
                .send()
                .await;
            match result {
                Ok(_) => {}
                Err(SdkError::ServiceError(e))
                    if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) => {}
                Err(e) => {
                    let applied = refund_outcome(&e);
                    let error = LimiterError::new("refund", e);
                    tracing::warn!(
                        error = %error,
                        source = ?std::error::Error::source(&error),
                        applied,
                        "a rate-limit refund failed and is not resent; the unit stays counted until its window ends"
                    );
                }
            }
        }
        admission.tightest = None;
    }

    /// Gives back only the counters of `layer` that `admission` holds; the others stay counted.
    /// For a request that was admitted by every layer but turned out not to need one of them:
    /// a `POST /session` answered 409 or 422 by the idempotency claim never calls upstream, so
    /// it spends no `global` unit, while its `ip` unit stays spent (lesson 002).
    pub async fn refund_layer(&self, admission: &mut Admission, layer: Layer) {
        let mut part = admission.split_off(layer);
        self.refund(&mut part).await;
    }

    /// The current window's counter for one layer and key (operator view).
    pub async fn usage(&self, limit: &RateLimit, key: &str) -> Result<Usage, LimiterError> {
        let (pk, end) = self.counter_key(limit, key, self.clock.now_ms());
        let out = self
            .ddb
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(pk))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| LimiterError::new("read", e))?;
        Ok(Usage {
            count: read_count(out.item()).unwrap_or(0),
            limit: limit.limit(),
            window_ends_at: end / 1000,
        })
    }

    /// Empties the current window's counter for one layer and key (operator action).
    pub async fn reset(&self, limit: &RateLimit, key: &str) -> Result<(), LimiterError> {
        let (pk, _) = self.counter_key(limit, key, self.clock.now_ms());
        self.ddb
            .delete_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(pk.clone()))
            .send()
            .await
            .map_err(|e| LimiterError::new("reset", e))?;
        // This process may have the key cached as full; forget it.
        self.blocked.remove(&pk);
        Ok(())
    }

    /// The key a layer counts by, for operator tools: the client address, the client id, or
    /// nothing for `global`.
    pub fn layer_key(layer: Layer, key: &str) -> &str {
        match layer {
            Layer::Global => "",
            _ => key,
        }
    }
}

/// Whether a failed refund may still have applied, for the log: `"no"` when DynamoDB answered
/// with an error, `"unknown"` when the answer never came (lost, timed out).
fn refund_outcome<R>(e: &SdkError<UpdateItemError, R>) -> &'static str {
    match e {
        SdkError::ServiceError(_) | SdkError::ConstructionFailure(_) => "no",
        _ => "unknown",
    }
}

enum Increment {
    Full(Decision),
    Store(LimiterError),
}

fn read_count(item: Option<&HashMap<String, AttributeValue>>) -> Option<u32> {
    match item?.get(COUNT)? {
        AttributeValue::N(n) => n.parse().ok(),
        _ => None,
    }
}
