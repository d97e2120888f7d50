//! The DynamoDB tables of the SAM template, read from the template itself.
//!
//! Reading `KeySchema`, `AttributeDefinitions`, `BillingMode` and `TimeToLiveSpecification` from
//! `template.yaml` instead of restating them in code is what keeps the local tables (the CLI's
//! `tables create`, every test's own tables) and the deployed ones from drifting apart: there is
//! one definition, and both follow it.
//!
//! The template is read into typed structs ([`serde`]); only the table properties are typed,
//! since the other resources are CloudFormation's business. Table *names* do not come from the
//! template (it leaves them to CloudFormation and hands them to the functions through `!Ref`);
//! `tollgate_functions::catalog` maps each logical id to the variable the functions read. Properties
//! that only matter in AWS (deletion protection, point-in-time recovery, retention policies) are
//! ignored. Properties that would change what the tables can answer (secondary indexes) are
//! refused rather than silently dropped.
//!
//! CloudFormation YAML uses short-form tags (`!Ref`, `!If`, ...). serde_norway keeps them as
//! tagged values; a table property written as one cannot be evaluated without a stack, so it is
//! an error naming the table and the property ([`Literal`]).
//!
//! This crate needs no AWS SDK; the `dynamodb` feature adds [`create_table`], which makes a
//! table in a DynamoDB (Local) from a [`TableDef`].

#[cfg(feature = "dynamodb")]
mod dynamodb;

#[cfg(feature = "dynamodb")]
pub use dynamodb::{create_table, CreateTableError, Outcome};

use serde::de::{DeserializeOwned, Error as _, IgnoredAny};
use serde::Deserialize;
use serde_norway::{Mapping, Value};

/// The CloudFormation resource type of a DynamoDB table.
pub const TABLE_TYPE: &str = "AWS::DynamoDB::Table";

/// One `AWS::DynamoDB::Table` of the template, as DynamoDB's `CreateTable` wants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDef {
    /// The resource's logical id, e.g. `RateLimitTable`.
    pub logical_id: String,
    pub key_schema: Vec<KeyElement>,
    pub attribute_definitions: Vec<AttributeDefinition>,
    pub billing_mode: BillingMode,
    /// Present when `billing_mode` is [`BillingMode::Provisioned`].
    pub provisioned_throughput: Option<Throughput>,
    /// The TTL attribute, when the template enables TTL.
    pub ttl_attribute: Option<String>,
}

/// One element of a `KeySchema`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyElement {
    pub attribute_name: String,
    pub key_type: KeyType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum KeyType {
    Hash,
    Range,
}

impl KeyType {
    /// DynamoDB's spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            KeyType::Hash => "HASH",
            KeyType::Range => "RANGE",
        }
    }
}

/// One element of `AttributeDefinitions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttributeDefinition {
    pub attribute_name: String,
    pub attribute_type: AttributeType,
}

/// A key attribute's scalar type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum AttributeType {
    S,
    N,
    B,
}

impl AttributeType {
    /// DynamoDB's spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            AttributeType::S => "S",
            AttributeType::N => "N",
            AttributeType::B => "B",
        }
    }
}

/// CloudFormation's default is `PROVISIONED`, which needs a throughput.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BillingMode {
    Provisioned,
    PayPerRequest,
}

impl BillingMode {
    /// DynamoDB's spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            BillingMode::Provisioned => "PROVISIONED",
            BillingMode::PayPerRequest => "PAY_PER_REQUEST",
        }
    }
}

/// `ProvisionedThroughput`, in capacity units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throughput {
    pub read_capacity_units: i64,
    pub write_capacity_units: i64,
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
    let template: Template =
        serde_norway::from_str(template_yaml).map_err(|e| TemplateError::Yaml(e.to_string()))?;
    let resources = template.resources.ok_or(TemplateError::NoResources)?;
    let mut tables = Vec::new();
    for (id, resource) in resources {
        let Some(id) = id.as_str() else { continue };
        let resource: Resource =
            serde_norway::from_value(resource).map_err(|e| invalid(id, e.to_string()))?;
        if resource.kind.as_deref() != Some(TABLE_TYPE) {
            continue;
        }
        let properties = resource
            .properties
            .ok_or_else(|| invalid(id, "no Properties"))?;
        let properties: TableProperties =
            serde_norway::from_value(properties).map_err(|e| invalid(id, e.to_string()))?;
        tables.push(properties.into_def(id)?);
    }
    Ok(tables)
}

/// The parts of a template read here; everything else is ignored.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Template {
    /// In template order (a `Mapping` keeps it).
    resources: Option<Mapping>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Resource {
    #[serde(rename = "Type")]
    kind: Option<String>,
    /// Typed only for tables: other resources are full of intrinsics.
    properties: Option<Value>,
}

/// A value the template may also write as an intrinsic function (`!Ref`, `!If`, ...), which
/// only a deployed stack can evaluate.
enum Literal<T> {
    Value(T),
    Intrinsic(String),
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Literal<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Tagged(tagged) => Ok(Literal::Intrinsic(tagged.tag.to_string())),
            value => serde_norway::from_value(value)
                .map(Literal::Value)
                .map_err(D::Error::custom),
        }
    }
}

/// `field` (named `name` in errors): absent, or a literal value.
fn literal<T>(id: &str, name: &str, field: Option<Literal<T>>) -> Result<Option<T>, TemplateError> {
    match field {
        None => Ok(None),
        Some(Literal::Value(v)) => Ok(Some(v)),
        Some(Literal::Intrinsic(tag)) => Err(invalid(
            id,
            format!("{name} is {tag}, which only a deployed stack can evaluate"),
        )),
    }
}

/// `field`, which the table needs.
fn required<T>(id: &str, name: &str, field: Option<Literal<T>>) -> Result<T, TemplateError> {
    literal(id, name, field)?.ok_or_else(|| invalid(id, format!("no {name}")))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TableProperties {
    key_schema: Option<Literal<Vec<KeySchemaEntry>>>,
    attribute_definitions: Option<Literal<Vec<AttributeEntry>>>,
    billing_mode: Option<Literal<BillingMode>>,
    provisioned_throughput: Option<Literal<ThroughputEntry>>,
    time_to_live_specification: Option<Literal<TtlEntry>>,
    /// Not carried over: refused (see [`TableProperties::into_def`]).
    global_secondary_indexes: Option<IgnoredAny>,
    local_secondary_indexes: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct KeySchemaEntry {
    attribute_name: Option<Literal<String>>,
    key_type: Option<Literal<KeyType>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct AttributeEntry {
    attribute_name: Option<Literal<String>>,
    attribute_type: Option<Literal<AttributeType>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ThroughputEntry {
    read_capacity_units: Option<Literal<Units>>,
    write_capacity_units: Option<Literal<Units>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TtlEntry {
    attribute_name: Option<Literal<String>>,
    enabled: Option<Literal<Flag>>,
}

/// Capacity units: CloudFormation accepts `5` and `"5"`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Units {
    Number(i64),
    Text(String),
}

/// A boolean: CloudFormation accepts `true` and `"true"`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Flag {
    Bool(bool),
    Text(String),
}

impl TableProperties {
    fn into_def(self, id: &str) -> Result<TableDef, TemplateError> {
        for (name, present) in [
            (
                "GlobalSecondaryIndexes",
                self.global_secondary_indexes.is_some(),
            ),
            (
                "LocalSecondaryIndexes",
                self.local_secondary_indexes.is_some(),
            ),
        ] {
            if present {
                return Err(invalid(
                    id,
                    format!("{name} is not supported by tables create; add it to shared/template"),
                ));
            }
        }
        let key_schema = required(id, "KeySchema", self.key_schema)?
            .into_iter()
            .map(|k| {
                Ok(KeyElement {
                    attribute_name: required(id, "KeySchema.AttributeName", k.attribute_name)?,
                    key_type: required(id, "KeySchema.KeyType", k.key_type)?,
                })
            })
            .collect::<Result<Vec<_>, TemplateError>>()?;
        if key_schema.is_empty() {
            return Err(invalid(id, "KeySchema is empty"));
        }
        let attribute_definitions =
            required(id, "AttributeDefinitions", self.attribute_definitions)?
                .into_iter()
                .map(|a| {
                    Ok(AttributeDefinition {
                        attribute_name: required(
                            id,
                            "AttributeDefinitions.AttributeName",
                            a.attribute_name,
                        )?,
                        attribute_type: required(
                            id,
                            "AttributeDefinitions.AttributeType",
                            a.attribute_type,
                        )?,
                    })
                })
                .collect::<Result<Vec<_>, TemplateError>>()?;

        let billing_mode =
            literal(id, "BillingMode", self.billing_mode)?.unwrap_or(BillingMode::Provisioned);
        let provisioned_throughput = match billing_mode {
            BillingMode::Provisioned => {
                let pt = literal(id, "ProvisionedThroughput", self.provisioned_throughput)?
                    .ok_or_else(|| {
                        invalid(id, "BillingMode PROVISIONED needs ProvisionedThroughput")
                    })?;
                Some(Throughput {
                    read_capacity_units: units(id, "ReadCapacityUnits", pt.read_capacity_units)?,
                    write_capacity_units: units(id, "WriteCapacityUnits", pt.write_capacity_units)?,
                })
            }
            BillingMode::PayPerRequest => None,
        };

        let ttl_attribute = match literal(
            id,
            "TimeToLiveSpecification",
            self.time_to_live_specification,
        )? {
            None => None,
            Some(spec) => {
                let enabled = match literal(id, "TimeToLiveSpecification.Enabled", spec.enabled)? {
                    None => false,
                    Some(Flag::Bool(b)) => b,
                    Some(Flag::Text(s)) if s.eq_ignore_ascii_case("true") => true,
                    Some(Flag::Text(s)) if s.eq_ignore_ascii_case("false") => false,
                    Some(Flag::Text(_)) => {
                        return Err(invalid(
                            id,
                            "TimeToLiveSpecification.Enabled is not true or false",
                        ))
                    }
                };
                if enabled {
                    Some(required(
                        id,
                        "TimeToLiveSpecification.AttributeName",
                        spec.attribute_name,
                    )?)
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
}

fn units(id: &str, key: &str, field: Option<Literal<Units>>) -> Result<i64, TemplateError> {
    let name = format!("ProvisionedThroughput.{key}");
    let n = match required(id, &name, field)? {
        Units::Number(n) => Some(n),
        Units::Text(s) => s.trim().parse().ok(),
    };
    n.filter(|n| *n > 0)
        .ok_or_else(|| invalid(id, format!("{name} is not a positive whole number")))
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

    fn keys(def: &TableDef) -> Vec<(&str, &str)> {
        def.key_schema
            .iter()
            .map(|k| (k.attribute_name.as_str(), k.key_type.as_str()))
            .collect()
    }

    fn attributes(def: &TableDef) -> Vec<(&str, &str)> {
        def.attribute_definitions
            .iter()
            .map(|a| (a.attribute_name.as_str(), a.attribute_type.as_str()))
            .collect()
    }

    #[test]
    fn reads_tables_and_skips_other_resources() {
        let tables = table_definitions(TEMPLATE).unwrap();
        assert_eq!(tables.len(), 2);
        let counters = &tables[0];
        assert_eq!(counters.logical_id, "Counters");
        assert_eq!(counters.billing_mode, BillingMode::PayPerRequest);
        assert_eq!(keys(counters), [("pk", "HASH"), ("sk", "RANGE")]);
        assert_eq!(attributes(counters), [("pk", "S"), ("sk", "N")]);
        assert_eq!(counters.ttl_attribute.as_deref(), Some("expires_at"));
        assert!(counters.provisioned_throughput.is_none());

        let old = &tables[1];
        assert_eq!(old.billing_mode, BillingMode::Provisioned);
        assert_eq!(
            old.provisioned_throughput,
            Some(Throughput {
                read_capacity_units: 5,
                write_capacity_units: 2
            })
        );
        assert_eq!(attributes(old), [("id", "B")]);
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

        let nested = TEMPLATE.replace(
            "- AttributeName: pk\n          KeyType",
            "- AttributeName: !Ref P\n          KeyType",
        );
        let err = table_definitions(&nested).unwrap_err().to_string();
        assert!(
            err.contains("Counters")
                && err.contains("KeySchema.AttributeName")
                && err.contains("!Ref"),
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

        let zero = TEMPLATE.replace("ReadCapacityUnits: 5", "ReadCapacityUnits: 0");
        let err = table_definitions(&zero).unwrap_err().to_string();
        assert!(err.contains("ReadCapacityUnits"), "{err}");

        let bad_type = TEMPLATE.replace("KeyType: RANGE", "KeyType: SORT");
        let err = table_definitions(&bad_type).unwrap_err().to_string();
        assert!(err.contains("Counters") && err.contains("SORT"), "{err}");

        assert!(matches!(
            table_definitions(": : :"),
            Err(TemplateError::Yaml(_))
        ));
        assert_eq!(table_definitions("a: 1"), Err(TemplateError::NoResources));
    }
}
