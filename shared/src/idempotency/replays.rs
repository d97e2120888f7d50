//! Completed responses kept per process, so a duplicate is answered with no DynamoDB request.
//!
//! A completed record never changes until it expires (nothing overwrites or deletes one: a key
//! is claimable again only once expired), so a copy of it answers a duplicate exactly as the
//! store would: the same bytes to the same body, 422 to another body. The copy is keyed by the
//! record's scope (caller, route, key), carries the record's fingerprint and expiry, and an
//! expired copy is never used. In-progress records are not kept: their answer changes. What is
//! not here, the store answers.

use crate::clock::UnixMillis;
use crate::expiring::Expiring;

use super::record::{Existing, Scope, StoredResponse};

/// The default number of responses kept (`IDEMPOTENCY_CACHE_SIZE`).
pub const DEFAULT_REPLAY_CACHE_SIZE: usize = 10_000;

/// A bounded map from scope to completed record (its fingerprint and response) until the
/// record's expiry; capacity 0 keeps nothing.
#[derive(Debug)]
pub struct ReplayCache(Expiring<(String, StoredResponse)>);

impl ReplayCache {
    /// Keeps at most `capacity` responses (0: none, every duplicate reads the table).
    pub fn new(capacity: usize) -> Self {
        Self(Expiring::new(capacity))
    }

    /// What a request with `fingerprint` finds under `scope`, if a live completed record is kept.
    pub fn get(&self, scope: &Scope, fingerprint: &str, now_ms: UnixMillis) -> Option<Existing> {
        let (kept, response) = self.0.get(scope.pk(), now_ms)?;
        Some(match kept == fingerprint {
            true => Existing::Replay(response),
            false => Existing::KeyReused,
        })
    }

    /// Keeps a completed record (the scope's `pk`; `expires_at` in seconds, as stored) until it
    /// expires. At capacity, expired copies go first, then those expiring soonest (an eighth of
    /// the capacity at once: see [`crate::expiring`]).
    pub fn insert(
        &self,
        pk: &str,
        fingerprint: &str,
        response: &StoredResponse,
        expires_at: u64,
        now_ms: UnixMillis,
    ) {
        let value = (fingerprint.to_string(), response.clone());
        let until = expires_at.saturating_mul(1000);
        self.0.insert(pk.to_string(), value, until, now_ms);
    }

    /// Responses held (expired ones included until a prune).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no response is held.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idempotency::IdempotencyKey;

    fn scope(key: &str) -> Scope {
        Scope::new(
            "client",
            "POST /orders",
            &IdempotencyKey::parse(Some(key.as_bytes())).unwrap(),
        )
    }

    fn response() -> StoredResponse {
        StoredResponse {
            status: 201,
            headers: vec![("content-type".into(), "application/json".into())],
            body: b"{}".to_vec(),
        }
    }

    #[test]
    fn a_kept_record_answers_like_the_store_until_it_expires() {
        let cache = ReplayCache::new(10);
        cache.insert(scope("k1").pk(), "fp", &response(), 100, 50_000);
        assert_eq!(
            cache.get(&scope("k1"), "fp", 99_999),
            Some(Existing::Replay(response()))
        );
        assert_eq!(
            cache.get(&scope("k1"), "other", 99_999),
            Some(Existing::KeyReused)
        );
        assert_eq!(
            cache.get(&scope("k1"), "fp", 100_000),
            None,
            "expired at its expiry"
        );
        assert_eq!(cache.get(&scope("k2"), "fp", 50_000), None, "another scope");
    }

    #[test]
    fn it_never_grows_past_its_capacity_and_zero_keeps_nothing() {
        let cache = ReplayCache::new(3);
        for i in 0..50u64 {
            cache.insert(
                scope(&format!("k{i}")).pk(),
                "fp",
                &response(),
                1_000 + i,
                0,
            );
            assert!(cache.len() <= 3);
        }
        assert!(cache.get(&scope("k49"), "fp", 0).is_some());
        assert!(cache.get(&scope("k0"), "fp", 0).is_none());
        let off = ReplayCache::new(0);
        off.insert(scope("k").pk(), "fp", &response(), 1_000, 0);
        assert!(off.is_empty());
    }
}
