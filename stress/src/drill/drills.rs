//! The drills themselves, the report's figures (`templates/drill.md`), and the client they
//! play: requests invoked on the pools, each answered or lost within 30 s.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::StreamExt;
use serde::Serialize;
use tollgate::ratelimit::{Layer, RateLimits};
use tollgate_tests::fault_proxy::FaultProxy;

use crate::lambda::Pool;
use crate::limits;

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
const TIMEOUT: Duration = Duration::from_secs(30);

/// The sliding phase's spend cap (`global`, per window, over 4 shards).
pub const SHARDED_CAP: u32 = 40;

/// The run's settings (from `--short`) and the secrets and limits the functions got.
pub struct Settings {
    pub short: bool,
    pub origin_secret: String,
    pub limits: limits::Limits,
    /// The limits of the third phase: the same per-caller limits with sliding windows, and a
    /// sharded spend cap of [`SHARDED_CAP`].
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

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// Random tokens, ports and addresses, from `fastrand`'s generator seeded with the start time.
struct Rng(fastrand::Rng);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.u64(..)
    }
    fn hex(&mut self) -> String {
        format!("{:016x}{:016x}", self.next(), self.next())
    }
    fn port(&mut self) -> u16 {
        self.0.u16(1024..61024)
    }
    fn ipv4(&mut self) -> String {
        let n = self.next();
        format!(
            "{}.{}.{}.{}",
            1 + n % 223,
            (n >> 8) % 256,
            (n >> 16) % 256,
            1 + (n >> 24) % 254
        )
    }
}

/// One request to send.
#[derive(Clone)]
struct Req {
    function: Arc<Pool>,
    method: &'static str,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
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
    let answer = match builder.body(Bytes::from(req.body)) {
        Ok(r) => match tokio::time::timeout(TIMEOUT, req.function.invoke(r)).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(lost)) => Err(lost.to_string()),
            Err(_) => Err(format!("no answer within {TIMEOUT:?}")),
        },
        Err(e) => Err(format!("not sendable: {e}")),
    };
    match answer {
        Ok(resp) => Outcome {
            status: resp.status().as_u16(),
            sent_ms,
            done_ms: now_ms(),
            retry_after: resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok()?.parse().ok()),
            error: None,
        },
        Err(e) => Outcome {
            status: 0,
            sent_ms,
            done_ms: now_ms(),
            retry_after: None,
            error: Some(e),
        },
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

fn delta(
    after: &BTreeMap<&'static str, usize>,
    before: &BTreeMap<&'static str, usize>,
) -> BTreeMap<&'static str, usize> {
    after
        .iter()
        .map(|(op, n)| (*op, n - before[op]))
        .filter(|(_, n)| *n > 0)
        .collect()
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

/// The DynamoDB cost of requests refused against a full key.
struct Cost {
    phase: &'static str,
    drill: String,
    rejected: usize,
    by_op: BTreeMap<&'static str, usize>,
}

impl Cost {
    fn total(&self) -> usize {
        self.by_op.values().sum()
    }
}

/// Everything the drills found.
struct Findings {
    rows: Vec<Row>,
    costs: Vec<Cost>,
    windows: Vec<Window>,
    bursts: Vec<Burst>,
    violations: Vec<String>,
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

fn statuses(outcomes: &[Outcome]) -> String {
    let mut m: BTreeMap<u16, usize> = BTreeMap::new();
    for o in outcomes {
        *m.entry(o.status).or_default() += 1;
    }
    m.iter()
        .map(|(s, n)| {
            if *s == 0 {
                format!("lost×{n}")
            } else {
                format!("{s}×{n}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The drill context: stack, limits, proxy and findings so far.
struct Drill<'a> {
    st: &'a Settings,
    stack: &'a Target,
    limits: Limits,
    proxy: &'a FaultProxy,
    rng: Rng,
    f: Findings,
    /// Extra requests against a full key, to measure what a rejection costs.
    probe: usize,
}

impl Drill<'_> {
    /// Waits, if need be, for a window with at least `need_ms` left (or a new window when
    /// `fresh`), so that a flood and its probes fall into one window.
    async fn room(&self, need_ms: u64, fresh: bool) -> u64 {
        let w = self.limits.window_ms;
        let now = now_ms();
        let start = now - now % w;
        if fresh || start + w - now < need_ms {
            tokio::time::sleep(Duration::from_millis(start + w + 30 - now)).await;
            start + w
        } else {
            start
        }
    }

    fn cf(&mut self, ip: &str) -> Vec<(String, String)> {
        let port = self.rng.port();
        vec![
            ("X-Origin-Verify".into(), self.st.origin_secret.clone()),
            ("CloudFront-Viewer-Address".into(), format!("{ip}:{port}")),
        ]
    }

    fn session(&mut self, ip: &str, extra: &[(&str, String)]) -> Req {
        let mut headers = self.cf(ip);
        headers.push(("Content-Type".into(), "application/json".into()));
        headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
        Req {
            function: self.stack.session.clone(),
            method: "POST",
            path: "/session".into(),
            headers,
            body: b"{}".to_vec(),
        }
    }

    fn account(&mut self, ip: &str, extra: &[(&str, String)]) -> Req {
        let mut headers = self.cf(ip);
        headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
        Req {
            function: self.stack.transfer.clone(),
            method: "GET",
            path: format!("/accounts/{}", self.stack.demo_account),
            headers,
            body: Vec::new(),
        }
    }

    fn violation(&mut self, v: String) {
        eprintln!("drill: VIOLATION: {v}");
        self.f.violations.push(v);
    }

    /// Sends `fill` (which must exceed the limit), checks that exactly `expected` were admitted,
    /// all in one window, then sends `probe` more against the full key and records what they
    /// cost in DynamoDB requests; every probe must be refused.
    #[allow(clippy::too_many_arguments)]
    async fn flood_drill(
        &mut self,
        phase: &'static str,
        drill: &str,
        key: &str,
        limit: String,
        expected: usize,
        fill: Vec<Req>,
        probes: Vec<Req>,
        fresh: bool,
    ) {
        let need = self.limits.window_ms / 2;
        let window = self.room(need, fresh).await;
        let t = Instant::now();
        let outcomes = flood(fill).await;
        let admitted = outcomes.iter().filter(|o| o.admitted()).count();
        self.check_outcomes(drill, &outcomes, window);
        if admitted != expected {
            self.violation(format!(
                "{phase} {drill}: {admitted} admitted for key {key}, expected exactly {expected} ({limit})"
            ));
        }
        let before = snapshot(self.proxy);
        let rejected = probes.len();
        let probed = flood(probes).await;
        let by_op = delta(&snapshot(self.proxy), &before);
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
            "drill: {phase} {drill}: {admitted}/{} admitted (expected {expected}), {rejected} probes cost {:?} ({:.1}s)",
            outcomes.len(),
            by_op,
            t.elapsed().as_secs_f64()
        );
        self.f.rows.push(Row {
            phase,
            drill: drill.to_string(),
            key: key.to_string(),
            sent: outcomes.len() + probed.len(),
            admitted,
            limit,
            expected,
            statuses: statuses(&outcomes.iter().chain(&probed).cloned().collect::<Vec<_>>()),
        });
        self.f.costs.push(Cost {
            phase,
            drill: drill.to_string(),
            rejected,
            by_op,
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

    /// The floods, run in both phases; `net` keeps each phase's addresses apart.
    async fn floods(&mut self, phase: &'static str, net: u8) {
        let l = self.limits;
        let over = if self.st.short { 2 } else { 4 };

        // Random bearer tokens against the transfer function: the `ip` layer counts them all.
        self.random_bearer_tokens(phase, net, "", over, false).await;

        // No token at all.
        let ip = format!("198.51.{net}.11");
        let mk = |d: &mut Self, n: usize| (0..n).map(|_| d.account(&ip, &[])).collect::<Vec<_>>();
        let (fill, probes) = (
            mk(self, l.transfer_ip as usize * over),
            mk(self, self.probe),
        );
        self.flood_drill(
            phase,
            "no token (transfer)",
            &ip,
            format!("ip={}", l.transfer_ip),
            l.transfer_ip as usize,
            fill,
            probes,
            false,
        )
        .await;

        // A rotating spoofed X-Forwarded-For from one viewer address.
        let ip = format!("198.51.{net}.12");
        let mk = |d: &mut Self, n: usize| {
            (0..n)
                .map(|_| {
                    let xff = format!("{}, {}", d.rng.ipv4(), d.rng.ipv4());
                    d.session(&ip, &[("X-Forwarded-For", xff)])
                })
                .collect::<Vec<_>>()
        };
        let (fill, probes) = (mk(self, l.session_ip as usize * over), mk(self, self.probe));
        self.flood_drill(
            phase,
            "rotating spoofed X-Forwarded-For (session)",
            &ip,
            format!("ip={}", l.session_ip),
            l.session_ip as usize,
            fill,
            probes,
            false,
        )
        .await;

        // Rotating IPv6 addresses inside one /64.
        self.rotating_slash_64(phase, net, "", over, false).await;
        // The neighbouring /64 is another client: it still gets in.
        let neighbour = format!("2001:db8:d{net:02x}:65::1");
        let req = self.session(&neighbour, &[]);
        let o = send(req).await;
        if o.status != 200 {
            self.violation(format!(
                "{phase}: the neighbouring /64 {neighbour} got {} instead of 200",
                o.status
            ));
        }

        // A forged internal token: counted like anyone.
        let ip = format!("198.51.{net}.13");
        let forged = self.rng.hex();
        let mk = |d: &mut Self, n: usize| {
            (0..n)
                .map(|_| d.session(&ip, &[("X-Internal-Token", forged.clone())]))
                .collect::<Vec<_>>()
        };
        let (fill, probes) = (mk(self, l.session_ip as usize * over), mk(self, self.probe));
        self.flood_drill(
            phase,
            "forged internal token (session)",
            &ip,
            format!("ip={}", l.session_ip),
            l.session_ip as usize,
            fill,
            probes,
            false,
        )
        .await;

        // One valid (stolen) client token from a new address each time: the `client` layer
        // holds, whatever the address. The client is shared by both phases, so the second one
        // starts in a fresh window.
        let token = format!("Bearer {}", self.stack.demo_token);
        let mk = |d: &mut Self, n: usize| {
            (0..n)
                .map(|_| {
                    let ip = d.rng.ipv4();
                    d.account(&ip, &[("Authorization", token.clone())])
                })
                .collect::<Vec<_>>()
        };
        let (fill, probes) = (
            mk(self, l.transfer_client as usize * over),
            mk(self, self.probe),
        );
        self.flood_drill(
            phase,
            "one client token from rotating addresses (transfer)",
            "the demo client",
            format!("client={}", l.transfer_client),
            l.transfer_client as usize,
            fill,
            probes,
            // The first phase already filled this client's counter in some window.
            phase != "cache on",
        )
        .await;
    }

    /// The third phase (sliding windows, a sharded spend cap, block cache on): failed
    /// authentications still count in `ip`; many addresses against the sharded cap admit
    /// exactly the cap; a rotating /64 against the sliding `ip` layer; a boundary burst.
    async fn sliding_floods(&mut self) {
        let (phase, net) = ("sliding, shards", 3u8);
        let over = if self.st.short { 2 } else { 3 };
        // Keys never used before, so no previous window to wait out.
        self.random_bearer_tokens(phase, net, ":sliding", over, false)
            .await;
        self.rotating_slash_64(phase, net, ":sliding", over, false)
            .await;

        // Every request from a new address: only the spend cap, spread over 4 shards, holds. A
        // fresh window: the floods above spent some of it.
        let mk = |d: &mut Self, n: usize| {
            (0..n)
                .map(|_| {
                    let ip = d.rng.ipv4();
                    d.session(&ip, &[])
                })
                .collect::<Vec<_>>()
        };
        let cap = SHARDED_CAP as usize;
        let (fill, probes) = (mk(self, cap * 3), mk(self, self.probe));
        self.flood_drill(
            phase,
            "a new address per request against the spend cap (session)",
            "global",
            format!("global={SHARDED_CAP}:shards=4"),
            cap,
            fill,
            probes,
            true,
        )
        .await;
        self.boundary(phase, "192.0.2.90", true).await;
    }

    /// Random bearer tokens from one address against the transfer function's `ip` layer
    /// (`option`: how the phase configured it, for the report), `over` times its limit.
    async fn random_bearer_tokens(
        &mut self,
        phase: &'static str,
        net: u8,
        option: &str,
        over: usize,
        fresh: bool,
    ) {
        let (ip, limit) = (format!("198.51.{net}.10"), self.limits.transfer_ip);
        let mk = |d: &mut Self, n: usize| {
            (0..n)
                .map(|_| {
                    let token = d.rng.hex();
                    d.account(&ip, &[("Authorization", format!("Bearer {token}"))])
                })
                .collect::<Vec<_>>()
        };
        let (fill, probes) = (mk(self, limit as usize * over), mk(self, self.probe));
        let drill = "random bearer tokens (transfer)";
        let limit_text = format!("ip={limit}{option}");
        self.flood_drill(
            phase,
            drill,
            &ip,
            limit_text,
            limit as usize,
            fill,
            probes,
            fresh,
        )
        .await;
    }

    /// Session requests from addresses rotating inside one IPv6 /64, `over` times the `ip`
    /// limit: one key, whatever the rotation.
    async fn rotating_slash_64(
        &mut self,
        phase: &'static str,
        net: u8,
        option: &str,
        over: usize,
        fresh: bool,
    ) {
        let (prefix, limit) = (format!("2001:db8:d{net:02x}:64"), self.limits.session_ip);
        let mk = |d: &mut Self, n: usize| {
            (0..n)
                .map(|_| {
                    let x = d.rng.next();
                    let (a, b, c, e) =
                        (x & 0xffff, (x >> 16) & 0xffff, (x >> 32) & 0xffff, x >> 48);
                    d.session(&format!("{prefix}:{a:x}:{b:x}:{c:x}:{e:x}"), &[])
                })
                .collect::<Vec<_>>()
        };
        let (fill, probes) = (mk(self, limit as usize * over), mk(self, self.probe));
        let (drill, key) = (
            "rotating IPv6 inside one /64 (session)",
            format!("{prefix}::/64"),
        );
        let limit_text = format!("ip={limit}{option}");
        self.flood_drill(
            phase,
            drill,
            &key,
            limit_text,
            limit as usize,
            fill,
            probes,
            fresh,
        )
        .await;
    }

    /// The limit's worth of session requests just before a window boundary and again just
    /// after, from one address: a fixed `ip` layer admits both (twice its limit within well
    /// under a window), a sliding one only the first.
    async fn boundary(&mut self, phase: &'static str, ip: &str, sliding: bool) {
        let (w, limit) = (self.limits.window_ms, self.limits.session_ip as usize);
        // A fresh window, then its last sixth.
        let start = self.room(w, true).await;
        let at = start + w - w / 6;
        tokio::time::sleep(Duration::from_millis(at.saturating_sub(now_ms()))).await;
        let before: Vec<Req> = (0..limit).map(|_| self.session(ip, &[])).collect();
        let before = flood(before).await;
        let next = start + w + 20;
        tokio::time::sleep(Duration::from_millis(next.saturating_sub(now_ms()))).await;
        let after: Vec<Req> = (0..limit).map(|_| self.session(ip, &[])).collect();
        let after = flood(after).await;
        let all: Vec<&Outcome> = before.iter().chain(&after).collect();
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
                statuses(&before.iter().chain(&after).cloned().collect::<Vec<_>>())
            ));
        }
        let boundary = (start + w) as f64;
        let mut answers: Vec<&&Outcome> = all.iter().collect();
        answers.sort_by_key(|o| o.done_ms);
        let mut timeline = vec![(first as f64 - boundary, 0)];
        for o in answers {
            let so_far = timeline.last().map_or(0, |t| t.1) + usize::from(o.admitted());
            timeline.push((o.done_ms as f64 - boundary, so_far));
        }
        self.f.bursts.push(Burst {
            phase,
            limit: format!("ip={limit}{}", if sliding { ":sliding" } else { "" }),
            before: b,
            after: a,
            span_ms: last.saturating_sub(first),
            bound,
            timeline,
        });
    }

    /// Internal callers sharing one address: not limited by `ip` (nor `client`), and they
    /// leave that address's quota to the external callers behind it.
    async fn internal(&mut self) {
        let l = self.limits;
        let ip = "192.0.2.50";
        let window = self.room(self.limits.window_ms * 2 / 3, false).await;
        let token = self.stack.internal_token.clone();
        let n = l.session_ip as usize * 4;
        let reqs: Vec<Req> = (0..n)
            .map(|_| self.session(ip, &[("X-Internal-Token", token.clone())]))
            .collect();
        let internal = flood(reqs).await;
        self.check_outcomes("internal callers", &internal, window);
        let admitted = internal.iter().filter(|o| o.status == 200).count();
        if admitted != n {
            self.violation(format!(
                "internal callers: {admitted} of {n} got 200 from {ip} ({})",
                statuses(&internal)
            ));
        }
        self.f.rows.push(Row {
            phase: "cache on",
            drill: "3 internal callers, one address (session)".into(),
            key: ip.into(),
            sent: n,
            admitted,
            limit: format!("ip={} (skipped)", l.session_ip),
            expected: n,
            statuses: statuses(&internal),
        });
        let reqs: Vec<Req> = (0..l.session_ip as usize * 2)
            .map(|_| self.session(ip, &[]))
            .collect();
        let external = flood(reqs).await;
        self.check_outcomes("external caller behind internal ones", &external, window);
        let admitted = external.iter().filter(|o| o.admitted()).count();
        if admitted != l.session_ip as usize {
            self.violation(format!(
                "an external caller sharing {ip} with internal callers got {admitted} admitted, expected {}",
                l.session_ip
            ));
        }
        self.f.rows.push(Row {
            phase: "cache on",
            drill: "an external caller at the same address, same window".into(),
            key: ip.into(),
            sent: external.len(),
            admitted,
            limit: format!("ip={}", l.session_ip),
            expected: l.session_ip as usize,
            statuses: statuses(&external),
        });

        // The transfer function: the real internal token with the demo client's token, far past
        // both `ip` and `client`.
        let n = l.transfer_ip as usize * 2;
        let bearer = format!("Bearer {}", self.stack.demo_token);
        let reqs: Vec<Req> = (0..n)
            .map(|_| {
                self.account(
                    ip,
                    &[
                        ("Authorization", bearer.clone()),
                        ("X-Internal-Token", token.clone()),
                    ],
                )
            })
            .collect();
        let window = self.room(self.limits.window_ms * 2 / 3, false).await;
        let out = flood(reqs).await;
        self.check_outcomes("internal callers (transfer)", &out, window);
        let admitted = out.iter().filter(|o| o.status == 200).count();
        if admitted != n {
            self.violation(format!(
                "internal callers (transfer): {admitted} of {n} got 200 ({})",
                statuses(&out)
            ));
        }
        self.f.rows.push(Row {
            phase: "cache on",
            drill: "internal caller with a client token (transfer)".into(),
            key: format!("{ip} / the demo client"),
            sent: n,
            admitted,
            limit: format!(
                "ip={}, client={} (both skipped)",
                l.transfer_ip, l.transfer_client
            ),
            expected: n,
            statuses: statuses(&out),
        });
    }

    /// The reconnect loop: one client retrying every tenth of a window (lesson 000's 3 s against
    /// an hour, scaled) for three windows. Each window must admit exactly the limit and reopen.
    async fn reconnect(&mut self) {
        let l = self.limits;
        let w = l.window_ms;
        let ip = "192.0.2.77";
        let first = self.room(w, true).await;
        let step = w / 10;
        let mut per_window: BTreeMap<u64, (usize, usize, bool)> = BTreeMap::new();
        let mut max_retry_after_ok = true;
        for i in 0..30u64 {
            let at = first + i * step + step / 2;
            let now = now_ms();
            if at > now {
                tokio::time::sleep(Duration::from_millis(at - now)).await;
            }
            let req = self.session(ip, &[]);
            let o = send(req).await;
            let win = (o.sent_ms - first) / w;
            if (o.done_ms - first) / w != win || o.error.is_some() {
                self.violation(format!(
                    "reconnect loop: request {i} straddled a window boundary or got no answer"
                ));
                continue;
            }
            let e = per_window.entry(win).or_insert((0, 0, false));
            e.0 += 1;
            if o.admitted() {
                e.1 += 1;
                if e.0 == 1 {
                    e.2 = true; // the window's first request got in: it reopened
                }
            } else if let Some(ra) = o.retry_after {
                let left = (first + (win + 1) * w).saturating_sub(o.sent_ms);
                if ra * 1000 > left + 1000 {
                    max_retry_after_ok = false;
                }
            }
        }
        if !max_retry_after_ok {
            self.violation(
                "reconnect loop: a Retry-After pointed past the end of its window".into(),
            );
        }
        for (win, (sent, admitted, reopened)) in &per_window {
            self.f.windows.push(Window {
                window: win + 1,
                sent: *sent,
                admitted: *admitted,
                limit: l.session_ip,
                reopened: *reopened,
            });
            if *admitted != l.session_ip as usize || !reopened {
                self.violation(format!(
                    "reconnect loop: window {} admitted {admitted} of {sent} (limit {}), reopened: {reopened}",
                    win + 1,
                    l.session_ip
                ));
            }
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

#[derive(Serialize)]
pub(super) struct CostRow {
    pub(super) phase: &'static str,
    pub(super) drill: String,
    pub(super) rejected: usize,
    pub(super) total: usize,
    per: String,
    by_op: String,
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
    let limits = Limits {
        window_ms: ip.window_secs() * 1000,
        session_ip: ip.limit(),
        transfer_ip: transfer.get(Layer::Ip).expect("transfer ip").limit(),
        transfer_client: transfer
            .get(Layer::Client)
            .expect("transfer client")
            .limit(),
    };
    let mut d = Drill {
        st,
        stack: target,
        limits,
        proxy,
        rng: Rng(fastrand::Rng::with_seed(now_ms())),
        f: Findings {
            rows: Vec::new(),
            costs: Vec::new(),
            windows: Vec::new(),
            bursts: Vec::new(),
            violations: Vec::new(),
        },
        probe: if st.short { 20 } else { 50 },
    };

    let t = Instant::now();
    d.floods("cache on", 1).await;
    d.internal().await;
    d.reconnect().await;
    d.boundary("cache on", "192.0.2.80", false).await;
    let on_time = t.elapsed();

    // Without the block cache.
    eprintln!("drill: restarting the functions with RATE_LIMIT_BLOCK_CACHE_SIZE=0");
    let off = vec![("RATE_LIMIT_BLOCK_CACHE_SIZE".to_string(), "0".to_string())];
    match restart(off).await {
        Err(e) => d.violation(format!("restart without the block cache: {e}")),
        Ok(()) => {
            let t = Instant::now();
            d.floods("cache off", 2).await;
            eprintln!(
                "drill: cache off floods took {:.1}s",
                t.elapsed().as_secs_f64()
            );
        }
    }

    // Sliding windows and a sharded spend cap, with the block cache.
    eprintln!("drill: restarting the functions with sliding windows and a sharded spend cap");
    let mut sliding = st.sliding.env().to_vec();
    sliding.push(("RATE_LIMIT_BLOCK_CACHE_SIZE".into(), "10000".into()));
    match restart(sliding).await {
        Err(e) => d.violation(format!("restart with sliding windows: {e}")),
        Ok(()) => d.sliding_floods().await,
    }
    figures(st, d, on_time, started.elapsed())
}

fn figures(st: &Settings, d: Drill<'_>, on_time: Duration, total: Duration) -> Figures {
    let f = d.f;
    let per = |c: &Cost| c.total() as f64 / c.rejected.max(1) as f64;
    let client_cost = |phase: &str| {
        f.costs
            .iter()
            .find(|c| c.phase == phase && c.drill.starts_with("one client token"))
            .map(|c| format!("{:.2}", per(c)))
    };
    let client_cost = client_cost("cache on").zip(client_cost("cache off"));
    Figures {
        short: st.short,
        limits: st.limits.clone(),
        sliding: st.sliding.clone(),
        bursts: f.bursts,
        concurrency: CONCURRENCY,
        on_s: format!("{:.1}", on_time.as_secs_f64()),
        total_s: format!("{:.1}", total.as_secs_f64()),
        step_s: format!("{:.1}", d.limits.window_ms as f64 / 10_000.0),
        window_s: d.limits.window_ms / 1000,
        session_ip: d.limits.session_ip,
        costs: f
            .costs
            .iter()
            .map(|c| CostRow {
                phase: c.phase,
                drill: c.drill.clone(),
                rejected: c.rejected,
                total: c.total(),
                per: format!("{:.2}", per(c)),
                by_op: if c.by_op.is_empty() {
                    "none".to_string()
                } else {
                    c.by_op
                        .iter()
                        .map(|(op, n)| format!("{op} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            })
            .collect(),
        client_cost,
        rows: f.rows,
        windows: f.windows,
        violations: f.violations,
    }
}
