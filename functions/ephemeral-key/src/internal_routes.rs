//! `GET|PUT /internal/kill-switch`: the operator's view and flip of a kill switch.
//!
//! These routes ignore the kill switch itself (an operator must be able to turn it off again)
//! and the `global` layer (operator calls spend nothing upstream). Callers without the real
//! internal token are counted by the `ip` layer before being refused with 401, so guessing the
//! token is rate limited like anything else (lesson 002).

use http::{Method, StatusCode};
use lambda_http::{Body, Request, RequestExt, Response};
use serde::Deserialize;
use tollgate::gate::Gate;
use tollgate::http::json_response;
use tollgate::kill_switch::{SetError, MAX_MESSAGE_CHARS};
use tollgate::layers::Caller;
use tollgate::ApiError;
use tollgate_functions::catalog;

/// What `/internal/kill-switch` serves.
pub const METHODS: &str = "GET, PUT";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FlipRequest {
    function: String,
    enabled: bool,
    #[serde(default)]
    message: Option<String>,
}

/// The route's work, inside the client address and the `ip` layer (see the crate's `stack`).
pub async fn kill_switch(gate: &Gate, req: &Request) -> Result<Response<Body>, ApiError> {
    let caller = req.extensions().get::<Caller>().ok_or(ApiError::Internal)?;
    if !caller.internal {
        // Tells a missing or wrong token apart from a secret-store outage (503, not 401).
        gate.require_internal(req).await?;
    }

    let state = if req.method() == Method::GET {
        let function = req
            .query_string_parameters_ref()
            .and_then(|q| q.first("function"))
            .unwrap_or(&gate.settings().function)
            .to_string();
        known_function(&function)?;
        gate.kill_switch()
            .status(&function)
            .await
            .map_err(store_failed)?
    } else {
        let body = gate.body(req)?;
        let flip: FlipRequest = serde_json::from_slice(body).map_err(|_| ApiError::BadRequest {
            detail: "Expected a JSON object {\"function\": string, \"enabled\": boolean, \"message\": string (optional)}.".into(),
        })?;
        known_function(&flip.function)?;
        let state = gate
            .kill_switch()
            .set(&flip.function, flip.enabled, flip.message.as_deref())
            .await
            .map_err(|e| match e {
                SetError::MessageTooLong => ApiError::BadRequest {
                    detail: format!("message must be at most {MAX_MESSAGE_CHARS} characters."),
                },
                SetError::Store(e) => store_failed(e),
            })?;
        tracing::warn!(function = %state.function, enabled = state.enabled, "kill switch flipped through the API");
        state
    };
    Ok(json_response(StatusCode::OK, &state))
}

fn known_function(name: &str) -> Result<(), ApiError> {
    if catalog::function(name).is_some() {
        Ok(())
    } else {
        Err(ApiError::BadRequest {
            detail: format!("function must be one of: {}.", catalog::function_names()),
        })
    }
}

fn store_failed(e: tollgate::kill_switch::ControlStoreError) -> ApiError {
    tracing::error!(error = %e, "control table unavailable");
    ApiError::Unavailable { retry_after: 1 }
}
