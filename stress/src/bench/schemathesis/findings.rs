//! One run's NDJSON events turned into what no summary report of Schemathesis counts: calls
//! and statuses per operation, evaluations and failures per check, 5xx by origin, and failed
//! checks grouped into findings by *our* answer (operation, status, problem code, origin),
//! since whether a failure is a documented refusal depends on the problem code and `detail`
//! of the response, which Schemathesis' grouping (by its failure title) does not look at.
//! Each finding carries a `curl` line that sends its first case again.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use super::reports::{Check, Recorder, Request};

/// Checks whose failure means a response `openapi.yaml` does not allow.
pub const SCHEMA_CHECKS: &[&str] = &[
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "unsupported_method",
    "allow_header_conformance",
];

/// Which goal a failed check counts against: `no_5xx`, `schema` or `reported` (none).
pub fn counts(check: &str) -> &'static str {
    match check {
        "not_a_server_error" => "no_5xx",
        c if SCHEMA_CHECKS.contains(&c) => "schema",
        _ => "reported",
    }
}

/// How a reproduction reaches a run's function and writes its credential, against the
/// `.dev/env` variables of `cargo xtask dev`.
#[derive(Debug, Clone)]
pub struct Reproduce {
    pub base_url: String,
    /// The `.dev/env` variable with the base URL.
    pub url_var: &'static str,
    /// (header, the value as written, e.g. `Bearer $TOKEN`).
    pub credential: Option<(&'static str, &'static str)>,
}

/// The tallies of one run.
#[derive(Debug, Default)]
pub struct Tally {
    /// Documented operations (the scenarios' labels).
    pub operations: BTreeSet<String>,
    /// `METHOD /path` → status (`None`: no response) → count.
    pub statuses: BTreeMap<String, BTreeMap<Option<u16>, u64>>,
    /// check → (evaluated, failed).
    pub checks: BTreeMap<String, (u64, u64)>,
    pub findings: Vec<Finding>,
    /// 5xx without `X-Request-Id`: answered by the front, no function ran.
    pub front_5xx: u64,
    /// 5xx that carried `X-Request-Id`: a function's.
    pub function_5xx: u64,
    /// Operations Schemathesis could not test because of the document: (operation, error
    /// type, message).
    pub untestable: BTreeSet<(String, String, String)>,
}

/// Failed checks on one operation with one kind of response.
#[derive(Debug, Serialize)]
pub struct Finding {
    /// Check name → Schemathesis' `code title` and message (first case).
    pub checks: BTreeMap<String, (String, String)>,
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
    /// `front`, or the goal of its weightiest check (see [`counts`]).
    pub counts: &'static str,
    pub phase: String,
    /// The first failing case, the one `reproduction` sends.
    pub case: String,
    pub reproduction: String,
}

impl Tally {
    /// Adds one finished scenario's calls, checks and failures.
    pub fn add(&mut self, recorder: &Recorder, reproduce: &Reproduce) {
        if recorder.label.contains(' ') && recorder.label.contains('/') {
            self.operations.insert(recorder.label.clone());
        }
        for (id, interaction) in &recorder.interactions {
            let response = interaction.response.as_ref();
            let status = response.and_then(|r| r.status_code);
            *self
                .statuses
                .entry(operation(recorder, id))
                .or_default()
                .entry(status)
                .or_default() += 1;
            match response {
                Some(r) if status >= Some(500) && r.is_from_function() => self.function_5xx += 1,
                Some(_) if status >= Some(500) => self.front_5xx += 1,
                _ => {}
            }
        }
        for (id, checks) in &recorder.checks {
            for check in checks {
                let entry = self.checks.entry(check.name.clone()).or_default();
                entry.0 += 1;
                if check.status == "failure" {
                    entry.1 += 1;
                    self.failure(recorder, id, check, reproduce);
                }
            }
        }
    }

    fn failure(&mut self, recorder: &Recorder, id: &str, check: &Check, reproduce: &Reproduce) {
        let failure = |field: &str| check.failure_info["failure"][field].as_str().unwrap_or("");
        let title = format!("{} {}", failure("code"), failure("title"))
            .trim()
            .to_string();
        let message = failure("message")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let interaction = recorder.interactions.get(id);
        let response = interaction.and_then(|i| i.response.as_ref());
        let status = response.and_then(|r| r.status_code);
        let from_front = response.is_some_and(|r| !r.is_from_function());
        let problem = response.map(|r| r.problem()).unwrap_or_default();
        let operation = operation(recorder, id);
        let index = self.findings.iter().position(|f| {
            (&f.operation, f.status, &f.problem, f.from_front)
                == (&operation, status, &problem.code, from_front)
        });
        let finding = match index {
            Some(i) => &mut self.findings[i],
            None => {
                self.findings.push(Finding {
                    checks: BTreeMap::new(),
                    cases: BTreeSet::new(),
                    case_count: 0,
                    operation,
                    status,
                    problem: problem.code,
                    detail: problem.detail,
                    from_front,
                    counts: "reported",
                    phase: recorder
                        .cases
                        .get(id)
                        .map_or("?", |c| {
                            c.pointer("/value/meta/phase/name")
                                .and_then(|n| n.as_str())
                                .unwrap_or("?")
                        })
                        .into(),
                    case: id.to_string(),
                    reproduction: interaction
                        .and_then(|i| i.request.as_ref())
                        .map_or_else(|| "(no request recorded)".into(), |r| curl(r, reproduce)),
                });
                self.findings.last_mut().expect("just pushed")
            }
        };
        finding
            .checks
            .entry(check.name.clone())
            .or_insert((title, message));
        finding.cases.insert(id.to_string());
        finding.case_count = finding.cases.len();
        finding.counts = if finding.from_front {
            "front"
        } else {
            ["no_5xx", "schema"]
                .into_iter()
                .find(|goal| finding.checks.keys().any(|c| counts(c) == *goal))
                .unwrap_or("reported")
        };
    }
}

/// `METHOD /path` of a recorded case (its method, not its scenario's: a probe of an
/// undocumented method is recorded under the operation it came from).
fn operation(recorder: &Recorder, id: &str) -> String {
    let case = |field: &str| {
        let value = recorder.cases.get(id).map(|c| &c["value"][field]);
        value.and_then(|v| v.as_str()).unwrap_or("?").to_string()
    };
    format!("{} {}", case("method"), case("path"))
}
/// A `curl` line that sends the recorded request again against the `.dev/env` variables of
/// `cargo xtask dev` (`source .dev/env` first), with credentials as variables.
pub fn curl(request: &Request, reproduce: &Reproduce) -> String {
    let method = if request.method.is_empty() {
        "GET"
    } else {
        &request.method
    };
    let path = request
        .uri
        .strip_prefix(&reproduce.base_url)
        .unwrap_or(&request.uri);
    let mut line = format!(
        "curl -sS -i -X {method} \"${}\"{}",
        reproduce.url_var,
        quote(path.as_bytes())
    );
    for (name, values) in &request.headers {
        for value in values {
            match reproduce.credential {
                Some((header, shown)) if header.eq_ignore_ascii_case(name) => {
                    let _ = write!(line, " -H \"{name}: {shown}\"");
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

#[cfg(test)]
mod tests {
    use super::super::reports::Payload;
    use super::*;
    use base64::Engine as _;

    fn caller() -> Reproduce {
        Reproduce {
            base_url: "http://127.0.0.1:9/".into(),
            url_var: "TRANSFER_URL",
            credential: Some(("Authorization", "Bearer $TOKEN")),
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
