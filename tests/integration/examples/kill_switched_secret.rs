//! `examples/kill-switched-secret`: its README's requests, against the service its `main`
//! runs: the secret as a plain variable (the README's local run) and from SSM (as deployed,
//! SSM stood in for over HTTP).

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_http::{Body, Request, Response};
use tollgate_tests::events::HttpEvent;
use tollgate_tests::ssm::{Reply, SsmStandIn};
use tollgate_tests::{dynamo, json_body, manual_clock};
use tower::ServiceExt;

use super::ExampleTables;

const EXAMPLE: &str = "kill-switched-secret";
/// `printf %s hello | sha256sum | cut -c1-12`, as the README checks it.
const HELLO_VERSION: &str = "2cf24dba5fb0";

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

fn key_version() -> Request {
    HttpEvent::get("/key-version").request()
}

#[tokio::test]
async fn the_plain_variable_form_answers_the_keys_version_never_the_key() {
    let (ddb, _counter) = dynamo::client();
    let tables = ExampleTables::create(&ddb, EXAMPLE).await;
    let (_clock, shared) = manual_clock();
    // The README's local run: UPSTREAM_KEY instead of UPSTREAM_KEY_PARAM, no SSM client.
    let env = tables.function_env_without(
        EXAMPLE,
        &["UPSTREAM_KEY_PARAM"],
        &[("UPSTREAM_KEY", "hello")],
    );
    let service = example_kill_switched_secret::service(&env, ddb, None, shared).unwrap();
    let resp = send(&service, key_version()).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        json_body(&resp),
        serde_json::json!({ "key_version": HELLO_VERSION })
    );
    assert!(!String::from_utf8_lossy(resp.body().as_ref()).contains("hello"));
}

#[tokio::test]
async fn setting_both_forms_of_the_secret_is_refused_at_start() {
    let (ddb, _counter) = dynamo::client();
    let tables = ExampleTables::create(&ddb, EXAMPLE).await;
    let (_clock, shared) = manual_clock();
    let env = tables.function_env(EXAMPLE, &[("UPSTREAM_KEY", "hello")]);
    let err = example_kill_switched_secret::service(&env, ddb, None, shared)
        .err()
        .expect("refused");
    assert_eq!(err.var, "UPSTREAM_KEY");
}

#[tokio::test]
async fn the_ssm_secret_is_cached_a_failing_ssm_is_a_503_and_left_alone_and_the_switch_reads_nothing(
) {
    let (ddb, _counter) = dynamo::client();
    let tables = ExampleTables::create(&ddb, EXAMPLE).await;
    let (clock, shared) = manual_clock();
    // As deployed: UPSTREAM_KEY_PARAM names the parameter (the template's default).
    let env = tables.function_env(EXAMPLE, &[]);
    let ssm = SsmStandIn::start(Reply::Error(500, "InternalServerError".into())).await;
    let service =
        example_kill_switched_secret::service(&env, ddb.clone(), Some(ssm.client()), shared)
            .unwrap();

    // SSM failing with nothing cached: 503 with Retry-After, then SSM left alone.
    let resp = send(&service, key_version()).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(json_body(&resp)["code"], "temporarily_unavailable");
    assert!(resp.headers().contains_key("retry-after"));
    let calls = ssm.calls().await;
    assert!(calls >= 1);
    assert_eq!(send(&service, key_version()).await.status(), 503);
    assert_eq!(ssm.calls().await, calls, "no SSM call within the cooldown");

    // SSM healthy again, the cooldown over: the value, then from cache.
    ssm.set(Reply::Value("hello".into()));
    clock.advance(Duration::from_secs(6));
    let resp = send(&service, key_version()).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(json_body(&resp)["key_version"], HELLO_VERSION);
    let calls = ssm.calls().await;
    assert_eq!(send(&service, key_version()).await.status(), 200);
    assert_eq!(ssm.calls().await, calls, "cached for SECRETS_TTL_SECONDS");

    // The README's kill switch: 403, and the secret is not read.
    ddb.put_item()
        .table_name(tables.name("ControlTable"))
        .item("pk", AttributeValue::S("kill-switch#key-version".into()))
        .item("enabled", AttributeValue::Bool(true))
        .send()
        .await
        .unwrap();
    clock.advance(Duration::from_secs(301));
    let resp = send(&service, key_version()).await;
    assert_eq!(resp.status(), 403);
    assert_eq!(json_body(&resp)["code"], "service_disabled");
    assert_eq!(
        ssm.calls().await,
        calls,
        "a disabled function reads no secret"
    );
}
