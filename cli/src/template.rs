//! The DynamoDB tables of the SAM template, read from the template itself and created in a target
//! DynamoDB (DynamoDB Local for the local stack and the tests).
//!
//! Reading `KeySchema`, `AttributeDefinitions`, `BillingMode` and `TimeToLiveSpecification` from
//! `template.yaml` instead of restating them in code is what keeps the local tables and the
//! deployed ones from drifting apart: there is one definition, and both follow it.
//!
//! Table *names* do not come from the template (it leaves them to CloudFormation and hands them
//! to the functions through `!Ref`); [`crate::table_names`] maps each logical id to the variable
//! the functions read. Properties that only matter in AWS (deletion protection, point-in-time
//! recovery, retention policies) are ignored. Properties that would change what the tables can
//! answer (secondary indexes) are refused rather than silently dropped.
//!
//! CloudFormation YAML uses short-form tags (`!Ref`, `!If`, ...). The parser keeps them as tagged
//! values; a table property written as one cannot be evaluated without a stack, so it is an
//! error naming the table and the property.

use std::time::Duration;

use aws_sdk_dynamodb::client::Waiters;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ProvisionedThroughput,
    ScalarAttributeType, TimeToLiveSpecification, TimeToLiveStatus,
};
use aws_sdk_dynamodb::Client;
use serde_norway::Value;

/// The CloudFormation resource type of a DynamoDB table.
pub const TABLE_TYPE: &str = "AWS::DynamoDB::Table";

/// Properties that change a table's schema or queries and that [`table_definitions`] does not
/// carry over; a template using them is refused instead of yielding different local tables.
const UNSUPPORTED: &[&str] = &["GlobalSecondaryIndexes", "LocalSecondaryIndexes"];

/// Longest wait for a new table to become ACTIVE (immediate on DynamoDB Local).
const ACTIVE_WAIT: Duration = Duration::from_secs(120);

/// One `AWS::DynamoDB::Table` of the template, as DynamoDB's `CreateTable` wants it.
#[derive(Debug, Clone, PartialEq)]
pub struct TableDef {
    /// The resource's logical id, e.g. `RateLimitTable`.
    pub logical_id: String,
    pub key_schema: Vec<KeySchemaElement>,
    pub attribute_definitions: Vec<AttributeDefinition>,
    pub billing_mode: BillingMode,
    /// Present when `billing_mode` is `PROVISIONED`.
    pub provisioned_throughput: Option<ProvisionedThroughput>,
    /// The TTL attribute, when the template enables TTL.
    pub ttl_attribute: Option<String>,
}

/// The template could not be read as the tables it defines.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("template is not valid YAML: {0}")]
    Yaml(String),
    #[error("template has no Resources mapping")]
    NoResources,
    #[error("{logical_id}: {reason}")]
    Table { logical_id: String, reason: String },
}

fn invalid(logical_id: &str, reason: impl Into<String>) -> TemplateError {
    TemplateError::Table {
        logical_id: logical_id.to_string(),
        reason: reason.into(),
    }
}

/// Every `AWS::DynamoDB::Table` resource of a CloudFormation/SAM template, in template order.
pub fn table_definitions(template_yaml: &str) -> Result<Vec<TableDef>, TemplateError> {
    let doc: Value =
        serde_norway::from_str(template_yaml).map_err(|e| TemplateError::Yaml(e.to_string()))?;
    let resources = doc
        .get("Resources")
        .and_then(Value::as_mapping)
        .ok_or(TemplateError::NoResources)?;
    let mut tables = Vec::new();
    for (id, resource) in resources {
        let Some(id) = id.as_str() else { continue };
        if resource.get("Type").and_then(Value::as_str) != Some(TABLE_TYPE) {
            continue;
        }
        let props = resource
            .get("Properties")
            .ok_or_else(|| invalid(id, "no Properties"))?;
        tables.push(table_def(id, props)?);
    }
    Ok(tables)
}

fn table_def(id: &str, props: &Value) -> Result<TableDef, TemplateError> {
    if let Some(p) = UNSUPPORTED.iter().find(|p| props.get(**p).is_some()) {
        return Err(invalid(
            id,
            format!("{p} is not supported by tables create; add it to cli/src/template.rs"),
        ));
    }
    let key_schema = list(id, props, "KeySchema")?
        .iter()
        .map(|k| {
            let name = string(id, k, "KeySchema", "AttributeName")?;
            let key_type = match string(id, k, "KeySchema", "KeyType")? {
                "HASH" => KeyType::Hash,
                "RANGE" => KeyType::Range,
                other => return Err(invalid(id, format!("KeySchema.KeyType {other:?}"))),
            };
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(key_type)
                .build()
                .map_err(|e| invalid(id, e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if key_schema.is_empty() {
        return Err(invalid(id, "KeySchema is empty"));
    }
    let attribute_definitions = list(id, props, "AttributeDefinitions")?
        .iter()
        .map(|a| {
            let name = string(id, a, "AttributeDefinitions", "AttributeName")?;
            let ty = match string(id, a, "AttributeDefinitions", "AttributeType")? {
                "S" => ScalarAttributeType::S,
                "N" => ScalarAttributeType::N,
                "B" => ScalarAttributeType::B,
                other => {
                    return Err(invalid(
                        id,
                        format!("AttributeDefinitions.AttributeType {other:?}"),
                    ))
                }
            };
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(ty)
                .build()
                .map_err(|e| invalid(id, e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;

    // CloudFormation's default billing mode is PROVISIONED, which needs a throughput.
    let billing_mode = match optional(id, props, "BillingMode")?
        .map(|v| scalar(id, v, "BillingMode"))
        .transpose()?
    {
        None | Some("PROVISIONED") => BillingMode::Provisioned,
        Some("PAY_PER_REQUEST") => BillingMode::PayPerRequest,
        Some(other) => return Err(invalid(id, format!("BillingMode {other:?}"))),
    };
    let provisioned_throughput = match billing_mode {
        BillingMode::Provisioned => {
            let pt = optional(id, props, "ProvisionedThroughput")?.ok_or_else(|| {
                invalid(id, "BillingMode PROVISIONED needs ProvisionedThroughput")
            })?;
            Some(
                ProvisionedThroughput::builder()
                    .read_capacity_units(units(id, pt, "ReadCapacityUnits")?)
                    .write_capacity_units(units(id, pt, "WriteCapacityUnits")?)
                    .build()
                    .map_err(|e| invalid(id, e.to_string()))?,
            )
        }
        _ => None,
    };

    let ttl_attribute = match optional(id, props, "TimeToLiveSpecification")? {
        None => None,
        Some(spec) => {
            let enabled = match optional(id, spec, "Enabled")? {
                None => false,
                Some(Value::Bool(b)) => *b,
                Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => true,
                Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => false,
                Some(_) => {
                    return Err(invalid(
                        id,
                        "TimeToLiveSpecification.Enabled is not true or false",
                    ))
                }
            };
            if enabled {
                Some(string(id, spec, "TimeToLiveSpecification", "AttributeName")?.to_string())
            } else {
                None
            }
        }
    };

    Ok(TableDef {
        logical_id: id.to_string(),
        key_schema,
        attribute_definitions,
        billing_mode,
        provisioned_throughput,
        ttl_attribute,
    })
}

/// `parent[key]`, refusing an intrinsic function (a tagged value) that only a stack can resolve.
fn optional<'a>(
    id: &str,
    parent: &'a Value,
    key: &str,
) -> Result<Option<&'a Value>, TemplateError> {
    match parent.get(key) {
        Some(Value::Tagged(t)) => Err(invalid(
            id,
            format!(
                "{key} is {}, which only a deployed stack can evaluate",
                t.tag
            ),
        )),
        Some(Value::Null) | None => Ok(None),
        Some(v) => Ok(Some(v)),
    }
}

fn list<'a>(id: &str, parent: &'a Value, key: &str) -> Result<&'a Vec<Value>, TemplateError> {
    optional(id, parent, key)?
        .ok_or_else(|| invalid(id, format!("no {key}")))?
        .as_sequence()
        .ok_or_else(|| invalid(id, format!("{key} is not a list")))
}

/// The string `parent[key]` of a `section` (`KeySchema`, ...), named `section.key` in errors.
fn string<'a>(
    id: &str,
    parent: &'a Value,
    section: &str,
    key: &str,
) -> Result<&'a str, TemplateError> {
    let what = format!("{section}.{key}");
    let v = optional(id, parent, key)?.ok_or_else(|| invalid(id, format!("no {what}")))?;
    scalar(id, v, &what)
}

fn scalar<'a>(id: &str, v: &'a Value, what: &str) -> Result<&'a str, TemplateError> {
    v.as_str()
        .ok_or_else(|| invalid(id, format!("{what} is not a string")))
}

fn units(id: &str, pt: &Value, key: &str) -> Result<i64, TemplateError> {
    let v = optional(id, pt, key)?
        .ok_or_else(|| invalid(id, format!("no ProvisionedThroughput.{key}")))?;
    v.as_i64()
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            invalid(
                id,
                format!("ProvisionedThroughput.{key} is not a positive whole number"),
            )
        })
}

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
    #[error("table {table}: {operation} failed: {message}")]
    Store {
        table: String,
        operation: &'static str,
        message: String,
    },
    /// An existing table does not match the definition; nothing was changed.
    #[error("table {table} exists with a different {what} than the template defines")]
    Drift { table: String, what: &'static str },
}

fn store_error(
    table: &str,
    operation: &'static str,
    e: &dyn std::error::Error,
) -> CreateTableError {
    CreateTableError::Store {
        table: table.to_string(),
        operation,
        message: crate::error::chain(e),
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
    let sent = ddb
        .create_table()
        .table_name(name)
        .set_key_schema(Some(def.key_schema.clone()))
        .set_attribute_definitions(Some(def.attribute_definitions.clone()))
        .billing_mode(def.billing_mode.clone())
        .set_provisioned_throughput(def.provisioned_throughput.clone())
        .send()
        .await;
    let outcome = match sent {
        Ok(_) => Outcome::Created,
        Err(SdkError::ServiceError(e)) if e.err().is_resource_in_use_exception() => {
            Outcome::Existed
        }
        Err(e) => return Err(store_error(name, "CreateTable", &e)),
    };
    // A new table accepts neither items nor a TTL setting until it is ACTIVE.
    let described = ddb
        .wait_until_table_exists()
        .table_name(name)
        .wait(ACTIVE_WAIT)
        .await
        .map_err(|e| store_error(name, "waiting for ACTIVE", &e))?;
    if outcome == Outcome::Existed {
        let table = described.as_result().ok().and_then(|out| out.table());
        let key_schema = table.map(|t| t.key_schema()).unwrap_or_default();
        if !same_elements(key_schema, &def.key_schema, key_of) {
            return Err(CreateTableError::Drift {
                table: name.to_string(),
                what: "key schema",
            });
        }
        let attributes = table.map(|t| t.attribute_definitions()).unwrap_or_default();
        if !same_elements(attributes, &def.attribute_definitions, attribute_of) {
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

fn key_of(k: &KeySchemaElement) -> (String, String) {
    (
        k.attribute_name().to_string(),
        k.key_type().as_str().to_string(),
    )
}

fn attribute_of(a: &AttributeDefinition) -> (String, String) {
    (
        a.attribute_name().to_string(),
        a.attribute_type().as_str().to_string(),
    )
}

fn same_elements<T>(a: &[T], b: &[T], key: fn(&T) -> (String, String)) -> bool {
    let mut a: Vec<_> = a.iter().map(key).collect();
    let mut b: Vec<_> = b.iter().map(key).collect();
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
        .map_err(|e| store_error(name, "DescribeTimeToLive", &e))?;
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
                .map_err(|e| store_error(name, "UpdateTimeToLive", &e))?;
            ddb.update_time_to_live()
                .table_name(name)
                .time_to_live_specification(spec)
                .send()
                .await
                .map_err(|e| store_error(name, "UpdateTimeToLive", &e))?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATE: &str = r#"
AWSTemplateFormatVersion: "2010-09-09"
Conditions:
  UseX: !Equals [!Ref P, x]
Resources:
  Counters:
    Type: AWS::DynamoDB::Table
    DeletionPolicy: Retain
    Properties:
      BillingMode: PAY_PER_REQUEST
      DeletionProtectionEnabled: true
      AttributeDefinitions:
        - AttributeName: pk
          AttributeType: S
        - AttributeName: sk
          AttributeType: N
      KeySchema:
        - AttributeName: pk
          KeyType: HASH
        - AttributeName: sk
          KeyType: RANGE
      TimeToLiveSpecification:
        AttributeName: expires_at
        Enabled: true
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          TABLE: !Ref Counters
          URL: !GetAtt Counters.Arn
  Old:
    Type: AWS::DynamoDB::Table
    Properties:
      ProvisionedThroughput:
        ReadCapacityUnits: 5
        WriteCapacityUnits: "2"
      AttributeDefinitions:
        - AttributeName: id
          AttributeType: B
      KeySchema:
        - AttributeName: id
          KeyType: HASH
      TimeToLiveSpecification:
        AttributeName: gone_at
        Enabled: false
"#;

    #[test]
    fn reads_tables_and_skips_other_resources() {
        let tables = table_definitions(TEMPLATE).unwrap();
        assert_eq!(tables.len(), 2);
        let counters = &tables[0];
        assert_eq!(counters.logical_id, "Counters");
        assert_eq!(counters.billing_mode, BillingMode::PayPerRequest);
        assert_eq!(
            counters.key_schema.iter().map(key_of).collect::<Vec<_>>(),
            [("pk".into(), "HASH".into()), ("sk".into(), "RANGE".into())]
        );
        assert_eq!(
            counters
                .attribute_definitions
                .iter()
                .map(attribute_of)
                .collect::<Vec<_>>(),
            [("pk".into(), "S".into()), ("sk".into(), "N".into())]
        );
        assert_eq!(counters.ttl_attribute.as_deref(), Some("expires_at"));
        assert!(counters.provisioned_throughput.is_none());

        let old = &tables[1];
        assert_eq!(old.billing_mode, BillingMode::Provisioned);
        let pt = old.provisioned_throughput.as_ref().unwrap();
        assert_eq!(
            (pt.read_capacity_units(), pt.write_capacity_units()),
            (5, 2)
        );
        assert_eq!(old.ttl_attribute, None);
    }

    #[test]
    fn refuses_what_it_cannot_carry_over() {
        let tagged = TEMPLATE.replace(
            "BillingMode: PAY_PER_REQUEST",
            "BillingMode: !If [UseX, PAY_PER_REQUEST, PROVISIONED]",
        );
        let err = table_definitions(&tagged).unwrap_err().to_string();
        assert!(
            err.contains("Counters") && err.contains("BillingMode") && err.contains("!If"),
            "{err}"
        );

        let gsi = TEMPLATE.replace(
            "      DeletionProtectionEnabled: true\n",
            "      GlobalSecondaryIndexes: []\n",
        );
        let err = table_definitions(&gsi).unwrap_err().to_string();
        assert!(err.contains("GlobalSecondaryIndexes"), "{err}");

        let no_throughput = TEMPLATE.replace("      ProvisionedThroughput:\n        ReadCapacityUnits: 5\n        WriteCapacityUnits: \"2\"\n", "");
        let err = table_definitions(&no_throughput).unwrap_err().to_string();
        assert!(
            err.contains("Old") && err.contains("ProvisionedThroughput"),
            "{err}"
        );

        assert!(matches!(
            table_definitions(": : :"),
            Err(TemplateError::Yaml(_))
        ));
        assert_eq!(table_definitions("a: 1"), Err(TemplateError::NoResources));
    }

    /// The project's own template: every table it defines has a name variable, and the reverse.
    #[test]
    fn the_project_template_matches_the_table_names() {
        let tables = table_definitions(include_str!("../../template.yaml")).unwrap();
        let mut ids: Vec<_> = tables.iter().map(|t| t.logical_id.as_str()).collect();
        let mut known: Vec<_> = crate::table_names::TABLES
            .iter()
            .map(|t| t.logical_id)
            .collect();
        ids.sort();
        known.sort();
        assert_eq!(ids, known);
    }
}
