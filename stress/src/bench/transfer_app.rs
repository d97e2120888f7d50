//! Every use the bench makes of the transfer function's `App` and of its ledger, in one place:
//! building it from an environment, seeding a client and accounts, the two calls that are
//! measured (the ledger's transfer after parsing, for part 1; the function's whole request
//! path, for the floor), and what the bare transaction borrows from it (the idempotency
//! record's `Put`, the 201 it stores, the ledger's own items). When the function's API changes, this file follows it
//! and the parts that measure do not.

use std::sync::Arc;

use aws_sdk_dynamodb::types::TransactWriteItem;
use secrecy::ExposeSecret;
use tollgate::clock::{SharedClock, SystemClock};
use tollgate::config::Env;
use tollgate::idempotency::{fingerprint, IdempotencyKey, Scope, StoredResponse};
use tollgate_functions::serve::GuardedFunction;
use transfer::domain::TransferRequest;
use transfer::ledger::Transfer;
use transfer::App;

use super::BenchError;

/// The route the transfer function scopes its idempotency keys to.
pub const ROUTE: &str = transfer::FUNCTION.route;
/// The variable holding the transfer function's rate limits.
pub const LIMITS_VARIABLE: &str = transfer::FUNCTION.limits_variable;

/// The transfer function as its entry point builds it, from `env`, on the system clock, without
/// SSM (nothing it reads on these paths lives there).
pub fn build(env: &Env, ddb: aws_sdk_dynamodb::Client) -> Result<App, BenchError> {
    let clock: SharedClock = Arc::new(SystemClock);
    App::from_env(env, ddb, None, clock)
        .map_err(|e| BenchError::Setup(format!("the transfer app: {e}")))
}

/// A new client of the function: its id and bearer token.
pub async fn client(app: &App, name: &str) -> Result<(String, String), BenchError> {
    let c = app
        .clients
        .create(name)
        .await
        .map_err(|e| BenchError::Setup(format!("a client: {e}")))?;
    Ok((c.client_id, c.token.expose_secret().to_string()))
}

/// A new JPY account of `client_id` holding `balance`: its id.
pub async fn account(app: &App, client_id: &str, balance: u64) -> Result<String, BenchError> {
    app.ledger
        .create_account(client_id, balance, "JPY")
        .await
        .map(|a| a.account_id)
        .map_err(|e| BenchError::Setup(format!("an account: {e}")))
}

/// Part 1: one `POST /transfers` as the function does it after authentication: parse, scope,
/// fingerprint, `Ledger::transfer`. The status, or `None` (logged) on an error.
pub async fn ledger_transfer(app: &App, client_id: &str, key: &str, body: &str) -> Option<u16> {
    let req = TransferRequest::parse(body.as_bytes(), u64::MAX).ok()?;
    let key = IdempotencyKey::parse(Some(key.as_bytes())).ok()?;
    let scope = Scope::new(client_id, ROUTE, &key);
    let fp = fingerprint(&req.canonical);
    match app
        .ledger
        .transfer(client_id, &scope, &fp, &req, "bench")
        .await
    {
        Ok(resp) => Some(resp.status().as_u16()),
        Err(e) => {
            eprintln!("transfer failed: {e:?}");
            None
        }
    }
}

/// `body` as the function parses it, and the fingerprint it computes.
pub fn parse(body: &str) -> Result<(TransferRequest, String), BenchError> {
    let req = TransferRequest::parse(body.as_bytes(), u64::MAX)
        .map_err(|e| BenchError::Setup(format!("the bench's transfer body: {e:?}")))?;
    let fp = fingerprint(&req.canonical);
    Ok((req, fp))
}

/// The idempotency record's `Put` exactly as the ledger's transaction carries it (the
/// library's record layout and claim condition), for `key` of `client_id`, storing `response`,
/// expiring after the store's TTL; with the key's scope, whose `pk` the transfer record points
/// back to.
pub fn record_put(
    app: &App,
    client_id: &str,
    key: &str,
    fingerprint: &str,
    response: &StoredResponse,
) -> Result<(TransactWriteItem, Scope), BenchError> {
    let key = IdempotencyKey::parse(Some(key.as_bytes()))
        .map_err(|e| BenchError::Setup(format!("an idempotency key: {e:?}")))?;
    let scope = Scope::new(client_id, ROUTE, &key);
    let store = app.ledger.idempotency();
    let put = store.completed_put(&scope, fingerprint, response, store.expires_at());
    Ok((put, scope))
}

/// The transfer the ledger records for `req` under `transfer_id`.
pub fn transfer(transfer_id: &str, req: &TransferRequest, created_at: String) -> Transfer {
    Transfer {
        transfer_id: transfer_id.to_string(),
        from: req.from.to_string(),
        to: req.to.to_string(),
        amount: req.amount.get(),
        memo: req.memo.clone(),
        created_at,
    }
}

/// The 201 the ledger stores for `transfer` (its JSON body and `Location`), as stored.
pub fn stored_created(transfer: &Transfer) -> StoredResponse {
    let mut created = tollgate::http::json_response(http::StatusCode::CREATED, transfer);
    let location = format!("/transfers/{}", transfer.transfer_id);
    if let Ok(location) = http::HeaderValue::from_str(&location) {
        created
            .headers_mut()
            .insert(http::header::LOCATION, location);
    }
    StoredResponse::capture(&created)
}
