//! One counter item in DynamoDB: a layer's key in one window (and shard), and the three writes
//! made to it: the limit-bounded increment, the refund, and the operator's reset.
//!
//! An item is `{pk, count, expires_at}` (the key's and the TTL's names are the table's:
//! [`crate::table`]); a sliding layer's item also counts per slot (`s0` … `s19`, see
//! [`super::sliding`]) and lives one window longer, because the next window reads it as its
//! previous one. An operator's reset of a sliding counter leaves the current item at
//! `count = 0` with `void`: the previous window no longer counts for this key, which warm
//! processes holding its slots learn from their next increment's condition.
//!
//! Two more attributes keep the bound against timing and configuration changes:
//!
//! - `sealed`: the next window reads a sliding item as its previous window with a write that
//!   seals it ([`Store::seal`]), and an increment of a sliding item is conditioned on it not
//!   being sealed. An increment that was sent for a window just ending but reaches DynamoDB after
//!   another process read that window is therefore refused ([`Refusal::Ended`]) and counted
//!   again in the window its process is now in, where the sealed counts are seen: what a process
//!   read of a previous window can never grow afterwards, whatever the network's delays or the
//!   processes' clocks do.
//! - `layout`: a sharded layer's window records its shard count on the layer's unsharded item
//!   (the *base* item, the one an unsharded layer counts in) when it is first used
//!   ([`Store::claim_layout`]), and every process counts that window in that layout; an
//!   unsharded increment is conditioned on no layout being recorded. So when an operator changes
//!   the shard count (or shards a layer, or stops sharding it), processes with the old and the
//!   new configuration still count one window in one layout, and the window never holds more
//!   than the limit; the new layout starts with the next window its first user starts.

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;

use crate::aws::{Resend, WriteError};
use crate::clock::UnixMillis;
use crate::table::Attributes;

use super::decision::Decision;
use super::sliding::{self, Slots, SLOTS};
use super::spec::RateLimit;

const COUNT: &str = "count";
const VOID: &str = "void";
const SEALED: &str = "sealed";
const LAYOUT: &str = "layout";

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
    pub(super) fn new(
        operation: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            operation,
            source: Box::new(source),
        }
    }
}

/// Where one layer's key is counted at one moment: the item of its window (and shard).
#[derive(Debug, Clone)]
pub(super) struct Counter {
    pub pk: String,
    /// The item of the window before, which a sliding layer reads as its previous window
    /// (empty for a fixed layer, which never reads it).
    pub previous_pk: String,
    /// The layer's unsharded item of this window: where an unsharded layout counts and a sharded
    /// one records its layout. Equal to `pk` when unsharded.
    pub base_pk: String,
    /// The unsharded item of the window before (sliding layers; empty for fixed ones).
    pub previous_base_pk: String,
    /// How many shards the window is counted in (1: the base item alone).
    pub layout: u32,
    pub start: UnixMillis,
    pub end: UnixMillis,
    /// This item's share of the limit (the whole limit unless sharded).
    pub limit: u32,
    pub sliding: bool,
}

impl Counter {
    /// The counter of `limit`'s layer for `key` and `shard` at `now_ms`, `limit` being in the
    /// layout its window is counted in. The window start is part of the key, so a stale item
    /// from an ended window is never read as the current one, whether or not DynamoDB's TTL has
    /// deleted it yet.
    pub fn new(scope: &str, limit: &RateLimit, key: &str, shard: u32, now_ms: UnixMillis) -> Self {
        let (start, end) = limit.window_at(now_ms);
        let layout = limit.shards();
        let shard_part = match layout {
            1 => String::new(),
            _ => format!("~{shard}"),
        };
        let stem = format!("{scope}#{}#{}#{key}", limit.layer(), limit.window_secs());
        let len = end - start;
        let previous_start = start.saturating_sub(len) / 1000;
        let sliding = limit.is_sliding();
        let previous = |part: &str| match sliding {
            true => format!("{stem}{part}#{previous_start}"),
            false => String::new(),
        };
        Self {
            pk: format!("{stem}{shard_part}#{}", start / 1000),
            previous_pk: previous(&shard_part),
            base_pk: format!("{stem}#{}", start / 1000),
            previous_base_pk: previous(""),
            layout,
            start,
            end,
            limit: limit.shard_limit(shard),
            sliding,
        }
    }

    /// The item of shard `shard` of the window before, in a layout of `layout` shards.
    pub fn previous_shard_pk(&self, layout: u32, shard: u32) -> String {
        match layout {
            1 => self.previous_base_pk.clone(),
            _ => {
                let (stem, start) = self
                    .previous_base_pk
                    .rsplit_once('#')
                    .expect("a counter key ends with its window start");
                format!("{stem}~{shard}#{start}")
            }
        }
    }

    fn len(&self) -> u64 {
        self.end - self.start
    }

    /// When the item may go: at its window's end, or a window later for a sliding layer.
    pub fn expires_at_secs(&self) -> u64 {
        let end = if self.sliding {
            self.end + self.len()
        } else {
            self.end
        };
        end / 1000
    }
}

/// A counted request: the decision, the slot incremented (sliding), and, when this admission
/// took the item's last unit, when it would admit again (for the block cache).
pub(super) struct Counted {
    pub decision: Decision,
    pub slot: Option<usize>,
    pub full_until: Option<UnixMillis>,
}

/// Why a counter did not count a request.
pub(super) enum Refusal {
    /// The item is full: nothing was counted. The decision's reset is when a request would be
    /// admitted again.
    Full(Decision),
    /// The item's window has ended and the next one has read it (it is sealed): nothing was
    /// counted; count the request in the window after.
    Ended,
    /// The window is counted in `n` shards (another process recorded that layout): nothing was
    /// counted; count the request in that layout.
    Layout(u32),
    Store(LimiterError),
}

/// The item's count and slots, as an increment or a read hands them back.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Seen {
    pub count: u32,
    pub slots: Slots,
    /// An operator reset the counter in this window: the previous window no longer counts.
    pub void: bool,
    /// The next window has read this one: it counts nothing more.
    pub sealed: bool,
    /// The shard count recorded for the window (on its base item), if any.
    pub layout: Option<u32>,
}

impl Seen {
    pub fn from_item(item: Option<&HashMap<String, AttributeValue>>) -> Self {
        let Some(item) = item else {
            return Self::default();
        };
        let number = |name: &str| match item.get(name) {
            Some(AttributeValue::N(n)) => n.parse().ok(),
            _ => None,
        };
        let count = number(COUNT).unwrap_or(0);
        let mut slots = [0; SLOTS];
        for (i, slot) in slots.iter_mut().enumerate() {
            *slot = number(&slot_name(i)).unwrap_or(0);
        }
        Self {
            count,
            slots: sliding::normalised(slots, count),
            void: item.contains_key(VOID),
            sealed: item.contains_key(SEALED),
            layout: number(LAYOUT),
        }
    }

    /// The layout a window was counted in, from its base item: the one recorded, else 1 when
    /// something was counted without one, else `None` (nothing counted in the window yet).
    pub fn window_layout(&self) -> Option<u32> {
        self.layout.or((self.count > 0).then_some(1))
    }
}

fn slot_name(i: usize) -> String {
    format!("s{i}")
}

/// The conditional `UpdateItem`s of one counter table.
#[derive(Debug, Clone)]
pub(super) struct Store {
    pub ddb: Client,
    pub table: String,
    /// The table's key and TTL attribute names.
    pub attributes: Arc<Attributes>,
}

impl Store {
    /// Counts one request in `counter` unless that would pass its limit: for a fixed window
    /// `count < limit`; for a sliding one `count < limit - previous still inside`, `previous`
    /// being the window before's slots. A rejected increment changes nothing.
    ///
    /// `ADD 1` is not idempotent, so the SDK never resends it: each send is one SDK attempt
    /// ([`crate::aws::send_write`] with [`Resend::NotApplied`]). A throttled send was refused before
    /// it was applied and is sent again (up to [`crate::aws::WRITE_ATTEMPTS`] sends). A send whose
    /// outcome is unknown (a timeout, a lost answer, a 5xx) is neither resent (a resend after a
    /// commit would count the request twice, or meet the condition its own first send filled
    /// and refuse the request with 429 while it holds a unit) nor refunded (a refund of an
    /// increment that never landed would give back another caller's unit): the request is
    /// refused with [`Refusal::Store`] (503, fail closed), and the unit it may hold stays
    /// counted until its window ends. Over-counting by one is the safe side; never under.
    pub async fn increment(
        &self,
        counter: &Counter,
        limit: &RateLimit,
        previous: &Slots,
        now_ms: UnixMillis,
    ) -> Result<Counted, Refusal> {
        let slot = counter
            .sliding
            .then(|| sliding::slot_at(counter.start, counter.len(), now_ms));
        let mut update = self
            .ddb
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.attributes.key(&counter.pk)))
            .expression_attribute_names("#count", COUNT)
            .expression_attribute_names("#expires", &self.attributes.expires_at)
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":limit", number(counter.limit))
            .expression_attribute_values(":expires", number(counter.expires_at_secs()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        // An unsharded item counts only while no sharded layout is recorded for its window.
        let unsharded = counter.layout == 1;
        if unsharded {
            update = update.expression_attribute_names("#layout", LAYOUT);
        }
        update = match slot {
            None => update
                .update_expression(
                    "ADD #count :one SET #expires = if_not_exists(#expires, :expires)",
                )
                .condition_expression(match unsharded {
                    true => "attribute_not_exists(#layout) AND (attribute_not_exists(#count) OR #count < :limit)",
                    false => "attribute_not_exists(#count) OR #count < :limit",
                })
                .return_values(ReturnValue::UpdatedNew),
            Some(slot) => {
                let allowed = counter
                    .limit
                    .saturating_sub(sliding::still_inside(previous, slot));
                // After an operator's reset (`void`) only this window counts. A sealed item's
                // window has been read by the next one: it takes nothing more.
                let bound = match allowed {
                    0 => "#void = :yes AND #count < :limit",
                    _ => "attribute_not_exists(#count) OR #count < :allowed OR (#void = :yes AND #count < :limit)",
                };
                let guard = match unsharded {
                    true => "attribute_not_exists(#sealed) AND attribute_not_exists(#layout)",
                    false => "attribute_not_exists(#sealed)",
                };
                let update = update
                    .update_expression(
                        "ADD #count :one, #slot :one SET #expires = if_not_exists(#expires, :expires)",
                    )
                    .condition_expression(format!("{guard} AND ({bound})"))
                    .expression_attribute_names("#slot", slot_name(slot))
                    .expression_attribute_names("#void", VOID)
                    .expression_attribute_names("#sealed", SEALED)
                    .expression_attribute_values(":yes", AttributeValue::Bool(true))
                    .return_values(ReturnValue::AllNew);
                match allowed {
                    0 => update,
                    _ => update.expression_attribute_values(":allowed", number(allowed)),
                }
            }
        };
        // One SDK attempt per send: `ADD 1` is not idempotent, so only a refusal that proves
        // nothing was applied (throttling) is sent again. See [`Self::increment`]'s doc.
        let sent = crate::aws::send_write(Resend::NotApplied, || {
            update
                .clone()
                .customize()
                .config_override(crate::aws::dynamodb_one_attempt())
                .send()
        })
        .await;
        match sent {
            Ok(out) => {
                let seen = Seen::from_item(out.attributes());
                let count = if seen.count > 0 {
                    seen.count
                } else {
                    counter.limit
                };
                let decision = self.decision(counter, limit, previous, seen, count, now_ms, false);
                let full_until = (decision.remaining == 0).then(|| {
                    let full = self.decision(counter, limit, previous, seen, count, now_ms, true);
                    full.reset_at_ms
                });
                Ok(Counted {
                    decision,
                    slot,
                    full_until,
                })
            }
            Err(WriteError {
                error: SdkError::ServiceError(e),
                ..
            }) if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) => {
                // ALL_OLD hands back the full counter with the failure: no second read needed.
                let old = match e.err() {
                    UpdateItemError::ConditionalCheckFailedException(c) => {
                        Seen::from_item(c.item())
                    }
                    _ => Seen::default(),
                };
                if old.sealed && counter.sliding {
                    tracing::debug!(pk = counter.pk, "counter's window already read by the next");
                    return Err(Refusal::Ended);
                }
                if let (Some(layout), true) = (old.layout, unsharded) {
                    tracing::debug!(pk = counter.pk, layout, "window counted in shards");
                    return Err(Refusal::Layout(layout));
                }
                tracing::debug!(pk = counter.pk, count = old.count, "counter full");
                let decision =
                    self.decision(counter, limit, previous, old, old.count, now_ms, true);
                Err(Refusal::Full(decision))
            }
            Err(WriteError { error, unknown }) => {
                if unknown {
                    tracing::warn!(
                        pk = counter.pk,
                        "a rate-limit increment's outcome is unknown; not resent and not refunded: refusing the request (it may stay counted until its window ends)"
                    );
                }
                Err(Refusal::Store(LimiterError::new("increment", error)))
            }
        }
    }

    /// The layer's decision from what the item holds: what is left, and the reset (for a
    /// rejection, `full`, when a request would be admitted again; otherwise when everything
    /// counted has left the window).
    #[allow(clippy::too_many_arguments)]
    fn decision(
        &self,
        counter: &Counter,
        limit: &RateLimit,
        previous: &Slots,
        seen: Seen,
        count: u32,
        now_ms: UnixMillis,
        full: bool,
    ) -> Decision {
        let (start, len) = (counter.start, counter.len());
        let previous = if seen.void { &[0; SLOTS] } else { previous };
        let (inside, reset_at_ms) = match counter.sliding {
            false => (0, counter.end),
            true => {
                let inside = sliding::still_inside(previous, sliding::slot_at(start, len, now_ms));
                let reset = match full {
                    true => sliding::reopens_at(
                        counter.limit,
                        start,
                        len,
                        now_ms,
                        previous,
                        &seen.slots,
                    ),
                    false => sliding::empties_at(start, len, now_ms, previous, &seen.slots),
                };
                (inside, reset)
            }
        };
        Decision {
            limit: *limit,
            remaining: match full {
                true => 0,
                false => counter.limit.saturating_sub(inside + count),
            },
            reset_at_ms,
            now_ms,
        }
    }

    /// The item as it is now (a consistent read): its count and slots, zero when absent.
    pub async fn read(&self, pk: &str) -> Result<Seen, LimiterError> {
        let out = self
            .ddb
            .get_item()
            .table_name(&self.table)
            .set_key(Some(self.attributes.key(pk)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| LimiterError::new("read", e))?;
        Ok(Seen::from_item(out.item()))
    }

    /// Reads `pk` as the previous window of a sliding layer, sealing it in the same write: no
    /// increment counts in it afterwards (an increment still on its way is refused with
    /// [`Refusal::Ended`] and counted in the next window), so what this returns is final. An
    /// item that does not exist yet is created sealed, empty, expiring at `expires_secs`.
    /// Idempotent, so the SDK's own retries are safe.
    pub async fn seal(&self, pk: &str, expires_secs: u64) -> Result<Seen, LimiterError> {
        let out = self
            .ddb
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.attributes.key(pk)))
            .update_expression("SET #sealed = :yes, #expires = if_not_exists(#expires, :expires)")
            .expression_attribute_names("#sealed", SEALED)
            .expression_attribute_names("#expires", &self.attributes.expires_at)
            .expression_attribute_values(":yes", AttributeValue::Bool(true))
            .expression_attribute_values(":expires", number(expires_secs))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .map_err(|e| LimiterError::new("seal", e))?;
        Ok(Seen::from_item(out.attributes()))
    }

    /// The layout of `counter`'s window for a process configured with `shards` (more than 1):
    /// the one already recorded on the window's base item, else `shards`, recorded now; or 1
    /// when the window is already being counted unsharded (a count and no layout). Idempotent.
    pub async fn claim_layout(&self, counter: &Counter, shards: u32) -> Result<u32, LimiterError> {
        let result = self
            .ddb
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.attributes.key(&counter.base_pk)))
            .update_expression(
                "SET #layout = if_not_exists(#layout, :shards), #expires = if_not_exists(#expires, :expires)",
            )
            .condition_expression("attribute_not_exists(#count) OR attribute_exists(#layout)")
            .expression_attribute_names("#layout", LAYOUT)
            .expression_attribute_names("#count", COUNT)
            .expression_attribute_names("#expires", &self.attributes.expires_at)
            .expression_attribute_values(":shards", number(shards))
            .expression_attribute_values(":expires", number(counter.expires_at_secs()))
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        match result {
            Ok(out) => Ok(Seen::from_item(out.attributes()).layout.unwrap_or(shards)),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(1)
            }
            Err(e) => Err(LimiterError::new("layout", e)),
        }
    }

    /// Gives back one unit of `pk` (and of its `slot`), never below zero; `Err` only for the
    /// log. See [`super::RateLimiter::refund`] for why it is sent once.
    pub async fn refund(
        &self,
        pk: &str,
        slot: Option<usize>,
        now_ms: UnixMillis,
    ) -> Result<(), SdkError<UpdateItemError, aws_smithy_runtime_api::http::Response>> {
        let refund = self
            .ddb
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.attributes.key(pk)))
            .expression_attribute_names("#count", COUNT)
            .expression_attribute_values(":minus_one", AttributeValue::N("-1".into()))
            .expression_attribute_values(":zero", AttributeValue::N("0".into()));
        let refund = match slot {
            None => refund
                .update_expression("ADD #count :minus_one")
                .condition_expression("#count > :zero AND #expires > :now")
                .expression_attribute_names("#expires", &self.attributes.expires_at)
                .expression_attribute_values(":now", number(now_ms / 1000)),
            Some(slot) => refund
                .update_expression("ADD #count :minus_one, #slot :minus_one")
                .condition_expression("#count > :zero AND #slot > :zero")
                .expression_attribute_names("#slot", slot_name(slot)),
        };
        let result = refund
            .customize()
            .config_override(crate::aws::dynamodb_one_attempt())
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Empties `counter` (operator action). A fixed counter's item is deleted. A sliding
    /// counter's previous item is deleted and its current one written back empty with `void`,
    /// so that processes which already read the previous window stop counting it.
    pub async fn reset(&self, counter: &Counter) -> Result<(), LimiterError> {
        let delete = |pk: &str| {
            self.ddb
                .delete_item()
                .table_name(&self.table)
                .set_key(Some(self.attributes.key(pk)))
                .send()
        };
        if !counter.sliding {
            delete(&counter.pk)
                .await
                .map_err(|e| LimiterError::new("reset", e))?;
            return Ok(());
        }
        delete(&counter.previous_pk)
            .await
            .map_err(|e| LimiterError::new("reset", e))?;
        let mut item = self.attributes.key(&counter.pk);
        item.insert(COUNT.into(), number(0));
        item.insert(VOID.into(), AttributeValue::Bool(true));
        item.insert(
            self.attributes.expires_at.clone(),
            number(counter.expires_at_secs()),
        );
        self.ddb
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| LimiterError::new("reset", e))?;
        Ok(())
    }
}

fn number(n: impl ToString) -> AttributeValue {
    AttributeValue::N(n.to_string())
}
