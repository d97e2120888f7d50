//! Sending the day: simulated bank clients with their retry rules, the fault schedule armed on
//! the proxy as the traffic goes, and the process kills.
//!
//! Requests go straight to the `transfer` pool ([`Pool::invoke`]): what a bank client
//! cannot tell apart (no answer, a timeout, a hang-up) is one outcome, [`Outcome::Lost`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Semaphore;
use tollgate_tests::fault_proxy::{DynamoError, Fault, FaultProxy};

use crate::lambda::Pool;
use crate::now_ms;

use super::plan::{fork, weighted, Kind, Logical, Rng};

/// Attempts per body before the client gives up and records "unknown". (It waits for each
/// answer as long as the pool's invocation timeout.)
const MAX_ATTEMPTS: u32 = 10;
/// 429s per body the client waits out (`Retry-After`) before it gives up: they are not
/// failures, so they do not count as attempts.
const MAX_LIMITED: u32 = 30;

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
    /// When the request was handed to the function, and when its answer (or its loss) came
    /// back: wall clock, [`now_ms`].
    pub sent_ms: u64,
    pub answered_ms: u64,
}

#[derive(Debug, Clone)]
pub enum Outcome {
    Answer {
        status: u16,
        replayed: bool,
        code: Option<String>,
        location: Option<String>,
        body: Vec<u8>,
        /// `Retry-After`, seconds.
        retry_after: Option<u64>,
        /// The problem's `detail`: what tells the outcome-unknown 503 from "nothing committed".
        detail: Option<String>,
    },
    Lost(String),
}

impl Outcome {
    pub fn status(&self) -> Option<u16> {
        self.answer().map(|a| a.0)
    }

    /// An answer's status, `Idempotent-Replayed`, `Location` and body: what a replay repeats.
    pub fn answer(&self) -> Option<(u16, bool, &Option<String>, &Vec<u8>)> {
        match self {
            Outcome::Answer {
                status,
                replayed,
                location,
                body,
                ..
            } => Some((*status, *replayed, location, body)),
            Outcome::Lost(_) => None,
        }
    }

    /// A 503 whose `detail` does not say the outcome is unknown: by the contract, nothing was
    /// committed and the key is free.
    pub fn nothing_committed(&self) -> bool {
        match self {
            Outcome::Answer {
                status: 503,
                detail,
                ..
            } => !detail
                .as_deref()
                .is_some_and(|d| d.to_ascii_lowercase().contains("unknown")),
            _ => false,
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
    /// A [`Kind::InFlight`] sequence: DynamoDB's statuses for the first invocation's attempt
    /// that landed late (200: it committed); empty when the proxy caught none.
    pub landed: Vec<u16>,
    /// A sequence's own verdict on whether it happened as designed (the layer was full, the
    /// increments were held across the boundary), for the report.
    pub exercised: bool,
}

/// A status the client retries (same key, same body).
pub fn transient(status: u16) -> bool {
    status == 409 || status >= 500
}

/// One request's answer, and when it was sent.
#[derive(Debug)]
pub struct Sent {
    pub outcome: Outcome,
    /// [`now_ms`] as the request was handed to the function.
    pub sent_ms: u64,
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
    pub transfer: Arc<Pool>,
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
        transfer: Arc<Pool>,
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

    pub async fn exchange(&self, l: &Logical, body: usize, mode: Mode) -> Sent {
        let _permit = self.in_flight.acquire().await.expect("semaphore open");
        self.send(l, body, mode).await
    }

    /// Sends one request; [`Self::exchange`] waits for one of the day's `--concurrency` slots
    /// first, a sequence ([`super::sequences`]) does not: its clients are extra ones, and its
    /// timing is its point.
    pub async fn send(&self, l: &Logical, body: usize, mode: Mode) -> Sent {
        let sent_ms = now_ms();
        let outcome = self.send_outcome(l, body, mode).await;
        Sent { outcome, sent_ms }
    }

    async fn send_outcome(&self, l: &Logical, body: usize, mode: Mode) -> Outcome {
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
        self.sent.fetch_add(1, Ordering::SeqCst);
        let answer = match mode {
            Mode::Normal => self.transfer.invoke(req).await,
            Mode::HangUp(ms) => {
                let wait = Duration::from_millis(ms);
                match tokio::time::timeout(wait, self.transfer.invoke(req)).await {
                    Ok(answer) => answer,
                    Err(_) => return Outcome::Lost("hung up on purpose".into()),
                }
            }
        };
        let r = match answer {
            Ok(r) => r,
            Err(lost) => return Outcome::Lost(lost.to_string()),
        };
        let header = |name: &str| r.headers().get(name).and_then(|v| v.to_str().ok());
        let problem = serde_json::from_slice::<serde_json::Value>(r.body()).unwrap_or_default();
        let text = |field: &str| problem[field].as_str().map(str::to_string);
        Outcome::Answer {
            status: r.status().as_u16(),
            replayed: header("idempotent-replayed") == Some("true"),
            code: text("code"),
            detail: text("detail"),
            retry_after: header("retry-after").and_then(|v| v.parse().ok()),
            location: header("location").map(str::to_string),
            body: r.body().to_vec(),
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
        self.settle_from(l, body, Some(first), rng, log).await
    }

    /// [`Self::settle`]; with `first` `None` the client has already sent `body` once (its
    /// answer is the log's last exchange) and waits as that answer asks before the next send.
    pub async fn settle_from(
        &self,
        l: &Logical,
        body: usize,
        first: Option<Mode>,
        rng: &mut Rng,
        log: &mut LogicalLog,
    ) -> Option<u16> {
        let (mut attempt, mut limited) = (0u32, 0u32);
        let mut wait = match first {
            Some(_) => Wait::No,
            None => match log.exchanges.last().map(|e| &e.outcome) {
                Some(Outcome::Answer {
                    status: 429,
                    retry_after,
                    ..
                }) => {
                    limited += 1;
                    Wait::RetryAfter(retry_after.unwrap_or(1))
                }
                Some(o) if o.status().is_some_and(|s| !transient(s)) => return o.status(),
                _ => {
                    attempt += 1;
                    Wait::Backoff
                }
            },
        };
        loop {
            match wait {
                Wait::No => {}
                Wait::Backoff => {
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    match l.later {
                        Some(n) if rng.f64() < 0.5 => self.wait_for_traffic(n).await,
                        _ => {
                            let ms = (50u64 << attempt.min(6)).min(3_000) + rng.u64(..50);
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                        }
                    }
                }
                // A 429 says when to come back; a client that comes sooner is refused again.
                Wait::RetryAfter(secs) => {
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    let ms = secs * 1_000 + rng.u64(..100);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
            }
            let mode = match (attempt, first) {
                (0, Some(mode)) => mode,
                _ => Mode::Normal,
            };
            let sent = self.exchange(l, body, mode).await;
            let (status, retry_after) = match &sent.outcome {
                Outcome::Answer {
                    status,
                    retry_after,
                    ..
                } => (Some(*status), *retry_after),
                Outcome::Lost(_) => (None, None),
            };
            log.push(body, sent, false);
            match status {
                Some(429) => {
                    limited += 1;
                    if limited > MAX_LIMITED {
                        return None;
                    }
                    wait = Wait::RetryAfter(retry_after.unwrap_or(1));
                }
                Some(s) if !transient(s) => return Some(s),
                _ => {
                    attempt += 1;
                    if attempt >= MAX_ATTEMPTS {
                        return None;
                    }
                    wait = Wait::Backoff;
                }
            }
        }
    }

    /// Runs one logical request the way its client behaves.
    pub async fn drive(&self, l: Logical, seed: u64) -> LogicalLog {
        let mut rng = fork(seed, 1_000_000 + l.index as u64);
        let mut log = LogicalLog::new(&l);
        match &l.kind {
            Kind::LostResponse { hang_up: true } => {
                let ms = rng.u64(..30);
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
                for sent in outcomes {
                    if let Some(s) = sent
                        .outcome
                        .status()
                        .filter(|s| !transient(*s) && *s != 429)
                    {
                        settled = Some(s);
                    }
                    log.push(0, sent, true);
                }
                if settled.is_none() {
                    settled = self.settle_from(&l, 0, None, &mut rng, &mut log).await;
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
            None => tokio::time::sleep(Duration::from_millis(rng.u64(..200))).await,
        }
    }
}

/// What the client waits for before its next send.
#[derive(Debug, Clone, Copy)]
enum Wait {
    No,
    /// Its own backoff (or "much later").
    Backoff,
    /// A 429's `Retry-After`, seconds.
    RetryAfter(u64),
}

impl LogicalLog {
    pub fn new(l: &Logical) -> Self {
        Self {
            logical: l.clone(),
            exchanges: Vec::new(),
            settled: vec![None; l.bodies.len()],
            landed: Vec::new(),
            exercised: false,
        }
    }

    /// Logs an exchange: `sent` came back just now (or a moment ago: its answered time is
    /// taken when logged, which only widens the span its admission is known to lie in).
    pub fn push(&mut self, body: usize, sent: Sent, concurrent: bool) {
        let Sent { outcome, sent_ms } = sent;
        let answered_ms = now_ms();
        let after_unanswered = self
            .exchanges
            .iter()
            .any(|e| matches!(e.outcome, Outcome::Lost(_)));
        self.exchanges.push(Exchange {
            body,
            outcome,
            concurrent,
            after_unanswered,
            sent_ms,
            answered_ms,
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
    let mut rng = fork(seed, 2);
    let mut log = FaultLog::default();
    let mut upto = 0;
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
        log.observe(&proxy);
        let sent = traffic.sent();
        while upto < sent {
            upto += 1;
            if rng.f64() >= rate {
                continue;
            }
            let op = weighted(&mut rng, &[40, 25, 20, 15]);
            let kind = weighted(&mut rng, &[30, 20, 20, 8, 16, 6, 10, 6, 6, 6, 4]);
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
                4 => vec![Fault::Delay(Duration::from_millis(rng.u64(20..=1_500)))],
                5 => vec![Fault::Delay(Duration::from_millis(rng.u64(3_200..=3_800)))],
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

/// One kill of a `transfer` process, as the report shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Kill {
    pub at_request: usize,
    pub pid: u32,
    pub instances: usize,
    /// Seconds until a new process polled for work (`None`: see `error`).
    pub replaced_s: Option<String>,
    /// Why no new process polled.
    pub error: Option<String>,
}

/// At evenly spaced points of the run, SIGKILLs one `transfer` process (its invocation in
/// flight, if any, answers 502) and starts a new one in its place, as Lambda would on the next
/// demand.
pub async fn kill_processes(
    traffic: Arc<Traffic>,
    transfer: Arc<Pool>,
    kills: usize,
    target: usize,
    seed: u64,
) -> Vec<Kill> {
    let mut rng = fork(seed, 3);
    let mut done = Vec::new();
    for k in 1..=kills {
        let at = target * k / (kills + 1);
        while traffic.sent() < at {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let pids = transfer.pids();
        let at_request = traffic.sent();
        let pid = match pids.is_empty() {
            true => 0,
            false => pids[rng.usize(..pids.len())],
        };
        let restart: Result<Duration, String> = if pids.is_empty() {
            Err("no transfer process was running".into())
        } else if let Err(e) = transfer.kill(pid).await {
            Err(e.to_string())
        } else {
            let started = Instant::now();
            match transfer.spawn_instance().await {
                Ok(_) => Ok(started.elapsed()),
                Err(e) => Err(e.to_string()),
            }
        };
        done.push(Kill {
            at_request,
            pid,
            instances: pids.len(),
            replaced_s: restart
                .as_ref()
                .ok()
                .map(|d| format!("{:.1}", d.as_secs_f64())),
            error: restart.err(),
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
