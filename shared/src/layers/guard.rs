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
