//! An existing single-table design hosts the guards' items: its own partition and sort key
//! names, a prefix that keeps each guard's items apart from its other items, its TTL attribute.
//! The idempotency records in both modes (two-phase and the atomic transaction), the rate-limit
//! counters, the kill switch and the published limits write and read them there.

use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, TransactWriteItem,
};
use http::StatusCode;
use lambda_http::Request;
use tollgate::config::GuardSettings;
use tollgate::gate::Gate;
use tollgate::http::json_response;
use tollgate::idempotency::{
    fingerprint, Attributes, Claim, Existing, Explained, IdempotencyKey, IdempotencyStore, Outcome,
    Scope, StoredResponse, TransactionEffect,
};
use tollgate::kill_switch::KillSwitch;
use tollgate::layers::{handler_fn, ClientAddress, Global, Methods};
use tollgate::ratelimit::Layer;
use tollgate::ApiError;
use tollgate_tests::dynamo::{self, scan_all, unique_prefix};
use tollgate_tests::events::HttpEvent;
use tollgate_tests::manual_clock;
use tower::{ServiceBuilder, ServiceExt};

async fn single_table(ddb: &aws_sdk_dynamodb::Client) -> String {
    let name = format!("{}-app", unique_prefix());
    let attribute = |n: &str| {
        AttributeDefinition::builder()
            .attribute_name(n)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .unwrap()
    };
    let key = |n: &str, t: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(n)
            .key_type(t)
            .build()
            .unwrap()
    };
    ddb.create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attribute("PK"))
        .attribute_definitions(attribute("SK"))
        .key_schema(key("PK", KeyType::Hash))
        .key_schema(key("SK", KeyType::Range))
        .send()
        .await
        .unwrap();
    name
}

fn attributes() -> Attributes {
    Attributes {
        partition_key: "PK".into(),
        sort_key: Some(("SK".into(), "IDEMPOTENCY".into())),
        key_prefix: "IDEM#".into(),
        expires_at: "ttl".into(),
    }
}

fn scope(key: &str) -> Scope {
    Scope::new(
        "tenant-1",
        "POST /orders",
        &IdempotencyKey::parse(Some(key.as_bytes())).unwrap(),
    )
}

/// An order item beside the record, in the same table.
struct PlaceOrder {
    table: String,
}

impl TransactionEffect for PlaceOrder {
    fn items(&mut self) -> Vec<TransactWriteItem> {
        let put = aws_sdk_dynamodb::types::Put::builder()
            .table_name(&self.table)
            .item("PK", AttributeValue::S("ORDER#1".into()))
            .item("SK", AttributeValue::S("ORDER".into()))
            .condition_expression("attribute_not_exists(PK)")
            .build()
            .unwrap();
        vec![TransactWriteItem::builder().put(put).build()]
    }

    fn explain(&mut self, _: &[aws_sdk_dynamodb::types::CancellationReason]) -> Explained {
        Explained::Raced
    }
}

#[tokio::test]
async fn records_live_under_the_tables_own_names_in_both_modes() {
    let (ddb, _) = dynamo::client();
    let table = single_table(&ddb).await;
    let (_clock, shared) = manual_clock();
    let store = IdempotencyStore::new(ddb.clone(), &table, shared, Duration::from_secs(3600))
        .with_attributes(attributes());

    // Two-phase.
    let two_phase = scope("two-phase-key-0001");
    let Claim::Acquired(lease) = store
        .claim(&two_phase, "fp", Duration::from_secs(30))
        .await
        .unwrap()
    else {
        panic!("a fresh key is claimed");
    };
    let answer = StoredResponse::capture(&json_response(StatusCode::OK, &"done"));
    store.complete(&lease, &answer, None).await.unwrap();
    let record = store
        .read(&two_phase)
        .await
        .unwrap()
        .expect("the record is there");
    assert_eq!(record.fingerprint, "fp");
    assert!(matches!(
        store.claim(&two_phase, "fp", Duration::from_secs(30)).await.unwrap(),
        Claim::Existing(Existing::Replay(r)) if r == answer
    ));

    // Atomic.
    let atomic = scope("atomic-key-0000001");
    let body = serde_json::json!({"item": 1});
    let created = json_response(StatusCode::CREATED, &"order 1");
    let mut effect = PlaceOrder {
        table: table.clone(),
    };
    let outcome = store
        .commit(&atomic, &fingerprint(&body), created, &mut effect)
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Committed(_)));
    let again = store
        .commit(
            &atomic,
            &fingerprint(&body),
            json_response(StatusCode::CREATED, &"order 1"),
            &mut effect,
        )
        .await
        .unwrap();
    assert!(matches!(again, Outcome::Replayed(_)));

    // Every record under the prefix and the fixed sort key, with the table's TTL attribute.
    let items = scan_all(&ddb, &table).await;
    let records: Vec<_> = items
        .iter()
        .filter(|i| i["PK"].as_s().unwrap().starts_with("IDEM#"))
        .collect();
    assert_eq!(records.len(), 2, "{items:?}");
    for record in records {
        assert_eq!(record["SK"].as_s().unwrap(), "IDEMPOTENCY");
        assert!(record.contains_key("ttl"), "{record:?}");
        assert!(!record.contains_key("pk") && !record.contains_key("expires_at"));
    }
    assert!(items.iter().any(|i| i["PK"].as_s().unwrap() == "ORDER#1"));
}

fn in_table(sort_key: &str, key_prefix: &str) -> Attributes {
    Attributes {
        partition_key: "PK".into(),
        sort_key: Some(("SK".into(), sort_key.into())),
        key_prefix: key_prefix.into(),
        expires_at: "ttl".into(),
    }
}

fn work(path: &str) -> Option<&'static str> {
    (path == "/work").then_some("POST")
}

/// The gate's own items in the same table, through the settings builder as an adopter writes
/// it: the counters (fixed and sliding) under `LIMIT#`, the kill switch and the published limits
/// under `CONTROL#`, each with the table's sort key and TTL attribute, and nothing under the
/// default names.
#[tokio::test]
async fn the_counters_and_the_kill_switch_live_in_the_same_table() {
    let (ddb, _) = dynamo::client();
    let table = single_table(&ddb).await;
    let (_clock, shared) = manual_clock();
    let settings = GuardSettings::builder("orders", &table, &table)
        .rate_limits("ip=2/1m,global=100/1m:sliding".parse().unwrap())
        .rate_limit_attributes(in_table("LIMIT", "LIMIT#"))
        .control_attributes(in_table("CONTROL", "CONTROL#"))
        .build()
        .unwrap();
    let gate = Gate::new(settings, ddb.clone(), shared);
    gate.publish_limits().await.unwrap();
    let service = ServiceBuilder::new()
        .layer(gate.respond_layer())
        .layer(gate.routes_layer(Methods(work)))
        .layer(gate.kill_switch_layer())
        .layer(gate.client_address_layer())
        .layer(
            gate.rate_limit_layer()
                .limit(gate.rate_limit(Layer::Ip), ClientAddress)
                .limit(gate.rate_limit(Layer::Global), Global),
        )
        .service(handler_fn(|_req: Request| async {
            Ok::<_, ApiError>(json_response(StatusCode::OK, &"done"))
        }));
    let send = |ip: &'static str| {
        let service = service.clone();
        async move {
            let req = HttpEvent::post("/work").from_ip(ip).request();
            service.oneshot(req).await.unwrap().status()
        }
    };

    // The limits count and refuse as in a table of their own.
    assert_eq!(send("198.51.100.1").await, 200);
    assert_eq!(send("198.51.100.1").await, 200);
    assert_eq!(send("198.51.100.1").await, 429);
    assert_eq!(send("198.51.100.2").await, 200);

    // The switch, flipped through the gate, is read back from the table by the layer.
    gate.kill_switch()
        .set("orders", true, Some("Closed for inventory."))
        .await
        .unwrap();
    assert_eq!(send("198.51.100.3").await, 403);
    let fresh = KillSwitch::new(ddb.clone(), &table, manual_clock().1, Duration::ZERO)
        .with_attributes(in_table("CONTROL", "CONTROL#"));
    assert!(fresh.check("orders").await.is_err(), "read from the table");

    let items = scan_all(&ddb, &table).await;
    let under = |prefix: &str| -> Vec<_> {
        items
            .iter()
            .filter(|i| i["PK"].as_s().unwrap().starts_with(prefix))
            .collect()
    };
    let counters = under("LIMIT#");
    // Two addresses in `ip`; `global`'s window, and the window before it, which the sliding
    // layer read and sealed (created empty).
    assert_eq!(counters.len(), 4, "{items:?}");
    for counter in &counters {
        assert_eq!(counter["SK"].as_s().unwrap(), "LIMIT");
        assert!(counter.contains_key("ttl"), "{counter:?}");
    }
    let counted: u64 = counters
        .iter()
        .filter_map(|c| c.get("count"))
        .map(|n| n.as_n().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(counted, 2 + 1 + 3, "ip twice and once, global three times");
    let control = under("CONTROL#");
    assert_eq!(
        control.len(),
        2,
        "the switch and the published limits: {items:?}"
    );
    assert!(control.iter().all(|i| i["SK"].as_s().unwrap() == "CONTROL"));
    assert_eq!(
        items.len(),
        6,
        "nothing else in the table, and nothing under `pk`"
    );
    assert!(items.iter().all(|i| !i.contains_key("pk")));
}
