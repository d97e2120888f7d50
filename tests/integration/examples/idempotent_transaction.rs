//! `examples/idempotent-transaction`: its README's requests, against the service its `main`
//! runs.

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_http::{Body, Request, Response};
use tollgate_tests::events::HttpEvent;
use tollgate_tests::{dynamo, json_body, manual_clock};
use tower::ServiceExt;

use super::ExampleTables;

const EXAMPLE: &str = "idempotent-transaction";
const K1: &str = "3f2b8c1e-0d7a-4e59-9a7e-6c1d2b3a4f50";
const K2: &str = "9c4e7a12-5b3d-4f68-8e21-0a9b8c7d6e5f";

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

fn booking(key: Option<&str>, body: &str) -> Request {
    let mut event = HttpEvent::post("/bookings")
        .from_ip("198.51.100.7")
        .body(body);
    if let Some(key) = key {
        event = event.header("idempotency-key", key);
    }
    event.request()
}

async fn guest_of(ddb: &aws_sdk_dynamodb::Client, tables: &ExampleTables, seat: &str) -> String {
    let item = ddb
        .get_item()
        .table_name(tables.name("BookingsTable"))
        .key("pk", AttributeValue::S(format!("seat#{seat}")))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    item.item().expect("the seat is booked")["guest"]
        .as_s()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn a_booking_commits_once_and_its_retry_is_replayed() {
    let (ddb, counter) = dynamo::client();
    let tables = ExampleTables::create(&ddb, EXAMPLE).await;
    let (_clock, shared) = manual_clock();
    let env = tables.function_env(EXAMPLE, &[]);
    let service =
        example_idempotent_transaction::service(&env, ddb.clone(), shared.clone()).unwrap();
    let ada = r#"{"seat":"12A","guest":"Ada"}"#;

    // 1. 201, one transaction.
    counter.reset();
    let resp = send(&service, booking(Some(K1), ada)).await;
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()["location"], "/bookings/12A");
    assert_eq!(
        json_body(&resp),
        serde_json::json!({"seat": "12A", "guest": "Ada"})
    );
    assert!(!resp.headers().contains_key("idempotent-replayed"));
    assert_eq!(counter.get("TransactWriteItems"), 1);
    assert_eq!(guest_of(&ddb, &tables, "12A").await, "Ada");

    // 2. The retry: the same 201, replayed, from this process's memory (no DynamoDB request).
    counter.reset();
    let resp = send(&service, booking(Some(K1), ada)).await;
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()["idempotent-replayed"], "true");
    assert_eq!(json_body(&resp)["guest"], "Ada");
    assert_eq!(counter.get("TransactWriteItems"), 0, "nothing written");

    // ... and from DynamoDB on another instance (a cold start), same fields in another order.
    let other = example_idempotent_transaction::service(&env, ddb.clone(), shared).unwrap();
    let reordered = "{ \"guest\": \"Ada\", \"seat\": \"12A\" }";
    let resp = send(&other, booking(Some(K1), reordered)).await;
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()["idempotent-replayed"], "true");
    assert_eq!(resp.headers()["location"], "/bookings/12A");

    // 3. The same key, another body: 422.
    let eve = r#"{"seat":"12A","guest":"Eve"}"#;
    let resp = send(&other, booking(Some(K1), eve)).await;
    assert_eq!(resp.status(), 422);
    assert_eq!(json_body(&resp)["code"], "idempotency_key_reused");
    assert_eq!(guest_of(&ddb, &tables, "12A").await, "Ada");
}

#[tokio::test]
async fn a_taken_seat_is_a_409_stored_under_its_key_and_bad_keys_are_400() {
    let (ddb, _counter) = dynamo::client();
    let tables = ExampleTables::create(&ddb, EXAMPLE).await;
    let (_clock, shared) = manual_clock();
    let env = tables.function_env(EXAMPLE, &[]);
    let service = example_idempotent_transaction::service(&env, ddb.clone(), shared).unwrap();

    let ada = r#"{"seat":"12A","guest":"Ada"}"#;
    assert_eq!(send(&service, booking(Some(K1), ada)).await.status(), 201);

    // 4. Another key for the same seat: 409 seat_taken, and the seat stays Ada's.
    let bob = r#"{"seat":"12A","guest":"Bob"}"#;
    let resp = send(&service, booking(Some(K2), bob)).await;
    assert_eq!(resp.status(), 409);
    assert_eq!(json_body(&resp)["code"], "seat_taken");
    assert_eq!(guest_of(&ddb, &tables, "12A").await, "Ada");
    // The refusal is stored under K2: its retry gets the same 409 even once the seat is free.
    ddb.delete_item()
        .table_name(tables.name("BookingsTable"))
        .key("pk", AttributeValue::S("seat#12A".into()))
        .send()
        .await
        .unwrap();
    let resp = send(&service, booking(Some(K2), bob)).await;
    assert_eq!(resp.status(), 409);
    assert_eq!(resp.headers()["idempotent-replayed"], "true");
    assert_eq!(json_body(&resp)["code"], "seat_taken");

    // 5. No key, or a guessable one: 400, nothing booked.
    let carl = r#"{"seat":"14C","guest":"Carl"}"#;
    for key in [None, Some("short-key")] {
        let resp = send(&service, booking(key, carl)).await;
        assert_eq!(resp.status(), 400, "{key:?}");
    }
    let seat = ddb
        .get_item()
        .table_name(tables.name("BookingsTable"))
        .key("pk", AttributeValue::S("seat#14C".into()))
        .send()
        .await
        .unwrap();
    assert!(seat.item().is_none());
}
