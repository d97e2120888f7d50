//! Read and write units per request: what DynamoDB Local reported (the meter's
//! `ConsumedCapacity` sums, `tollgate_tests::capacity`), and what AWS would bill for the same
//! requests, computed by the rules below where DynamoDB Local reports nothing or not what AWS
//! bills. Both sides of part 1 and every figure of part 2 go through [`figures`], so the rules
//! are applied once, the same way to all.
//!
//! The rules (each from the AWS documentation named; the report marks their results as
//! computed):
//!
//! 1. An answer with `ConsumedCapacity` of a single-item operation (`GetItem`, `PutItem`,
//!    `UpdateItem`, `DeleteItem`) is billed as reported: DynamoDB Local rounds item sizes as AWS
//!    does (1 KB per write unit, 4 KB per strongly consistent read unit).
//! 2. A failed conditional write (`ConditionalCheckFailedException`, answered without
//!    `ConsumedCapacity`) is billed as a write of the item: "If a ConditionExpression evaluates
//!    to false during a conditional write, DynamoDB still consumes write capacity from the
//!    table", by the item's size (Developer Guide, "Working with items and attributes",
//!    capacity units consumed by conditional writes). The size is taken from this run: the
//!    mean units of the same operation's successful answers in the reference phase (the same
//!    items, written successfully), or 1 unit if there were none.
//! 3. A `TransactWriteItems`, committed or cancelled, is billed at 2 units per action of up to
//!    1 KB, sized from the request (the meter's `transact_units`): "DynamoDB performs two
//!    underlying reads or writes of every item in the transaction: one to prepare the
//!    transaction and one to commit the transaction" (Developer Guide, "Amazon DynamoDB
//!    Transactions: How it works", capacity management for transactions). For a cancelled one,
//!    the archived copy of that guide read for this bench says nothing; the current page is
//!    quoted elsewhere as saying the capacity is consumed even when the transaction is
//!    cancelled. The bench bills the whole transaction either way, the conservative reading
//!    (it can only make the side that sends cancelled transactions look dearer). DynamoDB
//!    Local's own figure for a transaction is reported beside it but not billed: it is 2 units
//!    per table touched, whatever the items (the probe in part 1 shows it).
//!
//! Any other answer without `ConsumedCapacity` is listed and not billed.

use std::collections::BTreeMap;

use serde::Serialize;
use tollgate_tests::capacity::OpCapacity;

/// Write units per transactional write of an item of up to 1 KB (rule 3).
pub const TRANSACTION_FACTOR: f64 = 2.0;

/// Read and write units, per request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Units {
    pub read: f64,
    pub write: f64,
}

impl Units {
    pub fn total(&self) -> f64 {
        self.read + self.write
    }

    pub fn scaled(self, by: f64) -> Units {
        Units {
            read: self.read * by,
            write: self.write * by,
        }
    }

    pub fn plus(self, other: Units) -> Units {
        Units {
            read: self.read + other.read,
            write: self.write + other.write,
        }
    }
}

/// One phase's capacity, per request.
#[derive(Debug, Clone, Serialize)]
pub struct CapacityFigures {
    /// As DynamoDB Local reported it.
    pub measured: Units,
    /// Answers without `ConsumedCapacity`, per request: `(operation, error code, per request)`.
    pub unmeasured: Vec<(String, String, f64)>,
    /// As AWS would bill the same requests (rules 1 to 3).
    pub billed: Units,
    /// Whether `billed` needed rule 2 or 3 (the report marks it computed).
    pub computed: bool,
    /// DynamoDB Local's own figure for the transactions, per request (not billed: rule 3).
    pub local_transaction_units: f64,
}

/// `ops` (one phase, `calls` requests) per request, billed by the rules; `reference` is a phase
/// with the same items written successfully (rule 2).
pub fn figures(
    ops: &BTreeMap<String, OpCapacity>,
    reference: &BTreeMap<String, OpCapacity>,
    calls: usize,
) -> CapacityFigures {
    let per = |x: f64| x / calls.max(1) as f64;
    let (mut measured, mut billed) = (Units::default(), Units::default());
    let mut unmeasured = Vec::new();
    let mut computed = false;
    let mut local_transaction_units = 0.0;
    for (op, c) in ops {
        measured.read += c.read_units;
        measured.write += c.write_units;
        for (code, &count) in &c.unmeasured {
            unmeasured.push((op.clone(), code.clone(), per(count as f64)));
        }
        if op == "TransactWriteItems" {
            billed.write += TRANSACTION_FACTOR * c.transact_units;
            local_transaction_units += c.write_units;
            computed = true;
            continue;
        }
        billed.read += c.read_units;
        billed.write += c.write_units;
        let failed = c
            .unmeasured
            .get("ConditionalCheckFailedException")
            .copied()
            .unwrap_or(0);
        if failed > 0 && ["PutItem", "UpdateItem", "DeleteItem"].contains(&op.as_str()) {
            let unit = reference
                .get(op)
                .filter(|r| r.measured > 0)
                .map_or(1.0, |r| r.write_units / r.measured as f64);
            billed.write += failed as f64 * unit;
            computed = true;
        }
    }
    CapacityFigures {
        measured: measured.scaled(1.0 / calls.max(1) as f64),
        unmeasured,
        billed: billed.scaled(1.0 / calls.max(1) as f64),
        computed,
        local_transaction_units: per(local_transaction_units),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(measured: usize, write: f64, failed: usize) -> OpCapacity {
        let mut c = OpCapacity {
            measured,
            write_units: write,
            ..OpCapacity::default()
        };
        if failed > 0 {
            c.unmeasured
                .insert("ConditionalCheckFailedException".into(), failed);
        }
        c
    }

    #[test]
    fn a_failed_conditional_write_is_billed_as_the_successful_one() {
        let reference = BTreeMap::from([("PutItem".to_string(), op(10, 20.0, 0))]);
        let dup = BTreeMap::from([("PutItem".to_string(), op(0, 0.0, 10))]);
        let f = figures(&dup, &reference, 10);
        assert_eq!(f.measured, Units::default());
        assert_eq!(
            f.billed,
            Units {
                read: 0.0,
                write: 2.0
            }
        );
        assert!(f.computed);
        assert_eq!(f.unmeasured[0].2, 1.0);
        // No reference: one unit each.
        let f = figures(&dup, &BTreeMap::new(), 10);
        assert_eq!(f.billed.write, 1.0);
    }

    #[test]
    fn transactions_are_billed_per_item_from_the_request() {
        let mut twi = op(2, 12.0, 0);
        twi.unmeasured
            .insert("TransactionCanceledException".into(), 2);
        twi.transact_items = 16;
        twi.transact_units = 16.0;
        let get = OpCapacity {
            measured: 4,
            read_units: 4.0,
            ..OpCapacity::default()
        };
        let ops = BTreeMap::from([
            ("TransactWriteItems".to_string(), twi),
            ("GetItem".to_string(), get),
        ]);
        let f = figures(&ops, &BTreeMap::new(), 4);
        assert_eq!(
            f.billed,
            Units {
                read: 1.0,
                write: 8.0
            }
        );
        assert_eq!(f.local_transaction_units, 3.0);
        assert_eq!(
            f.measured,
            Units {
                read: 1.0,
                write: 3.0
            }
        );
    }
}
