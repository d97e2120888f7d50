//! Idempotency keys: a retry after a lost response gets the first response back, never a
//! second effect (lesson 004).
//!
//! Every failure mode of the lesson is closed here:
//!
//! - **No fingerprint**: each record keeps the SHA-256 of the canonical body; the same key with
//!   another body is refused with 422 instead of being "successfully" ignored.
//! - **String comparison of bodies**: the fingerprint is over the RFC 8785 canonical form.
//! - **No in-progress state / check-then-insert races**: a key is claimed with a conditional
//!   write (`attribute_not_exists(pk)` or expired), never by reading first.
//! - **Unscoped keys**: a record is scoped to (caller, method and route, key).
//! - **No retention policy**: records live [`IdempotencyStore::ttl`] (`IDEMPOTENCY_TTL_SECONDS`)
//!   and an expired record counts as absent before DynamoDB's TTL removes it.
//!
//! Two modes:
//!
//! 1. **Atomic** ([`IdempotencyStore::commit`]): when the effect is itself a DynamoDB write,
//!    the claim, the effect and the stored response commit in one `TransactWriteItems`. There
//!    is no in-progress state to recover from, because there is no moment in between. The
//!    caller gives its items and how to read their cancellation ([`TransactionEffect`]);
//!    `commit` makes the attempts, reads every answer and resolves unknown outcomes: see
//!    [`transaction`] for each answer of DynamoDB and what it comes to.
//!    ([`IdempotencyStore::completed_put`] and [`existing_in`](IdempotencyStore::existing_in)
//!    are its parts, for a caller that sends the transaction itself.)
//! 2. **Two-phase** ([`IdempotencyStore::claim`], [`complete`](IdempotencyStore::complete),
//!    [`release`](IdempotencyStore::release)): for effects outside DynamoDB (an upstream call).
//!    The claim holds a lease and an owner token; completing or releasing is conditioned on still
//!    being the owner, so a stale owner can neither overwrite nor delete another's record. An
//!    expired lease may be claimed again.
//!
//! Responses with status 5xx are never stored: the key stays free for a retry.
//!
//! Every conditional write here (claim, complete, release, store) is sent by
//! [`crate::aws::send_write`]: one SDK attempt per send, sent again after throttling and after an
//! unknown outcome (each write carries what makes a resend harmless: the owner token, or a
//! condition that fails once the write is there, with `ALL_OLD` showing whose it is), and the
//! caller learns whether any send's outcome was unknown. So no decision rests on the last
//! attempt alone: a claim that committed and lost its answer, then was throttled twice, is
//! known to be perhaps there, and is taken back before the 503. (The atomic transaction makes
//! its own attempts, per `ClientRequestToken`: [`transaction`].)
//!
//! Completed records are also kept per process ([`ReplayCache`], `IDEMPOTENCY_CACHE_SIZE`), so
//! a duplicate seen before by this process is answered with no DynamoDB request.

mod fingerprint;
mod key;
mod once;
mod peek;
mod record;
mod replays;
pub mod transaction;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};
use aws_sdk_dynamodb::Client;

pub use fingerprint::fingerprint;
pub use key::{
    IdempotencyKey, KeyError, IDEMPOTENCY_KEY_HEADER, MAX_KEY_LEN, MIN_UNGUESSABLE_KEY_LEN,
};
pub use once::Once;
pub use peek::AbsentKeys;
pub use record::{
    Attributes, Existing, Record, RecordState, Scope, StoredResponse, REPLAYED_HEADER,
};
pub use replays::{ReplayCache, DEFAULT_REPLAY_CACHE_SIZE};
pub use transaction::{
    Explained, Outcome, TransactionEffect, TransactionError, ANSWER_BY, MAX_ATTEMPTS, SENDS_END,
    SEND_BUDGET,
};

use crate::aws::{Resend, WriteError};
use crate::clock::{SharedClock, UnixMillis};
use record::*;

/// The condition under which a key may be (re)claimed: nobody holds it, or its record expired.
const CLAIMABLE: &str = "attribute_not_exists(#pk) OR #expires_at <= :now_s";

/// The idempotency table could not be used, or a two-phase owner lost its claim.
#[derive(Debug, thiserror::Error)]
pub enum IdempotencyError {
    /// A read or write of the table failed, and nothing says it was applied.
    #[error("idempotency store failed during {operation}")]
    Store {
        /// What was being done (`claim`, `complete`, ...), for the log line.
        operation: &'static str,
        /// The SDK's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The record is no longer this owner's (its lease expired and another request claimed it,
    /// or it was completed or released already).
    #[error("idempotency record is not held by this owner")]
    NotOwner,
    /// A write that may or may not have been applied: a send's outcome was unknown and no later
    /// answer said which. [`IdempotencyStore::store`] answers it; a caller that promises its
    /// client "nothing was written" must not after this.
    #[error("idempotency store {operation}: outcome unknown")]
    OutcomeUnknown {
        /// What was being done, for the log line.
        operation: &'static str,
        /// The last send's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

fn store_error(
    operation: &'static str,
    source: impl std::error::Error + Send + Sync + 'static,
) -> IdempotencyError {
    IdempotencyError::Store {
        operation,
        source: Box::new(source),
    }
}

/// One SDK attempt per send: [`crate::aws::send_write`] makes the sends.
fn one_attempt() -> aws_sdk_dynamodb::config::Builder {
    crate::aws::dynamodb_one_attempt()
}

/// A two-phase claim held by one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pk: String,
    owner: String,
    /// The claimed request's, kept with the response once completed.
    fingerprint: String,
    /// When the claim lapses and another request may take the key over: the effect must be done
    /// and completed before then, or its owner loses the record.
    pub lease_until_ms: UnixMillis,
}

/// The outcome of a two-phase claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This request holds the key: do the work, then complete or release.
    Acquired(Lease),
    /// The key is taken.
    Existing(Existing),
}

/// Idempotency records in one table (string partition key `pk`, TTL attribute `expires_at`).
#[derive(Debug, Clone)]
pub struct IdempotencyStore {
    ddb: Client,
    table: String,
    clock: SharedClock,
    ttl: Duration,
    /// Shared by the store's clones.
    replays: Arc<ReplayCache>,
    attributes: Arc<Attributes>,
}

impl IdempotencyStore {
    /// A store keeping no completed responses in process until [`Self::with_replay_cache`].
    pub fn new(ddb: Client, table: impl Into<String>, clock: SharedClock, ttl: Duration) -> Self {
        Self {
            ddb,
            table: table.into(),
            clock,
            ttl,
            replays: Arc::new(ReplayCache::new(0)),
            attributes: Arc::new(Attributes::default()),
        }
    }

    /// Keeps the records under these attribute names (a table of its own needs none: `pk` and
    /// `expires_at`; an existing single-table design names its own key, sort key, prefix and
    /// TTL attribute).
    pub fn with_attributes(mut self, attributes: Attributes) -> Self {
        self.attributes = Arc::new(attributes);
        self
    }

    /// The item key of the record for `scope_pk` (a [`Scope::pk`]).
    fn key(&self, scope_pk: &str) -> HashMap<String, AttributeValue> {
        self.attributes.key(scope_pk)
    }

    /// A record as stored under this store's attribute names.
    pub(crate) fn record(&self, item: &HashMap<String, AttributeValue>) -> Option<Record> {
        Record::from_item_with(item, &self.attributes.expires_at)
    }

    /// Keeps up to `capacity` completed responses in process (0: none).
    pub fn with_replay_cache(mut self, capacity: usize) -> Self {
        self.replays = Arc::new(ReplayCache::new(capacity));
        self
    }

    /// The answer for a duplicate this process has already seen completed, costing no DynamoDB
    /// request: the stored response, or 422 for another body. `None`: ask the store.
    pub fn cached(&self, scope: &Scope, fingerprint: &str) -> Option<Existing> {
        self.replays.get(scope, fingerprint, self.now_ms())
    }

    /// Keeps a completed record this process saw (or wrote: atomic mode, once committed).
    pub fn remember(
        &self,
        scope: &Scope,
        fingerprint: &str,
        response: &StoredResponse,
        expires_at: u64,
    ) {
        self.replays
            .insert(scope.pk(), fingerprint, response, expires_at, self.now_ms());
    }

    /// Keeps `record` if it is a live completed one.
    fn remember_record(&self, scope: &Scope, record: &Record) {
        if let RecordState::Completed(response) = &record.state {
            self.remember(scope, &record.fingerprint, response, record.expires_at);
        }
    }

    /// How long a record is kept.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The records' table, for a caller that puts the claim into its own transaction.
    pub fn table(&self) -> &str {
        &self.table
    }

    pub(crate) fn now_ms(&self) -> UnixMillis {
        self.clock.now_ms()
    }

    /// The expiry (seconds) of a record written now.
    pub fn expires_at(&self) -> u64 {
        (self.now_ms() + self.ttl.as_millis() as u64).div_ceil(1000)
    }

    fn completed_item(
        &self,
        scope: &Scope,
        fingerprint: &str,
        response: &StoredResponse,
        expires_at: u64,
        by: Option<&WrittenBy>,
    ) -> HashMap<String, AttributeValue> {
        let mut item = HashMap::new();
        item.extend(self.key(scope.pk()));
        item.insert(STATE.into(), AttributeValue::S(COMPLETED.into()));
        item.insert(FINGERPRINT.into(), AttributeValue::S(fingerprint.into()));
        item.insert(
            self.attributes.expires_at.clone(),
            AttributeValue::N(expires_at.to_string()),
        );
        if let Some(by) = by {
            item.insert(WRITTEN_BY.into(), AttributeValue::S(by.as_str().into()));
        }
        response.to_attributes(&mut item);
        item
    }

    fn claimable_values(&self) -> [(&'static str, AttributeValue); 1] {
        [(
            ":now_s",
            AttributeValue::N((self.now_ms() / 1000).to_string()),
        )]
    }

    /// Atomic mode: the transaction item that claims the key and stores `response` as done,
    /// expiring at `expires_at` (from [`Self::expires_at`]; the caller keeps it for
    /// [`Self::remember`] once committed), to commit together with the effect. If the key is
    /// taken the transaction is cancelled and [`Self::existing_in`] reads the record from the
    /// cancellation reason (`ALL_OLD`).
    pub fn completed_put(
        &self,
        scope: &Scope,
        fingerprint: &str,
        response: &StoredResponse,
        expires_at: u64,
    ) -> TransactWriteItem {
        self.completed_put_by(scope, fingerprint, response, expires_at, None)
    }

    /// [`Self::completed_put`], the record naming the call `by` that wrote it.
    fn completed_put_by(
        &self,
        scope: &Scope,
        fingerprint: &str,
        response: &StoredResponse,
        expires_at: u64,
        by: Option<&WrittenBy>,
    ) -> TransactWriteItem {
        let item = self.completed_item(scope, fingerprint, response, expires_at, by);
        let mut put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(CLAIMABLE)
            .expression_attribute_names("#pk", &self.attributes.partition_key)
            .expression_attribute_names("#expires_at", &self.attributes.expires_at)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        for (k, v) in self.claimable_values() {
            put = put.expression_attribute_values(k, v);
        }
        TransactWriteItem::builder()
            .put(put.build().expect("table, item and condition are set"))
            .build()
    }

    /// What the record in a cancellation reason means for a request with `fingerprint`.
    /// `None` when the reason carries no live record.
    pub fn existing_in(
        &self,
        scope: &Scope,
        reason: &CancellationReason,
        fingerprint: &str,
    ) -> Option<Existing> {
        let record = self.record(reason.item()?)?;
        let now = self.now_ms();
        if !record.is_live(now) {
            return None;
        }
        self.remember_record(scope, &record);
        Some(record.verdict(fingerprint, now))
    }

    /// Stores an outcome decided without an effect (a refusal the contract keeps under the key,
    /// e.g. 402). Conditional like a claim, so a racing duplicate cannot overwrite it: `Ok(None)`
    /// when stored, `Ok(Some(existing))` when another request got there first.
    pub async fn store(
        &self,
        scope: &Scope,
        fingerprint: &str,
        response: &StoredResponse,
    ) -> Result<Option<Existing>, IdempotencyError> {
        let found = self
            .put_completed(scope, fingerprint, response, None)
            .await?;
        Ok(found.map(|r| r.verdict(fingerprint, self.now_ms())))
    }

    /// [`Self::store`], the record naming the call `by` that wrote it: `Ok(Some(record))` is the
    /// live record found under the key (perhaps `by`'s own, after a lost answer).
    async fn put_completed(
        &self,
        scope: &Scope,
        fingerprint: &str,
        response: &StoredResponse,
        by: Option<&WrittenBy>,
    ) -> Result<Option<Record>, IdempotencyError> {
        debug_assert!(response.status < 500, "5xx outcomes are never stored");
        let expires_at = self.expires_at();
        let item = self.completed_item(scope, fingerprint, response, expires_at, by);
        let mut req = self
            .ddb
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(CLAIMABLE)
            .expression_attribute_names("#pk", &self.attributes.partition_key)
            .expression_attribute_names("#expires_at", &self.attributes.expires_at)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        for (k, v) in self.claimable_values() {
            req = req.expression_attribute_values(k, v);
        }
        // A resend after a lost answer finds this very record (the condition fails, ALL_OLD
        // shows it): the caller recognises its own response in the replay.
        let sent = crate::aws::send_write(Resend::AlsoUnknown, || {
            req.clone()
                .customize()
                .config_override(one_attempt())
                .send()
        })
        .await;
        match sent {
            Ok(_) => {
                self.remember(scope, fingerprint, response, expires_at);
                Ok(None)
            }
            Err(WriteError {
                error: SdkError::ServiceError(e),
                ..
            }) if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) => {
                let existing = match e.err() {
                    PutItemError::ConditionalCheckFailedException(c) => {
                        c.item().and_then(|item| self.record(item)).inspect(|r| {
                            self.remember_record(scope, r);
                        })
                    }
                    _ => None,
                };
                // The condition failed, so a live record exists; an unreadable one is a bug.
                existing
                    .map(Some)
                    .ok_or_else(|| store_error("store", MalformedRecord))
            }
            Err(WriteError {
                error,
                unknown: true,
            }) => Err(IdempotencyError::OutcomeUnknown {
                operation: "store",
                source: Box::new(error),
            }),
            Err(WriteError { error, .. }) => Err(store_error("store", error)),
        }
    }

    /// The live record under `scope`, if any (operator view).
    pub async fn read(&self, scope: &Scope) -> Result<Option<Record>, IdempotencyError> {
        self.read_with(scope, None).await
    }

    /// As [`Self::read`], in one attempt (no SDK retry) of at most `within`: for a request that
    /// has already spent most of its time budget and only needs to know.
    pub async fn read_once(
        &self,
        scope: &Scope,
        within: Duration,
    ) -> Result<Option<Record>, IdempotencyError> {
        self.read_with(scope, Some(within)).await
    }

    async fn read_with(
        &self,
        scope: &Scope,
        one_attempt: Option<Duration>,
    ) -> Result<Option<Record>, IdempotencyError> {
        let get = self
            .ddb
            .get_item()
            .table_name(&self.table)
            .set_key(Some(self.key(scope.pk())))
            .consistent_read(true);
        let out = match one_attempt {
            Some(within) => {
                get.customize()
                    .config_override(crate::aws::dynamodb_one_attempt_within(within))
                    .send()
                    .await
            }
            None => get.send().await,
        }
        .map_err(|e| store_error("read", e))?;
        let record = self.live(out.item())?;
        if let Some(record) = &record {
            self.remember_record(scope, record);
        }
        Ok(record)
    }

    fn live(
        &self,
        item: Option<&HashMap<String, AttributeValue>>,
    ) -> Result<Option<Record>, IdempotencyError> {
        let now = self.now_ms();
        match item {
            None => Ok(None),
            // A record that exists but cannot be read is not "no record": say so.
            Some(item) => match self.record(item) {
                Some(r) => Ok(Some(r).filter(|r| r.is_live(now))),
                None => Err(store_error("read", MalformedRecord)),
            },
        }
    }

    /// Two-phase mode: claims the key for `lease`. An expired record or an expired lease is
    /// claimed over; a live one is reported as [`Claim::Existing`], unless it is this call's own
    /// claim, found by a resend of a put whose reply was lost.
    pub async fn claim(
        &self,
        scope: &Scope,
        fingerprint: &str,
        lease: Duration,
    ) -> Result<Claim, IdempotencyError> {
        let now = self.now_ms();
        let owner = crate::ids::random_hex(16);
        let lease_until_ms = now + lease.as_millis() as u64;
        let put = self
            .ddb
            .put_item()
            .table_name(&self.table)
            .set_item(Some(self.key(scope.pk())))
            .item(STATE, AttributeValue::S(IN_PROGRESS.into()))
            .item(FINGERPRINT, AttributeValue::S(fingerprint.into()))
            .item(OWNER, AttributeValue::S(owner.clone()))
            .item(
                LEASE_UNTIL_MS,
                AttributeValue::N(lease_until_ms.to_string()),
            )
            .item(
                &self.attributes.expires_at,
                AttributeValue::N(self.expires_at().to_string()),
            )
            .condition_expression(format!(
                "{CLAIMABLE} OR (#state = :in_progress AND #lease <= :now_ms)"
            ))
            .expression_attribute_names("#pk", &self.attributes.partition_key)
            .expression_attribute_names("#expires_at", &self.attributes.expires_at)
            .expression_attribute_names("#state", STATE)
            .expression_attribute_names("#lease", LEASE_UNTIL_MS)
            .expression_attribute_values(":now_s", AttributeValue::N((now / 1000).to_string()))
            .expression_attribute_values(":now_ms", AttributeValue::N(now.to_string()))
            .expression_attribute_values(":in_progress", AttributeValue::S(IN_PROGRESS.into()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        // Resent after an unknown outcome too: the owner token tells our own claim apart.
        let sent = crate::aws::send_write(Resend::AlsoUnknown, || {
            put.clone()
                .customize()
                .config_override(one_attempt())
                .send()
        })
        .await;
        match sent {
            Ok(_) => Ok(Claim::Acquired(Lease {
                pk: scope.pk().into(),
                owner,
                fingerprint: fingerprint.into(),
                lease_until_ms,
            })),
            Err(WriteError {
                error: SdkError::ServiceError(e),
                ..
            }) if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) => {
                let record = match e.err() {
                    PutItemError::ConditionalCheckFailedException(c) => {
                        c.item().and_then(|item| self.record(item))
                    }
                    _ => None,
                };
                let record = record.ok_or_else(|| store_error("claim", MalformedRecord))?;
                // A claim whose reply was lost (the put committed, the answer did not arrive)
                // is sent again, and the resend finds this very claim: same owner token, so it
                // is ours, not a duplicate request's.
                if matches!(&record.state, RecordState::InProgress { owner: o, .. } if *o == owner)
                {
                    return Ok(Claim::Acquired(Lease {
                        pk: scope.pk().into(),
                        owner,
                        fingerprint: fingerprint.into(),
                        lease_until_ms,
                    }));
                }
                if record.is_live(now) {
                    self.remember_record(scope, &record);
                }
                Ok(Claim::Existing(record.verdict(fingerprint, now)))
            }
            Err(WriteError { error, unknown }) => {
                // A send whose outcome was unknown (a 5xx, a timeout, a lost reply) may have
                // committed the claim, whatever the later sends said (throttled, say): it would
                // hold the key (409 to the client's retry) until its lease ends. Take it back,
                // by our owner token, so the retry after our 503 runs at once. When every send
                // was refused (throttling, 4xx), nothing committed: no clean-up to do.
                if unknown {
                    let ours = Lease {
                        pk: scope.pk().into(),
                        owner,
                        fingerprint: fingerprint.into(),
                        lease_until_ms,
                    };
                    match self.release(&ours).await {
                        Ok(()) => tracing::info!(
                            "a claim whose outcome was unknown had committed; released it"
                        ),
                        Err(IdempotencyError::NotOwner) => {}
                        Err(release) => {
                            tracing::warn!(error = %release, "could not release a claim whose outcome was unknown; it frees itself when its lease ends")
                        }
                    }
                }
                Err(store_error("claim", error))
            }
        }
    }

    /// Two-phase mode: stores `response` under the claimed key, if this lease still owns it.
    /// `expires_at` (seconds) may shorten the record's life, e.g. to a minted secret's expiry.
    pub async fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        expires_at: Option<u64>,
    ) -> Result<(), IdempotencyError> {
        debug_assert!(response.status < 500, "5xx outcomes are never stored");
        let expires_at = expires_at
            .map(|e| e.min(self.expires_at()))
            .unwrap_or_else(|| self.expires_at());
        let headers = AttributeValue::M(
            response
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), AttributeValue::S(v.clone())))
                .collect(),
        );
        let update = self
            .ddb
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.key(&lease.pk)))
            .update_expression(
                "SET #state = :completed, #status = :status, #headers = :headers, #body = :body, #expires_at = :expires_at REMOVE #owner, #lease",
            )
            .condition_expression("#owner = :owner AND #state = :in_progress")
            .expression_attribute_names("#state", STATE)
            .expression_attribute_names("#status", STATUS)
            .expression_attribute_names("#headers", HEADERS)
            .expression_attribute_names("#body", BODY)
            .expression_attribute_names("#expires_at", &self.attributes.expires_at)
            .expression_attribute_names("#owner", OWNER)
            .expression_attribute_names("#lease", LEASE_UNTIL_MS)
            .expression_attribute_values(":completed", AttributeValue::S(COMPLETED.into()))
            .expression_attribute_values(":in_progress", AttributeValue::S(IN_PROGRESS.into()))
            .expression_attribute_values(":status", AttributeValue::N(response.status.to_string()))
            .expression_attribute_values(":headers", headers)
            .expression_attribute_values(":body", AttributeValue::B(Blob::new(response.body.clone())))
            .expression_attribute_values(":expires_at", AttributeValue::N(expires_at.to_string()))
            .expression_attribute_values(":owner", AttributeValue::S(lease.owner.clone()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        // Resent after an unknown outcome too: a resend after our own commit fails the owner
        // condition, and ALL_OLD shows our response completed under the key.
        let sent = crate::aws::send_write(Resend::AlsoUnknown, || {
            update
                .clone()
                .customize()
                .config_override(one_attempt())
                .send()
        })
        .await;
        let done = || {
            let now = self.now_ms();
            self.replays
                .insert(&lease.pk, &lease.fingerprint, response, expires_at, now);
            Ok(())
        };
        match sent {
            Ok(_) => done(),
            Err(WriteError {
                error: SdkError::ServiceError(e),
                unknown,
            }) if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) => {
                let found = match e.err() {
                    UpdateItemError::ConditionalCheckFailedException(c) => {
                        c.item().and_then(|item| self.record(item))
                    }
                    _ => None,
                };
                match found {
                    // An earlier send of ours committed and its answer was lost.
                    Some(record) if unknown && record.is_completion_of(lease, response) => done(),
                    _ => Err(IdempotencyError::NotOwner),
                }
            }
            Err(WriteError {
                error,
                unknown: true,
            }) => Err(IdempotencyError::OutcomeUnknown {
                operation: "complete",
                source: Box::new(error),
            }),
            Err(WriteError { error, .. }) => Err(store_error("complete", error)),
        }
    }

    /// Two-phase mode: frees the key after a failure on our side, if this lease still owns it,
    /// so the client's retry runs anew.
    pub async fn release(&self, lease: &Lease) -> Result<(), IdempotencyError> {
        let delete = self
            .ddb
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(self.key(&lease.pk)))
            .condition_expression("#owner = :owner AND #state = :in_progress")
            .expression_attribute_names("#owner", OWNER)
            .expression_attribute_names("#state", STATE)
            .expression_attribute_values(":owner", AttributeValue::S(lease.owner.clone()))
            .expression_attribute_values(":in_progress", AttributeValue::S(IN_PROGRESS.into()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        // Resent after an unknown outcome too: a resend after our own delete fails the owner
        // condition and finds no item.
        let sent = crate::aws::send_write(Resend::AlsoUnknown, || {
            delete
                .clone()
                .customize()
                .config_override(one_attempt())
                .send()
        })
        .await;
        match sent {
            Ok(_) => Ok(()),
            Err(WriteError {
                error: SdkError::ServiceError(e),
                unknown,
            }) if matches!(e.err(), DeleteItemError::ConditionalCheckFailedException(_)) => {
                let gone = match e.err() {
                    DeleteItemError::ConditionalCheckFailedException(c) => c.item().is_none(),
                    _ => false,
                };
                match gone && unknown {
                    // An earlier send of ours deleted it and its answer was lost.
                    true => Ok(()),
                    false => Err(IdempotencyError::NotOwner),
                }
            }
            Err(WriteError {
                error,
                unknown: true,
            }) => Err(IdempotencyError::OutcomeUnknown {
                operation: "release",
                source: Box::new(error),
            }),
            Err(WriteError { error, .. }) => Err(store_error("release", error)),
        }
    }
}

/// A record that exists but cannot be parsed.
#[derive(Debug, thiserror::Error)]
#[error("malformed idempotency record")]
struct MalformedRecord;
