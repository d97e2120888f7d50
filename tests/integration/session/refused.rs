//! A lost answer, then a full layer: the retry with the same key is still the replay the
//! contract promises (same secret, `Idempotent-Replayed: true`, no upstream call, no unit),
//! whether the secret comes from this process's replay cache or from the store; and a flood of
//! fresh keys against the full layer stays refused, counting nothing, calling nothing, for at
//! most one eventually consistent read per request and none for a key looked up before.

use std::sync::Arc;

use ephemeral_key::App;
use lambda_http::{Body, Response};
use serde_json::Value;
use tollgate::config::Env;
use tollgate_functions::catalog;
use tollgate_functions::serve::GuardedFunction;
use tollgate_tests::counting::RequestCounter;
use tollgate_tests::dynamo;
use tollgate_tests::events::HttpEvent;
use tollgate_tests::fault_proxy::{Fault, FaultProxy};
use tollgate_tests::json_body;
use tollgate_tests::openai::Answer;
use tollgate_tests::session::{SessionHarness, INTERNAL_TOKEN};

/// Which layer fills: `ip` (one address's third request) or `global` (the third address).
#[derive(Debug, Clone, Copy)]
enum Full {
    Ip,
    Global,
}

impl Full {
    const ALL: [Full; 2] = [Full::Ip, Full::Global];

    fn limits(self) -> &'static str {
        match self {
            Full::Ip => "ip=2/1h,global=2000/1d",
            Full::Global => "ip=10/1h,global=2/1d",
        }
    }

    /// The addresses of K1, K2 and K3.
    fn addresses(self) -> [&'static str; 3] {
        match self {
            Full::Ip => ["192.0.2.60"; 3],
            Full::Global => ["192.0.2.61", "192.0.2.62", "192.0.2.63"],
        }
    }

    /// Where K2 was sent from, and its retry is.
    fn k2_address(self) -> &'static str {
        self.addresses()[1]
    }
}

const K1: &str = "k1-6f1d2c3b-4a5e-4f60-8b7a-1c2d3e4f5a6b";
const K2: &str = "k2-0a9b8c7d-6e5f-4a3b-9c2d-1e0f2a3b4c5d";
const K3: &str = "k3-5d4c3b2a-1f0e-4d9c-8b7a-6f5e4d3c2b1a";
const CEDAR: &str = r#"{"voice":"cedar"}"#;

fn post(ip: &str, key: &str, body: &str) -> HttpEvent {
    SessionHarness::post(ip, Some(body)).header("idempotency-key", key)
}

/// The issue's sequence: K1 and K2 mint, K2's answer is lost (the test keeps it only to compare
/// the replay with), K3 finds the layer full. Returns K2's answer.
async fn fill(h: &SessionHarness, full: Full) -> Response<Body> {
    let [a1, a2, a3] = full.addresses();
    assert_eq!(h.send(post(a1, K1, CEDAR).request()).await.status(), 200);
    let k2 = h.send(post(a2, K2, CEDAR).request()).await;
    assert_eq!(k2.status(), 200);
    let k3 = h.send(post(a3, K3, CEDAR).request()).await;
    assert_eq!(k3.status(), 429, "{full:?}: the layer is full");
    assert_eq!(h.openai.calls().await, 2);
    k2
}

/// The counters of the `ip` and `global` layers, to compare before and after.
async fn counters(h: &SessionHarness) -> (u64, u64) {
    (h.counter_sum("#ip#").await, h.counter_sum("#global#").await)
}

/// The retry is K2's answer again, marked replayed.
fn assert_replay(retry: &Response<Body>, k2: &Response<Body>, what: &str) {
    assert_eq!(
        retry.status(),
        200,
        "{what}: {}",
        tollgate_tests::text_body(retry)
    );
    assert_eq!(retry.headers()["idempotent-replayed"], "true", "{what}");
    assert_eq!(retry.headers()["cache-control"], "no-store", "{what}");
    assert_eq!(retry.body().as_ref(), k2.body().as_ref(), "{what}");
}

/// Another process of the function over `h`'s tables, OpenAI stand-in and clock, with cold
/// caches, its DynamoDB client at `endpoint` (DynamoDB Local, or a fault proxy before it).
fn second_instance(h: &SessionHarness, full: Full, endpoint: &str) -> (App, RequestCounter) {
    let (ddb, counter) = dynamo::client_at(endpoint);
    let mut env = Env::from_pairs(h.tables.env_pairs());
    env.set(catalog::EPHEMERAL_KEY.limits_variable, full.limits())
        .set("OPENAI_BASE_URL", h.openai.server.uri())
        .set("OPENAI_API_KEY", "sk-test-key")
        .set("INTERNAL_TOKEN", INTERNAL_TOKEN)
        .set("UPSTREAM_TIMEOUT_SECONDS", "2");
    let app = App::from_env(&env, ddb, None, Arc::new(h.clock.clone())).expect("valid settings");
    (app, counter)
}

/// The same process: the replay cache answers, before any limit, for no DynamoDB request.
#[tokio::test]
async fn a_lost_answer_is_replayed_from_the_cache_after_the_layer_filled() {
    for full in Full::ALL {
        let h =
            SessionHarness::new(&[(catalog::EPHEMERAL_KEY.limits_variable, full.limits())]).await;
        let k2 = fill(&h, full).await;
        let before = counters(&h).await;
        h.counter.reset();
        let retry = h.send(post(full.k2_address(), K2, CEDAR).request()).await;
        assert_replay(&retry, &k2, &format!("{full:?}"));
        assert_eq!(h.openai.calls().await, 2, "{full:?}: no upstream call");
        assert_eq!(counters(&h).await, before, "{full:?}: no unit");
        assert_eq!(
            h.counter.total(),
            0,
            "{full:?}: no increment, no refund, no read: {:?}",
            h.counter.snapshot()
        );

        // The same key with another body is not a replay: the full layer's 429 stands (the 422
        // is for a request the limits admitted).
        let other = h
            .send(post(full.k2_address(), K2, r#"{"voice":"marin"}"#).request())
            .await;
        assert_eq!(other.status(), 429, "{full:?}");
        assert_eq!(counters(&h).await, before, "{full:?}");
    }
}

/// Without the replay cache (`IDEMPOTENCY_CACHE_SIZE=0`) the full layer is refused from the
/// block cache, and the refusal reads the key's record once: the store's replay.
#[tokio::test]
async fn a_lost_answer_is_replayed_from_the_store_after_the_layer_filled() {
    for full in Full::ALL {
        let h = SessionHarness::new(&[
            (catalog::EPHEMERAL_KEY.limits_variable, full.limits()),
            ("IDEMPOTENCY_CACHE_SIZE", "0"),
        ])
        .await;
        let k2 = fill(&h, full).await;
        let before = counters(&h).await;
        h.counter.reset();
        let retry = h.send(post(full.k2_address(), K2, CEDAR).request()).await;
        assert_replay(&retry, &k2, &format!("{full:?}"));
        assert_eq!(h.openai.calls().await, 2, "{full:?}: no upstream call");
        assert_eq!(counters(&h).await, before, "{full:?}: no unit");
        assert_eq!(
            (h.counter.get("GetItem"), h.counter.total()),
            (1, 1),
            "{full:?}: one read, no increment (the block cache refused): {:?}",
            h.counter.snapshot()
        );
    }
}

/// A second process, cold: its limiter's write finds the layer full in DynamoDB, and one
/// eventually consistent read of the record (one attempt) gives the replay, which it then
/// keeps; the same key with another body stays 429.
#[tokio::test]
async fn a_lost_answer_is_replayed_by_another_process_after_the_layer_filled() {
    for full in Full::ALL {
        let h =
            SessionHarness::new(&[(catalog::EPHEMERAL_KEY.limits_variable, full.limits())]).await;
        let k2 = fill(&h, full).await;
        let before = counters(&h).await;
        let proxy = FaultProxy::start(&dynamo::endpoint()).await;
        let (other, counter) = second_instance(&h, full, &proxy.endpoint());
        // The kill switch's read, which any first request of a process makes, out of the way.
        other.gate.check_kill_switch().await.unwrap();
        counter.reset();
        proxy.record("GetItem");

        let retry = other
            .handle(post(full.k2_address(), K2, CEDAR).request())
            .await;
        assert_replay(&retry, &k2, &format!("{full:?}"));
        assert_eq!(h.openai.calls().await, 2, "{full:?}: no upstream call");
        assert_eq!(counters(&h).await, before, "{full:?}: no unit");
        let reads: Vec<Value> = proxy
            .bodies("GetItem")
            .iter()
            .map(|b| serde_json::from_slice(b).unwrap())
            .collect();
        assert_eq!(reads.len(), 1, "{full:?}: one read: {reads:?}");
        assert_eq!(reads[0]["TableName"], h.tables.idempotency.as_str());
        assert_eq!(
            reads[0]["ConsistentRead"], false,
            "{full:?}: eventually consistent"
        );

        // Kept: the next retry in that process reads nothing.
        counter.reset();
        let again = other
            .handle(post(full.k2_address(), K2, CEDAR).request())
            .await;
        assert_replay(&again, &k2, &format!("{full:?}, again"));
        assert_eq!(counter.total(), 0, "{full:?}: {:?}", counter.snapshot());

        let reused = other
            .handle(post(full.k2_address(), K2, r#"{"voice":"marin"}"#).request())
            .await;
        assert_eq!(reused.status(), 429, "{full:?}");
        assert_eq!(json_body(&reused)["code"], "rate_limited");
        assert_eq!(counter.get("GetItem"), 0, "{full:?}: the record is known");
        assert_eq!(counters(&h).await, before, "{full:?}");
    }
}

/// A flood of fresh keys against the full layer: every request 429, nothing counted, nothing
/// upstream, one eventually consistent read per new key and none for a key already looked up.
#[tokio::test]
async fn a_flood_of_fresh_keys_against_a_full_layer_costs_one_read_per_new_key() {
    const N: usize = 20;
    for full in Full::ALL {
        let h =
            SessionHarness::new(&[(catalog::EPHEMERAL_KEY.limits_variable, full.limits())]).await;
        fill(&h, full).await;
        let before = counters(&h).await;
        let records = h.records().await;
        // From K3's address for `ip`; from new addresses for `global`.
        let from = |i: usize| match full {
            Full::Ip => full.addresses()[2].to_string(),
            Full::Global => format!("198.51.100.{}", 10 + i),
        };
        let key = |i: usize| format!("flood-{i:04}-4c4e-9f0e-3d2c1b0a9f8e");
        for round in ["fresh", "repeated"] {
            h.counter.reset();
            for i in 0..N {
                let resp = h.send(post(&from(i), &key(i), CEDAR).request()).await;
                assert_eq!(resp.status(), 429, "{full:?} {round} {i}");
                assert_eq!(json_body(&resp)["code"], "rate_limited");
                assert!(resp.headers().contains_key("retry-after"));
            }
            let reads = match round {
                "fresh" => N,
                _ => 0,
            };
            assert_eq!(
                (h.counter.get("GetItem"), h.counter.total()),
                (reads, reads),
                "{full:?} {round}: reads only, no increment: {:?}",
                h.counter.snapshot()
            );
        }
        assert_eq!(counters(&h).await, before, "{full:?}: nothing counted");
        assert_eq!(h.openai.calls().await, 2, "{full:?}: nothing upstream");
        assert_eq!(h.records().await, records, "{full:?}: no key claimed");
    }
}

/// The read behind a refusal is one attempt: when it fails the request keeps its 429 (no
/// replay, no error of ours), and the SDK sends it no second time.
#[tokio::test]
async fn a_failed_read_behind_a_refusal_is_the_refusal_and_is_not_resent() {
    let full = Full::Ip;
    let h = SessionHarness::new(&[
        (catalog::EPHEMERAL_KEY.limits_variable, full.limits()),
        ("IDEMPOTENCY_CACHE_SIZE", "0"),
    ])
    .await;
    let k2 = fill(&h, full).await;
    let proxy = FaultProxy::start(&dynamo::endpoint()).await;
    let (other, _) = second_instance(&h, full, &proxy.endpoint());
    other.gate.check_kill_switch().await.unwrap();
    let reads = proxy.seen("GetItem");
    proxy.arm("GetItem", Fault::ServerError);
    let refused = other
        .handle(post(full.k2_address(), K2, CEDAR).request())
        .await;
    assert_eq!(refused.status(), 429);
    assert_eq!(proxy.fired(), 1);
    assert_eq!(proxy.seen("GetItem") - reads, 1, "one attempt");
    // The key was not found absent, only unread: the next retry reads again, and replays.
    let retry = other
        .handle(post(full.k2_address(), K2, CEDAR).request())
        .await;
    assert_replay(&retry, &k2, "after a failed read");
    assert_eq!(proxy.seen("GetItem") - reads, 2);
}

/// A replay calls nothing upstream, so an upstream cooldown does not hold it back: the replay
/// cache answers it; a new request still gets the cooldown's 503.
#[tokio::test]
async fn a_replay_is_answered_during_an_upstream_cooldown() {
    let h = SessionHarness::new(&[("UPSTREAM_COOLDOWN_SECONDS", "30")]).await;
    let ip = "192.0.2.64";
    let first = h.send(post(ip, K1, CEDAR).request()).await;
    assert_eq!(first.status(), 200);
    h.openai.then([Answer::Status(503)]);
    assert_eq!(h.send(post(ip, K2, CEDAR).request()).await.status(), 503);
    let before = counters(&h).await;
    h.counter.reset();
    let retry = h.send(post(ip, K1, CEDAR).request()).await;
    assert_replay(&retry, &first, "during the cooldown");
    assert_eq!(h.counter.total(), 0, "{:?}", h.counter.snapshot());
    let fresh = h.send(post(ip, K3, CEDAR).request()).await;
    assert_eq!(fresh.status(), 503, "a new secret waits for the cooldown");
    assert_eq!(counters(&h).await, before);
    assert_eq!(h.openai.calls().await, 2);
}
