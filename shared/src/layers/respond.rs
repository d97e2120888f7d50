//! The outermost layer: a request id on every answer, the `RateLimit` fields of the tightest
//! layer the request passed, one metrics line per outcome, and a 500 problem (never the error's
//! text) for an inner service's `Err`.

use std::task::{Context, Poll};

use lambda_http::{Body, Request, Response};
use tower_layer::Layer;
use tower_service::Service;

use super::keys::AdmissionSlot;
use super::{take_ready, Rejected, ResponseFuture};
use crate::http::finish;
use crate::metrics::{Event, Metrics};
use crate::problem::{ApiError, ClientError};

/// The request's id (the Lambda request id, or a process-unique one without a Lambda context),
/// in the request's extensions: every answer carries it as `X-Request-Id`, problem bodies too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub String);

/// The id [`RespondLayer`] gave `req`, or a fresh one outside it.
pub(crate) fn request_id_of(req: &Request) -> String {
    match req.extensions().get::<RequestId>() {
        Some(RequestId(id)) => id.clone(),
        None => crate::http::request_id(req),
    }
}

/// See the [module](super) table. `metrics`: where the outcome lines go (`None`: nowhere).
#[derive(Debug, Clone)]
pub struct RespondLayer {
    metrics: Option<Metrics>,
}

impl RespondLayer {
    /// Answers with request ids and `RateLimit` fields, counting outcomes in `metrics`.
    pub fn new(metrics: Option<Metrics>) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for RespondLayer {
    type Service = RespondService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RespondService {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The service of [`RespondLayer`].
#[derive(Debug, Clone)]
pub struct RespondService<S> {
    inner: S,
    metrics: Option<Metrics>,
}

impl<S> Service<Request> for RespondService<S>
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
        let id = crate::http::request_id(&req);
        let slot = AdmissionSlot::default();
        req.extensions_mut().insert(RequestId(id.clone()));
        req.extensions_mut().insert(slot.clone());
        let mut inner = take_ready(&mut self.inner);
        let metrics = self.metrics.clone();
        Box::pin(async move {
            let response = match inner.call(req).await {
                Ok(response) => response,
                Err(e) => {
                    // A bug or an unhandled failure below: logged here, never shown.
                    tracing::error!(error = %e, "inner service failed");
                    ApiError::Internal.to_response(&id)
                }
            };
            let admission = slot.take();
            let response = finish(response, &id, Some(&admission));
            if let Some(metrics) = &metrics {
                record(metrics, &response);
            }
            Ok(response)
        })
    }
}

/// One line for the outcome, and one more for a 5xx: [`Metrics::record`] for a response.
fn record(metrics: &Metrics, response: &Response<Body>) {
    let status = response.status();
    match response.extensions().get::<Rejected>() {
        Some(Rejected(ApiError::RateLimited(d))) => metrics.emit(Event::RateLimited {
            layer: d.limit.layer().as_str(),
        }),
        Some(Rejected(ApiError::ServiceDisabled { .. })) => metrics.emit(Event::KillSwitchDenied),
        Some(_) => {}
        #[cfg(feature = "idempotency")]
        None if response
            .headers()
            .contains_key(crate::idempotency::REPLAYED_HEADER) =>
        {
            metrics.emit(Event::IdempotentReplay)
        }
        None if status.is_success() => metrics.emit(Event::Admitted),
        None => {}
    }
    if status.is_server_error() {
        metrics.emit(Event::Status5xx);
    }
}
