//! DynamoDB Local: clients and per-test tables.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;

use tollgate_functions::catalog;
use tollgate_template::{self as template, TableDef};

use crate::capacity::CapacityMeter;
use crate::counting::{RequestCounter, WireClock};

/// DynamoDB Local's endpoint, from `DYNAMODB_ENDPOINT`.
pub fn endpoint() -> String {
    std::env::var("DYNAMODB_ENDPOINT").unwrap_or_else(|_| {
        panic!("DYNAMODB_ENDPOINT is not set: run the tests with `cargo xtask test`, which starts DynamoDB Local")
    })
}

/// A client for DynamoDB Local that counts what it sends.
pub fn client() -> (Client, RequestCounter) {
    client_at(&endpoint())
}

/// A counting client for an explicit endpoint (a fault proxy in front of DynamoDB Local).
pub fn client_at(endpoint: &str) -> (Client, RequestCounter) {
    let counter = RequestCounter::default();
    let config = config_at(endpoint).interceptor(counter.clone()).build();
    (Client::from_conf(config), counter)
}

/// A client for DynamoDB Local that counts what it sends and asks every request for the
/// capacity it consumed ([`CapacityMeter`]): for the bench's capacity figures.
pub fn metered_client() -> (Client, RequestCounter, CapacityMeter) {
    let (config, counter, meter) = metered_config();
    (Client::from_conf(config.build()), counter, meter)
}

/// [`metered_client`] whose requests' time on the wire is also clocked.
pub fn metered_clocked_client() -> (Client, RequestCounter, CapacityMeter, WireClock) {
    let (config, counter, meter) = metered_config();
    let wire = WireClock::default();
    let config = config.interceptor(wire.clone()).build();
    (Client::from_conf(config), counter, meter, wire)
}

/// The configuration of [`metered_client`], with its counter and meter.
fn metered_config() -> (
    aws_sdk_dynamodb::config::Builder,
    RequestCounter,
    CapacityMeter,
) {
    let (counter, meter) = (RequestCounter::default(), CapacityMeter::default());
    let config = config_at(&endpoint())
        .interceptor(counter.clone())
        .interceptor(meter.clone());
    (config, counter, meter)
}

fn config_at(endpoint: &str) -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
        .endpoint_url(endpoint)
}

/// Names of one test's own tables.
#[derive(Debug, Clone)]
pub struct Tables {
    pub rate_limits: String,
    pub control: String,
    pub clients: String,
    pub accounts: String,
    pub transfers: String,
    pub idempotency: String,
}

/// A prefix no other test (in this or another test process) uses.
pub fn unique_prefix() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "t{}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        nanos
    )
}

/// The table definitions of the project's `template.yaml`, read once.
pub fn template_tables() -> &'static [TableDef] {
    static DEFS: OnceLock<Vec<TableDef>> = OnceLock::new();
    DEFS.get_or_init(|| {
        let path = crate::workspace_root().join("template.yaml");
        let text = std::fs::read_to_string(path).expect("template.yaml is readable");
        template::table_definitions(&text).expect("template.yaml defines its tables")
    })
}

impl Tables {
    /// Creates fresh tables with unique names, each exactly as `template.yaml` defines it (so
    /// every test runs on the deployed schema, TTL included).
    pub async fn create(ddb: &Client) -> Self {
        let prefix = unique_prefix();
        let tables = Self {
            rate_limits: format!("{prefix}-rate-limits"),
            control: format!("{prefix}-control"),
            clients: format!("{prefix}-clients"),
            accounts: format!("{prefix}-accounts"),
            transfers: format!("{prefix}-transfers"),
            idempotency: format!("{prefix}-idempotency"),
        };
        for (table, name) in tables.by_table() {
            let def = template_tables()
                .iter()
                .find(|d| d.logical_id == table.logical_id)
                .unwrap_or_else(|| panic!("template.yaml has no {}", table.logical_id));
            template::create_table(ddb, name, def)
                .await
                .unwrap_or_else(|e| panic!("create table {name}: {e:?}"));
        }
        tables
    }

    /// Each table with the catalog entry it is made from. One idempotency table per test
    /// serves either function (both read `IDEMPOTENCY_TABLE`), made as the transfer one.
    fn by_table(&self) -> [(catalog::Table, &String); 6] {
        [
            (catalog::RATE_LIMITS, &self.rate_limits),
            (catalog::CONTROL, &self.control),
            (catalog::CLIENTS, &self.clients),
            (catalog::ACCOUNTS, &self.accounts),
            (catalog::TRANSFERS, &self.transfers),
            (catalog::TRANSFER_IDEMPOTENCY, &self.idempotency),
        ]
    }

    /// The environment the functions read these table names from.
    pub fn env_pairs(&self) -> Vec<(String, String)> {
        self.by_table()
            .into_iter()
            .map(|(table, name)| (table.function_variable.to_string(), name.clone()))
            .collect()
    }
}

/// A bare table with a single string partition key `pk`, on demand (for tests of the SDK and
/// the fault proxy themselves, not of the project's tables).
pub async fn create_pk_table(ddb: &Client, name: &str) {
    ddb.create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("pk")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("pk")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("create table {name}: {e:?}"));
}

/// Every item of a table, every page, strongly consistent.
pub async fn scan_all(
    ddb: &Client,
    table: &str,
) -> Vec<std::collections::HashMap<String, AttributeValue>> {
    let scan = ddb.scan().table_name(table).consistent_read(true);
    let items = scan.into_paginator().items().send().try_collect().await;
    items.unwrap_or_else(|e| panic!("scan {table}: {e:?}"))
}

/// The stored `count` of every rate-limit counter whose key contains `needle`.
pub async fn counters_matching(ddb: &Client, table: &str, needle: &str) -> Vec<(String, u64)> {
    scan_all(ddb, table)
        .await
        .into_iter()
        .filter_map(|item| {
            let pk = item.get("pk")?.as_s().ok()?.clone();
            let count = item.get("count")?.as_n().ok()?.parse().ok()?;
            pk.contains(needle).then_some((pk, count))
        })
        .collect()
}
