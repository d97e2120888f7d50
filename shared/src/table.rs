//! Where a guard keeps its items in a DynamoDB table: the attribute names of the table's key and
//! TTL, so that an existing single-table design can host them beside its own items.
//!
//! Each guard has a table of its own by default (partition key `pk`, TTL attribute
//! `expires_at`, what `shared/docs/tables.md` creates). A single-table design names its own
//! partition key, a sort key and the value the guard's items have in it, a prefix that keeps
//! them apart from the table's other items, and the table's TTL attribute (DynamoDB allows one
//! per table). The guards' other attributes (`count`, `state`, ...) are theirs, on their own
//! items only.
//!
//! The counters and the control items of a [`crate::gate::Gate`] in one existing table, under
//! two prefixes (the idempotency records take the same through
//! `IdempotencyStore::with_attributes`):
//!
//! ```
//! use tollgate::config::GuardSettings;
//! use tollgate::table::Attributes;
//!
//! let in_app_table = |sort_value: &str, prefix: &str| Attributes {
//!     partition_key: "PK".into(),
//!     sort_key: Some(("SK".into(), sort_value.into())),
//!     key_prefix: prefix.into(),
//!     expires_at: "ttl".into(),
//! };
//! let settings = GuardSettings::builder("orders", "app-table", "app-table")
//!     .rate_limits("ip=60/1m".parse()?)
//!     .rate_limit_attributes(in_app_table("LIMIT", "LIMIT#"))
//!     .control_attributes(in_app_table("CONTROL", "CONTROL#"))
//!     .build()?;
//! let key = settings.rate_limit_attributes.key("orders#ip#60#192.0.2.1#0");
//! assert_eq!(key["PK"].as_s().unwrap(), "LIMIT#orders#ip#60#192.0.2.1#0");
//! assert_eq!(key["SK"].as_s().unwrap(), "LIMIT");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

/// The default partition key of a guard's own table.
pub const PARTITION_KEY: &str = "pk";
/// The default TTL attribute of a guard's own table (seconds since the epoch).
pub const EXPIRES_AT: &str = "expires_at";

/// The attribute names a guard's items are kept under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    /// The table's partition key (string).
    pub partition_key: String,
    /// The table's sort key and the value every item of this guard has in it, if the table has
    /// one.
    pub sort_key: Option<(String, String)>,
    /// Prepended to every item's partition key, so the guard's items cannot collide with the
    /// table's other items (`IDEMPOTENCY#`, `LIMIT#`, say).
    pub key_prefix: String,
    /// The table's TTL attribute (a number of seconds): DynamoDB allows one per table, so the
    /// guard's items use the table's.
    pub expires_at: String,
}

impl Default for Attributes {
    /// A table of the guard's own: partition key `pk`, TTL attribute `expires_at`.
    fn default() -> Self {
        Self {
            partition_key: PARTITION_KEY.into(),
            sort_key: None,
            key_prefix: String::new(),
            expires_at: EXPIRES_AT.into(),
        }
    }
}

impl Attributes {
    /// The item key of the guard's item `pk`: the prefixed partition key, and the sort key's
    /// value when the table has one.
    pub fn key(&self, pk: &str) -> HashMap<String, AttributeValue> {
        let mut key = HashMap::from([(
            self.partition_key.clone(),
            AttributeValue::S(format!("{}{pk}", self.key_prefix)),
        )]);
        if let Some((name, value)) = &self.sort_key {
            key.insert(name.clone(), AttributeValue::S(value.clone()));
        }
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_table_key_has_the_prefix_and_the_sort_key() {
        let own = Attributes::default().key("ip#1");
        assert_eq!(
            own,
            HashMap::from([("pk".into(), AttributeValue::S("ip#1".into()))])
        );
        let shared = Attributes {
            partition_key: "PK".into(),
            sort_key: Some(("SK".into(), "LIMIT".into())),
            key_prefix: "LIMIT#".into(),
            expires_at: "ttl".into(),
        };
        assert_eq!(
            shared.key("ip#1"),
            HashMap::from([
                ("PK".into(), AttributeValue::S("LIMIT#ip#1".into())),
                ("SK".into(), AttributeValue::S("LIMIT".into())),
            ])
        );
    }
}
