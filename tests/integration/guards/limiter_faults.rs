//! The limiter's writes when DynamoDB fails or loses an answer (through the fault proxy).

use tollgate::gate::Gate;
use tollgate::ratelimit::{Admission, LimitCheck, RateLimit, RateLimiter, Verdict};
use tollgate_functions::catalog;
use tollgate_tests::dynamo::{self, counters_matching, Tables};
use tollgate_tests::events::HttpEvent;
use tollgate_tests::fault_proxy::{DynamoError, Fault, FaultProxy};
use tollgate_tests::pipeline::{guarded, settings};
use tollgate_tests::{json_body, manual_clock};

/// Text only a refund's `UpdateItem` body has (an increment adds `:one`).
const REFUND: &str = ":minus_one";

struct Setup {
    proxy: FaultProxy,
    /// Through the proxy.
    ddb: aws_sdk_dynamodb::Client,
    /// Straight to DynamoDB Local, for looking at what is stored.
    direct: aws_sdk_dynamodb::Client,
    tables: Tables,
}

async fn setup() -> Setup {
    let proxy = FaultProxy::start(&dynamo::endpoint()).await;
    let (ddb, _) = dynamo::client_at(&proxy.endpoint());
    let (direct, _) = dynamo::client();
    let tables = Tables::create(&direct).await;
    Setup {
        proxy,
        ddb,
        direct,
        tables,
    }
}

/// Caller A is admitted by a shared layer; caller B is admitted by it too and then refused by a
/// full layer, so B's shared unit is refunded, with the refund's answer disturbed by `fault`.
/// Returns the shared counter afterwards and how many refunds were sent.
async fn refund_disturbed_by(fault: Fault) -> (u64, usize) {
    let s = setup().await;
    let (_, clock) = manual_clock();
    let limiter = RateLimiter::new(
        s.ddb.clone(),
        &s.tables.rate_limits,
        catalog::EPHEMERAL_KEY.name,
        clock,
    );
    let shared: RateLimit = "global=10/1d".parse().unwrap();
    let full: RateLimit = "ip=1/1h".parse().unwrap();
    let global = LimitCheck {
        limit: &shared,
        key: "",
    };
    let ip = LimitCheck {
        limit: &full,
        key: "192.0.2.9",
    };

    let mut a = Admission::default();
    assert_eq!(
        limiter.check(&mut a, &[global]).await.unwrap(),
        Verdict::Admitted
    );
    let mut earlier = Admission::default();
    assert_eq!(
        limiter.check(&mut earlier, &[ip]).await.unwrap(),
        Verdict::Admitted,
        "fills B's ip layer"
    );

    s.proxy.record("UpdateItem");
    s.proxy.arm_when("UpdateItem", REFUND, fault);
    let mut b = Admission::default();
    assert!(matches!(
        limiter.check(&mut b, &[global, ip]).await.unwrap(),
        Verdict::Rejected(_)
    ));
    assert_eq!(s.proxy.fired(), 1, "the refund met the fault");
    let refunds = s
        .proxy
        .bodies("UpdateItem")
        .iter()
        .filter(|body| String::from_utf8_lossy(body).contains(REFUND))
        .count();
    let counters = counters_matching(&s.direct, &s.tables.rate_limits, "#global#").await;
    assert_eq!(counters.len(), 1, "{counters:?}");
    (counters[0].1, refunds)
}

/// A refund whose reply was lost after it committed is not sent again: a resend would give
/// back a unit that belongs to another caller (A's), and the cap would admit one request too many.
#[tokio::test]
async fn a_refund_whose_answer_was_lost_is_not_resent() {
    let (count, refunds) = refund_disturbed_by(Fault::DropResponseAfterCommit).await;
    assert_eq!(count, 1, "A's unit is still counted");
    assert_eq!(refunds, 1, "the refund was sent once");
}

/// A refund that failed is not sent again either: the unit stays counted (over-counting by one
/// until the window ends is the safe side), and the failure is logged.
#[tokio::test]
async fn a_failed_refund_is_not_resent() {
    let (count, refunds) = refund_disturbed_by(Fault::ServerError).await;
    assert_eq!(count, 2, "B's unit stays counted");
    assert_eq!(refunds, 1, "the refund was sent once");
}

/// When the increment itself fails (throttled on every send, or a 500, whose outcome is unknown
/// and which is not sent again), the request is refused with 503 (fail closed: a cap that opens
/// when DynamoDB is unwell is no cap), the layers it already passed are given back, and nothing
/// stays counted (the proxy's 500 applied nothing).
#[tokio::test]
async fn a_failing_increment_fails_closed_and_counts_nothing() {
    for fault in [
        Fault::Error(DynamoError::ProvisionedThroughputExceeded),
        Fault::Error(DynamoError::Throttling),
        Fault::ServerError,
    ] {
        let s = setup().await;
        let (_, clock) = manual_clock();
        let gate = Gate::new(
            settings(&s.tables, "ip=10/1h,global=100/1d", &[]),
            s.ddb.clone(),
            clock,
        );
        // The ip layer counts, then the global layer's increment fails.
        s.proxy
            .arm_always_when("UpdateItem", "#global#", fault.clone());
        let resp = guarded(
            &gate,
            &HttpEvent::post("/session").from_ip("192.0.2.7").request(),
            None,
        )
        .await;
        assert_eq!(resp.status(), 503, "{fault:?}");
        assert_eq!(json_body(&resp)["code"], "temporarily_unavailable");
        let retry_after: u64 = resp.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(retry_after >= 1);
        assert!(s.proxy.fired() >= 1, "{fault:?}");
        assert_eq!(
            counters_matching(&s.direct, &s.tables.rate_limits, "#ip#")
                .await
                .iter()
                .map(|(_, c)| *c)
                .collect::<Vec<_>>(),
            [0],
            "{fault:?}: the ip unit was refunded"
        );
        assert!(
            counters_matching(&s.direct, &s.tables.rate_limits, "#global#")
                .await
                .is_empty(),
            "{fault:?}"
        );

        // Every write failing: refused just the same, nothing counted.
        s.proxy.disarm("UpdateItem");
        s.proxy.arm_always("UpdateItem", fault.clone());
        let resp = guarded(
            &gate,
            &HttpEvent::post("/session").from_ip("192.0.2.8").request(),
            None,
        )
        .await;
        assert_eq!(resp.status(), 503, "{fault:?}");
        assert!(
            counters_matching(&s.direct, &s.tables.rate_limits, "192.0.2.8")
                .await
                .is_empty()
        );
    }
}

/// An increment whose answer was lost after it committed is not sent again: `ADD 1` is not
/// idempotent, so a resend would count the one request twice, and at the limit it would meet
/// the unit its own first send took and refuse the request with 429 while it holds that unit
/// (a rejected request must increment nothing). Its outcome is unknown: the request is refused
/// with 503 (fail closed), the layer it passed is given back, and the unit it may hold is not
/// refunded (it stays counted until its window ends: over by one, never under).
#[tokio::test]
async fn an_increment_whose_answer_was_lost_is_not_resent_and_fails_closed() {
    for limits in ["ip=10/1h,global=100/1d", "ip=10/1h,global=1/1d"] {
        let s = setup().await;
        let (_, clock) = manual_clock();
        let gate = Gate::new(settings(&s.tables, limits, &[]), s.ddb.clone(), clock);
        s.proxy.record("UpdateItem");
        s.proxy
            .arm_when("UpdateItem", "#global#", Fault::DropResponseAfterCommit);
        let resp = guarded(
            &gate,
            &HttpEvent::post("/session").from_ip("192.0.2.5").request(),
            None,
        )
        .await;
        assert_eq!(resp.status(), 503, "{limits}: {}", json_body(&resp));
        assert_eq!(json_body(&resp)["code"], "temporarily_unavailable");
        assert!(resp.headers().contains_key("retry-after"), "{limits}");
        let global_sends = s
            .proxy
            .bodies("UpdateItem")
            .iter()
            .filter(|body| String::from_utf8_lossy(body).contains("#global#"))
            .count();
        assert_eq!(
            global_sends, 1,
            "{limits}: sent once, not resent, not refunded"
        );
        assert_eq!(
            counters_matching(&s.direct, &s.tables.rate_limits, "#global#")
                .await
                .iter()
                .map(|(_, c)| *c)
                .collect::<Vec<_>>(),
            [1],
            "{limits}: the lost increment counts once"
        );
        assert_eq!(
            counters_matching(&s.direct, &s.tables.rate_limits, "#ip#")
                .await
                .iter()
                .map(|(_, c)| *c)
                .collect::<Vec<_>>(),
            [0],
            "{limits}: the ip unit was refunded"
        );
    }
}

/// A throttled increment was refused before it was applied, so it is safe to send again: the
/// limiter does (one SDK attempt per send), and the request is admitted and counted once.
#[tokio::test]
async fn a_throttled_increment_is_sent_again_and_counts_once() {
    let s = setup().await;
    let (_, clock) = manual_clock();
    let gate = Gate::new(
        settings(&s.tables, "ip=10/1h,global=100/1d", &[]),
        s.ddb.clone(),
        clock,
    );
    s.proxy.record("UpdateItem");
    for _ in 0..2 {
        s.proxy.arm_when(
            "UpdateItem",
            "#global#",
            Fault::Error(DynamoError::Throttling),
        );
    }
    let resp = guarded(
        &gate,
        &HttpEvent::post("/session").from_ip("192.0.2.6").request(),
        None,
    )
    .await;
    assert_eq!(resp.status(), 200, "{}", json_body(&resp));
    assert_eq!(s.proxy.fired(), 2);
    assert_eq!(s.proxy.seen("UpdateItem"), 4, "ip once, global three times");
    for layer in ["#ip#", "#global#"] {
        assert_eq!(
            counters_matching(&s.direct, &s.tables.rate_limits, layer)
                .await
                .iter()
                .map(|(_, c)| *c)
                .collect::<Vec<_>>(),
            [1],
            "{layer}"
        );
    }
}
