//! The `transfer` function: money transfers that a retry can never repeat.
//!
//! Routes (after `BASE_PATH` is stripped):
//! - `POST /transfers` — `Idempotency-Key` required; see [`ledger`] for the transaction.
//! - `GET /transfers/{id}` — visible to the client that made it.
//! - `GET /accounts/{id}` — visible to its owner.
//!
//! Every route runs, in order: kill switch, client address, `ip` layer, authentication
//! (`Authorization: Bearer`; failures are already counted by the `ip` layer), `client` and
//! `global` layers on the verified client id, then its own validation and work. A CORS preflight
//! from a listed origin gets its 204 before all of them (`tollgate_functions::serve::Function::handle`).
//!
//! Its names (function, limits variable, idempotency route, tables) are the catalog's
//! ([`tollgate_functions::catalog::TRANSFER`]); what only it answers (`insufficient_funds`,
//! `account_not_found`, ...) is [`TransferError`], rendered by the shared `ClientError`.

pub mod config;
pub mod domain;
pub mod error;
pub mod ledger;

use http::StatusCode;
use lambda_http::{Body, Request, Response};
use serde::Serialize;
use tollgate::config::ConfigError;
use tollgate::gate::Gate;
use tollgate::http::json_response;
use tollgate::idempotency::{fingerprint, IdempotencyKey, KeyError, Scope};
use tollgate::ratelimit::{Admission, Layer};
use tollgate::ApiError;
use tollgate_functions::catalog;
use tollgate_functions::clients::{bearer_token, ClientStore};
use tollgate_functions::serve::Parts;

pub use crate::error::TransferError;

use crate::config::TransferSettings;
use crate::domain::{AccountId, TransferId, TransferRequest};
use crate::ledger::Ledger;

/// The function's names: kill-switch key, rate-limit scope, limits variable, idempotency route.
pub const FUNCTION: &catalog::Function = &catalog::TRANSFER;

/// Everything a request needs, built once per process.
#[derive(Debug)]
pub struct App {
    pub gate: Gate,
    pub settings: TransferSettings,
    pub clients: ClientStore,
    pub ledger: Ledger,
}

enum Route<'a> {
    Transfers,
    Transfer(&'a str),
    Account(&'a str),
}

impl tollgate_functions::serve::Function for App {
    const FUNCTION: &'static catalog::Function = FUNCTION;
    type Error = TransferError;

    fn build(parts: Parts<'_>) -> Result<Self, ConfigError> {
        let settings = TransferSettings::from_env(parts.env)?;
        let idempotency =
            parts.idempotency(&settings.idempotency_table, settings.idempotency_ttl)?;
        Ok(Self {
            clients: ClientStore::new(
                parts.ddb.clone(),
                &settings.clients_table,
                parts.clock.clone(),
                settings.token_cache,
            ),
            ledger: Ledger::new(
                parts.ddb,
                &settings.accounts_table,
                &settings.transfers_table,
                idempotency,
                parts.clock,
                &settings.default_currency,
                &parts.gate.settings().base_path,
            ),
            gate: parts.gate,
            settings,
        })
    }

    fn gate(&self) -> &Gate {
        &self.gate
    }

    fn methods(path: &str) -> Option<&'static str> {
        resolve(path).map(|(_, allow)| allow)
    }

    async fn route(
        &self,
        req: &Request,
        request_id: &str,
        admission: &mut Admission,
    ) -> Result<Response<Body>, TransferError> {
        let path = self.gate.route_path(req).ok_or(ApiError::NotFound)?;
        let (route, allow) = resolve(path).ok_or(ApiError::NotFound)?;
        if req.method().as_str() != allow {
            return Err(ApiError::MethodNotAllowed { allow }.into());
        }
        self.gate.body(req)?;
        let client_id = self.authenticated(req, admission).await?;
        match route {
            Route::Transfers => self.post_transfer(req, &client_id, request_id).await,
            Route::Transfer(id) => self.get_transfer(id, &client_id).await,
            Route::Account(id) => self.get_account(id, &client_id).await,
        }
    }
}

/// The route at `path` and the one method it serves.
fn resolve(path: &str) -> Option<(Route<'_>, &'static str)> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["transfers"] => Some((Route::Transfers, "POST")),
        ["transfers", id] if !id.is_empty() => Some((Route::Transfer(id), "GET")),
        ["accounts", id] if !id.is_empty() => Some((Route::Account(id), "GET")),
        _ => None,
    }
}

impl App {
    /// Kill switch, address, `ip` layer, bearer token, `client` and `global` layers.
    async fn authenticated(
        &self,
        req: &Request,
        admission: &mut Admission,
    ) -> Result<String, TransferError> {
        let caller = self.gate.front(req).await?;
        let ip = caller.addr.to_string();
        let token = bearer_token(req.headers().get(http::header::AUTHORIZATION));
        // A client this process has verified, refused by a layer known to be full: answered
        // before the `ip` increment (and its refund), so the flood costs no DynamoDB request.
        // Any other token is counted in `ip` first, so failed authentications stay limited.
        if let Some(client_id) = token.as_ref().and_then(|t| self.clients.cached(t)) {
            let layers = [
                (Layer::Ip, ip.as_str()),
                (Layer::Client, &client_id),
                (Layer::Global, ""),
            ];
            self.gate.refuse_if_blocked(&caller, &layers)?;
        }
        self.gate
            .limit(admission, &caller, &[(Layer::Ip, &ip)])
            .await?;
        let token = token.ok_or(ApiError::Unauthorized)?;
        let client_id = self
            .clients
            .authenticate(&token)
            .await?
            .ok_or(ApiError::Unauthorized)?;
        self.gate
            .limit(
                admission,
                &caller,
                &[(Layer::Client, &client_id), (Layer::Global, "")],
            )
            .await?;
        Ok(client_id)
    }

    async fn post_transfer(
        &self,
        req: &Request,
        client_id: &str,
        request_id: &str,
    ) -> Result<Response<Body>, TransferError> {
        let key = IdempotencyKey::from_headers(req.headers())?.ok_or(KeyError::Missing)?;
        let body = self.gate.body(req)?;
        let transfer = TransferRequest::parse(body, self.settings.max_amount)?;
        let scope = Scope::new(client_id, FUNCTION.route, &key);
        let fingerprint = fingerprint(&transfer.canonical);
        self.ledger
            .transfer(client_id, &scope, &fingerprint, &transfer, request_id)
            .await
    }

    async fn get_transfer(
        &self,
        id: &str,
        client_id: &str,
    ) -> Result<Response<Body>, TransferError> {
        // Only an id of the shape we mint can exist; see `TransferId`.
        let Some(id) = TransferId::parse(id) else {
            return Err(TransferError::TransferNotFound);
        };
        match self.ledger.transfer_record(id.as_str()).await? {
            Some((transfer, owner)) if owner == client_id => {
                Ok(json_response(StatusCode::OK, &transfer))
            }
            _ => Err(TransferError::TransferNotFound),
        }
    }

    async fn get_account(
        &self,
        id: &str,
        client_id: &str,
    ) -> Result<Response<Body>, TransferError> {
        #[derive(Serialize)]
        struct View<'a> {
            account_id: &'a str,
            balance: u64,
            currency: &'a str,
        }
        if AccountId::parse(id).is_none() {
            return Err(TransferError::AccountNotFound);
        }
        match self.ledger.account(id).await? {
            // Another client's account is reported as missing: no existence oracle.
            Some(a) if a.client_id == client_id => Ok(json_response(
                StatusCode::OK,
                &View {
                    account_id: &a.account_id,
                    balance: a.balance,
                    currency: &a.currency,
                },
            )),
            _ => Err(TransferError::AccountNotFound),
        }
    }
}
