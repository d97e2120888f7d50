//! CloudWatch metrics as embedded-metric-format (EMF) log lines.
//!
//! Lambda ships stdout to CloudWatch Logs, which turns any line carrying an `_aws` object into
//! metrics: no agent, no `PutMetricData` call on the request path. Namespace `Tollgate`,
//! dimension `Function` (and `Layer` for rate-limit rejections). The alarms in `template.yaml`
//! watch these.

use std::time::{SystemTime, UNIX_EPOCH};

use lambda_http::{Body, Response};
use serde_json::{json, Map, Value};

use crate::idempotency::REPLAYED_HEADER;
use crate::problem::{ApiError, ClientError};

/// Metric namespace.
pub const NAMESPACE: &str = "Tollgate";

/// A countable event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// A request answered with 2xx by the handler itself.
    Admitted,
    /// A layer was full (429).
    RateLimited { layer: &'a str },
    /// The kill switch refused a request (403).
    KillSwitchDenied,
    /// A stored response was replayed.
    IdempotentReplay,
    /// The upstream failed and a cooldown started.
    UpstreamFailure,
    /// The upstream refused our API key, also as freshly read from the secret store, and the
    /// longer key cooldown started: nothing heals until an operator puts a valid key in place.
    UpstreamKeyRefused,
    /// A request was answered 503, without an upstream call, because an upstream cooldown was
    /// running (after a failure, or a refused key): how much traffic a failure turned away.
    Cooldown,
    /// Any 5xx answer.
    Status5xx,
}

impl Event<'_> {
    fn name(&self) -> &'static str {
        match self {
            Event::Admitted => "Admitted",
            Event::RateLimited { .. } => "RateLimited",
            Event::KillSwitchDenied => "KillSwitchDenied",
            Event::IdempotentReplay => "IdempotentReplay",
            Event::UpstreamFailure => "UpstreamFailure",
            Event::UpstreamKeyRefused => "UpstreamKeyRefused",
            Event::Cooldown => "Cooldown",
            Event::Status5xx => "Status5xx",
        }
    }
}

/// The EMF line for one event (exposed for tests).
pub fn line(function: &str, event: Event<'_>, now_ms: u64) -> String {
    let mut dimensions = vec!["Function"];
    let mut root = Map::new();
    root.insert("Function".into(), Value::from(function));
    if let Event::RateLimited { layer } = event {
        dimensions.push("Layer");
        root.insert("Layer".into(), Value::from(layer));
    }
    root.insert(event.name().into(), Value::from(1));
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": now_ms,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [dimensions],
                "Metrics": [{"Name": event.name(), "Unit": "Count"}]
            }]
        }),
    );
    Value::Object(root).to_string()
}

/// Writes one event to stdout.
pub fn emit(function: &str, event: Event<'_>) {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    println!("{}", line(function, event, now_ms));
}

/// Records what a request came to: one line for the outcome, and one more for a 5xx.
pub fn record<E: ClientError>(function: &str, result: &Result<Response<Body>, E>) {
    match result {
        Ok(r) if r.headers().contains_key(REPLAYED_HEADER) => {
            emit(function, Event::IdempotentReplay)
        }
        Ok(r) if r.status().is_success() => emit(function, Event::Admitted),
        Ok(r) if r.status().is_server_error() => emit(function, Event::Status5xx),
        Ok(_) => {}
        Err(e) => {
            match e.as_api_error() {
                Some(ApiError::RateLimited(d)) => emit(
                    function,
                    Event::RateLimited {
                        layer: d.limit.layer().as_str(),
                    },
                ),
                Some(ApiError::ServiceDisabled { .. }) => emit(function, Event::KillSwitchDenied),
                _ => {}
            }
            if e.status().is_server_error() {
                emit(function, Event::Status5xx);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_limit_line_has_the_layer_dimension() {
        let v: Value = serde_json::from_str(&line(
            crate::catalog::TRANSFER.name,
            Event::RateLimited { layer: "global" },
            42,
        ))
        .unwrap();
        assert_eq!(v["Function"], crate::catalog::TRANSFER.name);
        assert_eq!(v["Layer"], "global");
        assert_eq!(v["RateLimited"], 1);
        let m = &v["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(m["Namespace"], "Tollgate");
        assert_eq!(m["Dimensions"], json!([["Function", "Layer"]]));
        assert_eq!(m["Metrics"][0]["Name"], "RateLimited");
        assert_eq!(v["_aws"]["Timestamp"], 42);
    }

    #[test]
    fn other_events_have_the_function_only() {
        let v: Value = serde_json::from_str(&line(
            crate::catalog::EPHEMERAL_KEY.name,
            Event::Cooldown,
            1,
        ))
        .unwrap();
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Function"]])
        );
        assert!(v.get("Layer").is_none());
    }

    #[test]
    fn a_refused_key_is_its_own_metric() {
        let v: Value = serde_json::from_str(&line(
            crate::catalog::EPHEMERAL_KEY.name,
            Event::UpstreamKeyRefused,
            1,
        ))
        .unwrap();
        assert_eq!(v["UpstreamKeyRefused"], 1);
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"],
            "UpstreamKeyRefused"
        );
    }
}
