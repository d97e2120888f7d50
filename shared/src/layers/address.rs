//! [`ClientAddressLayer`]: who is calling, established before any limit: the client address
//! (the peer's, or CloudFront's viewer address behind a verified origin secret; IPv6 per /64),
//! and whether the request carries the real internal token.

use std::sync::Arc;

use lambda_http::{Body, Request, Response};
use secrecy::SecretString;
use tower_layer::Layer;

use super::{reject, Guard, Guarded};
use crate::client_addr::{self, ClientAddr, ClientIpSource};
use crate::config::SecretSource;
use crate::internal::{is_internal_token, INTERNAL_TOKEN_HEADER};
use crate::problem::ApiError;
use crate::secrets::{SecretError, SecretStore};

/// Who is calling, in the request's extensions once [`ClientAddressLayer`] has run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// The counted address: IPv4, or the IPv6 /64.
    pub addr: ClientAddr,
    /// The request carried the real internal token (our own services: not counted per
    /// address or identity, see [`super::ClientAddress`]).
    pub internal: bool,
}

/// Where the client address comes from, and the secrets that establish it.
#[derive(Debug, Clone)]
pub struct ClientAddressSource {
    source: ClientIpSource,
    origin_secret: Option<SecretSource>,
    internal_token: Option<SecretSource>,
    secrets: Arc<SecretStore>,
}

impl ClientAddressSource {
    /// The peer's address (`ClientIpSource::Peer`), or CloudFront's `CloudFront-Viewer-Address`
    /// on requests whose `X-Origin-Verify` matches `origin_secret` (`Cloudfront`: without the
    /// secret every request is refused). `X-Forwarded-For` is never read. `internal_token`:
    /// the secret our own services present in `X-Internal-Token` (none: no internal callers).
    pub fn new(
        source: ClientIpSource,
        origin_secret: Option<SecretSource>,
        internal_token: Option<SecretSource>,
        secrets: Arc<SecretStore>,
    ) -> Self {
        Self {
            source,
            origin_secret,
            internal_token,
            secrets,
        }
    }

    /// The caller of `req`: its address, then whether it is internal.
    pub async fn caller(&self, req: &Request) -> Result<Caller, ApiError> {
        let addr = self.addr(req).await?;
        let internal = self.is_internal(req).await;
        Ok(Caller { addr, internal })
    }

    /// The client address of `req`.
    pub async fn addr(&self, req: &Request) -> Result<ClientAddr, ApiError> {
        let secret = match self.source {
            ClientIpSource::Peer => None,
            ClientIpSource::Cloudfront => match &self.origin_secret {
                Some(source) => Some(self.secrets.get(source).await?),
                None => return Err(ApiError::Internal),
            },
        };
        Ok(client_addr::resolve(req, self.source, secret.as_ref())?)
    }

    /// Whether `req` carries the real internal token. Requests without the header never cost a
    /// secret lookup; when the token cannot be loaded the request is treated as an ordinary one
    /// (counted), which is the safe side.
    pub async fn is_internal(&self, req: &Request) -> bool {
        match self.internal_token(req).await {
            Ok(Some((presented, expected))) => is_internal_token(Some(&presented), &expected),
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(error = %e, "internal token unavailable; treating the request as external");
                false
            }
        }
    }

    /// For internal routes: Ok only with the real internal token; 401 otherwise. A token that
    /// cannot be loaded gives 503/500, so an SSM outage is not reported as bad credentials.
    pub async fn require_internal(&self, req: &Request) -> Result<(), ApiError> {
        match self.internal_token(req).await? {
            Some((presented, expected)) if is_internal_token(Some(&presented), &expected) => Ok(()),
            _ => Err(ApiError::Unauthorized),
        }
    }

    async fn internal_token(
        &self,
        req: &Request,
    ) -> Result<Option<(String, SecretString)>, SecretError> {
        let Some(presented) = req
            .headers()
            .get(INTERNAL_TOKEN_HEADER)
            .and_then(|v| v.to_str().ok())
        else {
            return Ok(None);
        };
        let Some(source) = &self.internal_token else {
            return Ok(None);
        };
        let expected = self.secrets.get(source).await?;
        Ok(Some((presented.to_string(), expected)))
    }
}

/// Puts the [`Caller`] in the request's extensions, or refuses a request with no trustworthy
/// address (see the [module table](super)).
#[derive(Debug, Clone)]
pub struct ClientAddressLayer {
    source: Arc<ClientAddressSource>,
}

impl ClientAddressLayer {
    /// Establishes callers from `source`.
    pub fn new(source: Arc<ClientAddressSource>) -> Self {
        Self { source }
    }
}

impl<S> Layer<S> for ClientAddressLayer {
    type Service = Guarded<Self, S>;

    fn layer(&self, inner: S) -> Self::Service {
        Guarded::new(self.clone(), inner)
    }
}

impl Guard for ClientAddressLayer {
    async fn admit(&self, req: &mut Request) -> Result<(), Response<Body>> {
        match self.source.caller(req).await {
            Ok(caller) => {
                req.extensions_mut().insert(caller);
                Ok(())
            }
            Err(e) => Err(reject(req, &e)),
        }
    }
}
