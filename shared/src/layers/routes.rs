//! [`RoutesLayer`]: 404, 405 and 413 before any guard, so a request for nothing a function
//! serves spends nothing; and the path to route on, after the base path, for the router.

use std::sync::Arc;

use lambda_http::{Body, Request, Response};
use tower_layer::Layer;

use super::{reject, Guard, Guarded};
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
    type Service = Guarded<Self, S>;

    fn layer(&self, inner: S) -> Self::Service {
        Guarded::new(self.clone(), inner)
    }
}

impl Guard for RoutesLayer {
    async fn admit(&self, req: &mut Request) -> Result<(), Response<Body>> {
        match self.routes.check(req) {
            Ok(path) => {
                req.extensions_mut().insert(RoutePath(path));
                Ok(())
            }
            Err(e) => Err(reject(req, &e)),
        }
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
