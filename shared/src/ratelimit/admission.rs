//! What one request has consumed in the limits: plain data, always compiled (the response
//! fields of [`crate::http::finish`] read it), filled by the limiter (feature `ratelimit`).

use crate::clock::UnixMillis;

use super::decision::Decision;
#[cfg(feature = "ratelimit")]
use super::spec::Layer;

/// A counter one request incremented.
#[derive(Debug, Clone)]
// Without the limiter nothing is counted, so nothing makes or reads one.
#[cfg_attr(not(feature = "ratelimit"), allow(dead_code))]
pub(super) struct Held {
    pub(super) pk: String,
    /// The slot incremented, for a sliding layer.
    pub(super) slot: Option<usize>,
    /// The end of the counter's window: a refund after it is not sent.
    pub(super) window_end_ms: UnixMillis,
    pub(super) decision: Decision,
}

/// What one request has consumed so far, across calls to `RateLimiter::check`: the counters to
/// give back if the request is refused later, and the tightest decision for the response fields.
#[derive(Debug, Default)]
pub struct Admission {
    pub(super) counted: Vec<Held>,
    pub(super) tightest: Option<Decision>,
}

impl Admission {
    /// The decision with the fewest requests left, for the `RateLimit` response fields.
    pub fn tightest(&self) -> Option<&Decision> {
        self.tightest.as_ref()
    }

    /// How many counters this request has incremented.
    pub fn counted(&self) -> usize {
        self.counted.len()
    }

    /// Takes over what `other` counted, so one request's units (counted by several checks, in
    /// several layers of a service stack) can be given back together.
    pub fn absorb(&mut self, other: Admission) {
        for held in other.counted {
            self.note(held.decision);
            self.counted.push(held);
        }
        if let Some(d) = other.tightest {
            self.note(d);
        }
    }

    pub(super) fn note(&mut self, decision: Decision) {
        if self.tightest.is_none_or(|t| decision.is_tighter_than(&t)) {
            self.tightest = Some(decision);
        }
    }

    /// Moves the counters of `layer` into an admission of their own (to refund them), keeping
    /// the others; the tightest decision is then the tightest of those kept.
    #[cfg(feature = "ratelimit")]
    pub(super) fn split_off(&mut self, layer: Layer) -> Admission {
        let (taken, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.counted)
            .into_iter()
            .partition(|c| c.decision.limit.layer() == layer);
        self.tightest = None;
        for c in &kept {
            self.note(c.decision);
        }
        self.counted = kept;
        Admission {
            counted: taken,
            ..Admission::default()
        }
    }
}
