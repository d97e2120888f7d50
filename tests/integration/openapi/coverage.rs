//! Every status the document lists is produced by a conformance test, or says why it cannot be.

use std::collections::BTreeSet;

use crate::openapi::conformance::EXERCISED;
use crate::openapi::spec::{spec, UNKNOWN_ROUTE};

/// (operation, status, why no in-process test can produce it). A status listed in
/// `openapi.yaml` must be produced by a conformance test in `main.rs` or appear here.
///
/// Empty: every documented status is produced in process. The hard ones and how they are made:
/// 409 on `POST /transfers` (DynamoDB Local serialises transactions) by a live claim on the key;
/// 500 by an event without a usable source address, or by OpenAI refusing the key twice;
/// 503 by tables that do not exist, or by OpenAI failing; 400/403 from the client-address
/// guard with `CLIENT_IP_SOURCE=cloudfront`.
pub const NOT_PRODUCIBLE: &[(&str, u16, &str)] = &[];

fn documented() -> BTreeSet<(String, u16)> {
    let spec = spec();
    let mut all: BTreeSet<(String, u16)> = spec
        .operations()
        .into_iter()
        .flat_map(|(op, pointer)| {
            spec.statuses(&pointer)
                .into_iter()
                .map(move |status| (op.clone(), status))
        })
        .collect();
    all.insert((UNKNOWN_ROUTE.to_string(), 404));
    all
}

#[test]
fn every_documented_status_is_exercised() {
    let documented = documented();
    let exercised: BTreeSet<(String, u16)> = EXERCISED
        .iter()
        .flat_map(|(_, pairs)| pairs.iter().map(|(op, s)| (op.to_string(), *s)))
        .collect();
    let allowed: BTreeSet<(String, u16)> = NOT_PRODUCIBLE
        .iter()
        .map(|(op, s, reason)| {
            assert!(!reason.trim().is_empty(), "{op} {s}: give the reason");
            (op.to_string(), *s)
        })
        .collect();

    let unchecked: Vec<_> = documented
        .difference(&exercised)
        .filter(|pair| !allowed.contains(*pair))
        .collect();
    assert!(
        unchecked.is_empty(),
        "documented in openapi.yaml but produced by no conformance test and not in NOT_PRODUCIBLE: {unchecked:?}"
    );
    let undocumented: Vec<_> = exercised.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "declared in main.rs but not documented: {undocumented:?}"
    );
    let stale: Vec<_> = allowed.intersection(&exercised).collect();
    assert!(
        stale.is_empty(),
        "in NOT_PRODUCIBLE but produced after all, remove them: {stale:?}"
    );
    let unknown: Vec<_> = allowed.difference(&documented).collect();
    assert!(
        unknown.is_empty(),
        "in NOT_PRODUCIBLE but not documented: {unknown:?}"
    );
}
