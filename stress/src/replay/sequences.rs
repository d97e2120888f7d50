//! Sequences that random faults would almost never line up, run on purpose a few times a day
//! beside the generated traffic, each from a client of its own (with accounts of its own), so
//! that nothing else in the day fills its layer or crosses its windows:
//!
//! 1. **A lost answer after the layer filled** ([`Kind::LostAfterFull`]): a 201 the client
//!    never reads; the same client then fills its `client` layer with other transfers, and
//!    retries with the same key at once. The transfer function limits before it looks at the
//!    key, so that retry is a 429 (wait `Retry-After`); the retry after it must get the first
//!    201 replayed byte for byte, and DynamoDB must hold one transfer.
//! 2. **`TransactionInProgress` until the budget ends** ([`Kind::InFlight`]): the proxy catches
//!    the transaction's first attempt and answers every resend with
//!    `TransactionInProgressException` until the function has answered. The caught attempt
//!    then lands (in the "committed first" variant it lands at once, and only its answer is
//!    lost). What DynamoDB answered it says whether the first invocation's transaction
//!    committed; if it did, that invocation may answer 201 or the outcome-unknown 503, never
//!    the plain 503 that means "nothing committed".
//! 3. **Increments delayed across a sliding boundary** ([`Kind::Burst`]): in window k the
//!    client spends part of its `client` layer, sends a few more requests in k's last slot
//!    whose `client` increments the proxy holds past the boundary, and right after the boundary
//!    asks for the whole limit; the held increments are released once those are answered. The
//!    check ([`super::check`]) then finds no span of one window with more admissions than the
//!    limit, from the exchanges' wall-clock times.
//!
//! The functions count their windows on the machine's clock, the one the exchanges are timed
//! with: an admission lies between its exchange's `sent_ms` and `answered_ms`.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tollgate_tests::fault_proxy::{DynamoError, Fault, FaultProxy};

use super::plan::{fork, Body, Kind, Logical, Rng};
use super::run::{LogicalLog, Mode, Traffic};
use crate::{now_ms, sleep_until};

/// The replay's `client` layer: sliding, with a short window, so that a sequence can fill it
/// and cross its boundaries within seconds. The day's own clients send a few requests per
/// window each (about 1.6 per second at 85 requests/s over 50 clients), far from the limit;
/// should one reach it anyway, its 429 is answered as a client must (wait `Retry-After`).
pub const CLIENT_LIMIT: u32 = 30;
pub const CLIENT_WINDOW_MS: u64 = 4_000;
/// The replay's limits (`TRANSFER_RATE_LIMITS`): `ip` out of the way (every request of the
/// harness comes from 127.0.0.1), `client` as above.
pub fn limits() -> String {
    format!(
        "ip=10000000/1m,client={CLIENT_LIMIT}/{}s:sliding",
        CLIENT_WINDOW_MS / 1_000
    )
}

/// The sequences' clients: (index in the day's clients, its accounts).
pub struct Clients {
    pub lost_after_full: (usize, Vec<String>),
    pub in_flight: (usize, Vec<String>),
    pub burst: (usize, Vec<String>),
    /// Their ids (for the proxy's rules on their counter items).
    pub burst_id: String,
}

/// Accounts per sequence client, and their opening balance.
pub const ACCOUNTS: usize = 4;
pub const OPENING: u64 = 5_000_000;

/// How many rounds of the three sequences a day of `requests` runs: a handful (each round holds
/// one transaction for about the ledger's 5 s budget, twice).
pub fn rounds(requests: usize) -> usize {
    (requests / 12_000).clamp(1, 4)
}

/// What the sequences did, for the report: per sequence (runs, runs that happened as designed:
/// the retry met a full layer; the proxy caught the first attempt; a held request crossed the
/// boundary).
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct Counts {
    pub lost_after_full: (usize, usize),
    pub in_flight: (usize, usize),
    pub burst: (usize, usize),
    /// Wall clock the rounds took, together.
    #[serde(skip)]
    pub busy: Duration,
}

struct Seq<'a> {
    traffic: &'a Traffic,
    proxy: &'a FaultProxy,
    clients: &'a Clients,
    seed: u64,
    rng: Rng,
    /// Indices for the sequences' logical requests: after the day's (the generator counts up
    /// from 0), so they never share a key with one of its requests.
    next: usize,
    logs: Vec<LogicalLog>,
    instances: usize,
    counts: Counts,
}

/// Runs `rounds` rounds of the three sequences, one after the other, from evenly spaced points
/// of the day (by requests sent), the first at its start: a round takes about 25 s of wall
/// clock, which the day's traffic then hides (a day of 2,000 requests lasts about as long).
pub async fn run(
    traffic: Arc<Traffic>,
    proxy: Arc<FaultProxy>,
    clients: Arc<Clients>,
    seed: u64,
    target: usize,
    instances: usize,
) -> (Vec<LogicalLog>, Counts) {
    let rounds = rounds(target);
    let mut seq = Seq {
        traffic: &traffic,
        proxy: &proxy,
        clients: &clients,
        seed,
        rng: fork(seed, 5),
        next: 1 << 40,
        logs: Vec::new(),
        instances,
        counts: Counts::default(),
    };
    for r in 0..rounds {
        let at = target * r / rounds;
        while traffic.sent() < at {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let started = std::time::Instant::now();
        seq.lost_after_full().await;
        seq.in_flight(r % 2 == 1).await;
        seq.in_flight(r % 2 == 0).await;
        seq.burst().await;
        seq.counts.busy += started.elapsed();
        eprintln!(
            "replay: sequences, round {} of {rounds}, in {:.1}s",
            r + 1,
            started.elapsed().as_secs_f64()
        );
    }
    (seq.logs, seq.counts)
}

impl Seq<'_> {
    /// A transfer between two of the client's own accounts.
    fn logical(&mut self, kind: Kind, client: &(usize, Vec<String>)) -> Logical {
        let index = self.next;
        self.next += 1;
        let accounts = &client.1;
        let from = self.rng.usize(..accounts.len());
        let to = (from + 1 + self.rng.usize(..accounts.len() - 1)) % accounts.len();
        let amount = self.rng.u64(1..=100);
        Logical {
            index,
            kind,
            client: client.0,
            key: Some(format!("replay-{:x}-seq{index}", self.seed)),
            bodies: vec![Body::new(&accounts[from], &accounts[to], amount, None)],
            bad_auth: None,
            later: None,
        }
    }

    fn rng_for(&self, l: &Logical) -> Rng {
        fork(self.seed, 1_000_000 + l.index as u64)
    }

    /// Sends each of `ls` once, all at once; their logs.
    async fn send_all(&self, ls: &[Logical]) -> Vec<LogicalLog> {
        let sends = ls.iter().map(|l| async move {
            let mut log = LogicalLog::new(l);
            let sent = self.traffic.send(l, 0, Mode::Normal).await;
            log.push(0, sent, false);
            log
        });
        join_all(sends).await
    }

    /// Settles every log (its first answer is in) the way the day's clients do.
    async fn settle_all(&self, logs: &mut [LogicalLog]) {
        let settles = logs.iter_mut().map(|log| async move {
            let l = log.logical.clone();
            let mut rng = self.rng_for(&l);
            log.settled[0] = self.traffic.settle_from(&l, 0, None, &mut rng, log).await;
        });
        join_all(settles).await;
    }

    /// Sequence 1.
    async fn lost_after_full(&mut self) {
        let clients = self.clients;
        let client = &clients.lost_after_full;
        let k = self.logical(Kind::LostAfterFull, client);
        let mut log = LogicalLog::new(&k);
        // Its 201 is logged (the bytes a replay must repeat), and the client never reads it.
        let sent = self.traffic.send(&k, 0, Mode::Normal).await;
        let first = sent.outcome.status();
        log.push(0, sent, false);
        // The layer's whole limit in other transfers: one of them at least is refused.
        let fills: Vec<Logical> = (0..CLIENT_LIMIT)
            .map(|_| self.logical(Kind::Burst, client))
            .collect();
        let mut fills = self.send_all(&fills).await;
        // The retry at once: the layer is full.
        let mut rng = self.rng_for(&k);
        let sent = self.traffic.send(&k, 0, Mode::Normal).await;
        let refused = sent.outcome.status() == Some(429);
        log.push(0, sent, false);
        let (settled, ()) = futures::join!(
            self.traffic.settle_from(&k, 0, None, &mut rng, &mut log),
            self.settle_all(&mut fills)
        );
        log.settled[0] = settled;
        log.exercised = first == Some(201) && refused;
        self.counts.lost_after_full.0 += 1;
        self.counts.lost_after_full.1 += usize::from(log.exercised);
        self.logs.push(log);
        self.logs.extend(fills);
    }

    /// Sequence 2.
    async fn in_flight(&mut self, committed_first: bool) {
        let clients = self.clients;
        let client = &clients.in_flight;
        let l = self.logical(Kind::InFlight { committed_first }, client);
        let key = l.key.clone().expect("a sequence has a key");
        // The key as it ends the record's `pk` (and the transfer's `idempotency_pk`) in the
        // transaction's body: only this request's attempts match.
        let needle = format!("#{key}\"");
        let op = "TransactWriteItems";
        let landing = self.proxy.land_later_when(op, &needle);
        if committed_first {
            landing.open();
        }
        self.proxy.arm_always_when(
            op,
            &needle,
            Fault::Error(DynamoError::TransactionInProgress),
        );
        let mut log = LogicalLog::new(&l);
        let sent = self.traffic.send(&l, 0, Mode::Normal).await;
        log.push(0, sent, false);
        self.proxy.disarm_when(op, &needle);
        landing.open();
        log.landed = tokio::time::timeout(Duration::from_secs(35), landing.landed())
            .await
            .unwrap_or_default();
        log.exercised = !log.landed.is_empty();
        self.counts.in_flight.0 += 1;
        self.counts.in_flight.1 += usize::from(log.exercised);
        let mut rng = self.rng_for(&l);
        log.settled[0] = self
            .traffic
            .settle_from(&l, 0, None, &mut rng, &mut log)
            .await;
        self.logs.push(log);
    }

    /// Sequence 3.
    async fn burst(&mut self) {
        let clients = self.clients;
        let client = &clients.burst;
        let w = CLIENT_WINDOW_MS;
        // A window k whose previous window holds nothing of this client: its last requests were
        // sent (and refused or counted) before k - 1 began.
        let last = self
            .logs
            .iter()
            .filter(|log| log.logical.client == client.0)
            .flat_map(|log| log.exchanges.iter().map(|e| e.answered_ms))
            .max()
            .unwrap_or(0);
        let now = now_ms();
        let mut k = (now / w + 1) * w;
        while k < last + w {
            k += w;
        }
        let early = CLIENT_LIMIT / 3;
        // Requests held in processes: leave at least two processes for the rest of the day and
        // for the burst after the boundary.
        let held = self.instances.saturating_sub(1).min(2);
        let a: Vec<Logical> = (0..early)
            .map(|_| self.logical(Kind::Burst, client))
            .collect();
        let b: Vec<Logical> = (0..held)
            .map(|_| self.logical(Kind::Burst, client))
            .collect();
        let c: Vec<Logical> = (0..CLIENT_LIMIT)
            .map(|_| self.logical(Kind::Burst, client))
            .collect();

        sleep_until(k + w / 4).await;
        let mut logs = self.send_all(&a).await;
        // k's last slot (a twentieth of the window): these increments reach DynamoDB only
        // after the boundary, and after the requests below have read k.
        sleep_until(k + w - w / 40).await;
        let needle = format!("#client#{}#{}#", w / 1_000, self.clients.burst_id);
        let release = self.proxy.hold_always_when("UpdateItem", &needle);
        let late = self.send_all(&b);
        let after = async {
            sleep_until(k + w + 20).await;
            self.proxy.disarm_when("UpdateItem", &needle);
            // Right after the boundary, the whole limit: what k left is admitted, no more.
            let after = self.send_all(&c);
            tokio::pin!(after);
            // The held increments go on once these are answered (or, should that take long,
            // well within the SDK's 3 s attempt timeout, so that they do land).
            let logs = tokio::select! {
                logs = &mut after => logs,
                _ = tokio::time::sleep(Duration::from_millis(1_500)) => {
                    release.open();
                    after.await
                }
            };
            release.open();
            logs
        };
        let (late, after) = futures::join!(late, after);
        let crossed = late.iter().any(|log| {
            log.exchanges
                .first()
                .is_some_and(|e| e.sent_ms < k + w && e.answered_ms > k + w)
        });
        self.counts.burst.0 += 1;
        self.counts.burst.1 += usize::from(crossed);
        logs.extend(late);
        logs.extend(after);
        self.settle_all(&mut logs).await;
        self.logs.extend(logs);
    }
}
