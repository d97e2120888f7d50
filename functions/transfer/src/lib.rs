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
mod routes;

use std::sync::Arc;

use lambda_http::Request;
use tollgate::config::ConfigError;
use tollgate::gate::Gate;
use tollgate::layers::{handler_fn, ClientAddress, Global, Methods, Verified};
use tollgate::ratelimit::Layer;
use tollgate_functions::auth::{AuthenticateLayer, ClientId, KnownClient};
use tollgate_functions::catalog;
use tollgate_functions::clients::ClientStore;
use tollgate_functions::serve::{Parts, ServiceStack};
use tower::ServiceBuilder;

pub use crate::error::TransferError;

use crate::config::TransferSettings;
use crate::ledger::Ledger;
use crate::routes::{methods, Routes};

/// The function's names: kill-switch key, rate-limit scope, limits variable, idempotency route.
pub const FUNCTION: &catalog::Function = &catalog::TRANSFER;

/// Everything a request needs, built once per process.
#[derive(Debug)]
pub struct App {
    pub gate: Arc<Gate>,
    pub settings: Arc<TransferSettings>,
    pub clients: Arc<ClientStore>,
    pub ledger: Arc<Ledger>,
    service: ServiceStack,
}

impl tollgate_functions::serve::GuardedFunction for App {
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

    fn service(&self) -> ServiceStack {
        self.service.clone()
    }
}

/// Every route's guards, in order (see the crate doc): a request for no route, and a CORS
/// preflight, are answered before the kill switch; the address is counted before the token is
/// checked, so failed authentications are limited; the client's limits count only a verified
/// client.
fn stack(gate: &Gate, clients: &Arc<ClientStore>, routes: Routes) -> ServiceStack {
    let known = KnownClient(clients.clone());
    let knows = known.clone();
    ServiceStack::new(
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
