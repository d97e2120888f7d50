//! [`Guard`]: a layer that only decides before the inner service runs (let the request
//! through, perhaps with what it learnt in the extensions, or answer it), written once as a
//! tower service ([`Guarded`]), so each such guard is its decision alone.

use std::future::Future;
use std::task::{Context, Poll};

use lambda_http::{Body, Request, Response};
use tower_service::Service;

use super::{take_ready, ResponseFuture};

/// A guard that decides before the inner service: `Ok(())` lets the request through (the guard
/// may have added extensions), `Err(response)` answers it instead (a [`super::reject`]ed
/// problem, usually). Implement it for a guard of your own and wrap it with
/// [`GuardLayer::new`]; the crate's kill switch, client address, routes and check layers are
/// guards too.
///
/// # Example: authentication, then a limit per verified tenant
///
/// A guard that verifies the caller's API key and puts the tenant it belongs to in the
/// request's extensions, for a [`super::Verified`] limit inside it. The address limit stays
/// outside, so failed attempts are counted too.
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::Arc;
///
/// use lambda_http::{Body, Request, Response};
/// use tollgate::gate::Gate;
/// use tollgate::layers::{
///     handler_fn, reject, ClientAddress, Guard, GuardLayer, Identity, Methods, Verified,
/// };
/// use tollgate::ratelimit::{Layer, RateLimit};
/// use tollgate::ApiError;
/// use tower::ServiceBuilder;
///
/// /// Who the key belongs to, once checked: the key a `Verified<Tenant>` limit counts under.
/// #[derive(Clone)]
/// struct Tenant(String);
///
/// impl Identity for Tenant {
///     fn id(&self) -> &str {
///         &self.0
///     }
/// }
///
/// /// API keys by their SHA-256 (stored hashed, looked up by hash).
/// #[derive(Clone)]
/// struct ApiKeys(Arc<HashMap<String, Tenant>>);
///
/// impl Guard for ApiKeys {
///     async fn admit(&self, req: &mut Request) -> Result<(), Response<Body>> {
///         let key = req.headers().get("x-api-key").map(|v| v.as_bytes());
///         let hash = key.map(|k| hex::encode(sha2::Sha256::digest(k)));
///         match hash.and_then(|h| self.0.get(&h)) {
///             Some(tenant) => {
///                 req.extensions_mut().insert(tenant.clone());
///                 Ok(())
///             }
///             // 401, problem+json; the address limit outside has already counted it.
///             None => Err(reject(req, &ApiError::Unauthorized)),
///         }
///     }
/// }
/// # use sha2::Digest;
///
/// fn methods(path: &str) -> Option<&'static str> {
///     (path == "/reports").then_some("POST")
/// }
///
/// async fn report(_req: Request) -> Result<Response<Body>, ApiError> {
///     Ok(Response::new(Body::from("queued")))
/// }
///
/// fn stack(gate: &Gate, keys: ApiKeys) -> impl tower::Service<Request> {
///     let per_tenant = RateLimit::new(Layer::Client, 100, std::time::Duration::from_secs(60));
///     ServiceBuilder::new()
///         .layer(gate.respond_layer())
///         .layer(gate.routes_layer(Methods(methods)))
///         .layer(gate.kill_switch_layer())
///         .layer(gate.client_address_layer())
///         .layer(gate.rate_limit_layer().limit(gate.rate_limit(Layer::Ip), ClientAddress))
///         .layer(GuardLayer::new(keys)) // 401 unless the key is known
///         .layer(gate.rate_limit_layer().limit(per_tenant.ok(), Verified::<Tenant>::new()))
///         .service(handler_fn(report))
/// }
/// ```
pub trait Guard: Clone + Send + Sync + 'static {
    /// The decision for `req`.
    fn admit(&self, req: &mut Request) -> impl Future<Output = Result<(), Response<Body>>> + Send;
}

/// Any [`Guard`] as a layer.
#[derive(Debug, Clone)]
pub struct GuardLayer<G>(G);

impl<G: Guard> GuardLayer<G> {
    /// `guard` as a layer.
    pub fn new(guard: G) -> Self {
        Self(guard)
    }
}

impl<G: Guard, S> tower_layer::Layer<S> for GuardLayer<G> {
    type Service = Guarded<G, S>;

    fn layer(&self, inner: S) -> Self::Service {
        Guarded::new(self.0.clone(), inner)
    }
}

/// The service of a [`Guard`]: the guard's decision, then the inner service.
#[derive(Debug, Clone)]
pub struct Guarded<G, S> {
    guard: G,
    inner: S,
}

impl<G, S> Guarded<G, S> {
    /// `inner` behind `guard`.
    pub fn new(guard: G, inner: S) -> Self {
        Self { guard, inner }
    }
}

impl<G, S> Service<Request> for Guarded<G, S>
where
    G: Guard,
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = lambda_http::Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        let mut inner = take_ready(&mut self.inner);
        let guard = self.guard.clone();
        Box::pin(async move {
            match guard.admit(&mut req).await {
                Ok(()) => inner.call(req).await,
                Err(answer) => Ok(answer),
            }
        })
    }
}
