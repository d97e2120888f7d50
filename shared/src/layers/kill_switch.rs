//! [`KillSwitchLayer`]: 403 `service_disabled` within the switch's cache time of an operator's
//! flip, before any other guard spends anything.

use std::sync::Arc;

use lambda_http::{Body, Request, Response};
use tower_layer::Layer;

use super::{reject, Guard, Guarded};
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
    type Service = Guarded<Self, S>;

    fn layer(&self, inner: S) -> Self::Service {
        Guarded::new(self.clone(), inner)
    }
}

impl Guard for KillSwitchLayer {
    async fn admit(&self, req: &mut Request) -> Result<(), Response<Body>> {
        match self.switch.check(&self.key).await {
            Ok(()) => Ok(()),
            Err(e) => Err(reject(req, &ApiError::from(e))),
        }
    }
}
