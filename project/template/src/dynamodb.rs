//! A [`TableDef`] made real in a DynamoDB: `CreateTable`, the wait for ACTIVE, TTL.
//!
//! Used for DynamoDB Local only (the CLI's `tables create`, the tests' per-test tables):
//! deployed tables belong to the SAM stack.

use std::time::Duration;

use aws_sdk_dynamodb::client::Waiters;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{
    self as ddb, KeySchemaElement, ProvisionedThroughput, ScalarAttributeType,
    TimeToLiveSpecification, TimeToLiveStatus,
};
use aws_sdk_dynamodb::Client;

use crate::{AttributeType, BillingMode, KeyType, TableDef};

/// Longest wait for a new table to become ACTIVE (immediate on DynamoDB Local).
const ACTIVE_WAIT: Duration = Duration::from_secs(120);

/// What [`create_table`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The table was created (and its TTL enabled, when the definition has one).
    Created,
    /// A table of that name was there already with the same key schema; it was left as it was,
    /// except that TTL was enabled if the definition wants it and it was off (a run interrupted
    /// between creating a table and enabling its TTL is repaired by running again).
    Existed,
}

/// A table could not be created or checked.
#[derive(Debug, thiserror::Error)]
pub enum CreateTableError {
    /// DynamoDB refused or failed; the SDK's error is the source (its own message alone,
    /// "service error", says little: print the chain).
    #[error("table {table}: {operation} failed")]
    Store {
        table: String,
        operation: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An existing table does not match the definition; nothing was changed.
    #[error("table {table} exists with a different {what} than the template defines")]
    Drift { table: String, what: &'static str },
}

fn store_error(
    table: &str,
    operation: &'static str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> CreateTableError {
    CreateTableError::Store {
        table: table.to_string(),
        operation,
        source: Box::new(e),
    }
}

impl TableDef {
    fn sdk_key_schema(&self) -> Result<Vec<KeySchemaElement>, CreateTableError> {
        self.key_schema
            .iter()
            .map(|k| {
                KeySchemaElement::builder()
                    .attribute_name(&k.attribute_name)
                    .key_type(match k.key_type {
                        KeyType::Hash => ddb::KeyType::Hash,
                        KeyType::Range => ddb::KeyType::Range,
                    })
                    .build()
                    .map_err(|e| store_error(&self.logical_id, "KeySchema", e))
            })
            .collect()
    }

    fn sdk_attributes(&self) -> Result<Vec<ddb::AttributeDefinition>, CreateTableError> {
        self.attribute_definitions
            .iter()
            .map(|a| {
                ddb::AttributeDefinition::builder()
                    .attribute_name(&a.attribute_name)
                    .attribute_type(match a.attribute_type {
                        AttributeType::S => ScalarAttributeType::S,
                        AttributeType::N => ScalarAttributeType::N,
                        AttributeType::B => ScalarAttributeType::B,
                    })
                    .build()
                    .map_err(|e| store_error(&self.logical_id, "AttributeDefinitions", e))
            })
            .collect()
    }
}

/// Creates table `name` as `def` defines it, waits until it is ACTIVE and enables TTL where the
/// definition does. A table that exists already is checked against the definition's key schema
/// and reported as [`Outcome::Existed`].
pub async fn create_table(
    ddb: &Client,
    name: &str,
    def: &TableDef,
) -> Result<Outcome, CreateTableError> {
    let (billing_mode, throughput) = match (def.billing_mode, def.provisioned_throughput) {
        (BillingMode::PayPerRequest, _) => (ddb::BillingMode::PayPerRequest, None),
        (BillingMode::Provisioned, t) => (
            ddb::BillingMode::Provisioned,
            t.map(|t| {
                ProvisionedThroughput::builder()
                    .read_capacity_units(t.read_capacity_units)
                    .write_capacity_units(t.write_capacity_units)
                    .build()
                    .map_err(|e| store_error(name, "ProvisionedThroughput", e))
            })
            .transpose()?,
        ),
    };
    let sent = ddb
        .create_table()
        .table_name(name)
        .set_key_schema(Some(def.sdk_key_schema()?))
        .set_attribute_definitions(Some(def.sdk_attributes()?))
        .billing_mode(billing_mode)
        .set_provisioned_throughput(throughput)
        .send()
        .await;
    let outcome = match sent {
        Ok(_) => Outcome::Created,
        Err(SdkError::ServiceError(e)) if e.err().is_resource_in_use_exception() => {
            Outcome::Existed
        }
        Err(e) => return Err(store_error(name, "CreateTable", e)),
    };
    // A new table accepts neither items nor a TTL setting until it is ACTIVE.
    let described = ddb
        .wait_until_table_exists()
        .table_name(name)
        .wait(ACTIVE_WAIT)
        .await
        .map_err(|e| store_error(name, "waiting for ACTIVE", e))?;
    if outcome == Outcome::Existed {
        let table = described.as_result().ok().and_then(|out| out.table());
        let key_schema: Vec<_> = table
            .map(|t| t.key_schema())
            .unwrap_or_default()
            .iter()
            .map(|k| pair(k.attribute_name(), k.key_type().as_str()))
            .collect();
        let wanted: Vec<_> = def
            .key_schema
            .iter()
            .map(|k| pair(&k.attribute_name, k.key_type.as_str()))
            .collect();
        if !same_elements(key_schema, wanted) {
            return Err(CreateTableError::Drift {
                table: name.to_string(),
                what: "key schema",
            });
        }
        let attributes: Vec<_> = table
            .map(|t| t.attribute_definitions())
            .unwrap_or_default()
            .iter()
            .map(|a| pair(a.attribute_name(), a.attribute_type().as_str()))
            .collect();
        let wanted: Vec<_> = def
            .attribute_definitions
            .iter()
            .map(|a| pair(&a.attribute_name, a.attribute_type.as_str()))
            .collect();
        if !same_elements(attributes, wanted) {
            return Err(CreateTableError::Drift {
                table: name.to_string(),
                what: "key attribute types",
            });
        }
    }
    if let Some(attribute) = &def.ttl_attribute {
        ensure_ttl(ddb, name, attribute).await?;
    }
    Ok(outcome)
}

fn pair(name: &str, kind: &str) -> (String, String) {
    (name.to_string(), kind.to_string())
}

fn same_elements(mut a: Vec<(String, String)>, mut b: Vec<(String, String)>) -> bool {
    a.sort();
    b.sort();
    a == b
}

/// Enables TTL on `attribute` unless it is on (or being turned on) already. UpdateTimeToLive
/// refuses to enable a TTL that is already enabled, hence the look first.
async fn ensure_ttl(ddb: &Client, name: &str, attribute: &str) -> Result<(), CreateTableError> {
    let current = ddb
        .describe_time_to_live()
        .table_name(name)
        .send()
        .await
        .map_err(|e| store_error(name, "DescribeTimeToLive", e))?;
    let description = current.time_to_live_description();
    let status = description.and_then(|d| d.time_to_live_status());
    let current_attribute = description.and_then(|d| d.attribute_name());
    match status {
        Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling) => {
            if current_attribute == Some(attribute) {
                Ok(())
            } else {
                Err(CreateTableError::Drift {
                    table: name.to_string(),
                    what: "TTL attribute",
                })
            }
        }
        _ => {
            let spec = TimeToLiveSpecification::builder()
                .attribute_name(attribute)
                .enabled(true)
                .build()
                .map_err(|e| store_error(name, "UpdateTimeToLive", e))?;
            ddb.update_time_to_live()
                .table_name(name)
                .time_to_live_specification(spec)
                .send()
                .await
                .map_err(|e| store_error(name, "UpdateTimeToLive", e))?;
            Ok(())
        }
    }
}
