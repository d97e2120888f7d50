//! [`CheckLayer`]: a guard of the application's own, written as one function: `Ok(())` lets
//! the request through, an error that knows its answer ([`ClientError`]) refuses it. For the
//! checks only one function needs (a provider's cooldown, a feature flag) without writing a
//! tower service.

use lambda_http::{Body, Request, Response};
use tower_layer::Layer;

use super::{reject, Guard, Guarded};
use crate::problem::ClientError;

/// Refuses a request when `check` returns an error, with that error's problem+json answer.
///
/// ```
/// use lambda_http::Request;
/// use tollgate::layers::CheckLayer;
/// use tollgate::ApiError;
///
/// // Only JSON bodies reach the handler; anything else is a 400 that names the header.
/// let json_only = CheckLayer::new(|req: &Request| {
///     match req.headers().get("content-type").map(|v| v.as_bytes()) {
///         Some(b"application/json") => Ok(()),
///         _ => Err(ApiError::BadRequest {
///             detail: "Content-Type must be application/json".into(),
///         }),
///     }
/// });
/// # let _ = json_only;
/// ```
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

impl<S, F, E> Layer<S> for CheckLayer<F>
where
    F: Fn(&Request) -> Result<(), E> + Clone + Send + Sync + 'static,
    E: ClientError,
{
    type Service = Guarded<Self, S>;

    fn layer(&self, inner: S) -> Self::Service {
        Guarded::new(self.clone(), inner)
    }
}

impl<F, E> Guard for CheckLayer<F>
where
    F: Fn(&Request) -> Result<(), E> + Clone + Send + Sync + 'static,
    E: ClientError,
{
    async fn admit(&self, req: &mut Request) -> Result<(), Response<Body>> {
        (self.check)(req).map_err(|e| reject(req, &e))
    }
}
