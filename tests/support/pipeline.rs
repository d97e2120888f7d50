//! The guard pipeline as a function runs it, over a [`Gate`] built for one test.

use http::StatusCode;
use lambda_http::{Body, Request, Response};
use tollgate::config::{Env, GuardSettings};
use tollgate::gate::Gate;
use tollgate::http::{json_response, respond};
use tollgate::ratelimit::{Admission, Layer};
use tollgate::ApiError;

use crate::dynamo::Tables;

/// Settings for a gate over `tables` with `limits`, plus any extra variables.
pub fn settings(tables: &Tables, limits: &str, extra: &[(&str, &str)]) -> GuardSettings {
    let mut env = Env::from_pairs(tables.env_pairs());
    for (k, v) in extra {
        env.set(*k, *v);
    }
    GuardSettings::from_env(
        &env,
        tollgate_functions::catalog::EPHEMERAL_KEY.name,
        "TEST_RATE_LIMITS",
        limits,
    )
    .expect("test settings are valid")
}

/// Front guards, then the `ip`, `client` (when `client_id` is given, as if verified) and
/// `global` layers; 200 `{"ok": true}` when all pass.
pub async fn guarded(gate: &Gate, req: &Request, client_id: Option<&str>) -> Response<Body> {
    let mut admission = Admission::default();
    let result = run(gate, req, client_id, &mut admission).await;
    respond(result, "req-test", Some(&admission))
}

async fn run(
    gate: &Gate,
    req: &Request,
    client_id: Option<&str>,
    admission: &mut Admission,
) -> Result<Response<Body>, ApiError> {
    let caller = gate.front(req).await?;
    let ip = caller.addr.to_string();
    gate.limit(admission, &caller, &[(Layer::Ip, &ip)]).await?;
    let mut rest = vec![(Layer::Global, "")];
    if let Some(id) = client_id {
        rest.insert(0, (Layer::Client, id));
    }
    gate.limit(admission, &caller, &rest).await?;
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({"ok": true}),
    ))
}
