//! Keys known to be full, remembered until their window ends or for `max_age`, whichever is
//! sooner.
//!
//! A flood against a full key would otherwise cost one (failing) conditional write per request.
//! The cache is per process and bounded: it is pruned of ended entries whenever it is written,
//! and at capacity the entries that end soonest make room (an eighth at once: see
//! [`crate::expiring`]). `max_age` (a few seconds) bounds how
//! long an operator's `tollgate limits reset` takes to reach warm instances; meanwhile a flood
//! costs one write per key per `max_age` per instance.

use std::time::Duration;

use crate::clock::UnixMillis;
use crate::expiring::Expiring;

use super::decision::Decision;

/// A bounded map from counter key to the rejection that filled it.
#[derive(Debug)]
pub struct BlockCache {
    max_age_ms: u64,
    /// The rejection, until it is remembered no longer.
    entries: Expiring<Decision>,
}

impl BlockCache {
    /// A cache holding at most `capacity` keys (0 disables it), each for at most `max_age`.
    pub fn new(capacity: usize, max_age: Duration) -> Self {
        Self {
            max_age_ms: max_age.as_millis() as u64,
            entries: Expiring::new(capacity),
        }
    }

    /// The rejection for `key` if its window has not ended yet.
    pub fn get(&self, key: &str, now_ms: UnixMillis) -> Option<Decision> {
        let d = self.entries.get(key, now_ms)?;
        Some(Decision {
            now_ms,
            remaining: 0,
            ..d
        })
    }

    /// Remembers that `key` is full until `decision.reset_at_ms` (at most `max_age`).
    pub fn insert(&self, key: String, decision: Decision) {
        let now_ms = decision.now_ms;
        let until = decision.reset_at_ms.min(now_ms + self.max_age_ms);
        self.entries.insert(key, decision, until, now_ms);
    }

    /// Forgets `key` (after an operator reset, or a refund).
    pub fn remove(&self, key: &str) {
        self.entries.remove(key);
    }

    /// Number of keys held (ended windows included until the next prune).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejection(reset_at_ms: u64, now_ms: u64) -> Decision {
        Decision {
            limit: "ip=1/1m".parse().unwrap(),
            remaining: 0,
            reset_at_ms,
            now_ms,
        }
    }

    const LONG: Duration = Duration::from_secs(3600);

    #[test]
    fn forgets_a_key_after_max_age() {
        let cache = BlockCache::new(10, Duration::from_secs(5));
        cache.insert("a".into(), rejection(60_000, 1_000));
        assert!(cache.get("a", 5_999).is_some());
        assert!(
            cache.get("a", 6_000).is_none(),
            "max age reached before the window's end"
        );
    }

    #[test]
    fn forgets_a_key_when_its_window_ends() {
        let cache = BlockCache::new(10, LONG);
        cache.insert("a".into(), rejection(60_000, 1_000));
        assert!(cache.get("a", 59_999).is_some());
        assert!(cache.get("a", 60_000).is_none());
        assert!(cache.get("b", 1_000).is_none());
    }

    #[test]
    fn never_grows_past_its_capacity() {
        let cache = BlockCache::new(3, LONG);
        for i in 0..100u64 {
            cache.insert(format!("k{i}"), rejection(60_000 + i, 1_000));
            assert!(cache.len() <= 3);
        }
        // The newest keys survive; those reopening soonest made room.
        assert!(cache.get("k99", 1_000).is_some());
        assert!(cache.get("k0", 1_000).is_none());
    }

    #[test]
    fn ended_windows_are_pruned_first() {
        let cache = BlockCache::new(2, LONG);
        cache.insert("old".into(), rejection(2_000, 1_000));
        cache.insert("live".into(), rejection(90_000, 1_000));
        cache.insert("new".into(), rejection(95_000, 5_000));
        assert!(cache.get("live", 5_000).is_some());
        assert!(cache.get("new", 5_000).is_some());
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn capacity_zero_disables_it() {
        let cache = BlockCache::new(0, LONG);
        cache.insert("a".into(), rejection(60_000, 1_000));
        assert!(cache.get("a", 1_000).is_none());
    }
}
