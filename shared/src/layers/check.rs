//! [`CheckLayer`]: a guard of the application's own, written as one function: `Ok(())` lets
//! the request through, an error that knows its answer ([`ClientError`]) refuses it. For the
//! checks only one function needs (a provider's cooldown, a feature flag) without writing a
//! tower service.

use std::task::{Context, Poll};

use lambda_http::{Body, Request, Response};
use tower_layer::Layer;
use tower_service::Service;

use super::{reject, take_ready, ResponseFuture};
use crate::problem::ClientError;

/// Refuses a request when `check` returns an error, with that error's problem+json answer.
#[derive(Clone)]
pub struct CheckLayer<F> {
    check: F,
}

impl<F> std::fmt::Debug for CheckLayer<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CheckLayer")
    }
}

impl<F> CheckLayer<F> {
    /// A layer running `check` on every request before the inner service.
    pub fn new<E>(check: F) -> Self
    where
        F: Fn(&Request) -> Result<(), E>,
        E: ClientError,
    {
        Self { check }
    }
}

impl<S, F: Clone> Layer<S> for CheckLayer<F> {
    type Service = CheckService<S, F>;

    fn layer(&self, inner: S) -> Self::Service {
        CheckService {
            inner,
            check: self.check.clone(),
        }
    }
}

/// The service of [`CheckLayer`].
#[derive(Clone)]
pub struct CheckService<S, F> {
    inner: S,
    check: F,
}

impl<S, F> std::fmt::Debug for CheckService<S, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CheckService")
    }
}

impl<S, F, E> Service<Request> for CheckService<S, F>
where
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    F: Fn(&Request) -> Result<(), E> + Clone + Send + 'static,
    E: ClientError,
{
    type Response = Response<Body>;
    type Error = lambda_http::Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        match (self.check)(&req) {
            Ok(()) => {
                let mut inner = take_ready(&mut self.inner);
                Box::pin(async move { inner.call(req).await })
            }
            Err(e) => {
                let response = reject(&req, &e);
                Box::pin(async move { Ok(response) })
            }
        }
    }
}
