//! The idempotency layer around an effect of the application's own, as an adopter assembles
//! it: one effect per key, the stored answer replayed with its units given back, 409 or a
//! bounded wait while the first is in progress, 422 for another body, the key freed after a
//! 5xx, and after a 429 the answer a lost response never delivered.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use lambda_http::{Body, Request, Response};
use tokio::sync::Notify;
use tollgate::gate::Gate;
use tollgate::http::json_response;
use tollgate::idempotency::{AbsentKeys, IdempotencyStore};
use tollgate::layers::{
    handler_fn, ClientAddress, Global, IdempotencyLayer, InProgress, KeyedJson, ResponseFuture,
};
use tollgate::ratelimit::Layer;
use tollgate::ApiError;
use tollgate_tests::dynamo::{self, Tables};
use tollgate_tests::events::HttpEvent;
use tollgate_tests::pipeline::settings;
use tollgate_tests::{json_body, manual_clock};
use tower::{Service, ServiceBuilder, ServiceExt};

const ROUTE: &str = "POST /orders";
const KEY: &str = "order-key-0123456789";

struct Fixture {
    gate: Arc<Gate>,
    store: IdempotencyStore,
    runs: Arc<AtomicUsize>,
}

async fn fixture(limits: &str) -> Fixture {
    let (ddb, _) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let (_clock, shared) = manual_clock();
    let store = IdempotencyStore::new(
        ddb.clone(),
        &tables.idempotency,
        shared.clone(),
        Duration::from_secs(3600),
    );
    let gate = Arc::new(Gate::new(settings(&tables, limits, &[]), ddb, shared));
    Fixture {
        gate,
        store,
        runs: Arc::new(AtomicUsize::new(0)),
    }
}

/// The effect: counts its runs; `{"fail": true}` fails on our side (503), `{"wait": true}`
/// waits for `go` before answering.
fn effect(
    runs: Arc<AtomicUsize>,
    go: Arc<Notify>,
) -> impl Service<
    Request,
    Response = Response<Body>,
    Error = lambda_http::Error,
    Future = ResponseFuture,
> + Clone
       + Send {
    handler_fn(move |req: Request| {
        let (runs, go) = (runs.clone(), go.clone());
        async move {
            let body: serde_json::Value =
                serde_json::from_slice(req.body().as_ref()).unwrap_or_default();
            if body["wait"] == true {
                go.notified().await;
            }
            let claimed = req.extensions().get::<tollgate::layers::Claimed>().cloned();
            assert!(
                claimed.is_some_and(|c| c.scope.pk().starts_with("203.0.113.9#POST /orders#")),
                "the effect runs under its claim, scoped to its caller and route"
            );
            let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
            if body["fail"] == true {
                return Err(ApiError::Unavailable { retry_after: 1 });
            }
            Ok(json_response(
                StatusCode::CREATED,
                &serde_json::json!({"order": run}),
            ))
        }
    })
}

fn post(body: &str) -> Request {
    HttpEvent::post("/orders")
        .from_ip("203.0.113.9")
        .header("idempotency-key", KEY)
        .body(body)
        .request()
}

fn stack(
    f: &Fixture,
    go: Arc<Notify>,
    in_progress: InProgress,
) -> impl Service<
    Request,
    Response = Response<Body>,
    Error = lambda_http::Error,
    Future = ResponseFuture,
> + Clone
       + Send {
    let gate = &f.gate;
    ServiceBuilder::new()
        .layer(gate.respond_layer())
        .layer(gate.client_address_layer())
        .layer(
            gate.rate_limit_layer()
                .limit(gate.rate_limit(Layer::Ip), ClientAddress)
                .limit(gate.rate_limit(Layer::Global), Global)
                .refund_server_errors(),
        )
        .layer(
            IdempotencyLayer::claims(
                f.store.clone(),
                KeyedJson::new(ROUTE, ClientAddress).required(),
                Duration::from_secs(30),
                &[Layer::Global],
            )
            .in_progress(in_progress)
            .on_rejection(|mut response| {
                response
                    .headers_mut()
                    .insert("x-refused-by", http::HeaderValue::from_static("hook"));
                response
            })
            .on_replay(|mut response| {
                response
                    .headers_mut()
                    .insert("x-replayed-by", http::HeaderValue::from_static("hook"));
                response
            }),
        )
        .service(effect(f.runs.clone(), go))
}

/// The `r=` of the `RateLimit` field for `layer`.
fn remaining(resp: &Response<Body>) -> String {
    resp.headers()
        .get("ratelimit")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn one_effect_per_key_and_a_replay_costs_no_quota() {
    let f = fixture("ip=10/1h,global=10/1h").await;
    let service = stack(&f, Arc::new(Notify::new()), InProgress::Conflict);
    let first = service
        .clone()
        .oneshot(post(r#"{"item": 1}"#))
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    assert!(remaining(&first).contains("r=9"), "{}", remaining(&first));
    for _ in 0..3 {
        let again = service
            .clone()
            .oneshot(post(r#"{ "item" : 1 }"#))
            .await
            .unwrap();
        assert_eq!(again.status(), 201, "the same canonical body is a retry");
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(again.headers()["x-replayed-by"], "hook");
        assert_eq!(json_body(&again), json_body(&first));
    }
    assert_eq!(
        f.runs.load(Ordering::SeqCst),
        1,
        "one effect for four requests"
    );
    // The replays gave their units back: the next new key still sees 9 left before it.
    let other = HttpEvent::post("/orders")
        .from_ip("203.0.113.9")
        .header("idempotency-key", "another-key-0123456789")
        .body(r#"{"item": 2}"#)
        .request();
    let resp = service.clone().oneshot(other).await.unwrap();
    assert!(remaining(&resp).contains("r=8"), "{}", remaining(&resp));

    // Another body under the same key: 422, the effect does not run.
    let reused = service
        .clone()
        .oneshot(post(r#"{"item": 3}"#))
        .await
        .unwrap();
    assert_eq!(reused.status(), 422);
    assert_eq!(json_body(&reused)["code"], "idempotency_key_reused");
    assert_eq!(reused.headers()["x-refused-by"], "hook");
    assert_eq!(f.runs.load(Ordering::SeqCst), 2);

    // No key: 400 before the effect.
    let keyless = HttpEvent::post("/orders").body("{}").request();
    let resp = service.clone().oneshot(keyless).await.unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(f.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_failure_on_our_side_frees_the_key_and_gives_the_units_back() {
    let f = fixture("ip=10/1h,global=10/1h").await;
    let service = stack(&f, Arc::new(Notify::new()), InProgress::Conflict);
    let failed = service
        .clone()
        .oneshot(post(r#"{"fail": true}"#))
        .await
        .unwrap();
    assert_eq!(failed.status(), 503);
    // The retry runs the effect again (the key was released) and the 503 cost nothing.
    let retried = service
        .clone()
        .oneshot(post(r#"{"fail": true}"#))
        .await
        .unwrap();
    assert_eq!(retried.status(), 503);
    assert_eq!(f.runs.load(Ordering::SeqCst), 2);
    let ok = HttpEvent::post("/orders")
        .from_ip("203.0.113.9")
        .header("idempotency-key", "third-key-0123456789")
        .body("{}")
        .request();
    let resp = service.clone().oneshot(ok).await.unwrap();
    assert_eq!(resp.status(), 201);
    assert!(remaining(&resp).contains("r=9"), "{}", remaining(&resp));
}

#[tokio::test]
async fn a_duplicate_in_progress_gets_409_or_waits_for_the_answer() {
    for policy in [
        InProgress::Conflict,
        InProgress::Wait(Duration::from_secs(5)),
    ] {
        let f = fixture("ip=100/1h,global=100/1h").await;
        let go = Arc::new(Notify::new());
        let service = stack(&f, go.clone(), policy);
        let first = tokio::spawn(service.clone().oneshot(post(r#"{"wait": true}"#)));
        // Let the first claim the key.
        let mut claimed = false;
        for _ in 0..200 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            if f.store
                .read(&tollgate::idempotency::Scope::new(
                    "203.0.113.9",
                    ROUTE,
                    &tollgate::idempotency::IdempotencyKey::parse(Some(KEY.as_bytes())).unwrap(),
                ))
                .await
                .unwrap()
                .is_some()
            {
                claimed = true;
                break;
            }
        }
        assert!(claimed, "the first request claimed its key");
        let duplicate = tokio::spawn(service.clone().oneshot(post(r#"{"wait": true}"#)));
        match policy {
            InProgress::Conflict => {
                let resp = duplicate.await.unwrap().unwrap();
                assert_eq!(resp.status(), 409);
                assert_eq!(resp.headers()["x-refused-by"], "hook");
                assert!(resp.headers().contains_key("retry-after"));
                go.notify_one();
                assert_eq!(first.await.unwrap().unwrap().status(), 201);
            }
            InProgress::Wait(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                go.notify_one();
                assert_eq!(first.await.unwrap().unwrap().status(), 201);
                let resp = duplicate.await.unwrap().unwrap();
                assert_eq!(resp.status(), 201, "the waiting duplicate gets the answer");
                assert_eq!(resp.headers()["idempotent-replayed"], "true");
            }
        }
        assert_eq!(f.runs.load(Ordering::SeqCst), 1, "{policy:?}");
    }
}

#[tokio::test]
async fn after_a_429_a_retry_whose_answer_was_lost_gets_it() {
    let f = fixture("ip=100/1h,global=1/1h").await;
    let gate = &f.gate;
    let absent = Arc::new(AbsentKeys::new(100));
    // A stack with replays outside the limits: the first answer is "lost" (the client never
    // saw it), the cap is full, the retry still gets it.
    let service = ServiceBuilder::new()
        .layer(gate.respond_layer())
        .layer(gate.client_address_layer())
        .layer(IdempotencyLayer::replays(
            // Another process's store: its replay cache has not seen the first answer.
            IdempotencyStore::new(
                f.store_client(),
                f.store.table(),
                Arc::new(tollgate::clock::SystemClock),
                Duration::from_secs(3600),
            ),
            KeyedJson::new(ROUTE, ClientAddress),
            absent.clone(),
            Duration::from_secs(30),
        ))
        .layer(
            gate.rate_limit_layer()
                .limit(gate.rate_limit(Layer::Ip), ClientAddress)
                .limit(gate.rate_limit(Layer::Global), Global),
        )
        .layer(IdempotencyLayer::claims(
            f.store.clone(),
            KeyedJson::new(ROUTE, ClientAddress).required(),
            Duration::from_secs(30),
            &[Layer::Global],
        ))
        .service(effect(f.runs.clone(), Arc::new(Notify::new())));
    let first = service.clone().oneshot(post("{}")).await.unwrap();
    assert_eq!(first.status(), 201);
    let fresh = HttpEvent::post("/orders")
        .from_ip("203.0.113.9")
        .header("idempotency-key", "fresh-key-0123456789")
        .body("{}")
        .request();
    assert_eq!(service.clone().oneshot(fresh).await.unwrap().status(), 429);
    let retry = service.clone().oneshot(post("{}")).await.unwrap();
    assert_eq!(
        retry.status(),
        201,
        "the stored answer, though the cap is full"
    );
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(json_body(&retry), json_body(&first));
    assert_eq!(f.runs.load(Ordering::SeqCst), 1);
}

impl Fixture {
    fn store_client(&self) -> aws_sdk_dynamodb::Client {
        dynamo::client().0
    }
}
