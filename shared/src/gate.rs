//! One function's guards, built once from its [`GuardSettings`] over clients built once: the
//! kill switch, the limiter, the secret store, the client-address source, the metrics; and each
//! guard's layer over them, for the function's `ServiceBuilder`:
//!
//! ```text
//! respond ─▶ CORS ─▶ routes ─▶ kill switch ─▶ client address ─▶ address limit ─▶ [authentication] ─▶ identity limits ─▶ handler
//! ```
//!
//! The order is the stack's, one line per layer, so it is read where it is written (see
//! [`crate::layers`] for why each layer stands where it does). The direct methods
//! ([`Gate::front`], [`Gate::limit`], ...) are the same guards for a handler that runs one
//! itself, mid-way through its own work.
//!
//! Needs the `ratelimit` and `kill-switch` features (its core: every public route starts with
//! the kill switch and counts in the limits); [`Gate::cors_layer`] needs `cors` and
//! [`Gate::with_ssm`] needs `ssm`.

use std::sync::Arc;

use lambda_http::Request;

use crate::client_addr::ClientAddr;
use crate::clock::SharedClock;
use crate::config::GuardSettings;
use crate::kill_switch::KillSwitch;
#[cfg(feature = "cors")]
use crate::layers::CorsLayer;
use crate::layers::{
    ClientAddressLayer, ClientAddressSource, KillSwitchLayer, RateLimitLayer, RespondLayer,
    RouteMethods, RoutesLayer,
};
use crate::metrics::Metrics;
use crate::problem::ApiError;
use crate::published_limits::{LimitsRecord, PublishedLimitsError};
use crate::ratelimit::{Admission, Layer, LimitCheck, RateLimit, RateLimiter, Verdict};
use crate::secrets::SecretStore;

pub use crate::layers::Caller;

/// The shared guards of one function. Its parts are private: a function takes their layers (or
/// asks the gate to check, limit, refund, read a secret) instead of reaching into the limiter or
/// the kill switch, so the settings behind them stay in one place.
#[derive(Debug)]
pub struct Gate {
    settings: GuardSettings,
    kill_switch: Arc<KillSwitch>,
    limiter: Arc<RateLimiter>,
    secrets: Arc<SecretStore>,
    address: Arc<ClientAddressSource>,
    published_limits: LimitsRecord,
    metrics: Metrics,
    /// For a secret store built anew ([`Gate::with_ssm`]).
    #[cfg_attr(not(feature = "ssm"), allow(dead_code))]
    clock: SharedClock,
}

impl Gate {
    /// Builds the guards over an already-built client (built once, in `main`). Its secrets
    /// (the origin-verify secret, the internal token, the function's own) are plain values
    /// until [`Gate::with_ssm`] gives it an SSM client.
    pub fn new(settings: GuardSettings, ddb: aws_sdk_dynamodb::Client, clock: SharedClock) -> Self {
        let secrets = Arc::new(SecretStore::new(
            clock.clone(),
            settings.secrets_ttl,
            settings.secrets_cooldown,
        ));
        let address = address_source(&settings, secrets.clone());
        Self {
            kill_switch: Arc::new(
                KillSwitch::new(
                    ddb.clone(),
                    &settings.control_table,
                    clock.clone(),
                    settings.kill_switch_cache,
                )
                .with_stale_window(settings.kill_switch_stale)
                .with_attributes(settings.control_attributes.clone()),
            ),
            address,
            published_limits: LimitsRecord::new(
                ddb.clone(),
                &settings.control_table,
                clock.clone(),
            )
            .with_attributes(settings.control_attributes.clone()),
            limiter: Arc::new(
                RateLimiter::new(
                    ddb,
                    &settings.rate_limit_table,
                    &settings.function,
                    clock.clone(),
                )
                .with_block_cache(settings.block_cache_capacity, settings.block_cache_max_age)
                .with_attributes(settings.rate_limit_attributes.clone()),
            ),
            secrets,
            metrics: Metrics::new(settings.metrics_namespace.as_deref(), &settings.function),
            settings,
            clock,
        }
    }

    /// The same guards reading `*_PARAM` secrets from SSM Parameter Store with `ssm` (built
    /// with [`crate::aws::ssm`]). Call it before taking any layer: the secret store is built
    /// anew, and a layer taken before holds the one without SSM.
    #[cfg(feature = "ssm")]
    #[cfg_attr(docsrs, doc(cfg(feature = "ssm")))]
    pub fn with_ssm(mut self, ssm: aws_sdk_ssm::Client) -> Self {
        self.secrets = Arc::new(
            SecretStore::new(
                self.clock.clone(),
                self.settings.secrets_ttl,
                self.settings.secrets_cooldown,
            )
            .with_ssm(ssm),
        );
        self.address = address_source(&self.settings, self.secrets.clone());
        self
    }

    /// Where this function's metric lines go.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
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
    /// process, spawned by the entry point once the first answer has gone (so it reuses that
    /// answer's connection rather than opening a second one at cold start): no request waits
    /// for it. A failure is logged and returned, and changes nothing else: the guards never
    /// read it back, and the CLI says so when it finds nothing published.
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
        self.address.addr(req).await
    }

    /// Whether `req` carries the real internal token (see [`ClientAddressSource::is_internal`]).
    pub async fn is_internal(&self, req: &Request) -> bool {
        self.address.is_internal(req).await
    }

    /// For internal routes: Ok only with the real internal token; 401 otherwise (see
    /// [`ClientAddressSource::require_internal`]).
    pub async fn require_internal(&self, req: &Request) -> Result<(), ApiError> {
        self.address.require_internal(req).await
    }

    /// Kill switch, client address, internal token: the steps every public route starts with.
    pub async fn front(&self, req: &Request) -> Result<Caller, ApiError> {
        self.check_kill_switch().await?;
        self.address.caller(req).await
    }

    /// The outermost layer: request ids, `RateLimit` fields, this function's metrics.
    pub fn respond_layer(&self) -> RespondLayer {
        RespondLayer::new(Some(self.metrics.clone()))
    }

    /// CORS for `CORS_ALLOWED_ORIGINS` on the routes `methods` names. Feature `cors`.
    #[cfg(feature = "cors")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cors")))]
    pub fn cors_layer(&self, methods: impl RouteMethods) -> CorsLayer {
        CorsLayer::new(
            self.settings.cors.clone(),
            &self.settings.base_path,
            methods,
        )
    }

    /// 404, 405 and 413 (`MAX_BODY_BYTES`) under `BASE_PATH`, before any guard.
    pub fn routes_layer(&self, methods: impl RouteMethods) -> RoutesLayer {
        RoutesLayer::new(
            &self.settings.base_path,
            methods,
            self.settings.max_body_bytes,
        )
    }

    /// This function's kill switch.
    pub fn kill_switch_layer(&self) -> KillSwitchLayer {
        KillSwitchLayer::new(self.kill_switch.clone(), &self.settings.function)
    }

    /// The [`Caller`] by `CLIENT_IP_SOURCE`, with the internal token.
    pub fn client_address_layer(&self) -> ClientAddressLayer {
        ClientAddressLayer::new(self.address.clone())
    }

    /// A rate-limit layer over this function's counters, with no limit yet: add them with
    /// [`RateLimitLayer::limit`] and [`Gate::rate_limit`].
    pub fn rate_limit_layer(&self) -> RateLimitLayer {
        RateLimitLayer::new(self.limiter.clone())
    }

    /// The configured limit of `layer`, if it is on.
    pub fn rate_limit(&self, layer: Layer) -> Option<RateLimit> {
        self.settings.rate_limits.get(layer).copied()
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

/// The client-address source of `settings`, reading its secrets from `secrets`.
fn address_source(settings: &GuardSettings, secrets: Arc<SecretStore>) -> Arc<ClientAddressSource> {
    Arc::new(ClientAddressSource::new(
        settings.client_ip_source,
        settings.origin_verify_secret.clone(),
        settings.internal_token.clone(),
        secrets,
    ))
}
