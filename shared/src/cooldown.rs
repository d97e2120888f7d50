//! Pauses after a failure, so a failing dependency is not asked again on every request.
//!
//! Lesson 003: collapsing concurrent calls into one is not enough while a provider is failing,
//! because requests keep arriving one after another. After a failure the key cools down: callers
//! are told to come back (`Retry-After`, rounded up, at least 1) and the dependency is left alone
//! until the pause ends. Entries are pruned on write once there are many of them, so the map
//! cannot grow without bound. The state is per process: each Lambda instance waits on its own.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::clock::{retry_after_secs, SharedClock, UnixMillis};

const PRUNE_THRESHOLD: usize = 1_000;

/// Cooldowns keyed by dependency (an SSM parameter name, an upstream host).
#[derive(Debug)]
pub struct Cooldown {
    clock: SharedClock,
    until_ms: Mutex<HashMap<String, UnixMillis>>,
}

impl Cooldown {
    /// No dependency cooling down yet; time read from `clock` so tests need not sleep.
    pub fn new(clock: SharedClock) -> Self {
        Self {
            clock,
            until_ms: Mutex::new(HashMap::new()),
        }
    }

    /// Starts (or extends) a pause for `key`; returns its length in whole seconds, rounded up.
    pub fn start(&self, key: &str, pause: Duration) -> u64 {
        let now = self.clock.now_ms();
        let until = now + pause.as_millis() as u64;
        let mut map = self.until_ms.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= PRUNE_THRESHOLD {
            map.retain(|_, u| *u > now);
        }
        let entry = map.entry(key.to_string()).or_insert(until);
        *entry = (*entry).max(until);
        retry_after_secs(now, *entry)
    }

    /// Seconds left in `key`'s pause (rounded up, at least 1), or `None` when it may be asked.
    pub fn remaining(&self, key: &str) -> Option<u64> {
        let now = self.clock.now_ms();
        let mut map = self.until_ms.lock().unwrap_or_else(|e| e.into_inner());
        match map.get(key) {
            Some(&until) if until > now => Some(retry_after_secs(now, until)),
            Some(_) => {
                map.remove(key);
                None
            }
            None => None,
        }
    }

    /// Ends `key`'s pause (after a success).
    pub fn clear(&self, key: &str) {
        self.until_ms
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::sync::Arc;

    #[test]
    fn pauses_then_reopens() {
        let clock = ManualClock::at(1_000_000);
        let cd = Cooldown::new(Arc::new(clock.clone()));
        assert_eq!(cd.remaining("ssm"), None);
        assert_eq!(cd.start("ssm", Duration::from_millis(4_500)), 5);
        clock.advance(Duration::from_millis(4_100));
        assert_eq!(cd.remaining("ssm"), Some(1));
        assert_eq!(cd.remaining("other"), None);
        clock.advance(Duration::from_millis(400));
        assert_eq!(cd.remaining("ssm"), None);
    }

    #[test]
    fn a_shorter_pause_never_cuts_a_longer_one() {
        let clock = ManualClock::at(0);
        let cd = Cooldown::new(Arc::new(clock.clone()));
        cd.start("api", Duration::from_secs(30));
        assert_eq!(cd.start("api", Duration::from_secs(5)), 30);
        cd.clear("api");
        assert_eq!(cd.remaining("api"), None);
    }

    #[test]
    fn ended_pauses_are_pruned() {
        let clock = ManualClock::at(0);
        let cd = Cooldown::new(Arc::new(clock.clone()));
        for i in 0..PRUNE_THRESHOLD {
            cd.start(&format!("k{i}"), Duration::from_secs(1));
        }
        clock.advance(Duration::from_secs(2));
        cd.start("fresh", Duration::from_secs(1));
        assert_eq!(cd.until_ms.lock().unwrap().len(), 1);
    }
}
