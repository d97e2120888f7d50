//! Schemathesis' own reports, as far as part 4 reads them: the JSON run report and the NDJSON
//! events. Every field is optional or defaulted (deeper ones read as JSON values): a field a
//! later Schemathesis drops must not fail the whole run, only make a smaller report.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// The JSON run report (`[reports.json]`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RunReport {
    pub complete: bool,
    pub stop_reason: String,
    /// How Schemathesis was invoked, sanitized.
    pub command: String,
    pub seed: Option<u64>,
    pub exit_code: i32,
    /// `{"generated": n, ...}`.
    pub test_cases: BTreeMap<String, serde_json::Value>,
    pub failures: Vec<FailureGroup>,
    pub errors: Vec<FailureGroup>,
}

/// Schemathesis' failures (or errors) of one kind (its title), over the run.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct FailureGroup {
    pub code: String,
    pub title: String,
    pub count: u64,
    pub operations: Vec<String>,
}

/// One NDJSON line; only `ScenarioFinished` (its `recorder`) and `NonFatalError` (an operation
/// Schemathesis could not test, e.g. `InvalidSchema`: `label`, `value.type`, `value.message`)
/// matter here.
#[derive(Debug, Deserialize)]
pub struct NdjsonEvent {
    #[serde(rename = "ScenarioFinished")]
    pub scenario_finished: Option<ScenarioFinished>,
    #[serde(rename = "NonFatalError")]
    pub non_fatal_error: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
pub struct ScenarioFinished {
    pub recorder: Recorder,
}

/// A scenario's cases (`value.method`, `value.path`, `value.meta.phase.name`), interactions and
/// checks, each keyed by case id.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Recorder {
    /// The operation (`METHOD /path`), or a name such as `Stateful tests`.
    pub label: String,
    pub cases: BTreeMap<String, serde_json::Value>,
    pub interactions: BTreeMap<String, Interaction>,
    pub checks: BTreeMap<String, Vec<Check>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Interaction {
    pub request: Option<Request>,
    pub response: Option<Response>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Request {
    pub method: String,
    pub uri: String,
    /// Each header's values, in order.
    pub headers: BTreeMap<String, Vec<String>>,
    pub body: Option<Payload>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Response {
    pub status_code: Option<u16>,
    /// Names as received; values are not read.
    pub headers: BTreeMap<String, serde_json::Value>,
    pub content: Option<Payload>,
}

/// Bytes as Schemathesis records them: `{"$base64": "…"}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Payload {
    #[serde(rename = "$base64")]
    pub base64: Option<String>,
}

impl Payload {
    /// The bytes, `None` if absent or not base64.
    pub fn bytes(&self) -> Option<Vec<u8>> {
        base64::engine::general_purpose::STANDARD
            .decode(self.base64.as_deref()?)
            .ok()
    }
}

impl Response {
    /// Whether a function answered: every function response carries `X-Request-Id`.
    pub fn is_from_function(&self) -> bool {
        self.headers
            .keys()
            .any(|name| name.eq_ignore_ascii_case("x-request-id"))
    }

    /// The problem+json fields part 4 reports, when a function answered with one.
    pub fn problem(&self) -> Problem {
        self.content
            .as_ref()
            .and_then(Payload::bytes)
            .filter(|_| self.is_from_function())
            .and_then(|body| serde_json::from_slice(&body).ok())
            .unwrap_or_default()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Check {
    pub name: String,
    pub status: String,
    /// `{"failure": {"code", "title", "message"}}`.
    pub failure_info: serde_json::Value,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Problem {
    pub code: Option<String>,
    pub detail: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_recorded_scenario() {
        let line = r#"{"ScenarioFinished": {"recorder": {"label": "POST /session",
            "cases": {"c1": {"value": {"method": "POST", "path": "/session", "meta": {"phase": {"name": "coverage"}}}}},
            "interactions": {"c1": {"request": {"method": "POST", "uri": "http://x/session", "headers": {"A": ["b"]}, "body": {"$base64": "e30="}},
                                    "response": {"status_code": 400, "headers": {"X-Request-Id": ["r"]}, "content": {"$base64": "eyJjb2RlIjoiaW52YWxpZF9yZXF1ZXN0In0="}}}},
            "checks": {"c1": [{"name": "not_a_server_error", "status": "success"}]},
            "unknown": 1}}}"#;
        let event: NdjsonEvent = serde_json::from_str(line).unwrap();
        let mut recorder = event.scenario_finished.unwrap().recorder;
        assert_eq!(recorder.label, "POST /session");
        assert_eq!(recorder.checks["c1"][0].name, "not_a_server_error");
        let interaction = recorder.interactions.remove("c1").unwrap();
        let request = interaction.request.unwrap();
        assert_eq!(request.body.unwrap().bytes().unwrap(), b"{}");
        let mut response = interaction.response.unwrap();
        assert_eq!(response.problem().code.as_deref(), Some("invalid_request"));
        // The front's own answers (no `X-Request-Id`) have no problem of ours.
        response.headers.clear();
        assert_eq!(response.problem().code, None);
        let other: NdjsonEvent = serde_json::from_str(r#"{"Initialize": {}}"#).unwrap();
        assert!(other.scenario_finished.is_none());
    }
}
