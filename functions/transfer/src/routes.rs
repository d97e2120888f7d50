//! The transfer routes' own work, inside every guard of the crate's stack: the client is
//! verified, its limits counted; here is only what the API does.

use std::sync::Arc;

use http::StatusCode;
use lambda_http::{Body, Request, Response};
use serde::Serialize;
use tollgate::http::json_response;
use tollgate::idempotency::{fingerprint, IdempotencyKey, KeyError, Scope};
use tollgate::layers::{RequestId, RoutePath};
use tollgate::ApiError;
use tollgate_functions::auth::ClientId;

use crate::config::TransferSettings;
use crate::domain::{AccountId, TransferId, TransferRequest};
use crate::ledger::Ledger;
use crate::{TransferError, FUNCTION};

enum Route<'a> {
    Transfers,
    Transfer(&'a str),
    Account(&'a str),
}

/// The methods the route at `path` serves.
pub(crate) fn methods(path: &str) -> Option<&'static str> {
    resolve(path).map(|(_, allow)| allow)
}

/// The routes' own work, after every guard.
#[derive(Debug, Clone)]
pub(crate) struct Routes {
    pub(crate) ledger: Arc<Ledger>,
    pub(crate) settings: Arc<TransferSettings>,
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
    pub(crate) async fn route(&self, req: Request) -> Result<Response<Body>, TransferError> {
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
