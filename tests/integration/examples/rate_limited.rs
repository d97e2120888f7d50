//! `examples/rate-limited`: its README's requests, against the service its `main` runs.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_http::{Body, Request, Response};
use tollgate_tests::events::HttpEvent;
use tollgate_tests::{dynamo, json_body, manual_clock};
use tower::ServiceExt;

use super::ExampleTables;

const EXAMPLE: &str = "rate-limited";

async fn send<S>(service: &S, req: Request) -> Response<Body>
where
    S: tower::Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
{
    service
        .clone()
        .oneshot(req)
        .await
        .expect("the stack answers")
}

#[tokio::test]
async fn five_a_minute_per_address_then_429_and_other_addresses_still_pass() {
    let (ddb, counter) = dynamo::client();
    let tables = ExampleTables::create(&ddb, EXAMPLE).await;
    let (_clock, shared) = manual_clock();
    // The template's environment as it is: RATE_LIMITS defaults to ip=5/1m,global=1000/1m.
    let env = tables.function_env(EXAMPLE, &[]);
    let service = example_rate_limited::service(&env, ddb, shared).unwrap();
    let hello = || HttpEvent::get("/hello").from_ip("198.51.100.7").request();

    for left in (0..5).rev() {
        let resp = send(&service, hello()).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(json_body(&resp)["hello"], "198.51.100.7");
        assert!(resp.headers().contains_key("x-request-id"));
        let ratelimit = resp.headers()["ratelimit"].to_str().unwrap();
        assert!(
            ratelimit.starts_with(&format!("\"ip\";r={left};")),
            "{ratelimit}"
        );
    }
    let resp = send(&service, hello()).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(json_body(&resp)["code"], "rate_limited");
    assert!(resp.headers().contains_key("retry-after"));

    // A full address is refused from memory: no DynamoDB request.
    let before = counter.total();
    assert_eq!(send(&service, hello()).await.status(), 429);
    assert_eq!(counter.total(), before, "refused from the block cache");

    let other = HttpEvent::get("/hello").from_ip("203.0.113.9").request();
    assert_eq!(send(&service, other).await.status(), 200);
}

#[tokio::test]
async fn a_full_global_limit_refuses_every_address() {
    let (ddb, _counter) = dynamo::client();
    let tables = ExampleTables::create(&ddb, EXAMPLE).await;
    let (_clock, shared) = manual_clock();
    let env = tables.function_env(EXAMPLE, &[("RATE_LIMITS", "ip=100/1m,global=3/1m")]);
    let service = example_rate_limited::service(&env, ddb, shared).unwrap();
    let from = |ip: &str| HttpEvent::get("/hello").from_ip(ip).request();
    for ip in ["192.0.2.1", "192.0.2.2", "192.0.2.3"] {
        assert_eq!(send(&service, from(ip)).await.status(), 200, "{ip}");
    }
    let resp = send(&service, from("192.0.2.4")).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(json_body(&resp)["code"], "rate_limited");
}

#[tokio::test]
async fn wrong_routes_cost_nothing_and_the_kill_switch_stops_everything() {
    let (ddb, counter) = dynamo::client();
    let tables = ExampleTables::create(&ddb, EXAMPLE).await;
    let (clock, shared) = manual_clock();
    let env = tables.function_env(EXAMPLE, &[]);
    let service = example_rate_limited::service(&env, ddb.clone(), shared).unwrap();

    counter.reset();
    let resp = send(&service, HttpEvent::post("/hello").request()).await;
    assert_eq!(resp.status(), 405);
    assert_eq!(resp.headers()["allow"], "GET");
    assert_eq!(
        send(&service, HttpEvent::get("/elsewhere").request())
            .await
            .status(),
        404
    );
    assert_eq!(counter.total(), 0, "404 and 405 cost no DynamoDB request");

    assert_eq!(
        send(&service, HttpEvent::get("/hello").request())
            .await
            .status(),
        200
    );
    // The README's `aws dynamodb put-item`, item for item.
    ddb.put_item()
        .table_name(tables.name("ControlTable"))
        .item("pk", AttributeValue::S("kill-switch#rate-limited".into()))
        .item("enabled", AttributeValue::Bool(true))
        .item("message", AttributeValue::S("Back at noon.".into()))
        .send()
        .await
        .unwrap();
    // Within KILL_SWITCH_CACHE_SECONDS (5, the default) the flip applies.
    clock.advance(Duration::from_secs(6));
    let counted = dynamo::counters_matching(&ddb, tables.name("RateLimitTable"), "").await;
    let resp = send(&service, HttpEvent::get("/hello").request()).await;
    assert_eq!(resp.status(), 403);
    let body = json_body(&resp);
    assert_eq!(body["code"], "service_disabled");
    assert_eq!(body["detail"], "Back at noon.");
    assert_eq!(
        dynamo::counters_matching(&ddb, tables.name("RateLimitTable"), "").await,
        counted,
        "a disabled function counts nothing"
    );
}
