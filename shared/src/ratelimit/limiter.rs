//! The limiter: the layers of one request counted in order, each in one counter item (or in
//! one of its shards), with the block cache in front and the refunds behind.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::Client;

use crate::clock::{SharedClock, UnixMillis};
use crate::expiring::Expiring;
use crate::table::Attributes;

use super::admission::{Admission, Held};
use super::block_cache::BlockCache;
pub use super::counter::LimiterError;
use super::counter::{Counter, Refusal, Store};
use super::decision::Decision;
use super::sliding::{Slots, SLOTS};
use super::spec::{Layer, RateLimit};
use super::DEFAULT_BLOCK_CACHE_MAX_AGE;

/// How many shards one request tries at most before it is refused. A sharded layer refuses a
/// request only when this many shards (or every shard, when there are fewer) were full or known
/// full, so with at most this many shards it never refuses while any shard has room; with more
/// it may refuse with at most `(shards - SHARD_TRIES) × ⌈limit / shards⌉` units unused.
pub const SHARD_TRIES: u32 = 8;

/// How many previous windows' slots a process keeps (sliding layers): one entry per key and
/// shard seen this window.
const PREVIOUS_CAPACITY: usize = 10_000;

/// How many window layouts a process keeps (sharded layers, and unsharded ones that met a
/// sharded window): one entry per key and window.
const LAYOUT_CAPACITY: usize = 10_000;

/// How many times one layer's count starts over in a later window or another layout (a sealed
/// window, a layout recorded by another process) before the request is refused as a store
/// failure. Once is what happens; more means a clock far behind the others' or a bug.
const RECOUNTS: u32 = 3;

/// One layer to check for one request: the limit and the identity it counts (`""` for global).
#[derive(Debug, Clone, Copy)]
pub struct LimitCheck<'a> {
    /// The layer's limit.
    pub limit: &'a RateLimit,
    /// Whom the layer counts: an address, a verified identity, or `""` for global.
    pub key: &'a str,
}

/// The outcome of [`RateLimiter::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every layer had room; each has counted the request.
    Admitted,
    /// A layer is full. Nothing was incremented for this request (earlier layers were refunded).
    Rejected(Decision),
}

/// A counter as stored: how many requests its window holds now (for a sliding layer, with what
/// of the previous window is still inside; for a sharded one, summed over the shards).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    /// Requests counted in the current window.
    pub count: u32,
    /// The layer's limit.
    pub limit: u32,
    /// Seconds since the epoch when the current window ends (0: no counter found).
    pub window_ends_at: u64,
}

/// The limiter over a DynamoDB table with a string partition key `pk`: fixed or sliding
/// windows, each layer in one item or spread over shards.
#[derive(Debug)]
pub struct RateLimiter {
    store: Store,
    scope: String,
    clock: SharedClock,
    blocked: BlockCache,
    /// The previous window's slots of the sliding counters this process has used, read once
    /// per key and window (a window that has ended no longer changes), kept until the window
    /// reading them ends.
    previous: Expiring<Slots>,
    /// The shard count each window of a key is counted in, as recorded on its base item (or
    /// learnt from it), kept until the window ends.
    layouts: Expiring<u32>,
    /// Where the next sharded check starts, so a process spreads its writes evenly.
    next_shard: AtomicU32,
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
            store: Store {
                ddb,
                table: table.into(),
                attributes: Default::default(),
            },
            scope: scope.into(),
            clock,
            blocked: BlockCache::new(0, DEFAULT_BLOCK_CACHE_MAX_AGE),
            previous: Expiring::new(PREVIOUS_CAPACITY),
            layouts: Expiring::new(LAYOUT_CAPACITY),
            // Processes start at different shards.
            next_shard: AtomicU32::new(random_u32()),
        }
    }

    /// Keeps the counters under these attribute names (a table of their own needs none: `pk`
    /// and `expires_at`; an existing single-table design names its own key, sort key, prefix
    /// and TTL attribute, see [`crate::table`]).
    pub fn with_attributes(mut self, attributes: Attributes) -> Self {
        self.store.attributes = Arc::new(attributes);
        self
    }

    /// Remembers full keys: at most `capacity` keys (0: none), each for at most `max_age`.
    pub fn with_block_cache(mut self, capacity: usize, max_age: Duration) -> Self {
        self.blocked = BlockCache::new(capacity, max_age);
        self
    }

    fn counter(&self, limit: &RateLimit, key: &str, shard: u32, now_ms: UnixMillis) -> Counter {
        Counter::new(&self.scope, limit, key, shard, now_ms)
    }

    /// `limit` in the layout this process knows its window at `now_ms` is counted in: the one
    /// recorded for the window if it has learnt it, else its own configuration.
    fn known_layout(&self, limit: &RateLimit, key: &str, now_ms: UnixMillis) -> RateLimit {
        let base = self.counter(limit, key, 0, now_ms).base_pk;
        match self.layouts.get(&base, now_ms) {
            Some(n) if n != limit.shards() => limit.in_layout(n),
            _ => *limit,
        }
    }

    /// `limit` in the layout its window at `now_ms` is counted in. A sharded configuration asks
    /// the window's base item once per window (recording its own layout if the window has
    /// none); an unsharded one counts in the base item, whose condition tells it if the window
    /// has a layout ([`Refusal::Layout`]), so it costs nothing until a layout change.
    async fn layout(
        &self,
        limit: &RateLimit,
        key: &str,
        now_ms: UnixMillis,
    ) -> Result<RateLimit, LimiterError> {
        let counter = self.counter(limit, key, 0, now_ms);
        if let Some(n) = self.layouts.get(&counter.base_pk, now_ms) {
            return Ok(limit.in_layout(n));
        }
        if limit.shards() == 1 {
            return Ok(*limit);
        }
        let n = self.store.claim_layout(&counter, limit.shards()).await?;
        if n != limit.shards() {
            tracing::info!(
                layer = %limit.layer(),
                recorded = n,
                configured = limit.shards(),
                "this window is counted in another shard layout; the configured one starts with a later window"
            );
        }
        self.layouts.insert(counter.base_pk, n, counter.end, now_ms);
        Ok(limit.in_layout(n))
    }

    /// Checks `checks` in order, counting this request in each. On the first full layer the
    /// request is rejected, and every counter `admission` holds is given back.
    pub async fn check(
        &self,
        admission: &mut Admission,
        checks: &[LimitCheck<'_>],
    ) -> Result<Verdict, LimiterError> {
        let now_ms = self.clock.now_ms();
        // A layer known to be full is refused before any write: a flood costs nothing.
        if let Some(rejection) = self.blocked_at(checks, now_ms) {
            tracing::info!(decision = "rejected", layer = %rejection.limit.layer(), source = "block_cache", "rate limited");
            self.refund(admission).await;
            return Ok(Verdict::Rejected(rejection));
        }
        for check in checks {
            match self.count(check).await {
                Ok(counted) => {
                    admission.note(counted.decision);
                    admission.counted.push(counted);
                }
                Err(Refusal::Full(decision)) => {
                    tracing::info!(decision = "rejected", layer = %check.limit.layer(), source = "dynamodb", "rate limited");
                    self.refund(admission).await;
                    return Ok(Verdict::Rejected(decision));
                }
                Err(Refusal::Store(e)) => {
                    self.refund(admission).await;
                    return Err(e);
                }
                Err(Refusal::Ended | Refusal::Layout(_)) => {
                    unreachable!("count() counts again in the next window or the other layout")
                }
            }
        }
        Ok(Verdict::Admitted)
    }

    /// The block cache's answer for `checks`, costing nothing: the rejection of the first layer
    /// whose every shard is known full, if any. For a caller that can tell before counting in an
    /// earlier layer that a later one would refuse (a known client's full `client` layer).
    pub fn blocked(&self, checks: &[LimitCheck<'_>]) -> Option<Decision> {
        self.blocked_at(checks, self.clock.now_ms())
    }

    fn blocked_at(&self, checks: &[LimitCheck<'_>], now_ms: UnixMillis) -> Option<Decision> {
        // The usual case, and no key to build for it.
        if self.blocked.is_empty() {
            return None;
        }
        checks
            .iter()
            .find_map(|check| self.layer_blocked(check, now_ms))
    }

    /// The rejection that reopens first, if every shard of the layer is known full.
    fn layer_blocked(&self, check: &LimitCheck<'_>, now_ms: UnixMillis) -> Option<Decision> {
        let mut soonest = None;
        let limit = self.known_layout(check.limit, check.key, now_ms);
        for shard in 0..limit.shards() {
            let pk = self.counter(&limit, check.key, shard, now_ms).pk;
            soonest = Some(sooner(soonest, self.blocked.get(&pk, now_ms)?));
        }
        soonest
    }

    /// Counts the request in one of the layer's shards: starting from this process's next
    /// shard, skipping those known full, trying at most [`SHARD_TRIES`]. The clock is read for
    /// every increment, so an increment is sent for the window it is sent in; one that arrives
    /// after the next window has sealed its window is refused by its condition and counted
    /// again in the next window ([`Refusal::Ended`]), and one that meets another layout is
    /// counted again in that layout ([`Refusal::Layout`]).
    async fn count(&self, check: &LimitCheck<'_>) -> Result<Held, Refusal> {
        // Never earlier than a window known sealed: a process whose clock lags behind the one
        // that sealed it counts in the window after.
        let mut floor = 0;
        for _ in 0..RECOUNTS {
            let now_ms = self.clock.now_ms().max(floor);
            let limit = self
                .layout(check.limit, check.key, now_ms)
                .await
                .map_err(Refusal::Store)?;
            match self.count_in(check, &limit, floor).await {
                Err(Recount::Ended(end)) => floor = floor.max(end),
                Err(Recount::Layout) => {}
                Err(Recount::Refused(refusal)) => return Err(refusal),
                Ok(held) => return Ok(held),
            }
        }
        tracing::error!(layer = %check.limit.layer(), "a rate-limit count kept meeting sealed windows or other layouts; refusing");
        Err(Refusal::Store(LimiterError::new(
            "increment",
            std::io::Error::other("no window or layout settled"),
        )))
    }

    /// One pass of [`Self::count`] over the shards of `limit` (in its window's layout).
    async fn count_in(
        &self,
        check: &LimitCheck<'_>,
        limit: &RateLimit,
        floor: UnixMillis,
    ) -> Result<Held, Recount> {
        let shards = limit.shards();
        let first = match shards {
            1 => 0,
            n => self.next_shard.fetch_add(1, Ordering::Relaxed) % n,
        };
        let (mut full, mut tries) = (None, 0);
        let window = limit.window_at(self.clock.now_ms().max(floor));
        for i in 0..shards {
            let now_ms = self.clock.now_ms().max(floor);
            if limit.window_at(now_ms) != window {
                // The window ended while trying shards: start over in the next one.
                return Err(Recount::Ended(window.1));
            }
            let counter = self.counter(limit, check.key, (first + i) % shards, now_ms);
            if let Some(known) = self.blocked.get(&counter.pk, now_ms) {
                full = Some(sooner(full, known));
                continue;
            }
            if tries == SHARD_TRIES {
                break;
            }
            tries += 1;
            let previous = match counter.sliding {
                true => self
                    .previous_slots(&counter, limit, now_ms)
                    .await
                    .map_err(|e| Recount::Refused(Refusal::Store(e)))?,
                false => [0; SLOTS],
            };
            match self
                .store
                .increment(&counter, check.limit, &previous, now_ms)
                .await
            {
                Ok(super::counter::Counted {
                    decision,
                    slot,
                    full_until,
                }) => {
                    if let Some(until) = full_until {
                        let full = Decision {
                            remaining: 0,
                            reset_at_ms: until,
                            ..decision
                        };
                        self.blocked.insert(counter.pk.clone(), full);
                    }
                    return Ok(Held {
                        pk: counter.pk,
                        slot,
                        window_end_ms: counter.end,
                        decision,
                    });
                }
                Err(Refusal::Full(decision)) => {
                    self.blocked.insert(counter.pk, decision);
                    full = Some(sooner(full, decision));
                }
                Err(Refusal::Ended) => {
                    tracing::info!(layer = %limit.layer(), "an increment reached a window the next one had already read; counting it in the next");
                    return Err(Recount::Ended(counter.end));
                }
                Err(Refusal::Layout(n)) => {
                    // Known for the rest of the window: the next pass counts in it.
                    self.layouts.insert(counter.base_pk, n, counter.end, now_ms);
                    return Err(Recount::Layout);
                }
                Err(store) => return Err(Recount::Refused(store)),
            }
        }
        Err(Recount::Refused(Refusal::Full(full.expect(
            "a layer has a shard, and each was tried or known full",
        ))))
    }

    /// The previous window's slots of `counter` (counted in `limit`'s layout), read once per
    /// window by sealing them ([`Store::seal`]), so they cannot grow after this read. When the
    /// previous window was counted in another layout, its shards are summed and shared out over
    /// this layout's shards in proportion to their share of the limit, rounded up: the shards'
    /// conditions then still add up to at most the limit.
    async fn previous_slots(
        &self,
        counter: &Counter,
        limit: &RateLimit,
        now_ms: UnixMillis,
    ) -> Result<Slots, LimiterError> {
        if let Some(slots) = self.previous.get(&counter.previous_pk, now_ms) {
            return Ok(slots);
        }
        let expires = counter.end / 1000;
        let slots = match self.previous_layout(counter, now_ms).await? {
            None => [0; SLOTS],
            Some((n, _)) if n == counter.layout => match n {
                // The base item's slots, which finding the layout has just read.
                1 => self
                    .previous_layout(counter, now_ms)
                    .await?
                    .map_or([0; SLOTS], |(_, slots)| slots),
                _ => self.store.seal(&counter.previous_pk, expires).await?.slots,
            },
            Some((n, base)) => {
                let mut total = [0u32; SLOTS];
                for shard in 0..n {
                    let seen = match n {
                        1 => base,
                        _ => {
                            let pk = counter.previous_shard_pk(n, shard);
                            self.store.seal(&pk, expires).await?.slots
                        }
                    };
                    for (t, s) in total.iter_mut().zip(seen) {
                        *t += s;
                    }
                }
                let whole = u64::from(limit.limit().max(1));
                let share = u64::from(counter.limit);
                total.map(|t| (u64::from(t) * share).div_ceil(whole) as u32)
            }
        };
        self.previous
            .insert(counter.previous_pk.clone(), slots, counter.end, now_ms);
        Ok(slots)
    }

    /// The layout the previous window was counted in and its base item's slots, read by sealing
    /// the base item (kept for the window, like the slots): `None` when nothing was counted.
    async fn previous_layout(
        &self,
        counter: &Counter,
        now_ms: UnixMillis,
    ) -> Result<Option<(u32, Slots)>, LimiterError> {
        let key = format!("{}@previous", counter.previous_base_pk);
        if let (Some(n), Some(slots)) = (
            self.layouts.get(&key, now_ms),
            self.previous.get(&key, now_ms),
        ) {
            return Ok(Some((n, slots)));
        }
        let seen = self
            .store
            .seal(&counter.previous_base_pk, counter.end / 1000)
            .await?;
        let Some(n) = seen.window_layout() else {
            return Ok(None);
        };
        self.layouts.insert(key.clone(), n, counter.end, now_ms);
        self.previous.insert(key, seen.slots, counter.end, now_ms);
        Ok(Some((n, seen.slots)))
    }

    /// Gives back every counter `admission` holds: used when a later layer rejects the request
    /// and when a failure on our side (upstream, secrets, store) means the caller got nothing.
    /// The decrement is conditioned on the count being positive, so it never goes below zero;
    /// a counter from an ended window is left alone (its window already reopened, and a sliding
    /// layer's next window may already have read it).
    ///
    /// A refund is sent once, never again (one SDK attempt, no resend of ours): `ADD -1` is not
    /// idempotent, so resending one whose answer was lost after it committed would give back a
    /// unit another caller holds. A refund that fails or whose outcome is unknown is logged and
    /// dropped; the unit then stays counted until its window ends, which is the safe side.
    pub async fn refund(&self, admission: &mut Admission) {
        let now_ms = self.clock.now_ms();
        for counted in admission.counted.drain(..) {
            if counted.window_end_ms <= now_ms {
                continue;
            }
            // The unit is free again, so the key is not full any more.
            self.blocked.remove(&counted.pk);
            if let Err(e) = self.store.refund(&counted.pk, counted.slot, now_ms).await {
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
        admission.tightest = None;
    }

    /// Gives back only the counters of `layer` that `admission` holds; the others stay counted.
    /// For a request that was admitted by every layer but turned out not to need one of them:
    /// a request answered 409 or 422 by the idempotency claim never runs its paid effect, so
    /// it spends no `global` unit, while its `ip` unit stays spent (lesson 002).
    pub async fn refund_layer(&self, admission: &mut Admission, layer: Layer) {
        let mut part = admission.split_off(layer);
        self.refund(&mut part).await;
    }

    /// The layer's count for `key` now (operator view), as the functions count it: summed over
    /// the shards of the layout its window is counted in (which may not be `limit`'s own, after
    /// a change of the shard count), and for a sliding layer with what of the previous window is
    /// still inside. Consistent reads, no write.
    pub async fn usage(&self, limit: &RateLimit, key: &str) -> Result<Usage, LimiterError> {
        let now_ms = self.clock.now_ms();
        let limit = self.window_layout(limit, key, now_ms).await?;
        let mut count = 0;
        let mut void = false;
        let mut window_ends_at = 0;
        let base = self.counter(&limit, key, 0, now_ms);
        for shard in 0..limit.shards() {
            let counter = self.counter(&limit, key, shard, now_ms);
            let current = self.store.read(&counter.pk).await?;
            count += current.count;
            void |= current.void;
            window_ends_at = counter.end / 1000;
        }
        if base.sliding && !void {
            let previous = self.store.read(&base.previous_base_pk).await?;
            let slot = super::sliding::slot_at(base.start, base.end - base.start, now_ms);
            let shards = previous.window_layout().unwrap_or(1);
            for shard in 0..shards {
                let seen = match shards {
                    1 => previous,
                    n => self.store.read(&base.previous_shard_pk(n, shard)).await?,
                };
                count += super::sliding::still_inside(&seen.slots, slot);
            }
        }
        Ok(Usage {
            count,
            limit: limit.limit(),
            window_ends_at,
        })
    }

    /// `limit` in the layout its window at `now_ms` is counted in, read from the window's base
    /// item without recording anything (operator tools): the recorded layout, else the
    /// configured one.
    async fn window_layout(
        &self,
        limit: &RateLimit,
        key: &str,
        now_ms: UnixMillis,
    ) -> Result<RateLimit, LimiterError> {
        let base = self.counter(limit, key, 0, now_ms).base_pk;
        let seen = self.store.read(&base).await?;
        Ok(match seen.window_layout() {
            Some(n) if n != limit.shards() => limit.in_layout(n),
            _ => *limit,
        })
    }

    /// Empties the layer's counters for `key` (operator action): every shard of the layout the
    /// window is counted in, and for a sliding layer the previous window too.
    pub async fn reset(&self, limit: &RateLimit, key: &str) -> Result<(), LimiterError> {
        let now_ms = self.clock.now_ms();
        let limit = self.window_layout(limit, key, now_ms).await?;
        for shard in 0..limit.shards() {
            let counter = self.counter(&limit, key, shard, now_ms);
            self.store.reset(&counter).await?;
            // This process may have the key cached as full, or its previous window; forget them.
            self.blocked.remove(&counter.pk);
            self.previous.remove(&counter.previous_pk);
        }
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

/// Why one pass over a layer's shards must start over.
enum Recount {
    /// The window ending at this moment was sealed (or ended during the pass).
    Ended(UnixMillis),
    /// The window is counted in another layout (now in the layout cache).
    Layout,
    /// Full, or the store failed: the layer's answer.
    Refused(Refusal),
}

/// A random start, so that processes spread over shards differently; 0 without randomness.
fn random_u32() -> u32 {
    let mut bytes = [0; 4];
    getrandom::fill(&mut bytes).map_or(0, |()| u32::from_le_bytes(bytes))
}

/// Of two rejections, the one that reopens first: a request is admitted as soon as any shard
/// has room.
fn sooner(a: Option<Decision>, b: Decision) -> Decision {
    match a {
        Some(a) if a.reset_at_ms <= b.reset_at_ms => a,
        _ => b,
    }
}

/// Whether a failed refund may still have applied, for the log: `"no"` when DynamoDB's answer
/// proves it was not, `"unknown"` otherwise (lost, timed out, a 5xx).
fn refund_outcome<E: aws_sdk_dynamodb::error::ProvideErrorMetadata>(
    e: &SdkError<E, aws_smithy_runtime_api::http::Response>,
) -> &'static str {
    match crate::aws::failure(e) {
        crate::aws::Failure::Unknown => "unknown",
        _ => "no",
    }
}
