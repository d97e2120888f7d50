//! Sliding windows against fixed ones, on the injected clock: the burst a fixed window lets
//! through at its boundary, the bound a sliding one keeps in every span, and what each costs.

use std::time::Duration;

use tollgate::clock::Clock;
use tollgate::clock::ManualClock;
use tollgate::ratelimit::{Admission, Decision, LimitCheck, RateLimit, RateLimiter, Verdict};
use tollgate_functions::catalog;
use tollgate_tests::counting::RequestCounter;
use tollgate_tests::dynamo::{self, counters_matching, Tables};
use tollgate_tests::events::HttpEvent;
use tollgate_tests::pipeline::{guarded, settings};
use tollgate_tests::{manual_clock, T0_MS};

const MINUTE: u64 = 60_000;

struct Setup {
    ddb: aws_sdk_dynamodb::Client,
    counter: RequestCounter,
    tables: Tables,
    clock: ManualClock,
    shared: tollgate::clock::SharedClock,
}

async fn setup() -> Setup {
    let (ddb, counter) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let (clock, shared) = manual_clock();
    Setup {
        ddb,
        counter,
        tables,
        clock,
        shared,
    }
}

impl Setup {
    /// A limiter as a process has it: with a block cache unless `cache` is 0.
    fn limiter(&self, cache: usize) -> RateLimiter {
        RateLimiter::new(
            self.ddb.clone(),
            &self.tables.rate_limits,
            catalog::EPHEMERAL_KEY.name,
            self.shared.clone(),
        )
        .with_block_cache(cache, Duration::from_secs(5))
    }
}

/// One check of `limit` for `key`: the decision, admitted or not.
async fn check(limiter: &RateLimiter, limit: &RateLimit, key: &str) -> (bool, Decision) {
    let mut admission = Admission::default();
    let checks = [LimitCheck { limit, key }];
    match limiter.check(&mut admission, &checks).await.unwrap() {
        Verdict::Admitted => (true, *admission.tightest().unwrap()),
        Verdict::Rejected(decision) => (false, decision),
    }
}

/// The start of the minute holding T0 (T0 is one second into it).
const MINUTE_0: u64 = T0_MS - 1_000;

#[tokio::test]
async fn across_a_boundary_fixed_admits_twice_its_limit_in_two_seconds_sliding_only_its_limit() {
    for (spec, expected) in [("ip=10/1m", 20), ("ip=10/1m:sliding", 10)] {
        let s = setup().await;
        let limiter = s.limiter(10_000);
        let limit: RateLimit = spec.parse().unwrap();
        // 10 at 12:59:59, then 10 more at 13:00:00.
        s.clock.set(MINUTE_0 + MINUTE - 1_000);
        let mut admitted = 0;
        for _ in 0..10 {
            admitted += u32::from(check(&limiter, &limit, "192.0.2.1").await.0);
        }
        s.clock.set(MINUTE_0 + MINUTE);
        for _ in 0..10 {
            admitted += u32::from(check(&limiter, &limit, "192.0.2.1").await.0);
        }
        assert_eq!(admitted, expected, "{spec}: admitted within 2 seconds");
    }
}

/// The most admissions in any closed span `[t - window, t]`.
fn busiest_span(admitted: &[u64], window: u64) -> usize {
    admitted
        .iter()
        .map(|&t| {
            admitted
                .iter()
                .filter(|&&a| a <= t && a + window >= t)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Traffic that waits and bursts at random moments over six windows: the fixed layer lets more
/// than its limit into some span of one window; the sliding layer never does, and still admits
/// close to its limit per window while a continuous flood lasts.
#[tokio::test]
async fn a_sliding_layer_admits_at_most_its_limit_in_any_span_of_one_window() {
    for (spec, bounded) in [("ip=10/1m", false), ("ip=10/1m:sliding", true)] {
        let s = setup().await;
        let limiter = s.limiter(10_000);
        let limit: RateLimit = spec.parse().unwrap();
        // Seeded, so the traffic is the same on every run.
        let mut traffic = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
        let mut admitted = Vec::new();
        s.clock.set(MINUTE_0);
        while s.clock.now_ms() < MINUTE_0 + 6 * MINUTE {
            // A pause of up to 20 s, then a burst of up to 12 requests 100 ms apart.
            s.clock
                .advance(Duration::from_millis(traffic.u64(..20_000)));
            for _ in 0..=traffic.u64(..12) {
                if check(&limiter, &limit, "192.0.2.2").await.0 {
                    admitted.push(s.clock.now_ms());
                }
                s.clock.advance(Duration::from_millis(100));
            }
        }
        let busiest = busiest_span(&admitted, MINUTE);
        match bounded {
            true => assert!(busiest <= 10, "{spec}: {busiest} in one window's span"),
            false => assert!(busiest > 10, "{spec}: the fixed window's burst: {busiest}"),
        }
    }

    // A continuous flood, one request every 500 ms for twenty windows: the bound holds, and
    // the layer sustains at least 20/21 of its limit (a unit comes back at most one slot, a
    // twentieth of the window, late), less one window's worth at the edges.
    let s = setup().await;
    let limiter = s.limiter(10_000);
    let limit: RateLimit = "ip=21/1m:sliding".parse().unwrap();
    let mut admitted = Vec::new();
    s.clock.set(MINUTE_0);
    while s.clock.now_ms() < MINUTE_0 + 20 * MINUTE {
        if check(&limiter, &limit, "192.0.2.3").await.0 {
            admitted.push(s.clock.now_ms());
        }
        s.clock.advance(Duration::from_millis(500));
    }
    assert!(busiest_span(&admitted, MINUTE) <= 21);
    let sustained = admitted.len();
    assert!(
        sustained >= 20 * 20 - 21,
        "{sustained} admitted in 20 windows of 21"
    );
}

/// Lesson 000 for a sliding layer: a rejection changes no counter, `Retry-After` is exact (one
/// millisecond before the reset still refused, at it admitted, DynamoDB the judge), and a client
/// retrying every 3 seconds is let back in on time.
#[tokio::test]
async fn a_sliding_rejection_changes_nothing_and_reopens_exactly_when_it_says() {
    let s = setup().await;
    let limiter = s.limiter(0);
    let limit: RateLimit = "ip=10/1m:sliding".parse().unwrap();
    let key = "192.0.2.4";
    // 4 early in the minute, 6 late; the next minute starts full.
    s.clock.set(MINUTE_0 + 2_000);
    for _ in 0..4 {
        assert!(check(&limiter, &limit, key).await.0);
    }
    s.clock.set(MINUTE_0 + 40_000);
    for _ in 0..6 {
        assert!(check(&limiter, &limit, key).await.0);
    }
    s.clock.set(MINUTE_0 + MINUTE + 1_000);
    let before = counters_matching(&s.ddb, &s.tables.rate_limits, "#ip#").await;
    let (admitted, refused) = check(&limiter, &limit, key).await;
    assert!(!admitted);
    assert_eq!(
        counters_matching(&s.ddb, &s.tables.rate_limits, "#ip#").await,
        before,
        "a rejection changes no counter"
    );
    // The 4 early ones leave with their slot (0..3 s of the previous minute): at 3 s.
    assert_eq!(refused.reset_at_ms, MINUTE_0 + MINUTE + 3_000);
    assert_eq!(refused.retry_after_secs(), 2);
    s.clock.set(refused.reset_at_ms - 1);
    assert!(!check(&limiter, &limit, key).await.0, "1 ms early");
    s.clock.set(refused.reset_at_ms);
    assert!(check(&limiter, &limit, key).await.0, "on time");

    // Through the gate, with the block cache: a client retrying every 3 seconds.
    let gate = tollgate::gate::Gate::new(
        settings(&s.tables, "ip=3/1m:sliding", &[]),
        s.ddb.clone(),
        s.shared.clone(),
    );
    let req = HttpEvent::post("/session").from_ip("192.0.2.5").request();
    s.clock.set(MINUTE_0 + 3 * MINUTE + 50_000);
    for _ in 0..3 {
        assert_eq!(guarded(&gate, &req, None).await.status(), 200);
    }
    let mut promised = None;
    let mut first_429 = None;
    loop {
        s.clock.advance(Duration::from_secs(3));
        let resp = guarded(&gate, &req, None).await;
        if resp.status() == 200 {
            break;
        }
        assert_eq!(resp.status(), 429);
        let retry: u64 = resp.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        promised.get_or_insert(s.clock.now_ms() + retry * 1_000);
        first_429.get_or_insert(s.clock.now_ms());
    }
    let (promised, now) = (promised.unwrap(), s.clock.now_ms());
    assert!(
        now >= promised && now < promised + 3_000,
        "let in at the first retry after the promised time ({now} vs {promised})"
    );
    // The three leave with the slot they arrived in (48..51 s into their minute), a minute on.
    assert_eq!(promised, MINUTE_0 + 4 * MINUTE + 51_000, "{first_429:?}");
}

/// `RateLimit` for a sliding layer: `r` is what the limit leaves after this request and what
/// of the previous window is still inside, `t` when everything counted has left the window.
#[tokio::test]
async fn sliding_ratelimit_fields_count_the_previous_window() {
    let s = setup().await;
    let gate = tollgate::gate::Gate::new(
        settings(&s.tables, "ip=10/1m:sliding", &[]),
        s.ddb.clone(),
        s.shared.clone(),
    );
    let req = HttpEvent::post("/session").from_ip("192.0.2.6").request();
    // 6 in slot 10 (30..33 s) of a minute, then 2 in slot 5 (15..18 s) of the next.
    s.clock.set(MINUTE_0 + 31_000);
    for _ in 0..6 {
        assert_eq!(guarded(&gate, &req, None).await.status(), 200);
    }
    s.clock.set(MINUTE_0 + MINUTE + 16_000);
    guarded(&gate, &req, None).await;
    let resp = guarded(&gate, &req, None).await;
    assert_eq!(resp.status(), 200);
    // 10 - 6 still inside - 2 counted = 2; everything has left at 18 s into the minute after.
    assert_eq!(resp.headers()["ratelimit"], "\"ip\";r=2;t=62");
    assert_eq!(resp.headers()["ratelimit-policy"], "\"ip\";q=10;w=60");
}

/// What a sliding layer costs: one request per admission in the steady state, one more when a
/// window rolls (the previous window read once, by the write that seals it), none per
/// rejection once block-cached.
#[tokio::test]
async fn a_sliding_admission_costs_one_request_and_a_cached_rejection_none() {
    let s = setup().await;
    let limiter = s.limiter(10_000);
    let limit: RateLimit = "ip=5/1m:sliding".parse().unwrap();
    let key = "192.0.2.7";
    s.clock.set(MINUTE_0 + 10_000);
    s.counter.reset();
    assert!(check(&limiter, &limit, key).await.0);
    assert_eq!(
        s.counter.snapshot(),
        [("UpdateItem".to_string(), 2)].into(),
        "the previous window sealed once, and the increment"
    );
    s.counter.reset();
    for _ in 0..4 {
        assert!(check(&limiter, &limit, key).await.0);
    }
    assert_eq!(s.counter.snapshot(), [("UpdateItem".to_string(), 4)].into());
    s.counter.reset();
    for _ in 0..50 {
        assert!(!check(&limiter, &limit, key).await.0);
    }
    assert_eq!(s.counter.total(), 0, "{:?}", s.counter.snapshot());

    // A fixed layer beside it costs the same per admission.
    let fixed: RateLimit = "ip=5/1m".parse().unwrap();
    s.counter.reset();
    for _ in 0..5 {
        assert!(check(&limiter, &fixed, "192.0.2.17").await.0);
    }
    assert_eq!(s.counter.snapshot(), [("UpdateItem".to_string(), 5)].into());

    // The window rolls: one seal of the window that ended, then one write per admission.
    s.clock.set(MINUTE_0 + MINUTE + 59_000);
    s.counter.reset();
    for _ in 0..3 {
        assert!(check(&limiter, &limit, key).await.0);
    }
    assert_eq!(s.counter.snapshot(), [("UpdateItem".to_string(), 4)].into());
}

/// An operator's reset of a sliding counter reaches a warm process that has already read the
/// previous window: its next request is admitted.
#[tokio::test]
async fn a_reset_of_a_sliding_counter_reaches_warm_processes() {
    let s = setup().await;
    let warm = s.limiter(0);
    let limit: RateLimit = "ip=3/1m:sliding".parse().unwrap();
    let key = "192.0.2.8";
    s.clock.set(MINUTE_0 + 50_000);
    for _ in 0..3 {
        assert!(check(&warm, &limit, key).await.0);
    }
    s.clock.set(MINUTE_0 + MINUTE + 5_000);
    assert!(
        !check(&warm, &limit, key).await.0,
        "the previous window still counts"
    );
    let usage = s.limiter(0).usage(&limit, key).await.unwrap();
    assert_eq!(usage.count, 3);
    s.limiter(0).reset(&limit, key).await.unwrap();
    assert_eq!(s.limiter(0).usage(&limit, key).await.unwrap().count, 0);
    for _ in 0..3 {
        assert!(
            check(&warm, &limit, key).await.0,
            "admitted after the reset"
        );
    }
    assert!(!check(&warm, &limit, key).await.0);
}
