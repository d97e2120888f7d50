//! The capacity DynamoDB says each request consumed, per operation, with an SDK interceptor
//! that adds `"ReturnConsumedCapacity":"TOTAL"` to every request whose operation accepts it,
//! before signing, so the code under measurement need not ask. An answer without
//! `ConsumedCapacity` (an error: a failed condition, a cancelled transaction) is counted by its
//! error code, so the caller says which rule bills it instead of counting it free; a
//! `TransactWriteItems` is also sized from its request ([`OpCapacity::transact_units`]), since
//! DynamoDB Local reports 2 units per table touched, not what AWS bills. Retries count too (the
//! hooks run once per HTTP attempt).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    AfterDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextMut,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::ConfigBag;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The operations whose input has `ReturnConsumedCapacity` (DynamoDB API reference); any other
/// (`CreateTable`, `DescribeTable`, ...) would refuse the unknown member.
const REPORTING: &[&str] = &[
    "BatchExecuteStatement",
    "BatchGetItem",
    "BatchWriteItem",
    "DeleteItem",
    "ExecuteStatement",
    "ExecuteTransaction",
    "GetItem",
    "PutItem",
    "Query",
    "Scan",
    "TransactGetItems",
    "TransactWriteItems",
    "UpdateItem",
];

/// The reads among them: with `TOTAL` DynamoDB gives one `CapacityUnits` figure, read or write
/// by the operation's kind.
const READS: &[&str] = &[
    "BatchGetItem",
    "GetItem",
    "Query",
    "Scan",
    "TransactGetItems",
];

/// What one operation consumed, as DynamoDB reported it. The same shape comes from the
/// Powertools side of the bench (a botocore hook), so both are summed and billed alike.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OpCapacity {
    /// Answers that carried `ConsumedCapacity`.
    pub measured: usize,
    /// Their read and write units, summed.
    pub read_units: f64,
    pub write_units: f64,
    /// Answers without `ConsumedCapacity`, by error code (`ConditionalCheckFailedException`,
    /// `TransactionCanceledException`, ...; `none` for a success that carried none).
    pub unmeasured: BTreeMap<String, usize>,
    /// `TransactWriteItems` only, from the requests sent: their actions, and each action's
    /// write units before the transactional doubling (a `Put` by its item's size, rounded up to
    /// 1 KB; an `Update`, `Delete` or `ConditionCheck` as 1, its item's size not being in the
    /// request).
    #[serde(default)]
    pub transact_items: usize,
    #[serde(default)]
    pub transact_units: f64,
}

impl OpCapacity {
    /// Adds one answer's `ConsumedCapacity` (an object, or a list of them for transactions and
    /// batches) to this operation's sums.
    pub fn add_consumed(&mut self, operation: &str, consumed: &Value) {
        let entries = match consumed {
            Value::Array(list) => list.iter().collect(),
            other => vec![other],
        };
        for entry in entries {
            let units = |name: &str| entry.get(name).and_then(Value::as_f64);
            match (units("ReadCapacityUnits"), units("WriteCapacityUnits")) {
                (None, None) => {
                    let total = units("CapacityUnits").unwrap_or(0.0);
                    match READS.contains(&operation) {
                        true => self.read_units += total,
                        false => self.write_units += total,
                    }
                }
                (read, write) => {
                    self.read_units += read.unwrap_or(0.0);
                    self.write_units += write.unwrap_or(0.0);
                }
            }
        }
        self.measured += 1;
    }

    /// Counts one answer that carried no `ConsumedCapacity`.
    pub fn add_unmeasured(&mut self, code: &str) {
        *self.unmeasured.entry(code.to_string()).or_default() += 1;
    }

    /// Adds `other`'s answers, units and transactions to these.
    pub fn add(&mut self, other: &OpCapacity) {
        self.measured += other.measured;
        self.read_units += other.read_units;
        self.write_units += other.write_units;
        for (code, n) in &other.unmeasured {
            *self.unmeasured.entry(code.clone()).or_default() += n;
        }
        self.transact_items += other.transact_items;
        self.transact_units += other.transact_units;
    }

    /// Adds one `TransactWriteItems` request's actions (its `TransactItems`).
    pub fn add_transaction(&mut self, items: &[Value]) {
        for action in items {
            let units = match action.get("Put").and_then(|p| p.get("Item")) {
                Some(Value::Object(item)) => item_size(item).div_ceil(1024).max(1) as f64,
                _ => 1.0,
            };
            self.transact_items += 1;
            self.transact_units += units;
        }
    }
}

/// An item's size in bytes as DynamoDB counts it (Developer Guide, "Item sizes and formats"):
/// each attribute's name plus its value, a string's UTF-8 bytes, a number's 1 byte per two
/// significant digits plus 1, a binary's bytes, 1 for a boolean or null, a list or map 3 bytes
/// plus 1 per element plus its elements, a set its elements.
pub fn item_size(item: &serde_json::Map<String, Value>) -> usize {
    item.iter()
        .map(|(name, value)| name.len() + value_size(value))
        .sum()
}

fn value_size(value: &Value) -> usize {
    let Some((kind, v)) = value.as_object().and_then(|o| o.iter().next()) else {
        return 0;
    };
    let number = |n: &str| {
        let digits = n.trim_start_matches('-').replace('.', "");
        let significant = digits.trim_start_matches('0').trim_end_matches('0').len();
        significant.div_ceil(2) + 1
    };
    let strings = || v.as_array().into_iter().flatten().filter_map(Value::as_str);
    match kind.as_str() {
        "S" => v.as_str().map_or(0, str::len),
        "N" => v.as_str().map_or(0, number),
        // Base64 on the wire: three bytes per four characters.
        "B" => v
            .as_str()
            .map_or(0, |b| b.trim_end_matches('=').len() * 3 / 4),
        "BOOL" | "NULL" => 1,
        "SS" => strings().map(str::len).sum(),
        "NS" => strings().map(number).sum(),
        "BS" => strings()
            .map(|b| b.trim_end_matches('=').len() * 3 / 4)
            .sum(),
        "L" => {
            let list = v.as_array().map(Vec::as_slice).unwrap_or_default();
            3 + list.iter().map(|e| 1 + value_size(e)).sum::<usize>()
        }
        "M" => {
            let map = v.as_object();
            3 + map
                .into_iter()
                .flatten()
                .map(|(k, e)| 1 + k.len() + value_size(e))
                .sum::<usize>()
        }
        _ => 0,
    }
}

/// Adds `from` to `into`, operation by operation.
pub fn merge(into: &mut BTreeMap<String, OpCapacity>, from: &BTreeMap<String, OpCapacity>) {
    for (op, c) in from {
        into.entry(op.clone()).or_default().add(c);
    }
}

/// Consumed capacity by operation name, shared by every clone.
#[derive(Debug, Clone, Default)]
pub struct CapacityMeter(Arc<Mutex<BTreeMap<String, OpCapacity>>>);

impl CapacityMeter {
    /// Forgets everything so far.
    pub fn reset(&self) {
        self.0.lock().unwrap().clear();
    }

    /// [`Self::snapshot`], then [`Self::reset`], atomically.
    pub fn take(&self) -> BTreeMap<String, OpCapacity> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn operation(cfg: &ConfigBag) -> String {
    cfg.load::<Metadata>()
        .map(|m| m.name().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The body with `"ReturnConsumedCapacity":"TOTAL"`, unless it already says what it wants.
fn with_total(body: &[u8]) -> Option<Vec<u8>> {
    let mut json: serde_json::Map<String, Value> = serde_json::from_slice(body).ok()?;
    if json.contains_key("ReturnConsumedCapacity") {
        return None;
    }
    json.insert("ReturnConsumedCapacity".into(), Value::from("TOTAL"));
    serde_json::to_vec(&json).ok()
}

/// `com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException` → the part after `#`.
fn error_code(body: &Value) -> String {
    body.get("__type")
        .and_then(Value::as_str)
        .map(|t| t.rsplit('#').next().unwrap_or(t).to_string())
        .unwrap_or_else(|| "unknown".into())
}

impl Intercept for CapacityMeter {
    fn name(&self) -> &'static str {
        "CapacityMeter"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if !REPORTING.contains(&operation(cfg).as_str()) {
            return Ok(());
        }
        let request = context.request_mut();
        let op = operation(cfg);
        if op == "TransactWriteItems" {
            let sent: Option<Value> = request
                .body()
                .bytes()
                .and_then(|b| serde_json::from_slice(b).ok());
            if let Some(Value::Array(items)) = sent.as_ref().and_then(|s| s.get("TransactItems")) {
                self.0
                    .lock()
                    .unwrap()
                    .entry(op)
                    .or_default()
                    .add_transaction(items);
            }
        }
        let Some(body) = request.body().bytes().and_then(with_total) else {
            return Ok(());
        };
        request
            .headers_mut()
            .insert("content-length", body.len().to_string());
        *request.body_mut() = SdkBody::from(body);
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = operation(cfg);
        if !REPORTING.contains(&op.as_str()) {
            return Ok(());
        }
        let response = context.response();
        let body: Value = response
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or(Value::Null);
        let mut all = self.0.lock().unwrap();
        let entry = all.entry(op.clone()).or_default();
        match body.get("ConsumedCapacity") {
            Some(consumed) => entry.add_consumed(&op, consumed),
            None if response.status().is_success() => entry.add_unmeasured("none"),
            None => entry.add_unmeasured(&error_code(&body)),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumed_capacity_is_summed_by_kind() {
        let mut put = OpCapacity::default();
        put.add_consumed(
            "PutItem",
            &serde_json::json!({"TableName": "t", "CapacityUnits": 2.0}),
        );
        let mut twi = OpCapacity::default();
        twi.add_consumed(
            "TransactWriteItems",
            &serde_json::json!([{"CapacityUnits": 2.0}, {"CapacityUnits": 4.0}]),
        );
        let mut get = OpCapacity::default();
        get.add_consumed("GetItem", &serde_json::json!({"CapacityUnits": 0.5}));
        get.add_consumed(
            "GetItem",
            &serde_json::json!({"CapacityUnits": 1.0, "ReadCapacityUnits": 1.0}),
        );
        assert_eq!(
            (put.read_units, put.write_units, put.measured),
            (0.0, 2.0, 1)
        );
        assert_eq!((twi.write_units, twi.measured), (6.0, 1));
        assert_eq!(
            (get.read_units, get.write_units, get.measured),
            (1.5, 0.0, 2)
        );
    }

    #[test]
    fn transactions_are_sized_per_item_from_the_request() {
        let big = "x".repeat(1500);
        let items = serde_json::json!([
            {"Put": {"Item": {"pk": {"S": "a"}, "n": {"N": "12345"}}}},
            {"Put": {"Item": {"pk": {"S": "b"}, "body": {"S": big}}}},
            {"Update": {"Key": {"pk": {"S": "c"}}}},
        ]);
        let mut twi = OpCapacity::default();
        twi.add_transaction(items.as_array().unwrap());
        assert_eq!((twi.transact_items, twi.transact_units), (3, 4.0));
        let item = serde_json::json!({
            "pk": {"S": "abc"}, "n": {"N": "-0.012300"}, "ok": {"BOOL": true},
            "l": {"L": [{"S": "xy"}, {"NULL": true}]}, "m": {"M": {"k": {"S": "v"}}}
        });
        // pk 2+3, n 1+(2+1), ok 2+1, l 1+(3+1+2+1+1), m 1+(3+1+1+1)
        assert_eq!(item_size(item.as_object().unwrap()), 5 + 4 + 3 + 9 + 7);
    }

    #[test]
    fn the_parameter_is_added_once() {
        let body = with_total(br#"{"TableName":"t"}"#).unwrap();
        let json: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["ReturnConsumedCapacity"], "TOTAL");
        assert_eq!(with_total(br#"{"ReturnConsumedCapacity":"NONE"}"#), None);
        assert_eq!(
            error_code(
                &serde_json::json!({"__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"})
            ),
            "ConditionalCheckFailedException"
        );
    }
}
