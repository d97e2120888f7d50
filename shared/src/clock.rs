//! Time as a dependency.
//!
//! Rate-limit windows, secret TTLs, cooldowns and kill-switch caching all depend on "now". They
//! read it through [`Clock`] so that a test can jump three hours ahead instead of sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub type UnixMillis = u64;

/// A source of wall-clock time.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> UnixMillis;
}

/// Shared handle to a clock.
pub type SharedClock = Arc<dyn Clock>;

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> UnixMillis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as UnixMillis)
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to. Cloning shares the same time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn at(now_ms: UnixMillis) -> Self {
        Self(Arc::new(AtomicU64::new(now_ms)))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }

    /// Sets the clock to an absolute time.
    pub fn set(&self, now_ms: UnixMillis) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> UnixMillis {
        self.0.load(Ordering::SeqCst)
    }
}

/// Whole seconds until `deadline_ms`, rounded up and never below 1: the value a `Retry-After`
/// header may carry. Rounding down would tell a client to retry at once (`Retry-After: 0`).
pub fn retry_after_secs(now_ms: UnixMillis, deadline_ms: UnixMillis) -> u64 {
    deadline_ms.saturating_sub(now_ms).div_ceil(1000).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_and_is_at_least_one() {
        assert_eq!(retry_after_secs(1_000, 1_400), 1);
        assert_eq!(retry_after_secs(1_000, 2_001), 2);
        assert_eq!(retry_after_secs(1_000, 3_000), 2);
        assert_eq!(retry_after_secs(5_000, 1_000), 1);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::at(10);
        let shared = clock.clone();
        clock.advance(Duration::from_secs(2));
        assert_eq!(shared.now_ms(), 2_010);
        clock.set(5);
        assert_eq!(shared.now_ms(), 5);
    }
}
