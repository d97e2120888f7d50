//! [`CorsLayer`]: [`crate::cors`] as a layer. A preflight from a listed origin to a served path
//! is answered here, before any guard; every other answer to a listed origin gets its CORS
//! headers on the way out, refusals and replays included.

use std::sync::Arc;
use std::task::{Context, Poll};

use lambda_http::{Body, Request, Response};
use tower_layer::Layer;
use tower_service::Service;

use super::{take_ready, ResponseFuture, RouteMethods};
use crate::cors::Cors;

/// See the [layers](crate::layers) table. Place it inside [`super::RespondLayer`] and outside
/// everything
/// else.
#[derive(Clone)]
pub struct CorsLayer {
    cors: Arc<CorsRoutes>,
}

struct CorsRoutes {
    cors: Cors,
    base_path: String,
    methods: Box<dyn RouteMethods>,
}

impl std::fmt::Debug for CorsLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CorsLayer")
            .field("origins", &self.cors.cors.origins())
            .finish_non_exhaustive()
    }
}

impl CorsLayer {
    /// CORS for `cors`'s origins, on the routes `methods` names under `base_path`.
    pub fn new(cors: Cors, base_path: &str, methods: impl RouteMethods) -> Self {
        Self {
            cors: Arc::new(CorsRoutes {
                cors,
                base_path: base_path.to_string(),
                methods: Box::new(methods),
            }),
        }
    }
}

impl<S> Layer<S> for CorsLayer {
    type Service = CorsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CorsService {
            inner,
            cors: self.cors.clone(),
        }
    }
}

/// The service of [`CorsLayer`].
#[derive(Clone)]
pub struct CorsService<S> {
    inner: S,
    cors: Arc<CorsRoutes>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for CorsService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CorsService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S> Service<Request> for CorsService<S>
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

    fn call(&mut self, req: Request) -> Self::Future {
        let mut inner = take_ready(&mut self.inner);
        let routes = self.cors.clone();
        Box::pin(async move {
            let origin = routes.cors.listed_origin(req.headers());
            if let Some(origin) = &origin {
                let methods = crate::http::route_path(&req, &routes.base_path)
                    .and_then(|path| routes.methods.methods(path));
                if let (true, Some(methods)) = (crate::cors::is_preflight(&req), methods) {
                    return Ok(routes.cors.preflight(origin.clone(), methods));
                }
            }
            let mut response = inner.call(req).await?;
            routes.cors.decorate(origin, &mut response);
            Ok(response)
        })
    }
}
