//! The limits a function counts under, as it published them in the control table.
//!
//! An operator's tool (the CLI's `limits show|reset`) must look at the counters the functions
//! count, with the limits they count under. Limits read from the operator's own shell would be
//! another configuration whenever that shell differs from the deployed one (a stack parameter,
//! a variable only the functions get): the tool would report one limit while the functions
//! enforce another, or name counters nobody counts. So each function process writes the limits
//! it parsed at start into the control table it already reads for its kill switch (once its
//! first answer has gone, off the request path), and the tools read them back from there. What
//! a process publishes is exactly what its guards were built from; nothing is guessed.
//!
//! The item (`pk` = [`key`]`(function)`):
//!
//! - `spec`: the canonical form of the limits ([`RateLimits`]' `Display`, which
//!   [`RateLimits::parse`] reads back unchanged);
//! - `block_cache_seconds`: how long the process refuses a key it saw full from memory, at
//!   most (`RATE_LIMIT_BLOCK_CACHE_SECONDS`; 0 when the block cache is off), which bounds how
//!   long an operator's reset takes to reach it;
//! - `published_at`: when it was written, in seconds.
//!
//! Every process writes it once, when it starts (its entry point spawns the write, so no
//! request waits for it, and a failure is only logged: the guards never depend on it). It
//! therefore describes the process that started last. While two configurations run at once
//! (during a deploy that changes the limits), the item names whichever started last; a
//! configuration no process has started with yet is not in it. `published_at` tells the
//! operator how old it is.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;

use crate::clock::SharedClock;
use crate::ratelimit::{RateLimits, SpecError};
use crate::table::Attributes;

const SPEC: &str = "spec";
const BLOCK_CACHE_SECONDS: &str = "block_cache_seconds";
const PUBLISHED_AT: &str = "published_at";

/// The control table's key for `function`'s published limits. Public so that a deployment can
/// grant a function `PutItem` on this one key only (an IAM `dynamodb:LeadingKeys` condition).
pub fn key(function: &str) -> String {
    format!("limits#{function}")
}

/// What a function published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedLimits {
    /// The limits its guards count under.
    pub limits: RateLimits,
    /// How long it refuses a key it saw full without asking DynamoDB, at most (zero: never).
    pub block_cache_max_age: Duration,
    /// When it was written, seconds since the epoch.
    pub published_at: u64,
}

/// The published limits could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum PublishedLimitsError {
    /// The control table failed or refused the read or write.
    #[error("control table {operation} failed")]
    Store {
        /// What was being done, for the log line.
        operation: &'static str,
        /// The SDK's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The item exists but an attribute is missing or of the wrong type (by name: the value is
    /// whatever someone wrote there).
    #[error("the published limits item has no usable {attribute}")]
    Malformed {
        /// The attribute's name.
        attribute: &'static str,
    },
    /// The item's `spec` does not parse (written by another version of the code, or by hand).
    #[error("the published limits spec does not parse")]
    Spec(#[source] SpecError),
}

/// Reads and writes published limits in the control table (partition key `pk` unless
/// [`Self::with_attributes`] says otherwise).
#[derive(Debug, Clone)]
pub struct LimitsRecord {
    ddb: Client,
    table: String,
    attributes: Attributes,
    clock: SharedClock,
}

impl LimitsRecord {
    /// The records in `table` (the control table), stamped with `clock`'s time.
    pub fn new(ddb: Client, table: impl Into<String>, clock: SharedClock) -> Self {
        Self {
            ddb,
            table: table.into(),
            attributes: Attributes::default(),
            clock,
        }
    }

    /// Keeps the records under these attribute names (the control table's, as the kill
    /// switch's: [`crate::table`]).
    pub fn with_attributes(mut self, attributes: Attributes) -> Self {
        self.attributes = attributes;
        self
    }

    /// Writes `function`'s limits, replacing what an earlier process wrote.
    pub async fn publish(
        &self,
        function: &str,
        limits: &RateLimits,
        block_cache_max_age: Duration,
    ) -> Result<(), PublishedLimitsError> {
        self.ddb
            .put_item()
            .table_name(&self.table)
            .set_item(Some(self.attributes.key(&key(function))))
            .item(SPEC, AttributeValue::S(limits.to_string()))
            .item(
                BLOCK_CACHE_SECONDS,
                AttributeValue::N(block_cache_max_age.as_secs().to_string()),
            )
            .item(
                PUBLISHED_AT,
                AttributeValue::N((self.clock.now_ms() / 1000).to_string()),
            )
            .send()
            .await
            .map_err(|e| PublishedLimitsError::Store {
                operation: "write",
                source: Box::new(e),
            })?;
        Ok(())
    }

    /// What `function` published (strongly consistent); `None` when no process of it has
    /// answered a request against this table yet.
    pub async fn read(
        &self,
        function: &str,
    ) -> Result<Option<PublishedLimits>, PublishedLimitsError> {
        let out = self
            .ddb
            .get_item()
            .table_name(&self.table)
            .set_key(Some(self.attributes.key(&key(function))))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| PublishedLimitsError::Store {
                operation: "read",
                source: Box::new(e),
            })?;
        out.item().map(parse).transpose()
    }
}

fn parse(item: &HashMap<String, AttributeValue>) -> Result<PublishedLimits, PublishedLimitsError> {
    let spec = item
        .get(SPEC)
        .and_then(|v| v.as_s().ok())
        .ok_or(PublishedLimitsError::Malformed { attribute: SPEC })?;
    let number = |attribute: &'static str| {
        item.get(attribute)
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or(PublishedLimitsError::Malformed { attribute })
    };
    Ok(PublishedLimits {
        limits: RateLimits::parse(spec).map_err(PublishedLimitsError::Spec)?,
        block_cache_max_age: Duration::from_secs(number(BLOCK_CACHE_SECONDS)?),
        published_at: number(PUBLISHED_AT)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(pairs: &[(&str, AttributeValue)]) -> HashMap<String, AttributeValue> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn an_item_reads_back_and_a_bad_one_names_its_attribute() {
        let s = |v: &str| AttributeValue::S(v.into());
        let n = |v: &str| AttributeValue::N(v.into());
        let good = item(&[
            (SPEC, s("ip=10/1h,global=off")),
            (BLOCK_CACHE_SECONDS, n("5")),
            (PUBLISHED_AT, n("1700000000")),
        ]);
        let read = parse(&good).unwrap();
        assert_eq!(read.limits.to_string(), "ip=10/1h,global=off");
        assert_eq!(read.block_cache_max_age, Duration::from_secs(5));
        assert_eq!(read.published_at, 1_700_000_000);

        let mut no_time = good.clone();
        no_time.remove(PUBLISHED_AT);
        assert!(matches!(
            parse(&no_time),
            Err(PublishedLimitsError::Malformed {
                attribute: PUBLISHED_AT
            })
        ));
        let mut bad_spec = good.clone();
        bad_spec.insert(SPEC.into(), s("ip=ten/1h"));
        assert!(matches!(
            parse(&bad_spec),
            Err(PublishedLimitsError::Spec(_))
        ));
        let mut spec_as_number = good;
        spec_as_number.insert(SPEC.into(), n("1"));
        assert!(matches!(
            parse(&spec_as_number),
            Err(PublishedLimitsError::Malformed { attribute: SPEC })
        ));
    }
}
