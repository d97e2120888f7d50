//! CloudWatch metrics as embedded-metric-format (EMF) log lines.
//!
//! Lambda ships stdout to CloudWatch Logs, which turns any line carrying an `_aws` object into
//! metrics: no agent, no `PutMetricData` call on the request path. The namespace is the
//! deployment's ([`crate::config::GuardSettings::metrics_namespace`]; none: no lines), the
//! dimension `Function` (and `Layer` for rate-limit rejections), so alarms can watch each
//! function's refusals and failures.

use std::time::{SystemTime, UNIX_EPOCH};

use lambda_http::{Body, Response};
use serde::ser::{Serialize, SerializeMap, Serializer};

#[cfg(feature = "idempotency")]
use crate::idempotency::REPLAYED_HEADER;
use crate::problem::{ApiError, ClientError};

/// Where one function's metric lines go: a namespace (none: nothing is written) and the value
/// of the `Function` dimension. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Metrics {
    namespace: Option<std::sync::Arc<str>>,
    function: std::sync::Arc<str>,
}

/// A countable event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// A request answered with 2xx by the handler itself.
    Admitted,
    /// A layer was full (429).
    RateLimited {
        /// The full layer's name (`ip`, `client`, `global`): the metric's dimension.
        layer: &'a str,
    },
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

impl Metrics {
    /// Lines in `namespace` (none: the metrics are off) with `Function` = `function`.
    pub fn new(namespace: Option<&str>, function: &str) -> Self {
        Self {
            namespace: namespace.map(Into::into),
            function: function.into(),
        }
    }

    /// The EMF line for one event at `now_ms`; `None` when the metrics are off.
    pub fn line(&self, event: Event<'_>, now_ms: u64) -> Option<String> {
        let namespace = self.namespace.as_deref()?;
        let layer = match event {
            Event::RateLimited { layer } => Some(layer),
            _ => None,
        };
        let line = Line {
            function: &self.function,
            layer,
            name: event.name(),
            aws: Aws {
                timestamp: now_ms,
                cloud_watch_metrics: [Directive {
                    namespace,
                    dimensions: [if layer.is_some() {
                        &["Function", "Layer"][..]
                    } else {
                        &["Function"][..]
                    }],
                    metrics: [MetricName {
                        name: event.name(),
                        unit: "Count",
                    }],
                }],
            },
        };
        // Serialising borrowed fields straight into the string: this runs on every request,
        // and a `serde_json::Value` tree cost an allocation per key.
        serde_json::to_string(&line).ok()
    }

    /// Writes one event to stdout (Lambda ships it to CloudWatch Logs), in one `write`.
    pub fn emit(&self, event: Event<'_>) {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        if let Some(line) = self.line(event, now_ms) {
            // One `write`: stdout is line-buffered and the line is far below its buffer.
            println!("{line}");
        }
    }

    /// Records what a request came to: one line for the outcome, and one more for a 5xx.
    pub fn record<E: ClientError>(&self, result: &Result<Response<Body>, E>) {
        match result {
            #[cfg(feature = "idempotency")]
            Ok(r) if r.headers().contains_key(REPLAYED_HEADER) => {
                self.emit(Event::IdempotentReplay)
            }
            Ok(r) if r.status().is_success() => self.emit(Event::Admitted),
            Ok(r) if r.status().is_server_error() => self.emit(Event::Status5xx),
            Ok(_) => {}
            Err(e) => {
                match e.as_api_error() {
                    Some(ApiError::RateLimited(d)) => self.emit(Event::RateLimited {
                        layer: d.limit.layer().as_str(),
                    }),
                    Some(ApiError::ServiceDisabled { .. }) => self.emit(Event::KillSwitchDenied),
                    _ => {}
                }
                if e.status().is_server_error() {
                    self.emit(Event::Status5xx);
                }
            }
        }
    }
}

/// One EMF document: the dimensions' values, the count under the metric's name, and the
/// `_aws` metadata that declares them.
struct Line<'a> {
    function: &'a str,
    layer: Option<&'a str>,
    name: &'static str,
    aws: Aws<'a>,
}

// By hand: the count's key is the metric's name, which a derive cannot name.
impl Serialize for Line<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("Function", self.function)?;
        if let Some(layer) = self.layer {
            map.serialize_entry("Layer", layer)?;
        }
        map.serialize_entry(self.name, &1)?;
        map.serialize_entry("_aws", &self.aws)?;
        map.end()
    }
}

#[derive(serde::Serialize)]
#[serde(rename_all = "PascalCase")]
struct Aws<'a> {
    timestamp: u64,
    cloud_watch_metrics: [Directive<'a>; 1],
}

#[derive(serde::Serialize)]
#[serde(rename_all = "PascalCase")]
struct Directive<'a> {
    namespace: &'a str,
    dimensions: [&'a [&'a str]; 1],
    metrics: [MetricName; 1],
}

#[derive(serde::Serialize)]
#[serde(rename_all = "PascalCase")]
struct MetricName {
    name: &'static str,
    unit: &'static str,
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn line(function: &str, event: Event<'_>, now_ms: u64) -> String {
        Metrics::new(Some("Guards"), function)
            .line(event, now_ms)
            .expect("a namespace is set")
    }

    #[test]
    fn a_rate_limit_line_has_the_layer_dimension() {
        let v: Value =
            serde_json::from_str(&line("orders", Event::RateLimited { layer: "global" }, 42))
                .unwrap();
        assert_eq!(v["Function"], "orders");
        assert_eq!(v["Layer"], "global");
        assert_eq!(v["RateLimited"], 1);
        let m = &v["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(m["Namespace"], "Guards");
        assert_eq!(m["Dimensions"], json!([["Function", "Layer"]]));
        assert_eq!(m["Metrics"][0]["Name"], "RateLimited");
        assert_eq!(v["_aws"]["Timestamp"], 42);
    }

    #[test]
    fn other_events_have_the_function_only() {
        let v: Value = serde_json::from_str(&line("voice", Event::Cooldown, 1)).unwrap();
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Function"]])
        );
        assert!(v.get("Layer").is_none());
    }

    #[test]
    fn a_refused_key_is_its_own_metric() {
        let v: Value = serde_json::from_str(&line("voice", Event::UpstreamKeyRefused, 1)).unwrap();
        assert_eq!(v["UpstreamKeyRefused"], 1);
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"],
            "UpstreamKeyRefused"
        );
    }

    #[test]
    fn without_a_namespace_nothing_is_written() {
        assert_eq!(Metrics::new(None, "f").line(Event::Admitted, 1), None);
    }
}
