//! [`KillSwitchLayer`]: 403 `service_disabled` within the switch's cache time of an operator's
//! flip, before any other guard spends anything.

use std::sync::Arc;
use std::task::{Context, Poll};

use lambda_http::{Body, Request, Response};
use tower_layer::Layer;
use tower_service::Service;

use super::{reject, take_ready, ResponseFuture};
use crate::kill_switch::KillSwitch;
use crate::problem::ApiError;

/// Refuses every request while the switch named `key` is on (see [`KillSwitch::check`]: a
/// cached read, stale reads served for a bounded time while the control table fails, then 503).
#[derive(Debug, Clone)]
pub struct KillSwitchLayer {
    switch: Arc<KillSwitch>,
    key: Arc<str>,
}

impl KillSwitchLayer {
    /// The switch `key` (a function's name, say) in `switch`'s table.
    pub fn new(switch: Arc<KillSwitch>, key: &str) -> Self {
        Self {
            switch,
            key: key.into(),
        }
    }
}

impl<S> Layer<S> for KillSwitchLayer {
    type Service = KillSwitchService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        KillSwitchService {
            inner,
            switch: self.switch.clone(),
            key: self.key.clone(),
        }
    }
}

/// The service of [`KillSwitchLayer`].
#[derive(Debug, Clone)]
pub struct KillSwitchService<S> {
    inner: S,
    switch: Arc<KillSwitch>,
    key: Arc<str>,
}

impl<S> Service<Request> for KillSwitchService<S>
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
        let switch = self.switch.clone();
        let key = self.key.clone();
        Box::pin(async move {
            match switch.check(&key).await {
                Ok(()) => inner.call(req).await,
                Err(e) => Ok(reject(&req, &ApiError::from(e))),
            }
        })
    }
}
