//! A bounded in-process map whose entries expire: the block cache, the replay cache and a
//! sliding layer's previous windows are each one, with their own values and lifetimes.
//!
//! An expired entry is never returned. The map never holds more than its capacity: at capacity
//! a new key first prunes the expired entries, then evicts the one expiring soonest (the one
//! least worth keeping). Capacity 0 keeps nothing.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::clock::UnixMillis;

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
                let soonest = entries.iter().min_by_key(|(_, (_, u))| *u);
                if let Some(k) = soonest.map(|(k, _)| k.clone()) {
                    entries.remove(&k);
                }
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
