//! The guards as tower layers, assembled the way any Rust Lambda would: a `ServiceBuilder` over
//! a handler of its own, against DynamoDB Local. What each layer answers, what it passes
//! inward, and that a refusal never reaches the handler.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::StatusCode;
use lambda_http::{Body, Request, Response};
use tollgate::gate::Gate;
use tollgate::http::json_response;
use tollgate::layers::{
    handler_fn, Admitted, Caller, ClientAddress, Global, Guard, GuardLayer, Identity, Methods,
    RequestId, ResponseFuture, Verified,
};
use tollgate::ratelimit::Layer;
use tollgate::ApiError;
use tollgate_tests::counting::RequestCounter;
use tollgate_tests::dynamo::{self, Tables};
use tollgate_tests::events::HttpEvent;
use tollgate_tests::pipeline::settings;
use tollgate_tests::{json_body, manual_clock};
use tower::{Layer as _, Service, ServiceBuilder, ServiceExt};

/// A tenant as a layer of the application verifies it: here, any `X-Tenant` header.
#[derive(Debug, Clone)]
struct Tenant(String);

impl Identity for Tenant {
    fn id(&self) -> &str {
        &self.0
    }
}

fn methods(path: &str) -> Option<&'static str> {
    (path == "/work").then_some("POST")
}

struct Fixture {
    gate: Arc<Gate>,
    counter: RequestCounter,
    calls: Arc<AtomicUsize>,
}

async fn fixture(limits: &str) -> Fixture {
    let (ddb, counter) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let (_clock, shared) = manual_clock();
    let gate = Arc::new(Gate::new(settings(&tables, limits, &[]), ddb, shared));
    Fixture {
        gate,
        counter,
        calls: Arc::new(AtomicUsize::new(0)),
    }
}

/// The handler: counts its calls, and answers with what the guards passed it.
fn handler(
    calls: Arc<AtomicUsize>,
) -> impl Service<
    Request,
    Response = Response<Body>,
    Error = lambda_http::Error,
    Future = ResponseFuture,
> + Clone
       + Send {
    handler_fn(move |req: Request| {
        let calls = calls.clone();
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            let caller = req.extensions().get::<Caller>().ok_or(ApiError::Internal)?;
            let admitted = req.extensions().get::<Admitted>().map(Admitted::counted);
            let id = req.extensions().get::<RequestId>().map(|r| r.0.clone());
            Ok::<_, ApiError>(json_response(
                StatusCode::OK,
                &serde_json::json!({
                    "addr": caller.addr.to_string(),
                    "counted": admitted,
                    "request_id": id,
                }),
            ))
        }
    })
}

#[tokio::test]
async fn an_address_limit_counts_every_request_and_a_refusal_never_reaches_the_handler() {
    let f = fixture("ip=3/1h,global=off").await;
    let gate = &f.gate;
    let service = ServiceBuilder::new()
        .layer(gate.respond_layer())
        .layer(gate.routes_layer(Methods(methods)))
        .layer(gate.kill_switch_layer())
        .layer(gate.client_address_layer())
        .layer(
            gate.rate_limit_layer()
                .limit(gate.rate_limit(Layer::Ip), ClientAddress),
        )
        .service(handler(f.calls.clone()));
    let req = || {
        HttpEvent::post("/work")
            .from_ip("2001:db8:1:2::7")
            .request()
    };
    for left in [2, 1, 0] {
        let resp = service.clone().oneshot(req()).await.unwrap();
        assert_eq!(resp.status(), 200);
        let body = json_body(&resp);
        assert_eq!(body["addr"], "2001:db8:1:2::/64", "IPv6 counted per /64");
        // The id the handler was given is the one the answer carries.
        assert_eq!(
            body["request_id"],
            resp.headers()["x-request-id"].to_str().unwrap()
        );
        let fields = resp.headers()["ratelimit"].to_str().unwrap();
        assert!(fields.starts_with(&format!("\"ip\";r={left};")), "{fields}");
    }
    let writes = f.counter.get("UpdateItem");
    let resp = service.clone().oneshot(req()).await.unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(json_body(&resp)["code"], "rate_limited");
    assert_eq!(
        json_body(&resp)["request_id"],
        resp.headers()["x-request-id"].to_str().unwrap()
    );
    assert!(resp.headers().contains_key("retry-after"));
    assert_eq!(
        f.calls.load(Ordering::SeqCst),
        3,
        "the 429 never reached the handler"
    );
    assert_eq!(
        f.counter.get("UpdateItem"),
        writes,
        "the block cache refused it without a write"
    );
    // Another /64 has its own counter.
    let other = HttpEvent::post("/work")
        .from_ip("2001:db8:1:3::7")
        .request();
    assert_eq!(service.clone().oneshot(other).await.unwrap().status(), 200);
}

/// A rate-limit layer whose every limit is configured off (the function's limits variable says
/// `off`) is not there at all: its condition is never evaluated, nothing is sent to DynamoDB,
/// and it puts no `Admitted` of its own in the extensions (there is nothing to give back).
#[tokio::test]
async fn a_layer_with_every_limit_off_evaluates_nothing_and_passes_the_request_straight_in() {
    let f = fixture("ip=off,client=off,global=off").await;
    let gate = &f.gate;
    let evaluated = Arc::new(AtomicUsize::new(0));
    let seen = evaluated.clone();
    let service = ServiceBuilder::new()
        .layer(gate.respond_layer())
        .layer(gate.client_address_layer())
        .layer(
            gate.rate_limit_layer()
                .known_full_only()
                .only_if(move |_| {
                    seen.fetch_add(1, Ordering::SeqCst);
                    true
                })
                .limit(gate.rate_limit(Layer::Ip), ClientAddress)
                .limit(gate.rate_limit(Layer::Global), Global),
        )
        .layer(
            gate.rate_limit_layer()
                .limit(gate.rate_limit(Layer::Ip), ClientAddress),
        )
        .service(handler(f.calls.clone()));
    let before = f.counter.total();
    for _ in 0..3 {
        let req = HttpEvent::post("/work").from_ip("198.51.100.7").request();
        let resp = service.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(json_body(&resp)["counted"], serde_json::Value::Null);
        assert!(!resp.headers().contains_key("ratelimit"));
    }
    assert_eq!(f.calls.load(Ordering::SeqCst), 3);
    assert_eq!(
        evaluated.load(Ordering::SeqCst),
        0,
        "the condition never ran"
    );
    assert_eq!(f.counter.total(), before, "no DynamoDB request");
}

#[tokio::test]
async fn routes_and_the_kill_switch_answer_before_anything_is_counted() {
    let f = fixture("ip=100/1h,global=off").await;
    let gate = &f.gate;
    let service = ServiceBuilder::new()
        .layer(gate.respond_layer())
        .layer(gate.routes_layer(Methods(methods)))
        .layer(gate.kill_switch_layer())
        .layer(gate.client_address_layer())
        .layer(
            gate.rate_limit_layer()
                .limit(gate.rate_limit(Layer::Ip), ClientAddress),
        )
        .service(handler(f.calls.clone()));
    f.counter.reset();
    let nowhere = service
        .clone()
        .oneshot(HttpEvent::post("/elsewhere").request());
    assert_eq!(nowhere.await.unwrap().status(), 404);
    let resp = service
        .clone()
        .oneshot(HttpEvent::get("/work").request())
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(resp.headers()["allow"], "POST");
    assert_eq!(f.counter.total(), 0, "404 and 405 cost no DynamoDB request");

    gate.kill_switch()
        .set(&gate.settings().function, true, Some("paused"))
        .await
        .unwrap();
    f.counter.reset();
    let resp = service
        .clone()
        .oneshot(HttpEvent::post("/work").request())
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    assert_eq!(json_body(&resp)["code"], "service_disabled");
    assert_eq!(f.calls.load(Ordering::SeqCst), 0);
    assert_eq!(
        f.counter.get("UpdateItem"),
        0,
        "a disabled function counts nothing"
    );
}

#[tokio::test]
async fn an_identity_limit_counts_only_a_verified_identity_and_the_address_counts_failures() {
    let f = fixture("ip=100/1h,client=2/1h,global=off").await;
    let gate = &f.gate;
    let service = ServiceBuilder::new()
        .layer(gate.respond_layer())
        .layer(gate.client_address_layer())
        .layer(
            gate.rate_limit_layer()
                .limit(gate.rate_limit(Layer::Ip), ClientAddress),
        )
        .layer(GuardLayer::new(TenantCheck))
        .layer(
            gate.rate_limit_layer()
                .limit(gate.rate_limit(Layer::Client), Verified::<Tenant>::new())
                .limit(gate.rate_limit(Layer::Global), Global),
        )
        .service(handler(f.calls.clone()));
    let as_tenant = |t: &str| HttpEvent::post("/work").header("x-tenant", t).request();
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(
            service
                .clone()
                .oneshot(as_tenant("a"))
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(
        service
            .clone()
            .oneshot(as_tenant("b"))
            .await
            .unwrap()
            .status(),
        200,
        "each verified tenant has its own counter"
    );
    // Without a tenant: 401, but the address layer counted it first (lesson 002).
    let resp = service
        .clone()
        .oneshot(HttpEvent::post("/work").request())
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let fields = resp.headers()["ratelimit"].to_str().unwrap();
    assert!(
        fields.starts_with("\"ip\";r=96;"),
        "4 of 5 requests counted in ip (the 429 was given back, the 401 was not): {fields}"
    );

    // A stack whose identity limit has no verifying layer outside it is a 500, never a request
    // counted under a wrong key.
    let misordered = ServiceBuilder::new()
        .layer(gate.respond_layer())
        .layer(gate.client_address_layer())
        .layer(
            gate.rate_limit_layer()
                .limit(gate.rate_limit(Layer::Client), Verified::<Tenant>::new()),
        )
        .service(handler(f.calls.clone()));
    let resp = misordered.oneshot(as_tenant("a")).await.unwrap();
    assert_eq!(resp.status(), 500);
    assert!(!String::from_utf8_lossy(resp.body().as_ref()).contains("Tenant"));
}

/// The tenant check as an adopter writes a guard of its own: the decision alone.
#[derive(Clone)]
struct TenantCheck;

impl Guard for TenantCheck {
    async fn admit(&self, req: &mut Request) -> Result<(), Response<Body>> {
        let tenant = req
            .headers()
            .get("x-tenant")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        match tenant {
            Some(t) => {
                req.extensions_mut().insert(Tenant(t));
                Ok(())
            }
            None => Err(tollgate::layers::reject(req, &ApiError::Unauthorized)),
        }
    }
}

/// `lambda_http::run` and `run_concurrent` take the stack: Clone + Send, with `Send + 'static`
/// futures (checked at compile time).
#[tokio::test]
async fn the_stack_is_what_the_lambda_runtime_takes() {
    fn runnable<S>(_: &S)
    where
        S: Service<Request, Response = Response<Body>, Error = lambda_http::Error>
            + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
    {
    }
    let f = fixture("ip=1/1h,global=off").await;
    let gate = &f.gate;
    let service = ServiceBuilder::new()
        .layer(gate.respond_layer())
        .layer(gate.cors_layer(Methods(methods)))
        .layer(gate.routes_layer(Methods(methods)))
        .layer(gate.kill_switch_layer())
        .layer(gate.client_address_layer())
        .layer(
            gate.rate_limit_layer()
                .limit(gate.rate_limit(Layer::Ip), ClientAddress),
        )
        .service(handler(f.calls.clone()));
    runnable(&service);
    assert_eq!(
        service
            .oneshot(HttpEvent::post("/work").request())
            .await
            .unwrap()
            .status(),
        200
    );
}

/// The size of the future `service` makes for `req` (a boxed future's contents).
fn future_size<S>(mut service: S, req: Request) -> usize
where
    S: Service<Request, Future = ResponseFuture>,
{
    let future = service.call(req);
    std::mem::size_of_val(&*future)
}

/// Every layer's future is allocated and moved once per request, and a future holds its largest
/// await inline: an SDK request's future is kilobytes. A guard whose DynamoDB or SSM call is
/// rare (a cache refill) boxes that call, so the future every request pays for stays small; the
/// handler's future is made inside `handler_fn`'s box, not held twice. (Before: the kill switch's
/// 6.3 KB, the address's 5.8 KB, `handler_fn`'s twice its handler's.)
#[tokio::test]
async fn a_layers_future_holds_no_sdk_call_inline_and_the_handlers_future_once() {
    const SMALL: usize = 1024;
    let f = fixture("ip=100/1h,global=off").await;
    let gate = &f.gate;
    let inner = || handler(f.calls.clone());
    let req = || HttpEvent::post("/work").from_ip("198.51.100.7").request();
    let sizes = [
        (
            "respond",
            future_size(gate.respond_layer().layer(inner()), req()),
        ),
        (
            "routes",
            future_size(gate.routes_layer(Methods(methods)).layer(inner()), req()),
        ),
        (
            "kill switch",
            future_size(gate.kill_switch_layer().layer(inner()), req()),
        ),
        (
            "client address",
            future_size(gate.client_address_layer().layer(inner()), req()),
        ),
    ];
    let large: Vec<_> = sizes.iter().filter(|(_, size)| *size > SMALL).collect();
    assert!(
        large.is_empty(),
        "futures over {SMALL} bytes: {large:?} (all: {sizes:?})"
    );

    // A handler whose own future is large: `handler_fn`'s holds it once, not twice.
    const BIG: usize = 8192;
    let big = handler_fn(|_req: Request| async {
        let buffer = [7u8; BIG];
        tokio::task::yield_now().await;
        Ok::<_, ApiError>(json_response(StatusCode::OK, &buffer[BIG - 1]))
    });
    let size = future_size(big, req());
    assert!(
        (BIG..BIG + SMALL).contains(&size),
        "handler_fn's future is {size} bytes for a handler holding {BIG}"
    );
}
