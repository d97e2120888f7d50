//! Sending the day: simulated bank clients with their retry rules, the fault schedule armed on
//! the proxy as the traffic goes, and the process kills.
//!
//! Requests go straight to the `transfer` pool ([`Function::invoke`]): what a bank client
//! cannot tell apart (no answer, a timeout, a hang-up) is one outcome, [`Outcome::Lost`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Semaphore;
use tollgate_tests::fault_proxy::{DynamoError, Fault, FaultProxy};

use crate::lambda::Function;

use super::plan::{Kind, Logical, Rng};

/// Attempts per body before the client gives up and records "unknown".
const MAX_ATTEMPTS: u32 = 10;
/// How long the client waits for one answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// One request and what came back.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// Which body of the logical request (1: the changed body of a key reuse).
    pub body: usize,
    pub outcome: Outcome,
    /// Sent together with copies under the same key.
    pub concurrent: bool,
    /// An earlier request under this key went unanswered (its work may still be running).
    pub after_unanswered: bool,
}

#[derive(Debug, Clone)]
pub enum Outcome {
    Answer {
        status: u16,
        replayed: bool,
        code: Option<String>,
        location: Option<String>,
        body: Vec<u8>,
    },
    Lost(String),
}

impl Outcome {
    pub fn status(&self) -> Option<u16> {
        match self {
            Outcome::Answer { status, .. } => Some(*status),
            Outcome::Lost(_) => None,
        }
    }
}

/// Everything the log says about one logical request.
#[derive(Debug, Clone)]
pub struct LogicalLog {
    pub logical: Logical,
    pub exchanges: Vec<Exchange>,
    /// Per body: the definitive answer's status, `None` when the client gave up (unknown).
    pub settled: Vec<Option<u16>>,
}

/// A status the client retries (same key, same body).
pub fn transient(status: u16) -> bool {
    status == 409 || status >= 500
}

/// How a request is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Wait for the answer (up to the timeout).
    Normal,
    /// Send the request, then hang up after a few milliseconds without waiting for the
    /// answer: a response lost on the way back (the invocation still runs).
    HangUp(u64),
}

pub struct Traffic {
    pub transfer: Arc<Function>,
    pub tokens: Vec<String>,
    pub sent: AtomicUsize,
    pub retries: AtomicUsize,
    pub long_waits: AtomicUsize,
    in_flight: Semaphore,
    /// The day's last request: "much later" never waits past it.
    day_end: usize,
}

impl Traffic {
    pub fn new(
        transfer: Arc<Function>,
        tokens: Vec<String>,
        concurrency: usize,
        day_end: usize,
    ) -> Self {
        Self {
            transfer,
            tokens,
            sent: AtomicUsize::new(0),
            retries: AtomicUsize::new(0),
            long_waits: AtomicUsize::new(0),
            in_flight: Semaphore::new(concurrency),
            day_end,
        }
    }

    pub fn sent(&self) -> usize {
        self.sent.load(Ordering::SeqCst)
    }

    /// Waits until `n` more requests were sent by others ("much later"), the day ends, or
    /// traffic stalls.
    async fn wait_for_traffic(&self, n: usize) {
        self.long_waits.fetch_add(1, Ordering::Relaxed);
        let target = (self.sent() + n).min(self.day_end);
        let (mut last, mut since) = (self.sent(), Instant::now());
        while self.sent() < target {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = self.sent();
            if now != last {
                (last, since) = (now, Instant::now());
            } else if since.elapsed() > Duration::from_secs(1) {
                return;
            }
        }
    }

    async fn exchange(&self, l: &Logical, body: usize, mode: Mode) -> Outcome {
        let mut req = http::Request::post("/transfers").header("content-type", "application/json");
        match &l.bad_auth {
            None => req = req.header("authorization", format!("Bearer {}", self.tokens[l.client])),
            Some(Some(value)) => req = req.header("authorization", value.as_str()),
            Some(None) => {}
        }
        if let Some(key) = &l.key {
            req = req.header("idempotency-key", key.as_str());
        }
        let req = match req.body(Bytes::from(l.bodies[body].raw.clone())) {
            Ok(req) => req,
            // A header the plan made that HTTP cannot carry never reaches the function.
            Err(e) => return Outcome::Lost(format!("not sendable: {e}")),
        };
        let _permit = self.in_flight.acquire().await.expect("semaphore open");
        self.sent.fetch_add(1, Ordering::SeqCst);
        let answer = match mode {
            Mode::Normal => tokio::time::timeout(ANSWER_TIMEOUT, self.transfer.invoke(req)).await,
            Mode::HangUp(ms) => {
                match tokio::time::timeout(Duration::from_millis(ms), self.transfer.invoke(req))
                    .await
                {
                    Ok(answer) => Ok(answer),
                    Err(_) => return Outcome::Lost("hung up on purpose".into()),
                }
            }
        };
        match answer {
            Ok(Ok(r)) => Outcome::Answer {
                status: r.status().as_u16(),
                replayed: r
                    .headers()
                    .get("idempotent-replayed")
                    .is_some_and(|v| v == "true"),
                code: serde_json::from_slice::<serde_json::Value>(r.body())
                    .ok()
                    .and_then(|v| v["code"].as_str().map(str::to_string)),
                location: r
                    .headers()
                    .get("location")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string),
                body: r.body().to_vec(),
            },
            Ok(Err(lost)) => Outcome::Lost(lost.to_string()),
            Err(_) => Outcome::Lost(format!("no answer within {ANSWER_TIMEOUT:?}")),
        }
    }

    /// Sends `body` until a definitive answer or [`MAX_ATTEMPTS`]; the first send in `first`.
    async fn settle(
        &self,
        l: &Logical,
        body: usize,
        first: Mode,
        rng: &mut Rng,
        log: &mut LogicalLog,
    ) -> Option<u16> {
        for attempt in 0..MAX_ATTEMPTS {
            if attempt > 0 {
                self.retries.fetch_add(1, Ordering::Relaxed);
                match l.later {
                    Some(n) if rng.chance(0.5) => self.wait_for_traffic(n).await,
                    _ => {
                        let ms = (50u64 << attempt.min(6)).min(3_000) + rng.below(50);
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                    }
                }
            }
            let mode = if attempt == 0 { first } else { Mode::Normal };
            let outcome = self.exchange(l, body, mode).await;
            let status = outcome.status();
            log.push(body, outcome, false);
            match status {
                Some(s) if !transient(s) => return Some(s),
                _ => {}
            }
        }
        None
    }

    /// Runs one logical request the way its client behaves.
    pub async fn drive(&self, l: Logical, seed: u64) -> LogicalLog {
        let mut rng = Rng::fork(seed, 1_000_000 + l.index as u64);
        let mut log = LogicalLog {
            logical: l.clone(),
            exchanges: Vec::new(),
            settled: vec![None; l.bodies.len()],
        };
        match &l.kind {
            Kind::LostResponse { hang_up: true } => {
                let ms = rng.below(30);
                log.settled[0] = self
                    .settle(&l, 0, Mode::HangUp(ms), &mut rng, &mut log)
                    .await;
            }
            Kind::LostResponse { hang_up: false } => {
                let first = self.settle(&l, 0, Mode::Normal, &mut rng, &mut log).await;
                // The answer is "lost": the client never saw it and asks again.
                self.pause(&l, &mut rng).await;
                let again = self.settle(&l, 0, Mode::Normal, &mut rng, &mut log).await;
                log.settled[0] = again.or(first);
            }
            Kind::Duplicates(n) => {
                let copies = (0..*n).map(|_| self.exchange(&l, 0, Mode::Normal));
                let outcomes = futures::future::join_all(copies).await;
                let mut settled = None;
                for outcome in outcomes {
                    if let Some(s) = outcome.status().filter(|s| !transient(*s)) {
                        settled = Some(s);
                    }
                    log.push(0, outcome, true);
                }
                if settled.is_none() {
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    settled = self.settle(&l, 0, Mode::Normal, &mut rng, &mut log).await;
                }
                log.settled[0] = settled;
            }
            Kind::KeyReuse => {
                log.settled[0] = self.settle(&l, 0, Mode::Normal, &mut rng, &mut log).await;
                self.pause(&l, &mut rng).await;
                log.settled[1] = self.settle(&l, 1, Mode::Normal, &mut rng, &mut log).await;
            }
            _ => {
                log.settled[0] = self.settle(&l, 0, Mode::Normal, &mut rng, &mut log).await;
            }
        }
        log
    }

    async fn pause(&self, l: &Logical, rng: &mut Rng) {
        match l.later {
            Some(n) => self.wait_for_traffic(n).await,
            None => tokio::time::sleep(Duration::from_millis(rng.below(200))).await,
        }
    }
}

impl LogicalLog {
    fn push(&mut self, body: usize, outcome: Outcome, concurrent: bool) {
        let after_unanswered = self
            .exchanges
            .iter()
            .any(|e| matches!(e.outcome, Outcome::Lost(_)));
        self.exchanges.push(Exchange {
            body,
            outcome,
            concurrent,
            after_unanswered,
        });
    }
}

/// Fault kinds as the report names them.
pub const FAULT_KINDS: &[&str] = &[
    "response dropped after commit",
    "request dropped (connection closed)",
    "500 InternalServerError",
    "3 x 500 armed back to back (exhaust the SDK's 3 attempts when one request meets them all)",
    "delay 20-1500 ms (below the 3 s attempt timeout)",
    "delay 3.2-3.8 s (past the 3 s attempt timeout)",
    "ThrottlingException",
    "3 x ProvisionedThroughputExceededException back to back",
    "TransactionInProgressException (transactions only)",
    "TransactionConflict on the debited account (transactions only)",
    "IdempotentParameterMismatchException (transactions only)",
];
/// Fault kinds that only a transaction can meet.
const TRANSACTION_ONLY: std::ops::RangeInclusive<usize> = 8..=10;
pub const OPERATIONS: &[&str] = &["TransactWriteItems", "UpdateItem", "GetItem", "PutItem"];

#[derive(Debug, Default)]
pub struct FaultLog {
    /// (operation, kind) -> (armed, fired)
    pub counts: HashMap<(usize, usize), (usize, usize)>,
    /// Per operation: the `seen` count when the pending batch was armed, and its size.
    pending: HashMap<usize, (usize, usize, usize)>,
}

impl FaultLog {
    /// Settles pending batches whose requests have passed.
    fn observe(&mut self, proxy: &FaultProxy) {
        let done: Vec<usize> = self
            .pending
            .iter()
            .filter(|(op, (seen_at, n, _))| proxy.seen(OPERATIONS[**op]) >= seen_at + n)
            .map(|(op, _)| *op)
            .collect();
        for op in done {
            let (_, n, kind) = self.pending.remove(&op).expect("pending");
            self.counts.entry((op, kind)).or_default().1 += n;
        }
    }

    pub fn armed(&self) -> usize {
        self.counts.values().map(|c| c.0).sum()
    }

    pub fn fired(&self) -> usize {
        self.counts.values().map(|c| c.1).sum()
    }
}

/// Arms faults as traffic goes: for each request sent, with probability `rate`, one fault on a
/// random operation (at most one batch pending per operation, so every armed fault is known to
/// have fired once its operation has seen that many more requests).
pub async fn arm_faults(
    proxy: Arc<FaultProxy>,
    traffic: Arc<Traffic>,
    seed: u64,
    rate: f64,
    stop: Arc<AtomicBool>,
) -> FaultLog {
    let mut rng = Rng::fork(seed, 2);
    let mut log = FaultLog::default();
    let mut upto = 0;
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
        log.observe(&proxy);
        let sent = traffic.sent();
        while upto < sent {
            upto += 1;
            if !rng.chance(rate) {
                continue;
            }
            let op = rng.weighted(&[40, 25, 20, 15]);
            let kind = rng.weighted(&[30, 20, 20, 8, 16, 6, 10, 6, 6, 6, 4]);
            if log.pending.contains_key(&op)
                || (TRANSACTION_ONLY.contains(&kind) && OPERATIONS[op] != "TransactWriteItems")
            {
                continue;
            }
            let faults: Vec<Fault> = match kind {
                0 => vec![Fault::DropResponseAfterCommit],
                1 => vec![Fault::DropRequest],
                2 => vec![Fault::ServerError],
                3 => vec![Fault::ServerError; 3],
                4 => vec![Fault::Delay(Duration::from_millis(rng.range(20, 1_500)))],
                5 => vec![Fault::Delay(Duration::from_millis(rng.range(3_200, 3_800)))],
                6 => vec![Fault::Error(DynamoError::Throttling)],
                7 => vec![Fault::Error(DynamoError::ProvisionedThroughputExceeded); 3],
                8 => vec![Fault::Error(DynamoError::TransactionInProgress)],
                // The debit is the only item whose expression names the balance first.
                9 => vec![Fault::Error(DynamoError::TransactionConflict {
                    item: "SET #balance = #balance - :amount".into(),
                })],
                _ => vec![Fault::Error(DynamoError::IdempotentParameterMismatch)],
            };
            let seen = proxy.seen(OPERATIONS[op]);
            for f in &faults {
                proxy.arm(OPERATIONS[op], f.clone());
            }
            log.pending.insert(op, (seen, faults.len(), kind));
            log.counts.entry((op, kind)).or_default().0 += faults.len();
        }
    }
    log.observe(&proxy);
    log
}

/// One kill of a `transfer` process.
#[derive(Debug, Clone)]
pub struct Kill {
    pub at_request: usize,
    pub pid: u32,
    pub instances: usize,
    /// How long until a new process polled for work, or why none did.
    pub restart: Result<Duration, String>,
}

/// At evenly spaced points of the run, SIGKILLs one `transfer` process (its invocation in
/// flight, if any, answers 502) and starts a new one in its place, as Lambda would on the next
/// demand.
pub async fn kill_processes(
    traffic: Arc<Traffic>,
    transfer: Arc<Function>,
    kills: usize,
    target: usize,
    seed: u64,
) -> Vec<Kill> {
    let mut rng = Rng::fork(seed, 3);
    let mut done = Vec::new();
    for k in 1..=kills {
        let at = target * k / (kills + 1);
        while traffic.sent() < at {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let pids = transfer.pids();
        let at_request = traffic.sent();
        if pids.is_empty() {
            done.push(Kill {
                at_request,
                pid: 0,
                instances: 0,
                restart: Err("no transfer process was running".into()),
            });
            continue;
        }
        let pid = pids[rng.below(pids.len() as u64) as usize];
        if let Err(e) = transfer.kill(pid).await {
            done.push(Kill {
                at_request,
                pid,
                instances: pids.len(),
                restart: Err(e.to_string()),
            });
            continue;
        }
        let started = Instant::now();
        let restart = match transfer.spawn_instance().await {
            Ok(_) => Ok(started.elapsed()),
            Err(e) => Err(e.to_string()),
        };
        done.push(Kill {
            at_request,
            pid,
            instances: pids.len(),
            restart,
        });
    }
    done
}

/// Waits until the functions stop talking to DynamoDB (abandoned requests finish their work).
pub async fn quiesce(proxy: &FaultProxy) -> Duration {
    let started = Instant::now();
    let total = || OPERATIONS.iter().map(|op| proxy.seen(op)).sum::<usize>();
    let (mut last, mut since) = (total(), Instant::now());
    while since.elapsed() < Duration::from_secs(3) && started.elapsed() < Duration::from_secs(120) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = total();
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    started.elapsed()
}
