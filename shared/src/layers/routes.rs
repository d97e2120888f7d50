//! [`RoutesLayer`]: 404, 405 and 413 before any guard, so a request for nothing a function
//! serves spends nothing; and the path to route on, after the base path, for the router.

use std::sync::Arc;
use std::task::{Context, Poll};

use lambda_http::{Body, Request, Response};
use tower_layer::Layer;
use tower_service::Service;

use super::{reject, take_ready, ResponseFuture};
use crate::problem::ApiError;

/// The methods the route at a path serves, as a 405's `Allow` lists them (`"GET, PUT"`);
/// `None` when no route matches.
pub trait RouteMethods: Send + Sync + 'static {
    /// The methods of the route at `path` (after the base path).
    fn methods(&self, path: &str) -> Option<&'static str>;
}

/// A function as the route table.
#[derive(Debug, Clone, Copy)]
pub struct Methods(pub fn(&str) -> Option<&'static str>);

impl RouteMethods for Methods {
    fn methods(&self, path: &str) -> Option<&'static str> {
        (self.0)(path)
    }
}

/// The path to route on (the request's path without the base path), in the request's
/// extensions once [`RoutesLayer`] has let it through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutePath(pub String);

/// Answers 404 outside `base_path` or the routes, 405 (with `Allow`) for a method the route
/// does not serve, and 413 for a body over `max_body_bytes`.
#[derive(Clone)]
pub struct RoutesLayer {
    routes: Arc<Routes>,
}

struct Routes {
    base_path: String,
    methods: Box<dyn RouteMethods>,
    max_body_bytes: usize,
}

impl std::fmt::Debug for RoutesLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoutesLayer")
            .field("base_path", &self.routes.base_path)
            .field("max_body_bytes", &self.routes.max_body_bytes)
            .finish_non_exhaustive()
    }
}

impl RoutesLayer {
    /// Routes under `base_path` (`""` or e.g. `/api`), by `methods`.
    pub fn new(base_path: &str, methods: impl RouteMethods, max_body_bytes: usize) -> Self {
        Self {
            routes: Arc::new(Routes {
                base_path: base_path.to_string(),
                methods: Box::new(methods),
                max_body_bytes,
            }),
        }
    }
}

impl<S> Layer<S> for RoutesLayer {
    type Service = RoutesService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RoutesService {
            inner,
            routes: self.routes.clone(),
        }
    }
}

/// The service of [`RoutesLayer`].
#[derive(Clone)]
pub struct RoutesService<S> {
    inner: S,
    routes: Arc<Routes>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for RoutesService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoutesService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Routes {
    fn check(&self, req: &Request) -> Result<String, ApiError> {
        let path = crate::http::route_path(req, &self.base_path).ok_or(ApiError::NotFound)?;
        let allow = self.methods.methods(path).ok_or(ApiError::NotFound)?;
        let method = req.method().as_str();
        if !allow.split(',').any(|m| m.trim() == method) {
            return Err(ApiError::MethodNotAllowed { allow });
        }
        crate::http::body_bytes(req, self.max_body_bytes)?;
        Ok(path.to_string())
    }
}

impl<S> Service<Request> for RoutesService<S>
where
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
        let routes = self.routes.clone();
        Box::pin(async move {
            match routes.check(&req) {
                Ok(path) => {
                    req.extensions_mut().insert(RoutePath(path));
                    inner.call(req).await
                }
                Err(e) => Ok(reject(&req, &e)),
            }
        })
    }
}
