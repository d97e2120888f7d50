//! The arithmetic of a sliding window, apart from DynamoDB.
//!
//! A sliding layer counts, like a fixed one, in one item per epoch-aligned window, and each item
//! also counts per twentieth of its window (a *slot*: `s0` … `s19`). At a moment `t` the sliding
//! window is `[t - window, t]`: the whole current item, and the part of the previous item that is
//! still inside. Of the previous item, the slots from `t`'s own slot index on are still (at least
//! partly) inside, and each counts whole. So a request is admitted only while
//!
//! ```text
//! previous[slot(t)..].sum() + current.count < limit
//! ```
//!
//! which holds the layer to at most `limit` admissions in *any* span of one window length (the
//! last admission of a span sees every earlier one of that span counted), with no rounding
//! allowance. Counting a partly-inside slot whole costs throughput, not safety: under a
//! continuous flood a unit comes back at most one slot (5% of the window) later than an exact
//! sliding log would give it back, so the sustained rate is at least 20/21 of the limit.
//!
//! The previous window's slots never change once the current window has read them: the read is
//! a write that seals the item, and an increment still on its way to a sealed item is refused
//! and counted in the window after (the counter writes); refunds to an ended window are not
//! sent. So a process reads them once per key and window and keeps them ([`super::RateLimiter`]):
//! one write per key per window roll, and the bound above holds whatever the network's delays
//! or the processes' clocks do.

use crate::clock::UnixMillis;

/// Slots per window.
pub const SLOTS: usize = 20;

/// A window's counts per slot.
pub type Slots = [u32; SLOTS];

/// The slot of `now_ms` in the window `[start, start + len)`.
pub fn slot_at(start: UnixMillis, len: u64, now_ms: UnixMillis) -> usize {
    let offset = now_ms.saturating_sub(start).min(len - 1);
    (offset * SLOTS as u64 / len) as usize
}

/// The length of a slot: a window is a whole number of seconds, so this is a whole number of
/// milliseconds (at least 50).
pub fn slot_len(len: u64) -> u64 {
    len / SLOTS as u64
}

/// The previous window's requests still inside the sliding window at slot `slot` of the
/// current one.
pub fn still_inside(previous: &Slots, slot: usize) -> u32 {
    previous[slot.min(SLOTS)..].iter().sum()
}

/// Slots whose sum is `count`: an item counted without slots (written while the layer was
/// fixed, or emptied by an operator's reset) has its unplaced units put in the last slot, where
/// they stay inside the longest.
pub fn normalised(mut slots: Slots, count: u32) -> Slots {
    let placed: u32 = slots.iter().sum();
    slots[SLOTS - 1] += count.saturating_sub(placed);
    slots
}

/// When one more request would be admitted after a rejection at `now_ms`, assuming nothing else
/// arrives: the first slot boundary from which what is still inside is below `limit`. The
/// current window's requests are `current` (slots, summing to its count); from the next window
/// on they are the previous window's.
pub fn reopens_at(
    limit: u32,
    start: UnixMillis,
    len: u64,
    now_ms: UnixMillis,
    previous: &Slots,
    current: &Slots,
) -> UnixMillis {
    let step = slot_len(len);
    let count: u32 = current.iter().sum();
    let now_slot = slot_at(start, len, now_ms);
    if let Some(m) = (now_slot + 1..SLOTS).find(|&m| still_inside(previous, m) + count < limit) {
        return start + m as u64 * step;
    }
    // `m = SLOTS` always qualifies: nothing is inside any more.
    let m = (0..=SLOTS)
        .find(|&m| still_inside(current, m) < limit)
        .unwrap_or(SLOTS);
    start + len + m as u64 * step
}

/// When everything counted at `now_ms` has left the sliding window (the `RateLimit` field's
/// reset): the end of the last non-empty slot, one window later.
pub fn empties_at(
    start: UnixMillis,
    len: u64,
    now_ms: UnixMillis,
    previous: &Slots,
    current: &Slots,
) -> UnixMillis {
    let step = slot_len(len);
    let last = |slots: &Slots, from: usize| (from..SLOTS).rev().find(|&i| slots[i] > 0);
    match (
        last(current, 0),
        last(previous, slot_at(start, len, now_ms)),
    ) {
        (Some(i), _) => start + len + (i as u64 + 1) * step,
        (None, Some(i)) => start + (i as u64 + 1) * step,
        (None, None) => now_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEN: u64 = 60_000;

    fn slots(pairs: &[(usize, u32)]) -> Slots {
        let mut s = [0; SLOTS];
        for &(i, n) in pairs {
            s[i] = n;
        }
        s
    }

    #[test]
    fn slots_split_the_window_in_twentieths() {
        assert_eq!(slot_len(LEN), 3_000);
        assert_eq!(slot_at(0, LEN, 0), 0);
        assert_eq!(slot_at(0, LEN, 2_999), 0);
        assert_eq!(slot_at(0, LEN, 3_000), 1);
        assert_eq!(slot_at(0, LEN, 59_999), 19);
        assert_eq!(slot_len(1_000), 50);
    }

    #[test]
    fn previous_slots_leave_one_by_one() {
        let previous = slots(&[(0, 4), (10, 3), (19, 2)]);
        assert_eq!(still_inside(&previous, 0), 9);
        assert_eq!(still_inside(&previous, 1), 5);
        assert_eq!(still_inside(&previous, 11), 2);
        assert_eq!(still_inside(&previous, 19), 2);
        assert_eq!(still_inside(&previous, SLOTS), 0);
    }

    #[test]
    fn unplaced_units_go_to_the_last_slot() {
        assert_eq!(normalised(slots(&[(2, 1)]), 4), slots(&[(2, 1), (19, 3)]));
        assert_eq!(normalised(slots(&[(2, 1)]), 1), slots(&[(2, 1)]));
    }

    #[test]
    fn a_full_window_reopens_when_its_oldest_slot_leaves() {
        // Limit 10: the previous window's 10 arrived in slot 19 (its last three seconds); at
        // 1 s into the current window nothing fits until that slot has left, at its end.
        let previous = slots(&[(19, 10)]);
        let at = reopens_at(10, 0, LEN, 1_000, &previous, &[0; SLOTS]);
        assert_eq!(at, LEN);
        // 4 of the previous window in slot 3, 6 in slot 12: one unit back at slot 4.
        let previous = slots(&[(3, 4), (12, 6)]);
        assert_eq!(
            reopens_at(10, 0, LEN, 1_000, &previous, &[0; SLOTS]),
            12_000
        );
        // The current window alone is full: the next window, once its first slot has left.
        let current = slots(&[(0, 6), (5, 4)]);
        assert_eq!(
            reopens_at(10, 0, LEN, 20_000, &[0; SLOTS], &current),
            LEN + 3_000
        );
    }

    #[test]
    fn the_window_empties_when_its_newest_slot_leaves() {
        let current = slots(&[(2, 1), (7, 1)]);
        assert_eq!(
            empties_at(0, LEN, 25_000, &[0; SLOTS], &current),
            LEN + 24_000
        );
        let previous = slots(&[(5, 1), (9, 1)]);
        assert_eq!(empties_at(0, LEN, 3_500, &previous, &[0; SLOTS]), 30_000);
        assert_eq!(empties_at(0, LEN, 3_500, &[0; SLOTS], &[0; SLOTS]), 3_500);
    }
}
