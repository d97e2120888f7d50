//! Reconciliation: the log against DynamoDB, read directly (not through the functions).

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use tollgate::idempotency::{IdempotencyKey, Record, RecordState, Scope};

use super::plan::Kind;
use super::run::{LogicalLog, Outcome};

type Item = HashMap<String, AttributeValue>;

fn s<'a>(item: &'a Item, key: &str) -> Option<&'a str> {
    item.get(key)?.as_s().ok().map(String::as_str)
}

fn n(item: &Item, key: &str) -> Option<i128> {
    item.get(key)?.as_n().ok()?.parse().ok()
}

/// One check and what broke it (the report shows the first 20 violations).
#[derive(serde::Serialize)]
pub struct Check {
    pub name: &'static str,
    pub checked: usize,
    pub violations: Vec<String>,
}

impl Check {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            checked: 0,
            violations: Vec::new(),
        }
    }

    fn fail(&mut self, what: String) {
        self.violations.push(what);
    }
}

/// A transfer record as stored.
#[derive(Debug, Clone)]
struct TransferRecord {
    id: String,
    from: String,
    to: String,
    amount: i128,
    memo: Option<String>,
    scope: String,
}

pub struct Inputs<'a> {
    pub logs: &'a [LogicalLog],
    pub client_ids: &'a [String],
    pub accounts: &'a [(String, u64)],
    pub transfers: Vec<Item>,
    pub account_items: Vec<Item>,
    pub idempotency: Vec<Item>,
    /// Processes killed during the day: each may have answered one invocation 502.
    pub kills: usize,
    /// The `client` layer: its limit and window (ms).
    pub client_limit: (u32, u64),
}

/// What the reconciliation found; the report shows it as it is.
#[derive(serde::Serialize)]
pub struct Findings {
    pub checks: Vec<Check>,
    pub unknown: usize,
    pub unknown_committed: usize,
    pub acknowledged: usize,
    pub records: usize,
    pub total_initial: u64,
    pub total_final: i128,
}

const STORED: [u16; 4] = [201, 402, 403, 404];

fn expected_code(status: u16) -> Option<&'static str> {
    Some(match status {
        400 => "invalid_request",
        401 => "unauthorized",
        402 => "insufficient_funds",
        403 => "forbidden",
        404 => "account_not_found",
        409 => "request_in_progress",
        422 => "idempotency_key_reused",
        429 => "rate_limited",
        503 => "temporarily_unavailable",
        _ => return None,
    })
}

fn show(log: &LogicalLog) -> String {
    format!(
        "#{} {} (key {:?})",
        log.logical.index,
        log.logical.kind.label(),
        log.logical.key
    )
}

pub fn reconcile(inp: Inputs<'_>) -> Findings {
    let mut statuses =
        Check::new("422/409/402 (and every status) exactly where the log calls for them");
    let mut replays = Check::new("every replay byte-identical to the first answer");
    let mut doubles = Check::new("double transfers: 0");
    let mut orphans = Check::new("no transfer record without a logical request");
    let mut acked = Check::new("every acknowledged (201) transfer present exactly once, as sent");
    let mut refused = Check::new("refused requests moved nothing; unknown ones at most once");
    let mut stored =
        Check::new("stored responses are the ones clients were given; 400/401 store nothing");
    let mut ledger = Check::new("balances = opening + the log's transfers (independent ledger)");
    let mut conserved = Check::new("total money conserved");
    let mut negative = Check::new("no negative balance");
    let mut lost_full = Check::new(
        "a lost answer after the layer filled: 429 while full, then the first 201 replayed byte for byte",
    );
    let mut in_flight =
        Check::new("no 503 said nothing committed for a transaction that committed");
    let mut sliding =
        Check::new("no span of one window holds more admissions than the client layer's limit");

    // Scope pk per logical request (bad-token requests have none: no client was verified).
    let mut pk_of: HashMap<usize, String> = HashMap::new();
    let mut bad_gateways = 0;
    for (i, log) in inp.logs.iter().enumerate() {
        let l = &log.logical;
        if matches!(l.kind, Kind::BadToken(_)) {
            continue;
        }
        if let Some(key) = l.key.as_deref() {
            if let Ok(key) = IdempotencyKey::parse(Some(key.as_bytes())) {
                pk_of.insert(
                    i,
                    Scope::new(&inp.client_ids[l.client], "POST /transfers", &key)
                        .pk()
                        .to_string(),
                );
            }
        }
    }
    let ours: HashMap<&str, usize> = pk_of.iter().map(|(i, pk)| (pk.as_str(), *i)).collect();

    // Transfer records by scope.
    let mut by_scope: BTreeMap<String, Vec<TransferRecord>> = BTreeMap::new();
    for item in &inp.transfers {
        let r = TransferRecord {
            id: s(item, "pk").unwrap_or_default().into(),
            from: s(item, "from").unwrap_or_default().into(),
            to: s(item, "to").unwrap_or_default().into(),
            amount: n(item, "amount").unwrap_or(-1),
            memo: s(item, "memo").map(str::to_string),
            scope: s(item, "idempotency_pk").unwrap_or_default().into(),
        };
        orphans.checked += 1;
        if !ours.contains_key(r.scope.as_str()) {
            orphans.fail(format!(
                "record {} ({} -> {}, {}) has scope {:?}, which no logical request of the log has",
                r.id, r.from, r.to, r.amount, r.scope
            ));
        }
        by_scope.entry(r.scope.clone()).or_default().push(r);
    }
    for (scope, records) in &by_scope {
        doubles.checked += 1;
        if records.len() > 1 {
            let ids: Vec<&str> = records.iter().map(|r| r.id.as_str()).collect();
            doubles.fail(format!(
                "DOUBLE TRANSFER: scope {scope:?} has {} records: {ids:?}",
                records.len()
            ));
        }
    }
    let idem: HashMap<&str, &Item> = inp
        .idempotency
        .iter()
        .filter_map(|i| Some((s(i, "pk")?, i)))
        .collect();

    let opening: HashMap<&str, u64> = inp.accounts.iter().map(|(a, b)| (a.as_str(), *b)).collect();
    let mut expected: HashMap<&str, i128> = opening.iter().map(|(a, b)| (*a, *b as i128)).collect();
    let mut apply = |from: &str, to: &str, amount: i128| {
        if let Some(b) = expected.get_mut(from) {
            *b -= amount;
        }
        if let Some(b) = expected.get_mut(to) {
            *b += amount;
        }
    };
    let (mut unknown, mut unknown_committed, mut acknowledged) = (0, 0, 0);

    for (i, log) in inp.logs.iter().enumerate() {
        let l = &log.logical;
        let records = pk_of
            .get(&i)
            .and_then(|pk| by_scope.get(pk))
            .cloned()
            .unwrap_or_default();
        // --- statuses
        for e in &log.exchanges {
            let Outcome::Answer {
                status,
                code,
                replayed,
                ..
            } = &e.outcome
            else {
                continue;
            };
            statuses.checked += 1;
            let status = *status;
            let ok = match status {
                503 => true,
                // Wait `Retry-After`: documented for every request, and what a full layer answers
                // the sequences' clients (a retry too: the function limits before the replay).
                429 => true,
                // The process holding it was killed (Lambda's answer); counted below.
                502 => {
                    bad_gateways += 1;
                    true
                }
                409 => e.concurrent || e.after_unanswered,
                422 if e.body == 1 => match log.settled[0] {
                    Some(s) => STORED.contains(&s),
                    None => true,
                },
                201 if e.body == 1 => log.settled[0].is_none(),
                s if e.body == 0 => s == l.kind.expected(),
                _ => false,
            };
            let code_ok = expected_code(status).is_none_or(|c| code.as_deref() == Some(c))
                || (status == 201 && code.is_none());
            if !ok || !code_ok {
                statuses.fail(format!(
                    "{}: body {} got {status} {code:?} (log calls for {}{})",
                    show(log),
                    e.body,
                    if e.body == 0 { l.kind.expected() } else { 422 },
                    if e.concurrent {
                        ", sent concurrently"
                    } else {
                        ""
                    }
                ));
            }
            if *replayed && !STORED.contains(&status) {
                replays.fail(format!(
                    "{}: a {status} marked Idempotent-Replayed",
                    show(log)
                ));
            }
        }
        // --- replays
        for b in 0..l.bodies.len() {
            let answers: Vec<_> = log
                .exchanges
                .iter()
                .filter(|e| e.body == b)
                .filter_map(|e| e.outcome.answer())
                .filter(|a| STORED.contains(&a.0))
                .collect();
            if answers.len() > 1 {
                replays.checked += answers.len() - 1;
                let first = &answers[0];
                for a in &answers[1..] {
                    if (a.0, a.2, a.3) != (first.0, first.2, first.3) {
                        replays.fail(format!(
                            "{}: body {b}: {} {} differs from the first {} {}",
                            show(log),
                            a.0,
                            String::from_utf8_lossy(a.3),
                            first.0,
                            String::from_utf8_lossy(first.3)
                        ));
                    }
                }
                let originals = answers.iter().filter(|a| !a.1).count();
                if originals > 1 {
                    replays.fail(format!(
                        "{}: body {b}: {originals} answers without Idempotent-Replayed: true",
                        show(log)
                    ));
                }
            }
        }
        // --- money
        let acked_body = (0..l.bodies.len()).find(|b| {
            log.exchanges
                .iter()
                .any(|e| e.body == *b && e.outcome.status() == Some(201))
        });
        let is_unknown = log.settled.iter().any(Option::is_none);
        if let Some(b) = acked_body {
            acknowledged += 1;
            acked.checked += 1;
            let body = &l.bodies[b];
            let first_201 = log
                .exchanges
                .iter()
                .filter(|e| e.body == b)
                .filter_map(|e| e.outcome.answer())
                .filter(|a| a.0 == 201)
                .find_map(|a| serde_json::from_slice::<serde_json::Value>(a.3).ok());
            let id = first_201
                .as_ref()
                .and_then(|v| v["transfer_id"].as_str())
                .unwrap_or("?");
            match records.as_slice() {
                [r] if r.id == id
                    && r.from == body.from
                    && r.to == body.to
                    && r.amount == body.amount as i128
                    && r.memo == body.memo => {}
                [] => acked.fail(format!(
                    "LOST ACKNOWLEDGED TRANSFER: {} got 201 {id} and no record exists",
                    show(log)
                )),
                rs => acked.fail(format!(
                    "{}: 201 {id} for {} but records are {rs:?}",
                    show(log),
                    body.raw
                )),
            }
            // The independent ledger: what the client asked for, as acknowledged.
            apply(&body.from, &body.to, body.amount as i128);
        } else {
            refused.checked += 1;
            if is_unknown {
                unknown += 1;
                match records.as_slice() {
                    [] => {}
                    [r] => match l.bodies.iter().find(|b| {
                        r.from == b.from
                            && r.to == b.to
                            && r.amount == b.amount as i128
                            && r.memo == b.memo
                    }) {
                        Some(b) => {
                            unknown_committed += 1;
                            apply(&b.from, &b.to, b.amount as i128);
                        }
                        None => refused.fail(format!(
                            "{}: unknown outcome, and its record {r:?} matches none of its bodies",
                            show(log)
                        )),
                    },
                    rs => refused.fail(format!(
                        "{}: unknown outcome with {} records",
                        show(log),
                        rs.len()
                    )),
                }
                if l.kind == Kind::KeyReuse
                    && log.settled[1] == Some(422)
                    && records.is_empty()
                    && log.settled[0].is_none()
                {
                    refused.fail(format!("{}: the changed body got 422, so the first body was stored, yet no transfer exists", show(log)));
                }
            } else if !records.is_empty() {
                refused.fail(format!(
                    "{}: settled {:?} without a 201, yet {} record(s) exist: {:?}",
                    show(log),
                    log.settled,
                    records.len(),
                    records
                ));
            }
        }
        // --- the sequences
        if l.kind == Kind::LostAfterFull && log.exercised {
            lost_full.checked += 1;
            let answers: Vec<_> = log
                .exchanges
                .iter()
                .filter_map(|e| e.outcome.answer())
                .collect();
            let first = answers.first();
            let refused_at = answers.iter().position(|a| a.0 == 429);
            let last = answers.last();
            match (first, refused_at, last) {
                (Some(f), Some(_), Some(z))
                    if f.0 == 201 && !f.1 && z.0 == 201 && z.1 && (z.2, z.3) == (f.2, f.3) => {}
                _ => lost_full.fail(format!(
                    "{}: answers {:?}: not the first 201, a 429, then that 201 replayed",
                    show(log),
                    answers
                        .iter()
                        .map(|a| format!("{}{}", a.0, if a.1 { " (replayed)" } else { "" }))
                        .collect::<Vec<_>>()
                )),
            }
        }
        if matches!(l.kind, Kind::InFlight { .. }) && log.exercised {
            in_flight.checked += 1;
            // The caught attempt was the first invocation's: what DynamoDB answered it is
            // whether that invocation's transaction committed.
            let committed = log.landed.contains(&200);
            if let Some(e) = log.exchanges.first() {
                if committed && e.outcome.nothing_committed() {
                    in_flight.fail(format!(
                        "{}: a 503 said nothing committed, and the transfer committed (its first attempt landed after the answer; DynamoDB answered it {:?}); records {:?}",
                        show(log),
                        log.landed,
                        records.iter().map(|r| r.id.as_str()).collect::<Vec<_>>()
                    ));
                }
            }
        }
        // --- stored responses
        if let Some(pk) = pk_of.get(&i) {
            let record = idem
                .get(pk.as_str())
                .and_then(|item| Record::from_item(item));
            let seen: Vec<&Vec<u8>> = log
                .exchanges
                .iter()
                .filter_map(|e| e.outcome.answer())
                .filter(|a| STORED.contains(&a.0))
                .map(|a| a.3)
                .collect();
            stored.checked += 1;
            match (&record, seen.first()) {
                (Some(r), Some(body)) => match &r.state {
                    RecordState::Completed(resp) if &&resp.body == body => {}
                    other => stored.fail(format!(
                        "{}: stored {other:?} differs from what the client got: {}",
                        show(log),
                        String::from_utf8_lossy(body)
                    )),
                },
                (Some(r), None) if !is_unknown && matches!(l.kind, Kind::BadInput(_)) => {
                    stored.fail(format!(
                        "{}: a 400 stored a record: {:?}",
                        show(log),
                        r.state
                    ));
                }
                (None, Some(_)) => stored.fail(format!(
                    "{}: the client got a stored status but no record exists",
                    show(log)
                )),
                _ => {}
            }
        }
    }

    // --- balances, read directly
    let actual: HashMap<&str, Option<i128>> = inp
        .account_items
        .iter()
        .filter_map(|item| Some((s(item, "pk")?, n(item, "balance"))))
        .collect();
    let mut total_final = 0i128;
    for (account, initial) in inp.accounts {
        ledger.checked += 1;
        negative.checked += 1;
        let want = expected[account.as_str()];
        match actual.get(account.as_str()).copied().flatten() {
            None => ledger.fail(format!(
                "account {account} (opening {initial}) is missing or unreadable"
            )),
            Some(have) => {
                total_final += have;
                if have != want {
                    ledger.fail(format!("account {account}: DynamoDB holds {have}, the log's ledger says {want} (opening {initial})"));
                }
                if have < 0 {
                    negative.fail(format!("account {account}: balance {have}"));
                }
            }
        }
    }
    // A kill ends at most one invocation: the one its process held.
    if bad_gateways > inp.kills {
        statuses.fail(format!(
            "{bad_gateways} answers were 502, more than the {} processes killed",
            inp.kills
        ));
    }
    // --- the sliding `client` layer, per client, from the exchanges' times
    let (limit, window) = inp.client_limit;
    let mut admitted: HashMap<usize, Vec<(u64, u64)>> = HashMap::new();
    for log in inp.logs {
        if log.logical.bad_auth.is_some() {
            continue;
        }
        for e in &log.exchanges {
            if e.outcome.status().is_some_and(|s| ADMITTED.contains(&s)) {
                admitted
                    .entry(log.logical.client)
                    .or_default()
                    .push((e.sent_ms, e.answered_ms));
            }
        }
    }
    let mut clients: Vec<_> = admitted.into_iter().collect();
    clients.sort_by_key(|(c, _)| *c);
    for (client, spans) in clients {
        sliding.checked += 1;
        if let Some((n, span)) = crowded(spans, limit as usize, window) {
            sliding.fail(format!(
                "client {}: {n} admissions ({} allowed) certainly within {span} ms, less than the {window} ms window",
                inp.client_ids.get(client).map_or("?", String::as_str),
                limit
            ));
        }
    }
    let total_initial: u64 = inp.accounts.iter().map(|(_, b)| b).sum();
    conserved.checked += 1;
    if total_final != total_initial as i128 {
        conserved.fail(format!(
            "opening total {total_initial}, final total {total_final}"
        ));
    }
    Findings {
        checks: vec![
            doubles, acked, refused, orphans, replays, statuses, stored, ledger, conserved,
            negative, lost_full, in_flight, sliding,
        ],
        unknown,
        unknown_committed,
        acknowledged,
        records: inp.transfers.len(),
        total_initial,
        total_final,
    }
}

/// Answers that prove the request passed the `client` layer (the ledger's own answers). A 400
/// may come before it, a 401 does, a 503 may be the limiter's own failure, a 502 a kill: left
/// out, which can only hide a violation, never invent one.
const ADMITTED: [u16; 7] = [201, 402, 403, 404, 409, 422, 200];

/// The admissions' times: each happened (the function read its clock) between its request's
/// sending and its answer, `(sent, answered)`. Some `limit + 1` of them certainly fall within
/// one span shorter than `window` when their latest answer is less than `window` after their
/// earliest sending: then `Some((limit + 1, that span))`. Wherever in its exchange each
/// admission happened, such a span breaks "at most the limit in any span of one window". The
/// slack is each request's own duration, and it is on the limiter's side: admissions whose
/// exchanges together last a window or more are never held against it.
///
/// Over the requests from the latest sending back: each one with the `limit` others sent no
/// earlier whose answers came first (a heap of the `limit` smallest answer times after it).
pub fn crowded(mut spans: Vec<(u64, u64)>, limit: usize, window: u64) -> Option<(usize, u64)> {
    use std::collections::BinaryHeap;
    spans.sort();
    let mut smallest: BinaryHeap<u64> = BinaryHeap::new();
    let mut worst: Option<u64> = None;
    for &(sent, answered) in spans.iter().rev() {
        if smallest.len() == limit {
            let latest = smallest.peek().copied().unwrap_or(answered).max(answered);
            let span = latest.saturating_sub(sent);
            if span < window {
                worst = Some(worst.map_or(span, |w: u64| w.min(span)));
            }
        }
        smallest.push(answered);
        if smallest.len() > limit {
            smallest.pop();
        }
    }
    worst.map(|span| (limit + 1, span))
}

/// Statuses of the answers (with their problem codes), for the report.
pub fn status_counts(logs: &[LogicalLog]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for e in logs.iter().flat_map(|log| &log.exchanges) {
        let k = match &e.outcome {
            Outcome::Answer { status, code, .. } => match code {
                Some(code) => format!("{status} {code}"),
                None => status.to_string(),
            },
            Outcome::Lost(why) => format!("no answer ({})", lost_kind(why)),
        };
        *counts.entry(k).or_default() += 1;
    }
    counts
}

fn lost_kind(why: &str) -> &'static str {
    if why.contains("hung up") {
        "client hung up on purpose"
    } else if why.contains("no answer within") {
        "client timeout"
    } else if why.contains("refused") {
        "connection refused"
    } else {
        "connection dropped"
    }
}

#[cfg(test)]
mod tests {
    use super::crowded;

    #[test]
    fn a_window_span_with_more_than_the_limit_is_found_only_when_certain() {
        // Three admissions within 900 ms, limit 2, window 1 s: certain.
        let spans = vec![(0, 100), (400, 500), (800, 900), (5_000, 5_010)];
        assert_eq!(crowded(spans, 2, 1_000), Some((3, 900)));
        // The same, but one exchange lasted long enough that its admission may be outside.
        let spans = vec![(0, 100), (400, 500), (800, 1_200)];
        assert_eq!(crowded(spans, 2, 1_000), None);
        // At the limit: nothing to find.
        let spans = vec![(0, 10), (20, 30), (2_000, 2_010), (2_020, 2_030)];
        assert_eq!(crowded(spans, 2, 1_000), None);
        // The crowded ones need not be adjacent in sending order.
        let spans = vec![(0, 3_000), (100, 110), (200, 210), (300, 310)];
        assert_eq!(crowded(spans, 2, 1_000), Some((3, 210)));
    }
}
