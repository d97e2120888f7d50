//! The guards in the order the contract fixes, for the functions to call before their own work.
//!
//! ```text
//! kill switch ─▶ client address ─▶ internal token? ─▶ [function-specific steps] ─▶ limits ─▶ handler
//! ```
//!
//! The kill switch comes first so a flipped switch costs nothing else. The address comes before
//! any limit so that the `ip` layer counts every request, including those that fail
//! authentication later. Authentication itself belongs to each function, after the `ip` layer.
//! A CORS preflight from a listed origin never gets here: [`crate::serve::Function::handle`]
//! answers it first, so it costs no read and counts in no layer.

use std::sync::Arc;

use lambda_http::Request;
use secrecy::SecretString;

use crate::client_addr::{self, ClientAddr, ClientIpSource};
use crate::clock::SharedClock;
use crate::config::GuardSettings;
use crate::internal::{is_internal_token, INTERNAL_TOKEN_HEADER};
use crate::kill_switch::KillSwitch;
use crate::problem::ApiError;
use crate::ratelimit::{Admission, Layer, LimitCheck, RateLimiter, Verdict};
use crate::secrets::{SecretError, SecretStore};

/// Who is calling, as established by the front guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub addr: ClientAddr,
    /// The request carried the real internal token.
    pub internal: bool,
}

/// The shared guards of one function.
#[derive(Debug)]
pub struct Gate {
    pub settings: GuardSettings,
    pub clock: SharedClock,
    pub kill_switch: KillSwitch,
    pub limiter: RateLimiter,
    pub secrets: Arc<SecretStore>,
}

impl Gate {
    /// Builds the guards over already-built clients (built once, in `main`).
    pub fn new(
        settings: GuardSettings,
        ddb: aws_sdk_dynamodb::Client,
        ssm: Option<aws_sdk_ssm::Client>,
        clock: SharedClock,
    ) -> Self {
        let secrets = Arc::new(SecretStore::new(
            ssm,
            clock.clone(),
            settings.secrets_ttl,
            settings.secrets_cooldown,
        ));
        Self {
            kill_switch: KillSwitch::new(
                ddb.clone(),
                &settings.control_table,
                clock.clone(),
                settings.kill_switch_cache,
            )
            .with_stale_window(settings.kill_switch_stale),
            limiter: RateLimiter::new(
                ddb,
                &settings.rate_limit_table,
                &settings.function,
                clock.clone(),
            )
            .with_block_cache(settings.block_cache_capacity, settings.block_cache_max_age),
            secrets,
            clock,
            settings,
        }
    }

    /// 403 `service_disabled` when the function's kill switch is on.
    pub async fn check_kill_switch(&self) -> Result<(), ApiError> {
        Ok(self.kill_switch.check(&self.settings.function).await?)
    }

    /// The client address, by `CLIENT_IP_SOURCE`.
    pub async fn client_addr(&self, req: &Request) -> Result<ClientAddr, ApiError> {
        let secret = match self.settings.client_ip_source {
            ClientIpSource::Peer => None,
            ClientIpSource::Cloudfront => match &self.settings.origin_verify_secret {
                Some(source) => Some(self.secrets.get(source).await?),
                None => return Err(ApiError::Internal),
            },
        };
        Ok(client_addr::resolve(
            req,
            self.settings.client_ip_source,
            secret.as_ref(),
        )?)
    }

    /// Whether `req` carries the real internal token. Requests without the header never cost a
    /// secret lookup; when the token cannot be loaded the request is treated as an ordinary one
    /// (counted), which is the safe side.
    pub async fn is_internal(&self, req: &Request) -> bool {
        match self.internal_token(req).await {
            Ok(Some((presented, expected))) => is_internal_token(Some(&presented), &expected),
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(error = %e, "internal token unavailable; treating the request as external");
                false
            }
        }
    }

    /// For internal routes: Ok only with the real internal token; 401 otherwise. A token that
    /// cannot be loaded gives 503/500, so an SSM outage is not reported as bad credentials.
    pub async fn require_internal(&self, req: &Request) -> Result<(), ApiError> {
        match self.internal_token(req).await? {
            Some((presented, expected)) if is_internal_token(Some(&presented), &expected) => Ok(()),
            _ => Err(ApiError::Unauthorized),
        }
    }

    async fn internal_token(
        &self,
        req: &Request,
    ) -> Result<Option<(String, SecretString)>, SecretError> {
        let Some(presented) = req
            .headers()
            .get(INTERNAL_TOKEN_HEADER)
            .and_then(|v| v.to_str().ok())
        else {
            return Ok(None);
        };
        let Some(source) = &self.settings.internal_token else {
            return Ok(None);
        };
        let expected = self.secrets.get(source).await?;
        Ok(Some((presented.to_string(), expected)))
    }

    /// Kill switch, client address, internal token: the steps every public route starts with.
    pub async fn front(&self, req: &Request) -> Result<Caller, ApiError> {
        self.check_kill_switch().await?;
        let addr = self.client_addr(req).await?;
        let internal = self.is_internal(req).await;
        Ok(Caller { addr, internal })
    }

    /// Counts the request in the configured layers among `layers` (identity per layer: the
    /// address for `ip`, the verified client id for `client`, ignored for `global`). Internal
    /// callers skip `ip` and `client`. 429 when a layer is full.
    pub async fn limit(
        &self,
        admission: &mut Admission,
        caller: &Caller,
        layers: &[(Layer, &str)],
    ) -> Result<(), ApiError> {
        let checks: Vec<LimitCheck<'_>> = layers
            .iter()
            .filter(|(layer, _)| !(caller.internal && layer.skipped_for_internal_callers()))
            .filter_map(|(layer, key)| {
                self.settings
                    .rate_limits
                    .get(*layer)
                    .map(|limit| LimitCheck {
                        limit,
                        key: if *layer == Layer::Global { "" } else { key },
                    })
            })
            .collect();
        if checks.is_empty() {
            return Ok(());
        }
        match self.limiter.check(admission, &checks).await? {
            Verdict::Admitted => Ok(()),
            Verdict::Rejected(decision) => Err(ApiError::RateLimited(decision)),
        }
    }
}
