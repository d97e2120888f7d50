//! One Schemathesis run's recorded scenarios turned into figures: calls and statuses per
//! operation, evaluations and failures per check, and failures grouped into findings (one per
//! operation, status, problem code and origin) each with a `curl` line that sends its first
//! case again.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use super::record::{Check, Interaction, Problem, Recorder, Request};

/// Checks whose failure means a response `openapi.yaml` does not allow.
pub const SCHEMA_CHECKS: &[&str] = &[
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "unsupported_method",
    "allow_header_conformance",
];

/// One kind of caller: which operations, at which URL, with which credential.
#[derive(Debug, Clone, Serialize)]
pub struct Caller {
    pub name: &'static str,
    pub tag: &'static str,
    pub base_url: String,
    /// The `.dev/env` variable with the base URL, for reproductions.
    pub url_var: &'static str,
    pub credential: Option<Credential>,
    /// Whether the demo-account hook applies.
    pub demo_hook: bool,
}

/// A header carrying a secret: where Schemathesis reads it, and how a reproduction writes it.
#[derive(Debug, Clone, Serialize)]
pub struct Credential {
    pub header: &'static str,
    /// The environment variable the config file names.
    pub var: &'static str,
    /// `Bearer ` for `Authorization`, nothing otherwise.
    pub scheme: &'static str,
    #[serde(skip)]
    pub value: String,
    /// The reproduction's value, a `.dev/env` variable.
    pub shown: &'static str,
}

/// What one Schemathesis run found.
#[derive(Debug, Default, Serialize)]
pub struct Outcome {
    pub name: &'static str,
    pub tag: &'static str,
    pub command: String,
    pub config: String,
    pub seconds: f64,
    pub exit: String,
    pub generated: u64,
    pub calls: u64,
    /// `METHOD /path` → status (`None`: no response) → count.
    #[serde(skip)]
    pub statuses: BTreeMap<String, BTreeMap<Option<u16>, u64>>,
    /// check → (evaluated, failed).
    #[serde(skip)]
    pub checks: BTreeMap<String, (u64, u64)>,
    pub failures: Vec<Finding>,
    /// Errors of requests (not of the document), `title ×count`.
    pub errors: Vec<String>,
    /// Operations Schemathesis could not test because of the document: (operation, error
    /// type, message).
    pub untestable: BTreeSet<(String, String, String)>,
    /// 5xx without `X-Request-Id`: answered by the front, no function ran.
    pub front_5xx: u64,
    /// 5xx that carried `X-Request-Id`: a function's.
    pub function_5xx: u64,
}

/// Failed checks on one operation with one kind of response.
#[derive(Debug, Serialize)]
pub struct Finding {
    /// Check name → Schemathesis' failure title and message (first case).
    #[serde(skip)]
    pub checks: BTreeMap<String, (String, String)>,
    /// `` `name` (title) `` of each check, for the report.
    pub check_names: String,
    /// Schemathesis' messages, one per check.
    pub messages: Vec<String>,
    #[serde(skip)]
    pub cases: BTreeSet<String>,
    pub case_count: usize,
    pub operation: String,
    pub status: Option<u16>,
    /// The problem `code` of the first response, when a function answered.
    pub problem: Option<String>,
    pub detail: Option<String>,
    /// No `X-Request-Id`: not a function's response.
    pub from_front: bool,
    /// `front`, `no_5xx`, `schema` or `reported`: which goal it counts against.
    pub counts: &'static str,
    /// Which kind of expected refusal it is (see the template), or `unexplained`.
    pub kind: &'static str,
    pub phase: String,
    /// The first failing case, the one [`Finding::reproduction`] sends.
    pub case: String,
    pub reproduction: String,
}

impl Finding {
    pub fn has_check(&self, names: &[&str]) -> bool {
        self.checks.keys().any(|c| names.contains(&c.as_str()))
    }

    /// Fills the fields the report reads from the ones gathered.
    fn settle(&mut self) {
        self.check_names = self
            .checks
            .iter()
            .map(|(name, (title, _))| format!("`{name}` ({title})"))
            .collect::<Vec<_>>()
            .join(", ");
        self.messages = self
            .checks
            .values()
            .filter(|(_, m)| !m.is_empty())
            .map(|(_, m)| m.clone())
            .collect();
        self.case_count = self.cases.len();
        self.counts = if self.from_front {
            "front"
        } else if self.has_check(&["not_a_server_error"]) {
            "no_5xx"
        } else if self.has_check(SCHEMA_CHECKS) {
            "schema"
        } else {
            "reported"
        };
        let detail = self.detail.as_deref().unwrap_or("");
        let only = |names: &[&str]| self.checks.keys().all(|c| names.contains(&c.as_str()));
        let accepted_only = only(&["positive_data_acceptance"]);
        let preflight = self.operation.starts_with("OPTIONS ")
            && self.problem.as_deref() == Some("method_not_allowed")
            && only(&["positive_data_acceptance", "missing_required_header"]);
        self.kind = match self.problem.as_deref() {
            _ if self.from_front => "front",
            _ if preflight => "preflight",
            _ if !accepted_only => "unexplained",
            Some("invalid_request") if detail.contains("Idempotency-Key") => "long_key",
            Some("invalid_request") if detail.contains("voice") => "voice",
            Some("invalid_request") if detail.contains("different") => "same_account",
            Some("invalid_request") => "other_400",
            Some("idempotency_key_reused") => "key_reused",
            Some("insufficient_funds" | "currency_mismatch") => "business",
            _ => "unexplained",
        };
    }
}

impl Outcome {
    /// Adds one finished scenario's calls, checks and failures.
    pub fn add(&mut self, recorder: &Recorder, caller: &Caller) {
        for (id, interaction) in &recorder.interactions {
            let operation = operation_of(recorder, id).unwrap_or_else(|| "?".into());
            let response = interaction.response.as_ref();
            let status = response.and_then(|r| r.status_code);
            self.calls += 1;
            *self
                .statuses
                .entry(operation)
                .or_default()
                .entry(status)
                .or_default() += 1;
            if let (Some(status), Some(response)) = (status, response) {
                if status >= 500 {
                    if response.has_request_id() {
                        self.function_5xx += 1;
                    } else {
                        self.front_5xx += 1;
                    }
                }
            }
        }
        for (id, checks) in &recorder.checks {
            for check in checks {
                let entry = self.checks.entry(check.name.clone()).or_default();
                entry.0 += 1;
                if check.status != "failure" {
                    continue;
                }
                entry.1 += 1;
                self.failure(recorder, id, check, caller);
            }
        }
    }

    fn failure(&mut self, recorder: &Recorder, id: &str, check: &Check, caller: &Caller) {
        let failure = check
            .failure_info
            .as_ref()
            .map(|f| f.failure.clone())
            .unwrap_or_default();
        let interaction = recorder.interactions.get(id);
        let response = interaction.and_then(|i| i.response.as_ref());
        let status = response.and_then(|r| r.status_code);
        let from_front = response.is_some_and(|r| !r.has_request_id());
        let problem: Problem = response
            .filter(|_| !from_front)
            .and_then(|r| serde_json::from_slice(&r.body()).ok())
            .unwrap_or_default();
        let operation = operation_of(recorder, id)
            .or(failure.operation.clone())
            .unwrap_or_else(|| "?".into());
        let title = format!(
            "{} {}",
            failure.code.as_deref().unwrap_or(""),
            failure.title.as_deref().unwrap_or("")
        )
        .trim()
        .to_string();
        let message = failure
            .message
            .as_deref()
            .unwrap_or("")
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        if let Some(existing) = self.failures.iter_mut().find(|f| {
            f.operation == operation
                && f.status == status
                && f.problem == problem.code
                && f.from_front == from_front
        }) {
            existing.cases.insert(id.to_string());
            existing
                .checks
                .entry(check.name.clone())
                .or_insert((title, message));
            existing.settle();
            return;
        }
        let mut finding = Finding {
            checks: BTreeMap::from([(check.name.clone(), (title, message))]),
            check_names: String::new(),
            messages: Vec::new(),
            cases: BTreeSet::from([id.to_string()]),
            case_count: 0,
            operation,
            status,
            problem: problem.code,
            detail: problem.detail,
            from_front,
            counts: "reported",
            kind: "unexplained",
            phase: recorder
                .cases
                .get(id)
                .and_then(|c| c.value.as_ref())
                .and_then(|v| v.meta.as_ref())
                .and_then(|m| m.phase.as_ref())
                .map_or_else(|| "?".into(), |p| p.name.clone()),
            case: id.to_string(),
            reproduction: interaction
                .and_then(|i: &Interaction| i.request.as_ref())
                .map_or_else(|| "(no request recorded)".into(), |r| curl(r, caller)),
        };
        finding.settle();
        self.failures.push(finding);
    }
}

/// `METHOD /path` of a recorded case.
fn operation_of(recorder: &Recorder, id: &str) -> Option<String> {
    let case = recorder.cases.get(id)?.value.as_ref()?;
    Some(format!(
        "{} {}",
        case.method.as_deref().unwrap_or("?"),
        case.path.as_deref().unwrap_or("?")
    ))
}

/// A `curl` line that sends the recorded request again against the `.dev/env` variables of
/// `cargo xtask dev` (`source .dev/env` first), with credentials as variables.
pub fn curl(request: &Request, caller: &Caller) -> String {
    let method = if request.method.is_empty() {
        "GET"
    } else {
        &request.method
    };
    let path = request
        .uri
        .strip_prefix(&caller.base_url)
        .unwrap_or(&request.uri);
    let mut line = format!(
        "curl -sS -i -X {method} \"${}\"{}",
        caller.url_var,
        quote(path.as_bytes())
    );
    for (name, values) in &request.headers {
        for value in values {
            match &caller.credential {
                Some(c) if c.header.eq_ignore_ascii_case(name) => {
                    let _ = write!(line, " -H \"{name}: {}{}\"", c.scheme, c.shown);
                }
                _ => {
                    // requests sends header values as Latin-1.
                    let mut header = format!("{name}: ").into_bytes();
                    if value.chars().all(|c| (c as u32) < 256) {
                        header.extend(value.chars().map(|c| c as u8));
                    } else {
                        header.extend(value.as_bytes());
                    }
                    let _ = write!(line, " -H {}", quote(&header));
                }
            }
        }
    }
    if let Some(body) = request.body.as_ref().and_then(|b| b.bytes()) {
        if std::str::from_utf8(&body).is_ok() {
            let _ = write!(line, " --data-binary {}", quote(&body));
        } else {
            let octal: String = body.iter().map(|b| format!("\\{b:03o}")).collect();
            line = format!(
                "printf {} | {line} --data-binary @-",
                quote(octal.as_bytes())
            );
        }
    }
    line
}

/// Quotes bytes for bash: with `shlex` when they are printable ASCII; otherwise as `$'…'`
/// with `\xNN` escapes, which `shlex` (POSIX quoting, bytes passed through) cannot write into
/// a Markdown file.
fn quote(bytes: &[u8]) -> String {
    if bytes.iter().all(|b| (0x20..0x7f).contains(b)) {
        let text = String::from_utf8_lossy(bytes);
        if let Ok(quoted) = shlex::try_quote(&text) {
            return quoted.into_owned();
        }
    }
    let mut out = String::from("$'");
    for &b in bytes {
        match b {
            b'\'' => out.push_str("\\'"),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push('\'');
    out
}

/// Failures that count against the schema goal.
pub fn schema_failures(outcomes: &[Outcome]) -> Vec<&Finding> {
    outcomes
        .iter()
        .flat_map(|o| &o.failures)
        .filter(|f| !f.from_front && f.has_check(SCHEMA_CHECKS))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::record::Payload;
    use super::*;
    use base64::Engine as _;

    fn caller() -> Caller {
        Caller {
            name: "transfers",
            tag: "transfers",
            base_url: "http://127.0.0.1:9/".into(),
            url_var: "TRANSFER_URL",
            credential: Some(Credential {
                header: "Authorization",
                var: "V",
                scheme: "Bearer ",
                value: "secret".into(),
                shown: "$TOKEN",
            }),
            demo_hook: true,
        }
    }

    #[test]
    fn curl_hides_credentials_and_escapes_bytes() {
        let b64 = |b: &[u8]| Payload {
            base64: Some(base64::engine::general_purpose::STANDARD.encode(b)),
        };
        let request = Request {
            method: "POST".into(),
            uri: "http://127.0.0.1:9/transfers".into(),
            headers: BTreeMap::from([
                ("Authorization".into(), vec!["Bearer secret".into()]),
                ("Idempotency-Key".into(), vec!["\u{d7}\u{f8}".into()]),
                ("Content-Type".into(), vec!["application/json".into()]),
            ]),
            body: Some(b64(b"{\"a\": 1}")),
        };
        let line = curl(&request, &caller());
        assert_eq!(
            line,
            "curl -sS -i -X POST \"$TRANSFER_URL\"transfers -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' -H $'Idempotency-Key: \\xd7\\xf8' --data-binary '{\"a\": 1}'"
        );
        assert!(!line.contains("secret"));
        let binary = Request {
            body: Some(b64(&[0x6a, 0xd2])),
            headers: BTreeMap::new(),
            ..request
        };
        assert_eq!(
            curl(&binary, &caller()),
            "printf \"\\\\152\\\\322\" | curl -sS -i -X POST \"$TRANSFER_URL\"transfers --data-binary @-"
        );
    }
}
