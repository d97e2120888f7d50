//! The drills themselves, the report's figures (`templates/drill.md`), and the client they
//! play: requests invoked on the pools, each answered or lost within the pool's timeout.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures::StreamExt;
use serde::Serialize;
use tollgate::ratelimit::{Layer, RateLimits};
use tollgate_tests::fault_proxy::FaultProxy;

use crate::lambda::Pool;
use crate::{limits, now_ms, sleep_until};

/// DynamoDB operations the functions use (the proxy counts by `x-amz-target`).
const OPERATIONS: [&str; 8] = [
    "UpdateItem",
    "GetItem",
    "PutItem",
    "DeleteItem",
    "Query",
    "TransactWriteItems",
    "TransactGetItems",
    "BatchGetItem",
];
/// Requests in flight during a flood.
pub const CONCURRENCY: usize = 8;

/// The sliding phase's spend cap (`global`, per window, over 4 shards).
pub const SHARDED_CAP: u32 = 40;

/// The run's settings (from `--short`) and the secrets and limits the functions got.
pub struct Settings {
    pub short: bool,
    pub origin_secret: String,
    pub limits: limits::Limits,
    /// The third phase's: the same per-caller limits sliding, a spend cap of [`SHARDED_CAP`].
    pub sliding: limits::Limits,
}

/// The functions and what the drills need to call them as a client would.
pub struct Target {
    pub session: Arc<Pool>,
    pub transfer: Arc<Pool>,
    pub internal_token: String,
    pub demo_token: String,
    pub demo_account: String,
}

/// The limits the functions were started with.
#[derive(Clone, Copy)]
struct Limits {
    window_ms: u64,
    session_ip: u32,
    transfer_ip: u32,
    transfer_client: u32,
}

/// A public IPv4 address, drawn from `rng`.
fn ipv4(rng: &mut fastrand::Rng) -> String {
    let n = rng.u32(..);
    let [a, b, c, d] = n.to_be_bytes();
    format!("{}.{b}.{c}.{}", 1 + a % 223, 1 + d % 254)
}

/// One request to send.
struct Req {
    function: Arc<Pool>,
    method: &'static str,
    path: String,
    headers: Vec<(String, String)>,
    body: &'static [u8],
}

/// What became of it.
#[derive(Debug, Clone)]
struct Outcome {
    /// 0: no answer.
    status: u16,
    sent_ms: u64,
    done_ms: u64,
    retry_after: Option<u64>,
    error: Option<String>,
}

impl Outcome {
    /// Passed the limiter: anything but 429 (a 401 after the `ip` layer counts).
    fn admitted(&self) -> bool {
        self.status != 429 && self.status != 0
    }
}

async fn send(req: Req) -> Outcome {
    let sent_ms = now_ms();
    let mut builder = http::Request::builder().method(req.method).uri(&req.path);
    for (name, value) in &req.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let answer = match builder.body(Bytes::from_static(req.body)) {
        Ok(r) => req
            .function
            .invoke(r)
            .await
            .map_err(|lost| lost.to_string()),
        Err(e) => Err(format!("not sendable: {e}")),
    };
    let (status, retry_after, error) = match answer {
        Ok(resp) => {
            let retry_after = resp.headers().get("retry-after");
            let retry_after = retry_after.and_then(|v| v.to_str().ok()?.parse().ok());
            (resp.status().as_u16(), retry_after, None)
        }
        Err(e) => (0, None, Some(e)),
    };
    Outcome {
        status,
        sent_ms,
        done_ms: now_ms(),
        retry_after,
        error,
    }
}

async fn flood(reqs: Vec<Req>) -> Vec<Outcome> {
    futures::stream::iter(reqs.into_iter().map(send))
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await
}

/// DynamoDB requests seen by the proxy, per operation.
fn snapshot(proxy: &FaultProxy) -> BTreeMap<&'static str, usize> {
    OPERATIONS.iter().map(|op| (*op, proxy.seen(op))).collect()
}

/// One row of the admitted-versus-limit table.
#[derive(Serialize)]
struct Row {
    phase: &'static str,
    drill: String,
    key: String,
    sent: usize,
    admitted: usize,
    limit: String,
    expected: usize,
    statuses: String,
}

/// A burst across a window boundary: the limit's worth just before it and again just after.
#[derive(Serialize)]
pub(super) struct Burst {
    pub(super) phase: &'static str,
    pub(super) limit: String,
    before: usize,
    after: usize,
    /// From the first request sent to the last answer.
    span_ms: u64,
    pub(super) bound: usize,
    /// Admissions so far at each answer, by when it arrived (ms from the window boundary):
    /// the picture's line.
    #[serde(skip)]
    pub(super) timeline: Vec<(f64, usize)>,
}

/// One window of the reconnect loop.
#[derive(Serialize)]
struct Window {
    window: u64,
    sent: usize,
    admitted: usize,
    limit: u32,
    reopened: bool,
}

/// The DynamoDB cost of requests refused against a full key.
#[derive(Serialize)]
pub(super) struct CostRow {
    pub(super) phase: &'static str,
    pub(super) drill: String,
    pub(super) rejected: usize,
    pub(super) total: usize,
    per: String,
    by_op: String,
}

fn statuses<'a>(outcomes: impl IntoIterator<Item = &'a Outcome>) -> String {
    let mut m: BTreeMap<u16, usize> = BTreeMap::new();
    for o in outcomes {
        *m.entry(o.status).or_default() += 1;
    }
    let show = |(s, n): (&u16, &usize)| match s {
        0 => format!("lost×{n}"),
        s => format!("{s}×{n}"),
    };
    m.iter().map(show).collect::<Vec<_>>().join(", ")
}

/// One flood drill: its report row's names, and the limit that must hold.
struct Flood<'a> {
    drill: &'a str,
    key: &'a str,
    /// `ip=5`, `client=5:sliding`, ...: the layer, its limit and how the phase configured it.
    limit: String,
    /// Exactly this many must be admitted.
    expected: usize,
    /// Start in a new window (the key was filled in an earlier one).
    fresh: bool,
}

impl<'a> Flood<'a> {
    fn new(drill: &'a str, key: &'a str, layer: &str, limit: u32, option: &str) -> Self {
        Self {
            drill,
            key,
            limit: format!("{layer}={limit}{option}"),
            expected: limit as usize,
            fresh: false,
        }
    }
}

/// The drill context: the target, its limits, the proxy, the phase, and the figures so far.
struct Drill<'a> {
    st: &'a Settings,
    stack: &'a Target,
    limits: Limits,
    proxy: &'a FaultProxy,
    rng: fastrand::Rng,
    /// The phase running (`cache on`, `cache off`, `sliding, shards`), and how many times its
    /// limit each flood sends.
    phase: &'static str,
    over: usize,
    /// Extra requests against a full key, to measure what a rejection costs.
    probe: usize,
    rows: Vec<Row>,
    costs: Vec<CostRow>,
    windows: Vec<Window>,
    bursts: Vec<Burst>,
    violations: Vec<String>,
}

impl Drill<'_> {
    /// Waits, if need be, for a window with at least `need_ms` left (or a new window when
    /// `fresh`), so that a flood and its probes fall into one window.
    async fn room(&self, need_ms: u64, fresh: bool) -> u64 {
        let w = self.limits.window_ms;
        let now = now_ms();
        let start = now - now % w;
        if fresh || start + w - now < need_ms {
            sleep_until(start + w + 30).await;
            start + w
        } else {
            start
        }
    }

    fn request(&mut self, session: bool, ip: &str, extra: &[(&str, String)]) -> Req {
        let port = self.rng.u16(1024..61024);
        let mut headers = vec![
            ("X-Origin-Verify".into(), self.st.origin_secret.clone()),
            ("CloudFront-Viewer-Address".into(), format!("{ip}:{port}")),
        ];
        if session {
            headers.push(("Content-Type".into(), "application/json".into()));
        }
        headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
        let (function, method, path, body) = match session {
            true => (&self.stack.session, "POST", "/session".into(), &b"{}"[..]),
            false => {
                let path = format!("/accounts/{}", self.stack.demo_account);
                (&self.stack.transfer, "GET", path, &b""[..])
            }
        };
        Req {
            function: function.clone(),
            method,
            path,
            headers,
            body,
        }
    }

    /// `POST /session` from `ip`.
    fn session(&mut self, ip: &str, extra: &[(&str, String)]) -> Req {
        self.request(true, ip, extra)
    }

    /// `GET /accounts/{the demo account}` from `ip`.
    fn account(&mut self, ip: &str, extra: &[(&str, String)]) -> Req {
        self.request(false, ip, extra)
    }

    fn violation(&mut self, v: String) {
        eprintln!("drill: VIOLATION: {v}");
        self.violations.push(v);
    }

    /// Sends [`Self::over`] times the limit's worth of requests made by `make`, checks that
    /// exactly `f.expected` were admitted, all in one window, then sends [`Self::probe`] more
    /// against the full key and records what they cost in DynamoDB requests; every probe must
    /// be refused.
    async fn flood(&mut self, f: Flood<'_>, mut make: impl FnMut(&mut Self) -> Req) {
        let (phase, drill) = (self.phase, f.drill);
        let fill: Vec<Req> = (0..f.expected * self.over).map(|_| make(self)).collect();
        let probes: Vec<Req> = (0..self.probe).map(|_| make(self)).collect();
        let window = self.room(self.limits.window_ms / 2, f.fresh).await;
        let t = Instant::now();
        let outcomes = flood(fill).await;
        let admitted = outcomes.iter().filter(|o| o.admitted()).count();
        self.check_outcomes(drill, &outcomes, window);
        if admitted != f.expected {
            self.violation(format!(
                "{phase} {drill}: {admitted} admitted for key {}, expected exactly {} ({})",
                f.key, f.expected, f.limit
            ));
        }
        let before = snapshot(self.proxy);
        let rejected = probes.len();
        let probed = flood(probes).await;
        let by_op: BTreeMap<&str, usize> = snapshot(self.proxy)
            .into_iter()
            .map(|(op, n)| (op, n - before[op]))
            .filter(|(_, n)| *n > 0)
            .collect();
        self.check_outcomes(drill, &probed, window);
        // With the block cache a rejection writes nothing in any layer (one refresh allowed, for
        // a cache entry that reached its maximum age during the probes).
        let writes = by_op.get("UpdateItem").copied().unwrap_or(0);
        if phase != "cache off" && writes > 1 {
            self.violation(format!(
                "{phase} {drill}: {rejected} rejections against a block-cached key wrote {writes} times"
            ));
        }
        let leaked = probed.iter().filter(|o| o.status != 429).count();
        if leaked > 0 {
            self.violation(format!(
                "{phase} {drill}: {leaked} of {rejected} requests against the full key were not refused ({})",
                statuses(&probed)
            ));
        }
        eprintln!(
            "drill: {phase} {drill}: {admitted}/{} admitted (expected {}), {rejected} probes cost {by_op:?} ({:.1}s)",
            outcomes.len(),
            f.expected,
            t.elapsed().as_secs_f64()
        );
        self.row(f, outcomes.iter().chain(&probed).collect(), admitted);
        let total = by_op.values().sum::<usize>();
        let by_op: Vec<String> = by_op.iter().map(|(op, n)| format!("{op} {n}")).collect();
        self.costs.push(CostRow {
            phase,
            drill: drill.to_string(),
            rejected,
            total,
            per: format!("{:.2}", total as f64 / rejected.max(1) as f64),
            by_op: if by_op.is_empty() {
                "none".into()
            } else {
                by_op.join(", ")
            },
        });
    }

    /// No request lost, and every request answered within the window the drill counts in.
    fn check_outcomes(&mut self, drill: &str, outcomes: &[Outcome], window: u64) {
        let w = self.limits.window_ms;
        for o in outcomes {
            if let Some(e) = &o.error {
                self.violation(format!("{drill}: a request got no answer: {e}"));
            } else if o.sent_ms < window || o.done_ms >= window + w {
                self.violation(format!(
                    "{drill}: a request fell outside its window (sent at +{} ms, answered at +{} ms of a {w} ms window): the machine is too slow for these windows",
                    o.sent_ms as i64 - window as i64,
                    o.done_ms as i64 - window as i64
                ));
            }
        }
    }

    /// The floods of the first two phases; `net` keeps each phase's addresses apart.
    async fn floods(&mut self, net: u8) {
        let l = self.limits;

        // Random bearer tokens against the transfer function: the `ip` layer counts them all.
        self.random_bearer_tokens(net, "").await;

        // No token at all.
        let ip = format!("198.51.{net}.11");
        let f = Flood::new("no token (transfer)", &ip, "ip", l.transfer_ip, "");
        self.flood(f, |d| d.account(&ip, &[])).await;

        // A rotating spoofed X-Forwarded-For from one viewer address.
        let ip = format!("198.51.{net}.12");
        let drill = "rotating spoofed X-Forwarded-For (session)";
        let f = Flood::new(drill, &ip, "ip", l.session_ip, "");
        self.flood(f, |d| {
            let xff = format!("{}, {}", ipv4(&mut d.rng), ipv4(&mut d.rng));
            d.session(&ip, &[("X-Forwarded-For", xff)])
        })
        .await;

        // Rotating IPv6 addresses inside one /64.
        self.rotating_slash_64(net, "").await;
        // The neighbouring /64 is another client: it still gets in.
        let neighbour = format!("2001:db8:d{net:02x}:65::1");
        let req = self.session(&neighbour, &[]);
        let o = send(req).await;
        if o.status != 200 {
            let phase = self.phase;
            self.violation(format!(
                "{phase}: the neighbouring /64 {neighbour} got {} instead of 200",
                o.status
            ));
        }

        // A forged internal token: counted like anyone.
        let ip = format!("198.51.{net}.13");
        let forged = format!("{:032x}", self.rng.u128(..));
        let f = Flood::new(
            "forged internal token (session)",
            &ip,
            "ip",
            l.session_ip,
            "",
        );
        self.flood(f, |d| {
            d.session(&ip, &[("X-Internal-Token", forged.clone())])
        })
        .await;

        // One valid (stolen) client token from a new address each time: the `client` layer
        // holds, whatever the address. The client is shared by both phases, so the second one
        // starts in a fresh window (the first already filled its counter in some window).
        let token = format!("Bearer {}", self.stack.demo_token);
        let drill = "one client token from rotating addresses (transfer)";
        let mut f = Flood::new(drill, "the demo client", "client", l.transfer_client, "");
        f.fresh = self.phase != "cache on";
        self.flood(f, |d| {
            let ip = ipv4(&mut d.rng);
            d.account(&ip, &[("Authorization", token.clone())])
        })
        .await;
    }

    /// The third phase (sliding windows, a sharded spend cap, block cache on): failed
    /// authentications still count in `ip`; many addresses against the sharded cap admit
    /// exactly the cap; a rotating /64 against the sliding `ip` layer; a boundary burst.
    async fn sliding_floods(&mut self) {
        // Keys never used before, so no previous window to wait out.
        self.random_bearer_tokens(3, ":sliding").await;
        self.rotating_slash_64(3, ":sliding").await;

        // Every request from a new address: only the spend cap, spread over 4 shards, holds. A
        // fresh window: the floods above spent some of it.
        let drill = "a new address per request against the spend cap (session)";
        let mut f = Flood::new(drill, "global", "global", SHARDED_CAP, ":shards=4");
        f.fresh = true;
        let over = std::mem::replace(&mut self.over, 3);
        self.flood(f, |d| {
            let ip = ipv4(&mut d.rng);
            d.session(&ip, &[])
        })
        .await;
        self.over = over;
        self.boundary("192.0.2.90", true).await;
    }

    /// Random bearer tokens from one address against the transfer function's `ip` layer
    /// (`option`: how the phase configured it, for the report).
    async fn random_bearer_tokens(&mut self, net: u8, option: &str) {
        let ip = format!("198.51.{net}.10");
        let drill = "random bearer tokens (transfer)";
        let f = Flood::new(drill, &ip, "ip", self.limits.transfer_ip, option);
        self.flood(f, |d| {
            let token = format!("Bearer {:032x}", d.rng.u128(..));
            d.account(&ip, &[("Authorization", token)])
        })
        .await;
    }

    /// Session requests from addresses rotating inside one IPv6 /64: one key, whatever the
    /// rotation.
    async fn rotating_slash_64(&mut self, net: u8, option: &str) {
        let prefix = format!("2001:db8:d{net:02x}:64");
        let key = format!("{prefix}::/64");
        let drill = "rotating IPv6 inside one /64 (session)";
        let f = Flood::new(drill, &key, "ip", self.limits.session_ip, option);
        self.flood(f, |d| {
            let [a, b, c, e] = [(); 4].map(|_| d.rng.u16(..));
            d.session(&format!("{prefix}:{a:x}:{b:x}:{c:x}:{e:x}"), &[])
        })
        .await;
    }

    /// The limit's worth of session requests just before a window boundary and again just
    /// after, from one address: a fixed `ip` layer admits both (twice its limit within well
    /// under a window), a sliding one only the first.
    async fn boundary(&mut self, ip: &str, sliding: bool) {
        let (phase, w) = (self.phase, self.limits.window_ms);
        let limit = self.limits.session_ip as usize;
        // A fresh window, then its last sixth.
        let start = self.room(w, true).await;
        sleep_until(start + w - w / 6).await;
        let before: Vec<Req> = (0..limit).map(|_| self.session(ip, &[])).collect();
        let before = flood(before).await;
        sleep_until(start + w + 20).await;
        let after: Vec<Req> = (0..limit).map(|_| self.session(ip, &[])).collect();
        let after = flood(after).await;
        let mut all: Vec<&Outcome> = before.iter().chain(&after).collect();
        let first = all.iter().map(|o| o.sent_ms).min().unwrap_or(0);
        let last = all.iter().map(|o| o.done_ms).max().unwrap_or(0);
        let admitted = |o: &[Outcome]| o.iter().filter(|o| o.admitted()).count();
        let (b, a) = (admitted(&before), admitted(&after));
        let bound = if sliding { limit } else { 2 * limit };
        if all.iter().any(|o| o.error.is_some()) || before.iter().any(|o| o.done_ms >= start + w) {
            self.violation(format!(
                "{phase} boundary burst: a request was lost or answered late"
            ));
        }
        if b + a != bound {
            self.violation(format!(
                "{phase} boundary burst: {} admitted across the boundary, expected {bound} ({})",
                b + a,
                statuses(all.iter().copied())
            ));
        }
        let boundary = (start + w) as f64;
        all.sort_by_key(|o| o.done_ms);
        let mut timeline = vec![(first as f64 - boundary, 0)];
        for o in all {
            let so_far = timeline.last().map_or(0, |t| t.1) + usize::from(o.admitted());
            timeline.push((o.done_ms as f64 - boundary, so_far));
        }
        self.bursts.push(Burst {
            phase,
            limit: format!("ip={limit}{}", if sliding { ":sliding" } else { "" }),
            before: b,
            after: a,
            span_ms: last.saturating_sub(first),
            bound,
            timeline,
        });
    }

    /// `reqs` in `window`: a violation unless exactly `f.expected` of their answers `pass`; a
    /// row of the table either way.
    async fn exactly(
        &mut self,
        f: Flood<'_>,
        reqs: Vec<Req>,
        window: u64,
        pass: fn(&Outcome) -> bool,
    ) {
        let out = flood(reqs).await;
        self.check_outcomes(f.drill, &out, window);
        let passed = out.iter().filter(|o| pass(o)).count();
        if passed != f.expected {
            self.violation(format!(
                "{}: {passed} of {} passed at {}, expected {} ({}; {})",
                f.drill,
                out.len(),
                f.key,
                f.expected,
                f.limit,
                statuses(&out)
            ));
        }
        self.row(f, out.iter().collect(), passed);
    }

    /// The table's row for flood `f`: what was `sent`, and how many were admitted.
    fn row(&mut self, f: Flood<'_>, sent: Vec<&Outcome>, admitted: usize) {
        self.rows.push(Row {
            phase: self.phase,
            drill: f.drill.into(),
            key: f.key.into(),
            sent: sent.len(),
            admitted,
            limit: f.limit,
            expected: f.expected,
            statuses: statuses(sent),
        });
    }

    /// Internal callers sharing one address: not limited by `ip` (nor `client`), and they
    /// leave that address's quota to the external callers behind it (in the same window).
    async fn internal(&mut self) {
        let l = self.limits;
        let ip = "192.0.2.50";
        let token = self.stack.internal_token.clone();
        let internal = [("X-Internal-Token", token.clone())];
        let mut f = Flood::new(
            "3 internal callers, one address (session)",
            ip,
            "ip",
            l.session_ip,
            " (skipped)",
        );
        f.expected *= 4;
        let reqs: Vec<Req> = (0..f.expected)
            .map(|_| self.session(ip, &internal))
            .collect();
        let window = self.room(l.window_ms * 2 / 3, false).await;
        self.exactly(f, reqs, window, |o| o.status == 200).await;
        let drill = "an external caller at the same address, same window";
        let f = Flood::new(drill, ip, "ip", l.session_ip, "");
        let reqs: Vec<Req> = (0..l.session_ip * 2)
            .map(|_| self.session(ip, &[]))
            .collect();
        self.exactly(f, reqs, window, Outcome::admitted).await;

        // The transfer function: the real internal token with the demo client's token, far past
        // both `ip` and `client`.
        let headers = [
            ("Authorization", format!("Bearer {}", self.stack.demo_token)),
            ("X-Internal-Token", token),
        ];
        let key = format!("{ip} / the demo client");
        let drill = "internal caller with a client token (transfer)";
        let mut f = Flood::new(drill, &key, "ip", l.transfer_ip, "");
        f.limit = format!("{}, client={} (both skipped)", f.limit, l.transfer_client);
        f.expected *= 2;
        let reqs: Vec<Req> = (0..f.expected)
            .map(|_| self.account(ip, &headers))
            .collect();
        let window = self.room(l.window_ms * 2 / 3, false).await;
        self.exactly(f, reqs, window, |o| o.status == 200).await;
    }

    /// The reconnect loop: one client retrying every tenth of a window (lesson 000's 3 s against
    /// an hour, scaled) for three windows. Each window must admit exactly the limit and reopen.
    async fn reconnect(&mut self) {
        let l = self.limits;
        let w = l.window_ms;
        let ip = "192.0.2.77";
        let first = self.room(w, true).await;
        let step = w / 10;
        // Per window: (sent, admitted, its first request admitted: it reopened).
        let mut per_window: BTreeMap<u64, (usize, usize, bool)> = BTreeMap::new();
        let mut retry_after_ok = true;
        for i in 0..30u64 {
            sleep_until(first + i * step + step / 2).await;
            let req = self.session(ip, &[]);
            let o = send(req).await;
            let win = (o.sent_ms - first) / w;
            if (o.done_ms - first) / w != win || o.error.is_some() {
                self.violation(format!(
                    "reconnect loop: request {i} straddled a window boundary or got no answer"
                ));
                continue;
            }
            let e = per_window.entry(win).or_default();
            e.0 += 1;
            if o.admitted() {
                e.1 += 1;
                e.2 |= e.0 == 1;
            } else if let Some(ra) = o.retry_after {
                let left = (first + (win + 1) * w).saturating_sub(o.sent_ms);
                retry_after_ok &= ra * 1000 <= left + 1000;
            }
        }
        if !retry_after_ok {
            self.violation(
                "reconnect loop: a Retry-After pointed past the end of its window".into(),
            );
        }
        for (win, (sent, admitted, reopened)) in per_window.clone() {
            if admitted != l.session_ip as usize || !reopened {
                self.violation(format!(
                    "reconnect loop: window {} admitted {admitted} of {sent} (limit {}), reopened: {reopened}",
                    win + 1,
                    l.session_ip
                ));
            }
            self.windows.push(Window {
                window: win + 1,
                sent,
                admitted,
                limit: l.session_ip,
                reopened,
            });
        }
        if per_window.len() != 3 {
            self.violation(format!(
                "reconnect loop: spanned {} windows, expected 3",
                per_window.len()
            ));
        }
    }
}

/// What the report shows (`templates/drill.md`).
#[derive(Serialize)]
pub struct Figures {
    pub violations: Vec<String>,
    short: bool,
    limits: limits::Limits,
    sliding: limits::Limits,
    pub(super) bursts: Vec<Burst>,
    concurrency: usize,
    on_s: String,
    total_s: String,
    rows: Vec<Row>,
    step_s: String,
    window_s: u64,
    session_ip: u32,
    windows: Vec<Window>,
    pub(super) costs: Vec<CostRow>,
    /// DynamoDB requests per `client`-layer rejection with and without the block cache.
    client_cost: Option<(String, String)>,
}

/// Runs the drills on `target`, counting DynamoDB requests with `proxy`; `restart` restarts
/// the functions with the variables it is given: `RATE_LIMIT_BLOCK_CACHE_SIZE=0` for the
/// second pass, the sliding limits for the third.
pub async fn run<F, Fut>(
    st: &Settings,
    target: &Target,
    proxy: &FaultProxy,
    mut restart: F,
) -> Figures
where
    F: FnMut(Vec<(String, String)>) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let started = Instant::now();
    let session = RateLimits::parse(&st.limits.session).expect("session limits");
    let transfer = RateLimits::parse(&st.limits.transfer).expect("transfer limits");
    let ip = session.get(Layer::Ip).expect("session ip layer");
    let client = transfer.get(Layer::Client).expect("transfer client");
    let limits = Limits {
        window_ms: ip.window_secs() * 1000,
        session_ip: ip.limit(),
        transfer_ip: transfer.get(Layer::Ip).expect("transfer ip").limit(),
        transfer_client: client.limit(),
    };
    let mut d = Drill {
        st,
        stack: target,
        limits,
        proxy,
        rng: fastrand::Rng::with_seed(now_ms()),
        phase: "cache on",
        over: if st.short { 2 } else { 4 },
        probe: if st.short { 20 } else { 50 },
        rows: Vec::new(),
        costs: Vec::new(),
        windows: Vec::new(),
        bursts: Vec::new(),
        violations: Vec::new(),
    };

    let t = Instant::now();
    d.floods(1).await;
    d.internal().await;
    d.reconnect().await;
    d.boundary("192.0.2.80", false).await;
    let on_time = t.elapsed();

    eprintln!("drill: restarting the functions with RATE_LIMIT_BLOCK_CACHE_SIZE=0");
    let off = vec![("RATE_LIMIT_BLOCK_CACHE_SIZE".to_string(), "0".to_string())];
    d.phase = "cache off";
    match restart(off).await {
        Err(e) => d.violation(format!("restart without the block cache: {e}")),
        Ok(()) => {
            let t = Instant::now();
            d.floods(2).await;
            let took = t.elapsed().as_secs_f64();
            eprintln!("drill: cache off floods took {took:.1}s");
        }
    }

    eprintln!("drill: restarting the functions with sliding windows and a sharded spend cap");
    let mut sliding = st.sliding.env().to_vec();
    sliding.push(("RATE_LIMIT_BLOCK_CACHE_SIZE".into(), "10000".into()));
    (d.phase, d.over) = ("sliding, shards", if st.short { 2 } else { 3 });
    match restart(sliding).await {
        Err(e) => d.violation(format!("restart with sliding windows: {e}")),
        Ok(()) => d.sliding_floods().await,
    }

    let client_cost = |phase: &str| {
        let c = d
            .costs
            .iter()
            .find(|c| c.phase == phase && c.drill.starts_with("one client token"));
        c.map(|c| c.per.clone())
    };
    let client_cost = client_cost("cache on").zip(client_cost("cache off"));
    Figures {
        short: st.short,
        limits: st.limits.clone(),
        sliding: st.sliding.clone(),
        bursts: d.bursts,
        concurrency: CONCURRENCY,
        on_s: format!("{:.1}", on_time.as_secs_f64()),
        total_s: format!("{:.1}", started.elapsed().as_secs_f64()),
        step_s: format!("{:.1}", limits.window_ms as f64 / 10_000.0),
        window_s: limits.window_ms / 1000,
        session_ip: limits.session_ip,
        costs: d.costs,
        client_cost,
        rows: d.rows,
        windows: d.windows,
        violations: d.violations,
    }
}
