//! Bearer-token authentication of the transfer API's clients, as layers: [`AuthenticateLayer`]
//! verifies the token and puts the [`ClientId`] in the request's extensions (so a
//! `Verified<ClientId>` limit counts only verified clients), and [`KnownClient`] keys a limit by a
//! client this process has already verified, from memory, ahead of authentication.

use std::sync::Arc;

use lambda_http::{Body, Request, Response};
use tollgate::layers::{reject, Caller, Guard, Guarded, Identity, KeyExtractor, MissingExtension};
use tollgate::ApiError;
use tower::Layer;

use crate::clients::{bearer_token, ClientStore};

/// A client id whose bearer token was checked against the clients table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientId(pub String);

impl Identity for ClientId {
    fn id(&self) -> &str {
        &self.0
    }
}

/// The client of the request's bearer token when this process has verified that token before
/// (the client store's cache): no I/O, so a limit can refuse a known client whose layer is full
/// before its address is counted. Any other request gives no key.
#[derive(Debug, Clone)]
pub struct KnownClient(pub Arc<ClientStore>);

impl KnownClient {
    /// Whether `req` comes from a client this process has verified.
    pub fn knows(&self, req: &Request) -> bool {
        self.client(req).is_some()
    }

    fn client(&self, req: &Request) -> Option<String> {
        let token = bearer_token(req.headers().get(http::header::AUTHORIZATION))?;
        self.0.cached(&token)
    }
}

impl KeyExtractor for KnownClient {
    fn key(&self, req: &Request) -> Result<Option<String>, MissingExtension> {
        // Internal callers are not counted per client (as `Verified`).
        if req.extensions().get::<Caller>().is_some_and(|c| c.internal) {
            return Ok(None);
        }
        Ok(self.client(req))
    }
}

/// 401 without a valid `Authorization: Bearer` token; 503 when the clients table fails. Place
/// it inside the address limit, so failed authentications are counted (lesson 002).
#[derive(Debug, Clone)]
pub struct AuthenticateLayer {
    clients: Arc<ClientStore>,
}

impl AuthenticateLayer {
    /// Authenticates against `clients`.
    pub fn new(clients: Arc<ClientStore>) -> Self {
        Self { clients }
    }
}

impl<S> Layer<S> for AuthenticateLayer {
    type Service = Guarded<Self, S>;

    fn layer(&self, inner: S) -> Self::Service {
        Guarded::new(self.clone(), inner)
    }
}

impl Guard for AuthenticateLayer {
    async fn admit(&self, req: &mut Request) -> Result<(), Response<Body>> {
        let Some(token) = bearer_token(req.headers().get(http::header::AUTHORIZATION)) else {
            return Err(reject(req, &ApiError::Unauthorized));
        };
        match self.clients.authenticate(&token).await {
            Ok(Some(id)) => {
                req.extensions_mut().insert(ClientId(id));
                Ok(())
            }
            Ok(None) => Err(reject(req, &ApiError::Unauthorized)),
            Err(e) => Err(reject(req, &ApiError::from(e))),
        }
    }
}
