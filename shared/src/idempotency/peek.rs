//! The replay a limit must not refuse: a retry whose first request got its answer (and lost it)
//! is answered with the stored response even when a layer it once passed has filled since, as
//! the contract promises ("without consuming quota").
//!
//! Only a refused request pays for this, and at most one eventually consistent `GetItem` (half a
//! read unit for a record under 4 KB) in one attempt:
//!
//! - a key whose completed record this process holds ([`super::ReplayCache`]) costs nothing;
//! - a key this process has just looked up and found without a record ([`AbsentKeys`]) costs
//!   nothing while the refusal it came with is remembered;
//! - any other key costs the one read. Its answer is the replay only for a completed, live
//!   record of the same body; anything else (no record, another body, a request still in
//!   progress, a read that failed) leaves the refusal as it was.
//!
//! An eventually consistent read is enough: the record of a request whose answer was lost was
//! completed before the client could even notice the loss (a timeout, a dropped connection),
//! well past the second or so a replica takes to catch up. Should the read still miss it, the
//! client gets the 429 it would have got anyway.

use crate::clock::UnixMillis;
use crate::expiring::Expiring;

use super::record::{Record, RecordState, Scope, StoredResponse};
use super::{IdempotencyError, IdempotencyStore};

/// Keys a refused request was looked up for and found without a live record, per process, so a
/// flood of the same fresh key against a full layer costs one read, not one per request.
///
/// An entry lives no longer than the caller says (the refusal's own lifetime in the block
/// cache): a key found absent may gain its record later (its first request admitted by another
/// process, or a replica that had not caught up), and the retry must then find it. Bounded: at
/// capacity the entries expiring soonest make room (see [`crate::expiring`]); capacity 0 keeps
/// nothing.
#[derive(Debug)]
pub struct AbsentKeys(Expiring<()>);

impl AbsentKeys {
    /// Remembers at most `capacity` keys (0: none, every refused request reads).
    pub fn new(capacity: usize) -> Self {
        Self(Expiring::new(capacity))
    }

    /// Whether `scope` was found absent and that is still remembered at `now_ms`.
    pub fn contains(&self, scope: &Scope, now_ms: UnixMillis) -> bool {
        self.0.get(scope.pk(), now_ms).is_some()
    }

    /// Remembers `scope` as absent until `until_ms`.
    pub fn insert(&self, scope: &Scope, until_ms: UnixMillis, now_ms: UnixMillis) {
        self.0.insert(scope.pk().to_string(), (), until_ms, now_ms);
    }

    /// Keys held (expired ones included until a prune).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl IdempotencyStore {
    /// For a request a rate limit refused: the stored response to replay if `scope` holds a
    /// completed, live record of `fingerprint`, else `None` (the refusal stands). Answered from
    /// the replay cache, or from `absent` (a key found without a record, remembered until
    /// `absent_until_ms`), or by one eventually consistent read in one attempt; a completed
    /// record read is kept in the replay cache, whatever its body.
    ///
    /// Never an error: a read that fails is logged, and the request keeps its refusal, which is
    /// what it would have got without this lookup.
    pub async fn replay_refused(
        &self,
        scope: &Scope,
        fingerprint: &str,
        absent: &AbsentKeys,
        absent_until_ms: UnixMillis,
    ) -> Option<StoredResponse> {
        if let Some(existing) = self.cached(scope, fingerprint) {
            return match existing {
                super::Existing::Replay(response) => Some(response),
                _ => None,
            };
        }
        let now = self.clock.now_ms();
        if absent.contains(scope, now) {
            return None;
        }
        let record = match self.peek(scope).await {
            Ok(record) => record,
            Err(e) => {
                tracing::warn!(error = %e, source = ?std::error::Error::source(&e), "could not look for the stored answer of a refused request; it stays refused");
                return None;
            }
        };
        let now = self.clock.now_ms();
        match record {
            Some(record) if record.is_live(now) => match record.state {
                RecordState::Completed(response) => {
                    self.remember(scope, &record.fingerprint, &response, record.expires_at);
                    (record.fingerprint == fingerprint).then_some(response)
                }
                // Its answer is still to come: nothing to replay yet, nothing to remember.
                RecordState::InProgress { .. } => None,
            },
            _ => {
                absent.insert(scope, absent_until_ms, now);
                None
            }
        }
    }

    /// The record under `scope` as an eventually consistent read in one attempt (no SDK retry:
    /// a refused request is worth one read at most), expired or not.
    async fn peek(&self, scope: &Scope) -> Result<Option<Record>, IdempotencyError> {
        let store_error =
            |source: Box<dyn std::error::Error + Send + Sync>| IdempotencyError::Store {
                operation: "peek",
                source,
            };
        let out = self
            .ddb
            .get_item()
            .table_name(&self.table)
            .set_key(Some(self.key(scope.pk())))
            .consistent_read(false)
            .customize()
            .config_override(crate::aws::dynamodb_one_attempt())
            .send()
            .await
            .map_err(|e| store_error(Box::new(e)))?;
        match out.item() {
            None => Ok(None),
            Some(item) => self
                .record(item)
                .map(Some)
                .ok_or_else(|| store_error("malformed idempotency record".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idempotency::IdempotencyKey;

    fn scope(key: &str) -> Scope {
        Scope::new(
            "192.0.2.1",
            "POST /tokens",
            &IdempotencyKey::parse(Some(key.as_bytes())).unwrap(),
        )
    }

    #[test]
    fn an_absent_key_is_remembered_until_its_refusal_ends_and_never_past_capacity() {
        let absent = AbsentKeys::new(2);
        absent.insert(&scope("k1"), 5_000, 1_000);
        assert!(absent.contains(&scope("k1"), 4_999));
        assert!(
            !absent.contains(&scope("k1"), 5_000),
            "gone with its refusal"
        );
        assert!(!absent.contains(&scope("k2"), 1_000));
        for i in 0..10 {
            absent.insert(&scope(&format!("k{i}")), 9_000 + i, 1_000);
            assert!(absent.len() <= 2);
        }
        let off = AbsentKeys::new(0);
        off.insert(&scope("k1"), 5_000, 1_000);
        assert!(off.is_empty());
    }
}
