//! A bounded in-process map whose entries expire: the block cache, the replay cache and a
//! sliding layer's previous windows are each one, with their own values and lifetimes.
//!
//! An expired entry is never returned. The map never holds more than its capacity: at capacity
//! a new key first prunes the expired entries, then, if none had expired, evicts the eighth of
//! the entries expiring soonest (the least worth keeping) at once. Capacity 0 keeps nothing.
//!
//! Why an eighth and not one: finding the soonest means looking at every entry, and a cache of
//! live entries stays full (the replay cache holds 10,000 by default, each for a day), so
//! evicting one at a time would walk all of them on every new key from then on; evicting an
//! eighth walks them once per eighth of the capacity inserted. An evicted entry only costs the
//! lookup it would have saved.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::clock::UnixMillis;

/// At capacity with nothing expired, one entry in this many goes (see the [module](self)).
const EVICT_SHARE: usize = 8;

/// Removes the `n` entries expiring soonest (exactly `n`, ties broken arbitrarily).
fn evict_soonest<V>(entries: &mut HashMap<String, (V, UnixMillis)>, n: usize) {
    let mut untils: Vec<UnixMillis> = entries.values().map(|(_, until)| *until).collect();
    if n == 0 || untils.is_empty() {
        return;
    }
    let n = n.min(untils.len());
    let threshold = *untils.select_nth_unstable(n - 1).1;
    let mut ties = n - untils.iter().filter(|u| **u < threshold).count();
    entries.retain(|_, (_, until)| match (*until).cmp(&threshold) {
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal if ties > 0 => {
            ties -= 1;
            false
        }
        _ => true,
    });
}

/// A bounded map from string keys to values that expire; see the [module](self) for what it
/// evicts at capacity.
#[derive(Debug)]
pub struct Expiring<V> {
    capacity: usize,
    entries: Mutex<HashMap<String, (V, UnixMillis)>>,
}

impl<V: Clone> Expiring<V> {
    /// An empty map holding at most `capacity` entries (0: keeps nothing, so a cache can be
    /// turned off by its size setting alone).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (V, UnixMillis)>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value under `key`, if it has not expired at `now_ms`.
    pub fn get(&self, key: &str, now_ms: UnixMillis) -> Option<V> {
        let entries = self.lock();
        let (value, until) = entries.get(key)?;
        (*until > now_ms).then(|| value.clone())
    }

    /// Keeps `value` under `key` until `until` (an entry already expired is not kept).
    pub fn insert(&self, key: String, value: V, until: UnixMillis, now_ms: UnixMillis) {
        if self.capacity == 0 || until <= now_ms {
            return;
        }
        let mut entries = self.lock();
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            entries.retain(|_, (_, u)| *u > now_ms);
            if entries.len() >= self.capacity {
                evict_soonest(&mut entries, (self.capacity / EVICT_SHARE).max(1));
            }
        }
        entries.insert(key, (value, until));
    }

    /// Forgets `key` before it expires: a refund reopened the key, or an operator reset it, and
    /// memory must not go on refusing what the table would admit.
    pub fn remove(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Entries held (expired ones included until a prune).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_capacity_the_eighth_expiring_soonest_goes_at_once() {
        let map = Expiring::new(16);
        for i in 0..16u64 {
            map.insert(format!("k{i}"), (), 1_000 + i, 0);
        }
        map.insert("new".into(), (), 5_000, 0);
        assert_eq!(map.len(), 15, "16 / 8 = 2 evicted, 1 added");
        assert!(map.get("k0", 0).is_none() && map.get("k1", 0).is_none());
        assert!((2..16).all(|i| map.get(&format!("k{i}"), 0).is_some()));
        assert!(map.get("new", 0).is_some());
        // The room made lasts: the next key evicts nothing.
        map.insert("next".into(), (), 5_000, 0);
        assert_eq!(map.len(), 16);
        assert!(map.get("k2", 0).is_some());
    }

    #[test]
    fn ties_at_the_threshold_evict_exactly_the_share() {
        let map = Expiring::new(16);
        for i in 0..16u64 {
            map.insert(format!("k{i}"), (), 1_000, 0);
        }
        map.insert("new".into(), (), 1_000, 0);
        assert_eq!(map.len(), 15);
    }

    #[test]
    fn expired_entries_make_room_before_any_live_one_goes() {
        let map = Expiring::new(16);
        for i in 0..16u64 {
            map.insert(format!("k{i}"), (), if i == 7 { 10 } else { 1_000 }, 0);
        }
        map.insert("new".into(), (), 1_000, 20);
        assert_eq!(map.len(), 16);
        assert!(map.get("k7", 0).is_none());
        assert!(map.get("k0", 20).is_some());
    }
}
