//! Checks of `openapi.yaml` that need no running function but do need the code, so no linter
//! can make them: the document's error catalogue against the library's errors (each one
//! rendered and validated against its per-code schema), and its transfer request schema against
//! the transfer parser (the same bodies through both). The document's own structure and
//! conventions are Redocly's to check (`lint.rs`, `redocly.yaml`); its responses are checked
//! against what the functions answer by the conformance tests.

use std::collections::BTreeSet;

use ephemeral_key::SessionError;
use serde_json::{json, Value};
use tollgate::ratelimit::Decision;
use tollgate::{ApiError, ClientError};
use transfer::TransferError;

use crate::openapi::spec::spec;

/// Every error a function can send, one of each variant: the shared ones and each function's
/// own.
fn every_api_error() -> Vec<Box<dyn ClientError>> {
    let decision = Decision {
        limit: "ip=10/1h".parse().unwrap(),
        remaining: 0,
        reset_at_ms: 3_600_000,
        now_ms: 2_400_000,
    };
    let shared = vec![
        ApiError::BadRequest {
            detail: "The body must be a JSON object.".into(),
        },
        ApiError::Unauthorized,
        ApiError::Forbidden,
        ApiError::ServiceDisabled {
            message: "Paused.".into(),
        },
        ApiError::NotFound,
        ApiError::MethodNotAllowed { allow: "GET, PUT" },
        ApiError::PayloadTooLarge { limit: 16_384 },
        ApiError::RateLimited(decision),
        ApiError::Unavailable { retry_after: 0 },
        ApiError::OutcomeUnknown { retry_after: 1 },
        ApiError::IdempotencyKeyReused,
        ApiError::RequestInProgress { retry_after: 3 },
        ApiError::Internal,
    ];
    let transfer = vec![
        TransferError::AccountNotFound,
        TransferError::TransferNotFound,
        TransferError::InsufficientFunds,
        TransferError::CurrencyMismatch,
        TransferError::BalanceLimitExceeded,
    ];
    let session = vec![SessionError::Upstream { retry_after: 2 }];
    // No wildcard: a new variant fails to compile here until it is added to a list above.
    for e in &shared {
        match e {
            ApiError::BadRequest { .. }
            | ApiError::Unauthorized
            | ApiError::Forbidden
            | ApiError::ServiceDisabled { .. }
            | ApiError::NotFound
            | ApiError::MethodNotAllowed { .. }
            | ApiError::PayloadTooLarge { .. }
            | ApiError::RateLimited(_)
            | ApiError::Unavailable { .. }
            | ApiError::OutcomeUnknown { .. }
            | ApiError::IdempotencyKeyReused
            | ApiError::RequestInProgress { .. }
            | ApiError::Internal => {}
        }
    }
    for e in &transfer {
        match e {
            // The shared errors are listed above.
            TransferError::Api(_)
            | TransferError::AccountNotFound
            | TransferError::TransferNotFound
            | TransferError::InsufficientFunds
            | TransferError::CurrencyMismatch
            | TransferError::BalanceLimitExceeded => {}
        }
    }
    for e in &session {
        match e {
            SessionError::Api(_) | SessionError::Upstream { .. } => {}
        }
    }
    let mut all: Vec<Box<dyn ClientError>> = Vec::new();
    all.extend(
        shared
            .into_iter()
            .map(|e| Box::new(e) as Box<dyn ClientError>),
    );
    all.extend(
        transfer
            .into_iter()
            .map(|e| Box::new(e) as Box<dyn ClientError>),
    );
    all.extend(
        session
            .into_iter()
            .map(|e| Box::new(e) as Box<dyn ClientError>),
    );
    all
}

#[test]
fn the_error_catalogue_is_the_librarys() {
    let spec = spec();
    let documented: BTreeSet<String> = spec
        .get("/components/schemas/ProblemCode/enum")
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    let schemas = spec.get("/components/schemas").as_object().unwrap();
    let mut produced = BTreeSet::new();
    for error in every_api_error() {
        let resp = error.to_response("req-1");
        let body: Value = serde_json::from_slice(resp.body().as_ref()).unwrap();
        let code = error.code();
        produced.insert(code.to_string());
        spec.validate("/components/schemas/Problem", &body)
            .unwrap_or_else(|e| panic!("{code}: {e}"));
        let (name, _) = schemas
            .iter()
            .find(|(_, s)| s["title"] == code)
            .unwrap_or_else(|| panic!("no per-code problem schema titled {code}"));
        spec.validate(&format!("/components/schemas/{name}"), &body)
            .unwrap_or_else(|e| panic!("{code} against {name}: {e}"));
        assert_eq!(
            resp.headers().contains_key("retry-after"),
            body.get("retry_after").is_some(),
            "{code}"
        );
    }
    assert_eq!(
        produced, documented,
        "ProblemCode lists exactly the library's codes"
    );
}

/// The request schema may be looser than the parser only where JSON Schema cannot see.
#[test]
fn the_transfer_request_schema_agrees_with_the_parser() {
    const MAX: u64 = 1_000_000;
    let op = "POST /transfers";
    let spec = spec();
    // Refused by the parser, accepted by the schema, and why the schema cannot tell.
    let beyond_schema: &[(&str, &str)] = &[
        (r#"{"from":"a","to":"a","amount":1}"#, "from equals to"),
        (
            r#"{"from":"a","to":"b","amount":1,"amount":2}"#,
            "a duplicate member name",
        ),
        (
            r#"{"from":"a","to":"b","amount":1.0}"#,
            "an integer written with a fraction",
        ),
        (
            r#"{"from":"a","to":"b","amount":1e3}"#,
            "an integer written with an exponent",
        ),
        (
            r#"{"from":"a","to":"b","amount":1000001}"#,
            "over MAX_TRANSFER_AMOUNT (configuration)",
        ),
    ];
    let agreeing = [
        json!({"from": "acc_a", "to": "acc_b", "amount": 250, "memo": "rent"}),
        json!({"from": "a", "to": "b", "amount": 1}),
        json!({"from": "a", "to": "b", "amount": 1, "memo": null}),
        json!({"from": "a", "to": "b", "amount": MAX}),
        json!({"from": "a", "to": "b", "amount": 1, "memo": "é".repeat(140)}),
        json!({"from": "a".repeat(64), "to": "b", "amount": 1}),
        json!({"from": "a", "to": "b", "amount": 1, "memo": "é".repeat(141)}),
        json!({"from": "a".repeat(65), "to": "b", "amount": 1}),
        json!({"from": "a b", "to": "b", "amount": 1}),
        json!({"from": "a", "to": "b", "amount": 0}),
        json!({"from": "a", "to": "b", "amount": -5}),
        json!({"from": "a", "to": "b", "amount": 1.5}),
        json!({"from": "a", "to": "b", "amount": "100"}),
        json!({"from": "a", "to": "b", "amount": 1, "fee": 2}),
        json!({"from": "a", "to": "b", "amount": 1, "memo": 7}),
        json!({"to": "b", "amount": 1}),
        json!({"from": "a", "amount": 1}),
        json!({"from": "a", "to": "b"}),
        json!({"from": 1, "to": "b", "amount": 1}),
        json!([1, 2]),
        json!("str"),
        json!(null),
    ];
    for body in &agreeing {
        let text = body.to_string();
        let parser = transfer::domain::TransferRequest::parse(text.as_bytes(), MAX);
        let schema = spec.validate_request(op, body);
        assert_eq!(
            parser.is_ok(),
            schema.is_ok(),
            "{text}: parser {parser:?}, schema {schema:?}"
        );
    }
    for (text, why) in beyond_schema {
        assert!(
            transfer::domain::TransferRequest::parse(text.as_bytes(), MAX).is_err(),
            "{text}: the parser accepts {why}"
        );
        let value: Value = serde_json::from_str(text).unwrap();
        assert!(
            spec.validate_request(op, &value).is_ok(),
            "{text} ({why}) is refused by the schema: move it to the agreeing cases"
        );
    }
}

/// The validator is only worth its green runs if it goes red on drift: each of these responses
/// breaks one rule.
#[test]
fn the_validator_catches_drift() {
    use lambda_http::{Body, Response};

    let spec = spec();
    let response = |status: u16, headers: &[(&str, &str)], body: &str| {
        let mut builder = Response::builder().status(status);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Body::from(body.to_string())).unwrap()
    };
    let problem = |code: &str, status: u16, extra: &str| {
        format!(
            r#"{{"type":"urn:tollgate:problem:{code}","title":"T","status":{status},"detail":"D","code":"{code}","request_id":"r1"{extra}}}"#
        )
    };
    let problem_json = [
        ("content-type", "application/problem+json"),
        ("x-request-id", "r1"),
    ];
    let limited = "/paths/~1transfers/post/responses/429";
    let account = "/paths/~1accounts~1{id}/get/responses/200";

    // A conforming 429 first, so that each case below fails for its own reason only.
    let good_429 = response(
        429,
        &[
            ("content-type", "application/problem+json"),
            ("x-request-id", "r1"),
            ("retry-after", "7"),
            ("ratelimit-policy", "\"client\";q=60;w=60"),
            ("ratelimit", "\"client\";r=0;t=7"),
        ],
        &problem("rate_limited", 429, r#","retry_after":7"#),
    );
    assert_eq!(spec.problems_with(limited, &good_429), Vec::<String>::new());
    let good_204 = response(
        204,
        &[
            ("x-request-id", "r1"),
            ("access-control-allow-origin", "https://app.example.com"),
            ("access-control-allow-methods", "POST"),
            (
                "access-control-allow-headers",
                "Content-Type, Idempotency-Key, Authorization",
            ),
            ("access-control-max-age", "600"),
            ("vary", "Origin"),
        ],
        "",
    );
    let preflight = "/paths/~1session/options/responses/204";
    assert_eq!(
        spec.problems_with(preflight, &good_204),
        Vec::<String>::new()
    );
    let good_cross_origin = response(
        200,
        &[
            ("content-type", "application/json"),
            ("x-request-id", "r1"),
            ("access-control-allow-origin", "https://app.example.com"),
            (
                "access-control-expose-headers",
                "Retry-After, RateLimit, RateLimit-Policy, Idempotent-Replayed, X-Request-Id",
            ),
            ("vary", "Origin"),
        ],
        r#"{"account_id":"acc_a","balance":5,"currency":"JPY"}"#,
    );
    assert_eq!(
        spec.problems_with(account, &good_cross_origin),
        Vec::<String>::new()
    );

    let cases: Vec<(&str, &str, Response<Body>)> = vec![
        (
            "required Retry-After missing",
            limited,
            response(
                429,
                &[
                    ("content-type", "application/problem+json"),
                    ("x-request-id", "r1"),
                    ("ratelimit-policy", "\"client\";q=60;w=60"),
                    ("ratelimit", "\"client\";r=0;t=7"),
                ],
                &problem("rate_limited", 429, r#","retry_after":7"#),
            ),
        ),
        (
            "Retry-After and retry_after differ",
            limited,
            response(
                429,
                &[
                    ("content-type", "application/problem+json"),
                    ("x-request-id", "r1"),
                    ("retry-after", "8"),
                    ("ratelimit-policy", "\"client\";q=60;w=60"),
                    ("ratelimit", "\"client\";r=0;t=7"),
                ],
                &problem("rate_limited", 429, r#","retry_after":7"#),
            ),
        ),
        (
            "a malformed RateLimit field",
            limited,
            response(
                429,
                &[
                    ("content-type", "application/problem+json"),
                    ("x-request-id", "r1"),
                    ("retry-after", "7"),
                    ("ratelimit-policy", "client 60/60"),
                    ("ratelimit", "\"client\";r=0;t=7"),
                ],
                &problem("rate_limited", 429, r#","retry_after":7"#),
            ),
        ),
        (
            "another code than documented for the status",
            limited,
            response(
                429,
                &[
                    ("content-type", "application/problem+json"),
                    ("x-request-id", "r1"),
                    ("retry-after", "7"),
                    ("ratelimit-policy", "\"client\";q=60;w=60"),
                    ("ratelimit", "\"client\";r=0;t=7"),
                ],
                &problem("temporarily_unavailable", 429, r#","retry_after":7"#),
            ),
        ),
        (
            "a problem as application/json",
            "/paths/~1accounts~1{id}/get/responses/404",
            response(
                404,
                &[("content-type", "application/json"), ("x-request-id", "r1")],
                &problem("account_not_found", 404, ""),
            ),
        ),
        (
            "an undocumented member",
            "/paths/~1accounts~1{id}/get/responses/404",
            response(
                404,
                &problem_json,
                &problem("account_not_found", 404, r#","account":"acc_x""#),
            ),
        ),
        (
            "request_id not the X-Request-Id",
            "/paths/~1accounts~1{id}/get/responses/404",
            response(
                404,
                &[
                    ("content-type", "application/problem+json"),
                    ("x-request-id", "r2"),
                ],
                &problem("account_not_found", 404, ""),
            ),
        ),
        (
            "a contract header the response does not document",
            account,
            response(
                200,
                &[
                    ("content-type", "application/json"),
                    ("x-request-id", "r1"),
                    ("retry-after", "1"),
                ],
                r#"{"account_id":"acc_a","balance":5,"currency":"JPY"}"#,
            ),
        ),
        (
            "Access-Control-Allow-Origin: *",
            account,
            response(
                200,
                &[
                    ("content-type", "application/json"),
                    ("x-request-id", "r1"),
                    ("access-control-allow-origin", "*"),
                ],
                r#"{"account_id":"acc_a","balance":5,"currency":"JPY"}"#,
            ),
        ),
        (
            "Access-Control-Allow-Credentials",
            account,
            response(
                200,
                &[
                    ("content-type", "application/json"),
                    ("x-request-id", "r1"),
                    ("access-control-allow-origin", "https://app.example.com"),
                    ("access-control-allow-credentials", "true"),
                ],
                r#"{"account_id":"acc_a","balance":5,"currency":"JPY"}"#,
            ),
        ),
        (
            "Access-Control-Expose-Headers without Retry-After",
            account,
            response(
                200,
                &[
                    ("content-type", "application/json"),
                    ("x-request-id", "r1"),
                    ("access-control-expose-headers", "RateLimit, X-Request-Id"),
                ],
                r#"{"account_id":"acc_a","balance":5,"currency":"JPY"}"#,
            ),
        ),
        (
            "preflight headers on an ordinary response",
            account,
            response(
                200,
                &[
                    ("content-type", "application/json"),
                    ("x-request-id", "r1"),
                    ("access-control-allow-methods", "GET"),
                ],
                r#"{"account_id":"acc_a","balance":5,"currency":"JPY"}"#,
            ),
        ),
        (
            "a preflight answer with a body",
            preflight,
            response(
                204,
                &[
                    ("x-request-id", "r1"),
                    ("access-control-allow-origin", "https://app.example.com"),
                    ("access-control-allow-methods", "POST"),
                    (
                        "access-control-allow-headers",
                        "Content-Type, Idempotency-Key, Authorization",
                    ),
                    ("access-control-max-age", "600"),
                    ("vary", "Origin"),
                ],
                "{}",
            ),
        ),
        (
            "a preflight answer naming other methods",
            preflight,
            response(
                204,
                &[
                    ("x-request-id", "r1"),
                    ("access-control-allow-origin", "https://app.example.com"),
                    ("access-control-allow-methods", "GET, POST"),
                    (
                        "access-control-allow-headers",
                        "Content-Type, Idempotency-Key, Authorization",
                    ),
                    ("access-control-max-age", "600"),
                    ("vary", "Origin"),
                ],
                "",
            ),
        ),
        (
            "a negative balance",
            account,
            response(
                200,
                &[("content-type", "application/json"), ("x-request-id", "r1")],
                r#"{"account_id":"acc_a","balance":-5,"currency":"JPY"}"#,
            ),
        ),
        (
            "X-Request-Id missing",
            account,
            response(
                200,
                &[("content-type", "application/json")],
                r#"{"account_id":"acc_a","balance":5,"currency":"JPY"}"#,
            ),
        ),
        (
            "created_at not a date-time",
            "/paths/~1transfers~1{id}/get/responses/200",
            response(
                200,
                &[("content-type", "application/json"), ("x-request-id", "r1")],
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
