//! A small validator of real responses against `openapi.yaml`.
//!
//! The document is loaded once. Every schema in it (each `schema` of a media type, header or
//! parameter, and each `components/schemas` entry) is compiled as JSON Schema draft 2020-12 with
//! the whole document as the resource, so `$ref: '#/components/...'` resolves as it does for any
//! OpenAPI 3.1 tool. [`Checker::check`] then asserts, for one response of one operation:
//!
//! - the status is documented for the operation;
//! - the `Content-Type` is one of the response's media types (none documented: no body);
//! - the body validates against that media type's schema;
//! - every header documented as required is present, and every documented header that is
//!   present validates against its schema;
//! - every contract header the response carries (`Retry-After`, `Allow`, `Location`,
//!   `RateLimit`, the preflight's `Access-Control-Allow-Methods`, …) is documented for that
//!   response, so the document cannot fall behind the code silently;
//! - the CORS headers every response to a listed origin carries (`Access-Control-Allow-Origin`,
//!   `Access-Control-Expose-Headers`, `Vary`), documented once in `components/headers` rather
//!   than on each response, validate against that one definition wherever they appear;
//! - for problem bodies: `retry_after` is present exactly when `Retry-After` is, with the same
//!   value, and `request_id` is the `X-Request-Id` (except on a replay, which keeps the first
//!   request's body byte for byte).
//!
//! Each checker records the (operation, status) pairs it saw, for the coverage test.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, OnceLock};

use lambda_http::{Body, Response};
use serde_json::Value;

/// The document's location as a JSON Schema resource.
const BASE: &str = "urn:tollgate:openapi";
/// The pseudo-operation a response to an unmatched path is recorded under.
pub const UNKNOWN_ROUTE: &str = "* <unknown path>";
/// Headers of the contract: one present on a response must be documented for it.
const CONTRACT_HEADERS: &[&str] = &[
    "x-request-id",
    "retry-after",
    "allow",
    "location",
    "cache-control",
    "idempotent-replayed",
    "ratelimit-policy",
    "ratelimit",
    "access-control-allow-methods",
    "access-control-allow-headers",
    "access-control-max-age",
    // Documented nowhere: the API never sends it (bearer tokens, not cookies).
    "access-control-allow-credentials",
];
/// CORS headers of every response to a listed origin, with the `components/headers` entry that
/// documents them for all responses at once.
const CORS_HEADERS: &[(&str, &str)] = &[
    ("access-control-allow-origin", "Access-Control-Allow-Origin"),
    (
        "access-control-expose-headers",
        "Access-Control-Expose-Headers",
    ),
    ("vary", "Vary"),
];
const METHODS: &[&str] = &["get", "put", "post", "delete", "patch", "head", "options"];

pub struct Spec {
    pub doc: Value,
    schemas: boon::Schemas,
    index: HashMap<String, boon::SchemaIndex>,
}

/// The document, loaded and compiled once per test binary.
pub fn spec() -> &'static Spec {
    static SPEC: OnceLock<Spec> = OnceLock::new();
    SPEC.get_or_init(Spec::load)
}

/// A JSON pointer token for `key`.
pub fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// A JSON pointer as a URI fragment.
fn fragment(pointer: &str) -> String {
    let mut out = String::new();
    for b in pointer.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/!$&'()*+,;=:@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Spec {
    fn load() -> Spec {
        let file = tollgate_tests::workspace_root().join("openapi.yaml");
        let path = file.display();
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{path}: {e}"));
        let doc: Value =
            serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{path} is not YAML: {e}"));

        let mut pointers = Vec::new();
        collect_schema_pointers(&doc, String::new(), &mut pointers);
        if let Some(Value::Object(schemas)) = doc.pointer("/components/schemas") {
            for name in schemas.keys() {
                pointers.push(format!("/components/schemas/{}", escape(name)));
            }
        }

        let mut compiler = boon::Compiler::new();
        compiler.set_default_draft(boon::Draft::V2020_12);
        compiler.enable_format_assertions();
        compiler
            .add_resource(BASE, doc.clone())
            .expect("the document is a JSON value");
        let mut schemas = boon::Schemas::new();
        let mut index = HashMap::new();
        for pointer in pointers {
            let location = format!("{BASE}#{}", fragment(&pointer));
            let compiled = compiler
                .compile(&location, &mut schemas)
                .unwrap_or_else(|e| panic!("openapi.yaml{pointer}: not a valid schema: {e:#}"));
            index.insert(pointer, compiled);
        }
        Spec {
            doc,
            schemas,
            index,
        }
    }

    /// The node at `pointer`; panics when there is none.
    pub fn get(&self, pointer: &str) -> &Value {
        self.doc
            .pointer(pointer)
            .unwrap_or_else(|| panic!("openapi.yaml has nothing at {pointer}"))
    }

    /// Follows `$ref`s from `pointer` to the node they end at, and its pointer.
    pub fn resolve(&self, pointer: &str) -> (String, &Value) {
        let mut pointer = pointer.to_string();
        for _ in 0..16 {
            let node = self.get(&pointer);
            match node.get("$ref").and_then(Value::as_str) {
                Some(target) => {
                    pointer = target
                        .strip_prefix('#')
                        .unwrap_or_else(|| panic!("{pointer}: only local $refs: {target}"))
                        .to_string();
                }
                None => return (pointer, node),
            }
        }
        panic!("{pointer}: $ref chain too long")
    }

    /// Validates `value` against the schema at `pointer`.
    pub fn validate(&self, pointer: &str, value: &Value) -> Result<(), String> {
        let index = *self
            .index
            .get(pointer)
            .unwrap_or_else(|| panic!("no schema compiled at {pointer}"));
        self.schemas
            .validate(value, index)
            .map_err(|e| format!("{e:#}"))
    }

    /// Every documented operation as `METHOD /path`, with the pointer of its operation object.
    pub fn operations(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let paths = self.get("/paths").as_object().expect("paths is a map");
        for (path, item) in paths {
            for method in METHODS {
                if item.get(*method).is_some() {
                    out.push((
                        format!("{} {path}", method.to_uppercase()),
                        format!("/paths/{}/{method}", escape(path)),
                    ));
                }
            }
        }
        out
    }

    /// The pointer of the operation `METHOD /path`.
    pub fn operation(&self, op: &str) -> Option<String> {
        let (method, path) = op.split_once(' ')?;
        let pointer = format!("/paths/{}/{}", escape(path), method.to_lowercase());
        self.doc.pointer(&pointer).map(|_| pointer)
    }

    /// The methods documented for `path`, upper case, as `Allow` lists them: without the CORS
    /// preflight (`options`), which is answered only for listed origins.
    pub fn methods_of(&self, path: &str) -> BTreeSet<String> {
        let item = self.get(&format!("/paths/{}", escape(path)));
        METHODS
            .iter()
            .filter(|m| **m != "options" && item.get(**m).is_some())
            .map(|m| m.to_uppercase())
            .collect()
    }

    /// The statuses documented for the operation at `pointer`.
    pub fn statuses(&self, pointer: &str) -> Vec<u16> {
        self.get(&format!("{pointer}/responses"))
            .as_object()
            .expect("responses is a map")
            .keys()
            .map(|k| {
                k.parse()
                    .unwrap_or_else(|_| panic!("{pointer}: status {k} is not a number"))
            })
            .collect()
    }

    /// Validates a request body against the operation's `application/json` request schema.
    pub fn validate_request(&self, op: &str, body: &Value) -> Result<(), String> {
        let pointer = self
            .operation(op)
            .unwrap_or_else(|| panic!("{op} is not documented"));
        let (request, _) = self.resolve(&format!("{pointer}/requestBody"));
        self.validate(&format!("{request}/content/application~1json/schema"), body)
    }

    /// Everything wrong with `resp` as the response documented at `pointer` (a response object,
    /// possibly a `$ref`).
    pub fn problems_with(&self, pointer: &str, resp: &Response<Body>) -> Vec<String> {
        let mut problems = Vec::new();
        let (pointer, documented) = self.resolve(pointer);
        let headers = resp.headers();

        // Content type and body.
        let body = resp.body().as_ref();
        let content_type = headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase()
            });
        match documented.get("content").and_then(Value::as_object) {
            None => {
                if !body.is_empty() {
                    problems.push("a body, but the response documents no content".into());
                }
            }
            Some(content) => match content_type {
                None => problems.push(format!(
                    "no Content-Type; documented: {:?}",
                    content.keys().collect::<Vec<_>>()
                )),
                Some(ct) if !content.contains_key(&ct) => problems.push(format!(
                    "Content-Type {ct} is not documented; documented: {:?}",
                    content.keys().collect::<Vec<_>>()
                )),
                Some(ct) => match serde_json::from_slice::<Value>(body) {
                    Err(e) => problems.push(format!("the body is not JSON: {e}")),
                    Ok(json) => {
                        let schema = format!("{pointer}/content/{}/schema", escape(&ct));
                        if let Err(e) = self.validate(&schema, &json) {
                            problems.push(format!("the body does not match {schema}: {e}"));
                        }
                        if ct == "application/problem+json" {
                            problem_consistency(resp, &json, &mut problems);
                        }
                    }
                },
            },
        }

        // Headers: required ones present, present ones valid.
        let mut documented_headers = BTreeSet::new();
        if let Some(map) = documented.get("headers").and_then(Value::as_object) {
            for name in map.keys() {
                documented_headers.insert(name.to_ascii_lowercase());
                let (header_pointer, header) =
                    self.resolve(&format!("{pointer}/headers/{}", escape(name)));
                let required = header.get("required") == Some(&Value::Bool(true));
                match headers.get(name.as_str()) {
                    None if required => problems.push(format!("required header {name} missing")),
                    None => {}
                    Some(value) => {
                        let text = value.to_str().unwrap_or_default();
                        let schema = format!("{header_pointer}/schema");
                        let value = self.header_value(&schema, text);
                        if let Err(e) = self.validate(&schema, &value) {
                            problems.push(format!("header {name}: {text:?} does not match: {e}"));
                        }
                    }
                }
            }
        }
        for name in CONTRACT_HEADERS {
            if headers.contains_key(*name) && !documented_headers.contains(*name) {
                problems.push(format!(
                    "header {name} is sent but not documented for this response"
                ));
            }
        }
        for (name, component) in CORS_HEADERS {
            if documented_headers.contains(*name) {
                continue;
            }
            for value in headers.get_all(*name) {
                let text = value.to_str().unwrap_or_default();
                let schema = format!("/components/headers/{component}/schema");
                if let Err(e) = self.validate(&schema, &Value::String(text.to_string())) {
                    problems.push(format!(
                        "header {name}: {text:?} does not match {schema}: {e}"
                    ));
                }
            }
        }
        problems
    }

    /// A header's text as the JSON value its schema describes (numbers for integer schemas).
    fn header_value(&self, schema_pointer: &str, text: &str) -> Value {
        let (_, schema) = self.resolve(schema_pointer);
        match schema.get("type").and_then(Value::as_str) {
            Some("integer") | Some("number") => serde_json::from_str::<serde_json::Number>(text)
                .map(Value::Number)
                .unwrap_or_else(|_| Value::String(text.to_string())),
            _ => Value::String(text.to_string()),
        }
    }
}

/// The problem-body rules a schema cannot express: they relate the body to the headers.
fn problem_consistency(resp: &Response<Body>, body: &Value, problems: &mut Vec<String>) {
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let retry_after_header = header("retry-after").and_then(|v| v.parse::<u64>().ok());
    let retry_after_body = body.get("retry_after").and_then(Value::as_u64);
    if retry_after_header != retry_after_body {
        problems.push(format!(
            "Retry-After header {retry_after_header:?} and body retry_after {retry_after_body:?} differ"
        ));
    }
    let replayed = header("idempotent-replayed").is_some();
    if !replayed
        && header("x-request-id").as_deref() != body.get("request_id").and_then(Value::as_str)
    {
        problems.push("request_id is not the X-Request-Id of this (not replayed) response".into());
    }
}

/// Pointers of every `schema` of a media type, header or parameter.
fn collect_schema_pointers(node: &Value, pointer: String, out: &mut Vec<String>) {
    match node {
        Value::Object(map) => {
            for (key, value) in map {
                let child = format!("{pointer}/{}", escape(key));
                if pointer == "/components/schemas" {
                    continue; // compiled as a whole, below
                }
                if key == "schema" && value.is_object() {
                    out.push(child);
                } else {
                    collect_schema_pointers(value, child, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, value) in items.iter().enumerate() {
                collect_schema_pointers(value, format!("{pointer}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Checks responses of one test and records what it saw.
pub struct Checker {
    test: &'static str,
    seen: Mutex<BTreeSet<(String, u16)>>,
}

impl Checker {
    pub fn new(test: &'static str) -> Self {
        Self {
            test,
            seen: Mutex::new(BTreeSet::new()),
        }
    }

    fn record(&self, op: &str, status: u16) {
        self.seen.lock().unwrap().insert((op.to_string(), status));
    }

    fn fail(&self, what: &str, resp: &Response<Body>, problems: &[String]) -> ! {
        panic!(
            "{}: {what} -> {} does not conform to openapi.yaml:\n  - {}\nheaders: {:?}\nbody: {}",
            self.test,
            resp.status(),
            problems.join("\n  - "),
            resp.headers(),
            String::from_utf8_lossy(resp.body().as_ref())
        )
    }

    /// Asserts that `resp` is a documented response of `op` (`METHOD /path/{template}`).
    pub fn check(&self, op: &str, resp: &Response<Body>) {
        let spec = spec();
        let pointer = spec
            .operation(op)
            .unwrap_or_else(|| panic!("{}: {op} is not documented", self.test));
        let status = resp.status().as_u16();
        let response = format!("{pointer}/responses/{status}");
        if spec.doc.pointer(&response).is_none() {
            self.fail(
                op,
                resp,
                &[format!("status {status} is not documented for {op}")],
            );
        }
        self.record(op, status);
        let problems = spec.problems_with(&response, resp);
        if !problems.is_empty() {
            self.fail(op, resp, &problems);
        }
    }

    /// Asserts that `resp`, the answer to `method` on the documented `path` that does not
    /// document `method`, is the 405 every operation of the path documents, and that its
    /// `Allow` names exactly the documented methods.
    pub fn check_other_method(&self, method: &str, path: &str, resp: &Response<Body>) {
        let spec = spec();
        let methods = spec.methods_of(path);
        assert!(
            !methods.contains(method),
            "{}: {method} {path} is documented; use check",
            self.test
        );
        let what = format!("{method} {path}");
        let allow: BTreeSet<String> = resp
            .headers()
            .get(http::header::ALLOW)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .split(',')
            .map(|m| m.trim().to_string())
            .filter(|m| !m.is_empty())
            .collect();
        if allow != methods {
            self.fail(
                &what,
                resp,
                &[format!("Allow {allow:?}, but the document has {methods:?}")],
            );
        }
        for documented in &methods {
            let op = format!("{documented} {path}");
            let pointer = spec.operation(&op).expect("listed above");
            let response = format!("{pointer}/responses/{}", resp.status().as_u16());
            if spec.doc.pointer(&response).is_none() {
                self.fail(&what, resp, &[format!("{op} documents no such status")]);
            }
            self.record(&op, resp.status().as_u16());
            let problems = spec.problems_with(&response, resp);
            if !problems.is_empty() {
                self.fail(&what, resp, &problems);
            }
        }
    }

    /// Asserts that `resp`, the answer to a path no route matches, is the documented
    /// `RouteNotFound` response.
    pub fn check_unknown_route(&self, what: &str, resp: &Response<Body>) {
        if resp.status() != 404 {
            self.fail(what, resp, &["an unknown path must get 404".into()]);
        }
        self.record(UNKNOWN_ROUTE, 404);
        let problems = spec().problems_with("/components/responses/RouteNotFound", resp);
        if !problems.is_empty() {
            self.fail(what, resp, &problems);
        }
    }

    /// Asserts that the request schema of `op` accepts `body`, which the code accepted.
    pub fn accepted_body(&self, op: &str, body: &Value) {
        if let Err(e) = spec().validate_request(op, body) {
            panic!(
                "{}: the code accepted this {op} body but openapi.yaml refuses it: {body}\n{e}",
                self.test
            );
        }
    }

    /// Asserts that the request schema of `op` refuses `body`, which the code refused with 400.
    pub fn refused_body(&self, op: &str, body: &Value) {
        if spec().validate_request(op, body).is_ok() {
            panic!(
                "{}: the code refused this {op} body but openapi.yaml accepts it: {body}",
                self.test
            );
        }
    }

    /// Asserts that this test produced exactly the `declared` (operation, status) pairs.
    pub fn assert_exercised(&self, declared: &[(&str, u16)]) {
        let seen = self.seen.lock().unwrap().clone();
        let declared: BTreeSet<(String, u16)> = declared
            .iter()
            .map(|(op, status)| (op.to_string(), *status))
            .collect();
        assert_eq!(
            seen, declared,
            "{}: the responses checked differ from those its entry in main.rs declares",
            self.test
        );
    }
}
