//! The fault proxy against DynamoDB Local, and what the SDK does when a response is lost.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use aws_sdk_dynamodb::Client;
use bytes::Bytes;
use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tollgate_tests::counting::RequestCounter;
use tollgate_tests::dynamo;
use tollgate_tests::fault_proxy::{Fault, FaultProxy};

fn unique(what: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("fp{}-{n}-{nanos}-{what}", std::process::id())
}

/// A proxy in front of DynamoDB Local, a client through it and a fresh table made directly.
async fn setup() -> (FaultProxy, Client, RequestCounter, String) {
    let proxy = FaultProxy::start(&dynamo::endpoint()).await;
    let (ddb, counter) = dynamo::client_at(&proxy.endpoint());
    let table = unique("t");
    dynamo::create_pk_table(&dynamo::client().0, &table).await;
    (proxy, ddb, counter, table)
}

/// How many items with partition key `pk` exist, read directly (not through the proxy).
async fn count_items(table: &str, pk: &str) -> usize {
    dynamo::scan_all(&dynamo::client().0, table)
        .await
        .iter()
        .filter(|item| {
            item.get("pk")
                .and_then(|v| v.as_s().ok())
                .map(String::as_str)
                == Some(pk)
        })
        .count()
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_string())
}

#[tokio::test]
async fn passes_requests_through() {
    let (proxy, ddb, _, table) = setup().await;
    ddb.put_item()
        .table_name(&table)
        .item("pk", s("a"))
        .item("v", s("1"))
        .send()
        .await
        .unwrap();
    let got = ddb
        .get_item()
        .table_name(&table)
        .key("pk", s("a"))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    assert_eq!(got.item().unwrap()["v"], s("1"));
    assert_eq!(proxy.seen("PutItem"), 1);
    assert_eq!(proxy.seen("GetItem"), 1);
    assert_eq!(proxy.fired(), 0);
}

/// Three requests on one client connection, the middle one with a chunked body: the proxy
/// answers each, framed by `content-length`, and keeps the connection open between them.
#[tokio::test]
async fn keeps_client_connections_alive_and_reads_chunked_bodies() {
    let proxy = FaultProxy::start(&dynamo::endpoint()).await;
    let addr = proxy.endpoint().trim_start_matches("http://").to_string();
    let conn = TcpStream::connect(&addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(conn))
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    // Unsigned requests: DynamoDB Local answers them (with an error), which is all this needs.
    let request = |chunked: bool| {
        let mut req = http::Request::post("/")
            .header("host", &addr)
            .header("x-amz-target", "DynamoDB_20120810.ListTables")
            .header("content-type", "application/x-amz-json-1.0");
        if chunked {
            // hyper's client honours it: the body goes out in chunk framing.
            req = req.header(TRANSFER_ENCODING, "chunked");
        }
        req.body(Full::new(Bytes::from_static(b"{}"))).unwrap()
    };
    for (i, chunked) in [false, true, false].into_iter().enumerate() {
        let exchange = async {
            sender.ready().await?;
            let resp = sender.send_request(request(chunked)).await?;
            let framed = resp.headers().contains_key(CONTENT_LENGTH);
            resp.into_body().collect().await?;
            Ok::<_, hyper::Error>(framed)
        };
        let framed = tokio::time::timeout(Duration::from_secs(10), exchange)
            .await
            .expect("response in time")
            .unwrap_or_else(|e| panic!("request {i} on the kept-alive connection: {e}"));
        assert!(framed, "response {i} is framed by content-length");
    }
    assert_eq!(proxy.seen("ListTables"), 3);
    drop(sender);
    connection.await.unwrap().unwrap();
}

#[tokio::test]
async fn lost_put_response_after_commit() {
    let (proxy, ddb, counter, table) = setup().await;
    proxy.arm("PutItem", Fault::DropResponseAfterCommit);
    let result = ddb
        .put_item()
        .table_name(&table)
        .item("pk", s("once"))
        .condition_expression("attribute_not_exists(pk)")
        .send()
        .await;
    match &result {
        Ok(_) => eprintln!("PutItem after a lost response: Ok"),
        Err(e) => eprintln!(
            "PutItem after a lost response: Err, conditional check failed: {}\n{e:?}",
            e.as_service_error()
                .is_some_and(|e| e.is_conditional_check_failed_exception())
        ),
    }
    eprintln!(
        "PutItem attempts: proxy saw {}, SDK sent {}",
        proxy.seen("PutItem"),
        counter.get("PutItem")
    );
    assert_eq!(count_items(&table, "once").await, 1);
    assert_eq!(proxy.fired(), 1);
    assert!(proxy.seen("PutItem") >= 1);
}

#[tokio::test]
async fn a_server_error_is_retried() {
    let (proxy, ddb, counter, table) = setup().await;
    ddb.put_item()
        .table_name(&table)
        .item("pk", s("a"))
        .send()
        .await
        .unwrap();
    proxy.arm("GetItem", Fault::ServerError);
    let got = ddb
        .get_item()
        .table_name(&table)
        .key("pk", s("a"))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    assert!(got.item().is_some());
    assert_eq!(proxy.seen("GetItem"), 2);
    assert_eq!(counter.get("GetItem"), 2);
    assert_eq!(proxy.fired(), 1);
}

#[tokio::test]
async fn a_dropped_request_is_retried_and_a_delay_only_delays() {
    let (proxy, ddb, _, table) = setup().await;
    proxy.arm("PutItem", Fault::DropRequest);
    proxy.arm("PutItem", Fault::Delay(Duration::from_millis(300)));
    ddb.put_item()
        .table_name(&table)
        .item("pk", s("a"))
        .condition_expression("attribute_not_exists(pk)")
        .send()
        .await
        .unwrap();
    assert_eq!(proxy.seen("PutItem"), 2);
    assert_eq!(proxy.fired(), 2);

    proxy.arm("GetItem", Fault::Delay(Duration::from_millis(300)));
    let start = Instant::now();
    let got = ddb
        .get_item()
        .table_name(&table)
        .key("pk", s("a"))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    assert!(got.item().is_some());
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert_eq!(proxy.seen("GetItem"), 1);
    assert_eq!(count_items(&table, "a").await, 1);
}

#[tokio::test]
async fn lost_transaction_response_with_a_client_request_token() {
    let (proxy, ddb, counter, table) = setup().await;
    proxy.arm("TransactWriteItems", Fault::DropResponseAfterCommit);
    let put = Put::builder()
        .table_name(&table)
        .item("pk", s("tx"))
        .condition_expression("attribute_not_exists(pk)")
        .build()
        .unwrap();
    let token = unique("tok");
    let transaction = ddb
        .transact_write_items()
        .transact_items(TransactWriteItem::builder().put(put).build())
        .client_request_token(&token);
    let result = transaction.clone().send().await;
    match &result {
        Ok(_) => eprintln!("TransactWriteItems after a lost response: Ok"),
        Err(e) => {
            let reasons = e
                .as_service_error()
                .and_then(|e| match e {
                    TransactWriteItemsError::TransactionCanceledException(e) => Some(e),
                    _ => None,
                })
                .map(|e| {
                    e.cancellation_reasons()
                        .iter()
                        .map(|r| r.code().unwrap_or("-").to_string())
                        .collect::<Vec<_>>()
                });
            eprintln!("TransactWriteItems after a lost response: Err, cancellation reasons {reasons:?}\n{e:?}");
        }
    }
    eprintln!(
        "TransactWriteItems attempts: proxy saw {}, SDK sent {}",
        proxy.seen("TransactWriteItems"),
        counter.get("TransactWriteItems")
    );
    // A separate call, later, with the same token and parameters.
    let again = transaction.send().await;
    eprintln!(
        "TransactWriteItems again with the same token: {:?}",
        again.map(|_| ())
    );
    assert_eq!(count_items(&table, "tx").await, 1);
    assert_eq!(proxy.fired(), 1);
}

/// The SDK fills `client_request_token` itself when it is not set (the model marks it as an
/// idempotency token) once per operation, before the retry loop: every attempt carries the same
/// token, so the retry after a lost response is idempotent even without an explicit token.
#[tokio::test]
async fn lost_transaction_response_without_a_client_request_token() {
    let (proxy, ddb, counter, table) = setup().await;
    proxy.arm("TransactWriteItems", Fault::DropResponseAfterCommit);
    let put = Put::builder()
        .table_name(&table)
        .item("pk", s("tx"))
        .condition_expression("attribute_not_exists(pk)")
        .build()
        .unwrap();
    let result = ddb
        .transact_write_items()
        .transact_items(TransactWriteItem::builder().put(put).build())
        .send()
        .await;
    eprintln!(
        "TransactWriteItems (no explicit token) after a lost response: {:?}, attempts: proxy saw {}, SDK sent {}",
        result.as_ref().map(|_| ()),
        proxy.seen("TransactWriteItems"),
        counter.get("TransactWriteItems")
    );
    assert_eq!(count_items(&table, "tx").await, 1);
    assert_eq!(proxy.fired(), 1);
}

/// Without retries the lost response surfaces as a dispatch failure (hyper's `IncompleteMessage`,
/// classified transient): indistinguishable from a request that never arrived, yet committed.
#[tokio::test]
async fn without_retries_a_lost_response_is_a_dispatch_failure() {
    let (proxy, ddb, _, table) = setup().await;
    proxy.arm("PutItem", Fault::DropResponseAfterCommit);
    let result = ddb
        .put_item()
        .table_name(&table)
        .item("pk", s("a"))
        .customize()
        .config_override(
            aws_sdk_dynamodb::Config::builder()
                .retry_config(RetryConfig::standard().with_max_attempts(1)),
        )
        .send()
        .await;
    match result {
        Err(SdkError::DispatchFailure(e)) => eprintln!("PutItem without retries: {e:?}"),
        other => panic!("expected a dispatch failure, got {other:?}"),
    }
    assert_eq!(count_items(&table, "a").await, 1);
    assert_eq!(proxy.seen("PutItem"), 1);
}

#[tokio::test]
async fn dropping_the_proxy_stops_listening() {
    let proxy = FaultProxy::start(&dynamo::endpoint()).await;
    let addr = proxy.endpoint().trim_start_matches("http://").to_string();
    let kept = TcpStream::connect(&addr).await.unwrap();
    drop(proxy);
    // Aborted tasks are dropped at the runtime's next turn: wait for it, boundedly.
    let refused = async {
        while TcpStream::connect(&addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), refused)
        .await
        .expect("the listener closes after the proxy is dropped");
    // The connection it was serving is closed too.
    let mut kept = kept;
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), kept.read(&mut byte)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
}

/// Each of DynamoDB's own errors, answered by the proxy, reaches the caller as the SDK's typed
/// error for it: the failure branches of the code under test see what DynamoDB would give them.
#[tokio::test]
async fn dynamodb_errors_arrive_as_the_sdks_typed_errors() {
    use tollgate_tests::fault_proxy::DynamoError;
    let (proxy, ddb, counter, table) = setup().await;
    let one_attempt = || {
        aws_sdk_dynamodb::Config::builder()
            .retry_config(RetryConfig::standard().with_max_attempts(1))
    };
    let transaction = |pk: &str| {
        let put = |pk: String| {
            TransactWriteItem::builder()
                .put(
                    Put::builder()
                        .table_name(&table)
                        .item("pk", s(&pk))
                        .build()
                        .unwrap(),
                )
                .build()
        };
        ddb.transact_write_items()
            .transact_items(put(format!("{pk}-first")))
            .transact_items(put(format!("{pk}-second")))
            .client_request_token(unique("tok"))
            .customize()
            .config_override(one_attempt())
    };

    // A conflict on the chosen item; the other item's reason is None.
    proxy.arm(
        "TransactWriteItems",
        Fault::Error(DynamoError::TransactionConflict {
            item: "c-second".into(),
        }),
    );
    match transaction("c").send().await {
        Err(SdkError::ServiceError(e)) => match e.err() {
            TransactWriteItemsError::TransactionCanceledException(c) => {
                let codes: Vec<_> = c
                    .cancellation_reasons()
                    .iter()
                    .map(|r| r.code().unwrap_or("-"))
                    .collect();
                assert_eq!(codes, ["None", "TransactionConflict"]);
            }
            other => panic!("expected a cancellation, got {other:?}"),
        },
        other => panic!("expected a cancellation, got {other:?}"),
    }

    type Expected = fn(&TransactWriteItemsError) -> bool;
    let cases: [(DynamoError, Expected); 5] = [
        (DynamoError::TransactionInProgress, |e| {
            matches!(
                e,
                TransactWriteItemsError::TransactionInProgressException(_)
            )
        }),
        (DynamoError::IdempotentParameterMismatch, |e| {
            matches!(
                e,
                TransactWriteItemsError::IdempotentParameterMismatchException(_)
            )
        }),
        (DynamoError::ProvisionedThroughputExceeded, |e| {
            matches!(
                e,
                TransactWriteItemsError::ProvisionedThroughputExceededException(_)
            )
        }),
        (DynamoError::Throttling, |e| {
            use aws_sdk_dynamodb::error::ProvideErrorMetadata;
            e.code() == Some("ThrottlingException")
        }),
        (DynamoError::InternalServerError, |e| {
            matches!(e, TransactWriteItemsError::InternalServerError(_))
        }),
    ];
    for (error, expected) in cases {
        proxy.arm("TransactWriteItems", Fault::Error(error.clone()));
        match transaction("x").send().await {
            Err(SdkError::ServiceError(e)) => assert!(expected(e.err()), "{error:?}: {e:?}"),
            other => panic!("{error:?}: expected a service error, got {other:?}"),
        }
    }
    assert_eq!(count_items(&table, "x-first").await, 0, "nothing forwarded");
    assert_eq!(count_items(&table, "c-first").await, 0, "nothing forwarded");

    // With the SDK's own retries, throttling and 500s are retried on the same connection.
    proxy.arm(
        "PutItem",
        Fault::Error(DynamoError::ProvisionedThroughputExceeded),
    );
    proxy.arm("PutItem", Fault::Error(DynamoError::Throttling));
    counter.reset();
    ddb.put_item()
        .table_name(&table)
        .item("pk", s("retried"))
        .send()
        .await
        .unwrap();
    assert_eq!(counter.get("PutItem"), 3);
    assert_eq!(count_items(&table, "retried").await, 1);
}

/// A fault can be aimed at one item, and armed until disarmed; bodies can be recorded.
#[tokio::test]
async fn faults_aimed_at_an_item_and_armed_until_disarmed() {
    let (proxy, ddb, _, table) = setup().await;
    let no_retry = || {
        aws_sdk_dynamodb::Config::builder()
            .retry_config(RetryConfig::standard().with_max_attempts(1))
    };
    let put = |pk: &'static str| {
        ddb.put_item()
            .table_name(&table)
            .item("pk", s(pk))
            .customize()
            .config_override(no_retry())
    };
    proxy.record("PutItem");
    proxy.arm_when("PutItem", "\"target\"", Fault::ServerError);
    put("bystander").send().await.unwrap();
    assert!(put("target").send().await.is_err());
    put("target").send().await.unwrap();
    assert_eq!(proxy.fired(), 1);

    proxy.arm_always("PutItem", Fault::ServerError);
    for _ in 0..3 {
        assert!(put("again").send().await.is_err());
    }
    proxy.disarm("PutItem");
    put("again").send().await.unwrap();
    assert_eq!(proxy.fired(), 4);
    let bodies = proxy.bodies("PutItem");
    assert_eq!(bodies.len(), 7);
    assert!(String::from_utf8_lossy(&bodies[1]).contains("\"target\""));
    assert_eq!(bodies[1], bodies[2], "the same request, byte for byte");
}

/// The support library's `scan_all` (which the tests and the replay's reconciliation read
/// tables with) reads every page: 12 items of 100 KB are more than one 1 MB page of a scan.
#[tokio::test]
async fn scan_all_reads_every_page() {
    let (ddb, counter) = dynamo::client();
    let table = unique("pages");
    dynamo::create_pk_table(&ddb, &table).await;
    let big = "x".repeat(100_000);
    for i in 0..12 {
        let put = ddb
            .put_item()
            .table_name(&table)
            .item("pk", s(&format!("item-{i}")));
        put.item("payload", s(&big)).send().await.unwrap();
    }
    counter.reset();
    let items = dynamo::scan_all(&ddb, &table).await;
    assert_eq!(items.len(), 12);
    assert!(
        counter.get("Scan") > 1,
        "one page held them all: {}",
        counter.get("Scan")
    );
}
