//! An existing single-table design hosts the idempotency records: its own partition and sort
//! key names, a prefix that keeps the records apart from its other items, its TTL attribute.
//! Both modes (two-phase and the atomic transaction) write and read them there.

use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, TransactWriteItem,
};
use http::StatusCode;
use tollgate::http::json_response;
use tollgate::idempotency::{
    fingerprint, Attributes, Claim, Existing, Explained, IdempotencyKey, IdempotencyStore, Outcome,
    Scope, StoredResponse, TransactionEffect,
};
use tollgate_tests::dynamo::{self, scan_all, unique_prefix};
use tollgate_tests::manual_clock;

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
