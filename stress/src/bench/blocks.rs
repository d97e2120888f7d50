//! Two sides measured in alternating blocks on the one DynamoDB Local, so that neither is
//! measured on a server the other has warmed (or cooled) for it.
//!
//! DynamoDB Local is a JVM: it compiles as it goes, its heap and caches change with the traffic,
//! and the machine's other builders come and go. Run one side's whole phase before the other's
//! and the second side meets a different server: a figure of the order, not of the sides (the
//! issue this bench answers saw a new transfer at 1.04× in one mode and 0.34× in the next doing
//! the same work). So each phase is cut into [`BLOCKS`] blocks per side, run as pairs of one
//! block of each side, of the same size, back to back, in the order A B, B A, A B, B A, ...
//! ([`schedule`]): each side runs first in half the pairs, and the two blocks of a pair meet the
//! same server within milliseconds of each other. The medians are then reported twice more, over
//! the pairs where A ran first and over those where B did ([`ByOrder`]): if the order still
//! mattered, those two ratios would disagree.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tollgate_tests::capacity::{self as capacity, OpCapacity};

use super::capacity::{figures, CapacityFigures};
use super::stats::{quantile, Quantiles};

/// Blocks per side and phase: an even number, so each side runs first in as many pairs as the
/// other (fewer when a phase has fewer requests than this).
pub const BLOCKS: usize = 8;

/// One of the two sides of a comparison (A: Tollgate, or the guarded path; B: the other).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    A,
    B,
}

/// One block to run: `len` requests of side `side`, the `index`-th block of that side; side A's
/// and side B's blocks of the same index form a pair and run back to back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    pub index: usize,
    pub side: Which,
    pub len: usize,
}

impl Block {
    /// Whether side A ran first in this block's pair (the even pairs).
    pub fn a_first(&self) -> bool {
        self.index.is_multiple_of(2)
    }
}

/// The blocks of a phase of `n` requests per side, in the order they run: `blocks.min(n)` pairs,
/// sizes differing by at most one and summing to `n` per side, A first in even pairs and B
/// first in odd ones.
pub fn schedule(n: usize, blocks: usize) -> Vec<Block> {
    let count = blocks.min(n);
    let mut out = Vec::with_capacity(2 * count);
    for index in 0..count {
        let len = n / count + usize::from(index < n % count);
        let (first, second) = if index % 2 == 0 {
            (Which::A, Which::B)
        } else {
            (Which::B, Which::A)
        };
        for side in [first, second] {
            out.push(Block { index, side, len });
        }
    }
    out
}

/// Latencies of one phase (or block), the DynamoDB requests it sent and the capacity DynamoDB
/// reported, per operation. Both sides of part 1 produce it (the Python side as JSON), so they
/// are summarised by the same code ([`Phase::figures`]).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Phase {
    pub lat_ms: Vec<f64>,
    pub requests: BTreeMap<String, usize>,
    #[serde(default)]
    pub capacity: BTreeMap<String, OpCapacity>,
    /// The phase's wall-clock time (for blocks merged, the sum of theirs: the time the side
    /// was running, without the other side's blocks in between).
    pub wall_s: f64,
    /// Each call's time on the wire (`tollgate_tests::counting::WireClock`), in the order of
    /// `lat_ms`, where a part measures it (the floor); empty elsewhere.
    #[serde(default)]
    pub wire_ms: Vec<f64>,
}

/// What the report shows of a phase.
#[derive(Debug, Serialize)]
pub struct PhaseFigures {
    pub calls: usize,
    pub requests_per_call: f64,
    /// `(operation, requests)`, by name.
    pub operations: Vec<(String, usize)>,
    pub latency: Quantiles,
    /// Calls over the phase's wall-clock time.
    pub throughput: f64,
    pub capacity: CapacityFigures,
}

impl Phase {
    /// `reference`: a phase that wrote the same items successfully (capacity rule 2).
    pub fn figures(&self, reference: &Phase) -> PhaseFigures {
        let calls = self.lat_ms.len();
        PhaseFigures {
            calls,
            requests_per_call: self.requests.values().sum::<usize>() as f64 / calls.max(1) as f64,
            operations: self.requests.clone().into_iter().collect(),
            latency: Quantiles::of(&self.lat_ms),
            throughput: calls as f64 / self.wall_s,
            capacity: figures(&self.capacity, &reference.capacity, calls),
        }
    }

    /// Adds `other`'s latencies, requests, capacity and time to this phase's.
    pub fn merge(&mut self, other: &Phase) {
        self.lat_ms.extend_from_slice(&other.lat_ms);
        self.wire_ms.extend_from_slice(&other.wire_ms);
        for (op, count) in &other.requests {
            *self.requests.entry(op.clone()).or_default() += count;
        }
        capacity::merge(&mut self.capacity, &other.capacity);
        self.wall_s += other.wall_s;
    }
}

/// The blocks of one phase as they ran, with what each measured.
#[derive(Debug, Default)]
pub struct Blocks {
    done: Vec<(Block, Phase)>,
}

impl Blocks {
    pub fn push(&mut self, block: Block, phase: Phase) {
        self.done.push((block, phase));
    }

    /// Side `side`'s blocks merged: all of them (`order` `None`), or only those of the pairs
    /// where A ran first (`Some(true)`) or B did (`Some(false)`).
    fn merged(&self, side: Which, order: Option<bool>) -> Phase {
        let mut out = Phase::default();
        for (block, phase) in &self.done {
            if block.side == side && order.is_none_or(|a_first| block.a_first() == a_first) {
                out.merge(phase);
            }
        }
        out
    }

    /// Everything side `side` measured in this phase.
    pub fn side(&self, side: Which) -> Phase {
        self.merged(side, None)
    }

    /// Both sides' medians over the pairs of each order.
    pub fn by_order(&self) -> ByOrder {
        let order = |a_first: bool| {
            let a = self.merged(Which::A, Some(a_first));
            let b = self.merged(Which::B, Some(a_first));
            let median = |p: &Phase| quantile(&p.lat_ms, 0.5);
            Order {
                pairs: self
                    .done
                    .iter()
                    .filter(|(block, _)| block.side == Which::A && block.a_first() == a_first)
                    .count(),
                requests: a.lat_ms.len(),
                a_median: median(&a),
                b_median: median(&b),
                ratio: median(&a) / median(&b),
            }
        };
        ByOrder {
            a_first: order(true),
            b_first: order(false),
        }
    }
}

/// The medians of a phase split by which side ran first in a pair.
#[derive(Debug, Serialize)]
pub struct ByOrder {
    pub a_first: Order,
    pub b_first: Order,
}

/// Both sides' medians over the pairs of one order.
#[derive(Debug, Serialize)]
pub struct Order {
    /// Pairs of this order, and the requests per side in them.
    pub pairs: usize,
    pub requests: usize,
    pub a_median: f64,
    pub b_median: f64,
    /// A's median over B's.
    pub ratio: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_alternate_which_side_runs_first_and_split_n_evenly() {
        let s = schedule(10, 4);
        let sides: Vec<Which> = s.iter().map(|b| b.side).collect();
        use Which::{A, B};
        assert_eq!(sides, [A, B, B, A, A, B, B, A]);
        for side in [A, B] {
            let lens: Vec<usize> = s.iter().filter(|b| b.side == side).map(|b| b.len).collect();
            assert_eq!(lens, [3, 3, 2, 2]);
        }
        // Both blocks of a pair are adjacent, the same size and the same index.
        for pair in s.chunks(2) {
            assert_eq!(pair[0].index, pair[1].index);
            assert_eq!(pair[0].len, pair[1].len);
            assert_ne!(pair[0].side, pair[1].side);
            assert_eq!(pair[0].side == A, pair[0].a_first());
        }
    }

    #[test]
    fn fewer_requests_than_blocks_gives_one_request_per_block() {
        let s = schedule(3, BLOCKS);
        assert_eq!(s.len(), 6);
        assert!(s.iter().all(|b| b.len == 1));
        assert!(schedule(0, BLOCKS).is_empty());
    }

    fn phase(lat: &[f64], op: &str) -> Phase {
        let mut capacity = BTreeMap::new();
        capacity.insert(
            op.to_string(),
            OpCapacity {
                measured: lat.len(),
                write_units: lat.len() as f64,
                ..OpCapacity::default()
            },
        );
        Phase {
            lat_ms: lat.to_vec(),
            requests: BTreeMap::from([(op.to_string(), lat.len())]),
            capacity,
            wall_s: 1.0,
            wire_ms: Vec::new(),
        }
    }

    #[test]
    fn medians_by_order_use_only_that_orders_pairs() {
        let mut blocks = Blocks::default();
        for block in schedule(4, 2) {
            // A is 1 ms when it runs first and 3 ms when second; B is always 2 ms.
            let lat = match (block.side, block.a_first()) {
                (Which::A, true) => [1.0, 1.0],
                (Which::A, false) => [3.0, 3.0],
                (Which::B, _) => [2.0, 2.0],
            };
            blocks.push(block, phase(&lat, "TransactWriteItems"));
        }
        let o = blocks.by_order();
        assert_eq!((o.a_first.a_median, o.a_first.b_median), (1.0, 2.0));
        assert_eq!((o.b_first.a_median, o.b_first.b_median), (3.0, 2.0));
        assert_eq!((o.a_first.pairs, o.a_first.requests), (1, 2));
        assert_eq!(o.b_first.ratio, 1.5);
        // The whole side: every block merged, requests and capacity summed, times added.
        let a = blocks.side(Which::A);
        assert_eq!(a.lat_ms.len(), 4);
        assert_eq!(a.requests["TransactWriteItems"], 4);
        assert_eq!(a.capacity["TransactWriteItems"].write_units, 4.0);
        assert_eq!(a.wall_s, 2.0);
    }
}
