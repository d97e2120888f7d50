//! The response validator of `spec.rs` checked against itself: it is only worth its green runs
//! if it goes red on drift. Conforming responses first (so each broken one fails for its own
//! reason only), then responses that each break one rule.

use lambda_http::{Body, Response};

use crate::openapi::spec::spec;

const LIMITED: &str = "/paths/~1transfers/post/responses/429";
const ACCOUNT: &str = "/paths/~1accounts~1{id}/get/responses/200";
const ACCOUNT_404: &str = "/paths/~1accounts~1{id}/get/responses/404";
const PREFLIGHT: &str = "/paths/~1session/options/responses/204";
const ACCOUNT_BODY: &str = r#"{"account_id":"acc_a","balance":5,"currency":"JPY"}"#;
const ORIGIN: &str = "https://app.example.com";

type Headers<'a> = Vec<(&'a str, &'a str)>;

fn response(status: u16, headers: &[(&str, &str)], body: &str) -> Response<Body> {
    let mut builder = Response::builder().status(status);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(Body::from(body.to_string())).unwrap()
}

fn problem(code: &str, status: u16, extra: &str) -> String {
    format!(
        r#"{{"type":"urn:tollgate:problem:{code}","title":"T","status":{status},"detail":"D","code":"{code}","request_id":"r1"{extra}}}"#
    )
}

/// `base` with each header of `changes` set to its value, or removed for `None`.
fn edit<'a>(base: &[(&'a str, &'a str)], changes: &[(&'a str, Option<&'a str>)]) -> Headers<'a> {
    let mut headers: Headers = base
        .iter()
        .filter(|(name, _)| !changes.iter().any(|(changed, _)| changed == name))
        .copied()
        .collect();
    headers.extend(changes.iter().filter_map(|(n, v)| v.map(|v| (*n, v))));
    headers
}

#[test]
fn the_validator_catches_drift() {
    let spec = spec();
    let json = [("content-type", "application/json"), ("x-request-id", "r1")];
    let problem_json = [
        ("content-type", "application/problem+json"),
        ("x-request-id", "r1"),
    ];
    let limited = edit(
        &problem_json,
        &[
            ("retry-after", Some("7")),
            ("ratelimit-policy", Some("\"client\";q=60;w=60")),
            ("ratelimit", Some("\"client\";r=0;t=7")),
        ],
    );
    let limited_body = problem("rate_limited", 429, r#","retry_after":7"#);
    let preflight = [
        ("x-request-id", "r1"),
        ("access-control-allow-origin", ORIGIN),
        ("access-control-allow-methods", "POST"),
        (
            "access-control-allow-headers",
            "Content-Type, Idempotency-Key, Authorization",
        ),
        ("access-control-max-age", "600"),
        ("vary", "Origin"),
    ];
    let cross_origin = edit(
        &json,
        &[
            ("access-control-allow-origin", Some(ORIGIN)),
            (
                "access-control-expose-headers",
                Some("Retry-After, RateLimit, RateLimit-Policy, Idempotent-Replayed, X-Request-Id"),
            ),
            ("vary", Some("Origin")),
        ],
    );

    let good = [
        (LIMITED, response(429, &limited, &limited_body)),
        (PREFLIGHT, response(204, &preflight, "")),
        (ACCOUNT, response(200, &cross_origin, ACCOUNT_BODY)),
    ];
    for (pointer, resp) in &good {
        assert_eq!(spec.problems_with(pointer, resp), Vec::<String>::new());
    }

    let limited_with = |changes| response(429, &edit(&limited, changes), &limited_body);
    let account_with = |changes| response(200, &edit(&json, changes), ACCOUNT_BODY);
    let preflight_with = |changes, body| response(204, &edit(&preflight, changes), body);
    let cases: Vec<(&str, &str, Response<Body>)> = vec![
        (
            "required Retry-After missing",
            LIMITED,
            limited_with(&[("retry-after", None)]),
        ),
        (
            "Retry-After and retry_after differ",
            LIMITED,
            limited_with(&[("retry-after", Some("8"))]),
        ),
        (
            "a malformed RateLimit field",
            LIMITED,
            limited_with(&[("ratelimit-policy", Some("client 60/60"))]),
        ),
        (
            "another code than documented for the status",
            LIMITED,
            response(
                429,
                &limited,
                &problem("temporarily_unavailable", 429, r#","retry_after":7"#),
            ),
        ),
        (
            "a problem as application/json",
            ACCOUNT_404,
            response(404, &json, &problem("account_not_found", 404, "")),
        ),
        (
            "an undocumented member",
            ACCOUNT_404,
            response(
                404,
                &problem_json,
                &problem("account_not_found", 404, r#","account":"acc_x""#),
            ),
        ),
        (
            "request_id not the X-Request-Id",
            ACCOUNT_404,
            response(
                404,
                &edit(&problem_json, &[("x-request-id", Some("r2"))]),
                &problem("account_not_found", 404, ""),
            ),
        ),
        (
            "a contract header the response does not document",
            ACCOUNT,
            account_with(&[("retry-after", Some("1"))]),
        ),
        (
            "Access-Control-Allow-Origin: *",
            ACCOUNT,
            account_with(&[("access-control-allow-origin", Some("*"))]),
        ),
        (
            "Access-Control-Allow-Credentials",
            ACCOUNT,
            account_with(&[
                ("access-control-allow-origin", Some(ORIGIN)),
                ("access-control-allow-credentials", Some("true")),
            ]),
        ),
        (
            "Access-Control-Expose-Headers without Retry-After",
            ACCOUNT,
            account_with(&[(
                "access-control-expose-headers",
                Some("RateLimit, X-Request-Id"),
            )]),
        ),
        (
            "preflight headers on an ordinary response",
            ACCOUNT,
            account_with(&[("access-control-allow-methods", Some("GET"))]),
        ),
        (
            "a preflight answer with a body",
            PREFLIGHT,
            preflight_with(&[], "{}"),
        ),
        (
            "a preflight answer naming other methods",
            PREFLIGHT,
            preflight_with(&[("access-control-allow-methods", Some("GET, POST"))], ""),
        ),
        (
            "a negative balance",
            ACCOUNT,
            response(
                200,
                &json,
                r#"{"account_id":"acc_a","balance":-5,"currency":"JPY"}"#,
            ),
        ),
        (
            "X-Request-Id missing",
            ACCOUNT,
            account_with(&[("x-request-id", None)]),
        ),
        (
            "created_at not a date-time",
            "/paths/~1transfers~1{id}/get/responses/200",
            response(
                200,
                &json,
                r#"{"transfer_id":"tr_0123456789abcdef0123456789abcdef","from":"a","to":"b","amount":1,"memo":null,"created_at":"yesterday"}"#,
            ),
        ),
    ];
    for (why, pointer, resp) in cases {
        assert!(
            !spec.problems_with(pointer, &resp).is_empty(),
            "the validator missed: {why}"
        );
    }
}
