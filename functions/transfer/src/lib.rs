//! The `transfer` function: money transfers that a retry can never repeat.
//!
//! Routes (after `BASE_PATH` is stripped):
//! - `POST /transfers` — `Idempotency-Key` required; see [`ledger`] for the transaction.
//! - `GET /transfers/{id}` — visible to the client that made it.
//! - `GET /accounts/{id}` — visible to its owner.
//!
//! Every route runs the one stack that `stack` assembles from the guard crate's layers, read
//! top to bottom: kill switch, client address, `ip` layer, authentication (`Authorization:
//! Bearer`; failures are already counted by the `ip` layer), `client` and `global` layers on the
//! verified client id, then its own validation and work. A CORS preflight from a listed origin,
//! and a request for no route, are answered before all of them.
//!
//! Its names (function, limits variable, idempotency route, tables) are the catalog's
//! ([`tollgate_functions::catalog::TRANSFER`]); what only it answers (`insufficient_funds`,
//! `account_not_found`, ...) is [`TransferError`], rendered by the shared `ClientError`.

pub mod config;
pub mod domain;
pub mod error;
pub mod ledger;

use std::sync::Arc;

use http::StatusCode;
use lambda_http::{Body, Request, Response};
use serde::Serialize;
use tollgate::config::ConfigError;
use tollgate::gate::Gate;
use tollgate::http::json_response;
use tollgate::idempotency::{fingerprint, IdempotencyKey, KeyError, Scope};
use tollgate::layers::{
    handler_fn, ClientAddress, Global, Methods, RequestId, RoutePath, Verified,
};
use tollgate::ratelimit::Layer;
use tollgate::ApiError;
use tollgate_functions::auth::{AuthenticateLayer, ClientId, KnownClient};
use tollgate_functions::catalog;
use tollgate_functions::clients::ClientStore;
use tollgate_functions::serve::{Parts, Stack};
use tower::ServiceBuilder;

pub use crate::error::TransferError;

use crate::config::TransferSettings;
use crate::domain::{AccountId, TransferId, TransferRequest};
use crate::ledger::Ledger;

/// The function's names: kill-switch key, rate-limit scope, limits variable, idempotency route.
pub const FUNCTION: &catalog::Function = &catalog::TRANSFER;

/// Everything a request needs, built once per process.
#[derive(Debug)]
pub struct App {
    pub gate: Arc<Gate>,
    pub settings: Arc<TransferSettings>,
    pub clients: Arc<ClientStore>,
    pub ledger: Arc<Ledger>,
    service: Stack,
}

enum Route<'a> {
    Transfers,
    Transfer(&'a str),
    Account(&'a str),
}

impl tollgate_functions::serve::Function for App {
    const FUNCTION: &'static catalog::Function = FUNCTION;

    fn build(parts: Parts<'_>) -> Result<Self, ConfigError> {
        let settings = Arc::new(TransferSettings::from_env(parts.env)?);
        let idempotency =
            parts.idempotency(&settings.idempotency_table, settings.idempotency_ttl)?;
        let clients = Arc::new(ClientStore::new(
            parts.ddb.clone(),
            &settings.clients_table,
            parts.clock.clone(),
            settings.token_cache,
        ));
        let ledger = Arc::new(Ledger::new(
            parts.ddb,
            &settings.accounts_table,
            &settings.transfers_table,
            idempotency,
            parts.clock,
            &settings.default_currency,
            &parts.gate.settings().base_path,
        ));
        let gate = Arc::new(parts.gate);
        let routes = Routes {
            ledger: ledger.clone(),
            settings: settings.clone(),
        };
        let service = stack(&gate, &clients, routes);
        Ok(Self {
            gate,
            settings,
            clients,
            ledger,
            service,
        })
    }

    fn gate(&self) -> &Gate {
        &self.gate
    }

    fn service(&self) -> Stack {
        self.service.clone()
    }
}

/// Every route's guards, in order (see the crate doc): a request for no route, and a CORS
/// preflight, are answered before the kill switch; the address is counted before the token is
/// checked, so failed authentications are limited; the client's limits count only a verified
/// client.
fn stack(gate: &Gate, clients: &Arc<ClientStore>, routes: Routes) -> Stack {
    let known = KnownClient(clients.clone());
    let knows = known.clone();
    Stack::new(
        ServiceBuilder::new()
            .layer(gate.respond_layer())
            .layer(gate.cors_layer(Methods(methods)))
            .layer(gate.routes_layer(Methods(methods)))
            .layer(gate.kill_switch_layer())
            .layer(gate.client_address_layer())
            // A client this process has verified, refused by a layer known to be full: answered
            // before the `ip` increment (and its refund), so the flood costs no DynamoDB
            // request. Any other token is counted in `ip` first.
            .layer(
                gate.rate_limit_layer()
                    .known_full_only()
                    .only_if(move |req| knows.knows(req))
                    .limit(gate.rate_limit(Layer::Ip), ClientAddress)
                    .limit(gate.rate_limit(Layer::Client), known)
                    .limit(gate.rate_limit(Layer::Global), Global),
            )
            .layer(
                gate.rate_limit_layer()
                    .limit(gate.rate_limit(Layer::Ip), ClientAddress),
            )
            .layer(AuthenticateLayer::new(clients.clone()))
            .layer(
                gate.rate_limit_layer()
                    .limit(gate.rate_limit(Layer::Client), Verified::<ClientId>::new())
                    .limit(gate.rate_limit(Layer::Global), Global),
            )
            .service(handler_fn(move |req: Request| {
                let routes = routes.clone();
                async move { routes.route(req).await }
            })),
    )
}

/// The methods the route at `path` serves.
fn methods(path: &str) -> Option<&'static str> {
    resolve(path).map(|(_, allow)| allow)
}

/// The routes' own work, after every guard.
#[derive(Debug, Clone)]
struct Routes {
    ledger: Arc<Ledger>,
    settings: Arc<TransferSettings>,
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

impl Routes {
    async fn route(&self, req: Request) -> Result<Response<Body>, TransferError> {
        let extensions = req.extensions();
        let (Some(RoutePath(path)), Some(ClientId(client_id)), Some(RequestId(request_id))) = (
            extensions.get::<RoutePath>(),
            extensions.get::<ClientId>(),
            extensions.get::<RequestId>(),
        ) else {
            tracing::error!(
                "the transfer routes run inside the routes, authentication and respond layers"
            );
            return Err(ApiError::Internal.into());
        };
        match resolve(path).ok_or(ApiError::NotFound)?.0 {
            Route::Transfers => self.post_transfer(&req, client_id, request_id).await,
            Route::Transfer(id) => self.get_transfer(id, client_id).await,
            Route::Account(id) => self.get_account(id, client_id).await,
        }
    }

    async fn post_transfer(
        &self,
        req: &Request,
        client_id: &str,
        request_id: &str,
    ) -> Result<Response<Body>, TransferError> {
        let key = IdempotencyKey::from_headers(req.headers())?.ok_or(KeyError::Missing)?;
        let transfer = TransferRequest::parse(req.body().as_ref(), self.settings.max_amount)?;
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
