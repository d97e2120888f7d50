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
use crate::published_limits::{LimitsRecord, PublishedLimitsError};
use crate::ratelimit::{Admission, Layer, LimitCheck, RateLimiter, Verdict};
use crate::secrets::{SecretError, SecretStore};

/// Who is calling, as established by the front guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub addr: ClientAddr,
    /// The request carried the real internal token.
    pub internal: bool,
}

/// The shared guards of one function. Its parts are private: a function asks the gate (check,
/// limit, refund, read a secret) instead of reaching into the limiter or the kill switch, so the
/// order above and the settings behind it stay the gate's business.
#[derive(Debug)]
pub struct Gate {
    settings: GuardSettings,
    kill_switch: KillSwitch,
    limiter: RateLimiter,
    secrets: Arc<SecretStore>,
    published_limits: LimitsRecord,
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
            published_limits: LimitsRecord::new(
                ddb.clone(),
                &settings.control_table,
                clock.clone(),
            ),
            limiter: RateLimiter::new(ddb, &settings.rate_limit_table, &settings.function, clock)
                .with_block_cache(settings.block_cache_capacity, settings.block_cache_max_age),
            secrets,
            settings,
        }
    }

    /// The settings the guards were built from (base path, body limit, CORS origins, ...).
    pub fn settings(&self) -> &GuardSettings {
        &self.settings
    }

    /// The path to route on, after `BASE_PATH`; `None` outside it (a 404).
    pub fn route_path<'a>(&self, req: &'a Request) -> Option<&'a str> {
        crate::http::route_path(req, &self.settings.base_path)
    }

    /// The body, refused with 413 when over `MAX_BODY_BYTES`.
    pub fn body<'a>(&self, req: &'a Request) -> Result<&'a [u8], ApiError> {
        crate::http::body_bytes(req, self.settings.max_body_bytes)
    }

    /// The kill switches, for the operator's routes that show and flip them.
    pub fn kill_switch(&self) -> &KillSwitch {
        &self.kill_switch
    }

    /// The secret store the guards read their own secrets from, for the function's secrets.
    pub fn secrets(&self) -> &SecretStore {
        &self.secrets
    }

    /// Writes the limits these guards count under, and how long they refuse a full key from
    /// memory, to the control table ([`crate::published_limits`]), so the operator's CLI
    /// reports what this function counts rather than what the operator's shell says. Once per
    /// process, spawned at start by [`crate::serve::run`]: no request waits for it. A failure
    /// is logged and returned, and changes nothing else: the guards never read it back, and the
    /// CLI says so when it finds nothing published.
    pub async fn publish_limits(&self) -> Result<(), PublishedLimitsError> {
        let settings = &self.settings;
        let refused_from_memory_for = match settings.block_cache_capacity {
            0 => std::time::Duration::ZERO,
            _ => settings.block_cache_max_age,
        };
        let result = self
            .published_limits
            .publish(
                &settings.function,
                &settings.rate_limits,
                refused_from_memory_for,
            )
            .await;
        match &result {
            Ok(()) => tracing::debug!(limits = %settings.rate_limits, "limits published"),
            Err(e) => tracing::warn!(
                error = %e,
                source = ?std::error::Error::source(e),
                "limits not published; the CLI cannot learn them until a process publishes them"
            ),
        }
        result
    }

    /// Gives back every unit `admission` took: the request turned out to cost nothing.
    pub async fn refund(&self, admission: &mut Admission) {
        self.limiter.refund(admission).await
    }

    /// Gives back the unit `admission` took in `layer` only.
    pub async fn refund_layer(&self, admission: &mut Admission, layer: Layer) {
        self.limiter.refund_layer(admission, layer).await
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
        let checks = self.checks(caller, layers);
        if checks.is_empty() {
            return Ok(());
        }
        match self.limiter.check(admission, &checks).await? {
            Verdict::Admitted => Ok(()),
            Verdict::Rejected(decision) => Err(ApiError::RateLimited(decision)),
        }
    }

    /// 429 if the block cache knows one of `layers` to be full, costing no DynamoDB request and
    /// counting nothing: for a request whose later layer can be known before an earlier one is
    /// counted (a client this process has verified, whose `client` layer is full, is refused
    /// before its `ip` increment and refund).
    pub fn refuse_if_blocked(
        &self,
        caller: &Caller,
        layers: &[(Layer, &str)],
    ) -> Result<(), ApiError> {
        match self.limiter.blocked(&self.checks(caller, layers)) {
            Some(decision) => {
                tracing::info!(decision = "rejected", layer = %decision.limit.layer(), source = "block_cache", "rate limited");
                Err(ApiError::RateLimited(decision))
            }
            None => Ok(()),
        }
    }

    /// The configured layers among `layers` for this caller, as limiter checks.
    fn checks<'a>(&'a self, caller: &Caller, layers: &[(Layer, &'a str)]) -> Vec<LimitCheck<'a>> {
        layers
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
            .collect()
    }
}
