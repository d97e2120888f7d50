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
