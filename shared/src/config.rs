//! Typed settings read once at start.
//!
//! A bad value fails the cold start with a message that names the variable, instead of a
//! request failing later with something vague. Settings are read through [`Env`] so tests can
//! hand in a map instead of mutating the process environment (which races between parallel tests).

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use secrecy::SecretString;

use crate::client_addr::ClientIpSource;
#[cfg(feature = "cors")]
use crate::cors::{Cors, ORIGINS_VAR};
use crate::ratelimit::RateLimits;
use crate::table::Attributes;

/// A setting that could not be used. Display names the variable; it is shown to operators at
/// start, never to API clients.
#[derive(Debug, thiserror::Error)]
#[error("configuration variable {var}: {reason}")]
pub struct ConfigError {
    /// The environment variable at fault (from [`GuardSettings::from_env`]), or the setting
    /// (from [`GuardSettingsBuilder::build`]).
    pub var: String,
    /// What is wrong with it.
    pub reason: String,
}

impl ConfigError {
    /// A setting refused for `reason`, naming `var` so the operator knows which one to fix.
    pub fn new(var: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            var: var.into(),
            reason: reason.into(),
        }
    }
}

/// A snapshot of environment variables.
#[derive(Debug, Clone, Default)]
pub struct Env(HashMap<String, String>);

impl Env {
    /// The process environment.
    pub fn from_process() -> Self {
        Self(std::env::vars().collect())
    }

    /// A fixed set of variables (tests, CLI).
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Self(
            pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }

    /// Adds or replaces a variable.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.0.insert(key.into(), value.into());
        self
    }

    /// The variable's value; empty counts as unset.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.trim().is_empty())
    }

    /// Parses a variable, or returns `default` when it is unset.
    pub fn parse_or<T>(&self, key: &str, default: T) -> Result<T, ConfigError>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        match self.get(key) {
            None => Ok(default),
            Some(raw) => raw
                .trim()
                .parse()
                .map_err(|e: T::Err| ConfigError::new(key, format!("{e} (got {raw:?})"))),
        }
    }

    /// A whole number of seconds, at least `min`.
    pub fn seconds_or(&self, key: &str, default: u64, min: u64) -> Result<Duration, ConfigError> {
        let secs: u64 = self.parse_or(key, default)?;
        if secs < min {
            return Err(ConfigError::new(
                key,
                format!("must be at least {min} seconds"),
            ));
        }
        Ok(Duration::from_secs(secs))
    }

    /// A string setting that has no default: unset is an error naming it.
    pub fn required(&self, key: &str) -> Result<String, ConfigError> {
        self.get(key)
            .map(|v| v.trim().to_string())
            .ok_or_else(|| ConfigError::new(key, "must be set"))
    }

    /// A string setting with a default.
    pub fn string_or(&self, key: &str, default: &str) -> String {
        self.get(key).unwrap_or(default).trim().to_string()
    }

    /// Where a secret comes from: `<NAME>_PARAM` (an SSM parameter name) or, for local runs,
    /// `<NAME>` holding the value itself. Setting both is ambiguous and refused. Without the
    /// `ssm` feature `<NAME>_PARAM` is refused too: nothing could read the parameter.
    pub fn secret_source(&self, name: &str) -> Result<Option<SecretSource>, ConfigError> {
        let param_var = format!("{name}_PARAM");
        match (self.get(&param_var), self.get(name)) {
            (Some(_), Some(_)) => Err(ConfigError::new(
                name,
                format!("set either {param_var} (SSM parameter name) or {name} (value), not both"),
            )),
            #[cfg(not(feature = "ssm"))]
            (Some(_), None) => Err(ConfigError::new(
                param_var,
                "SSM parameters need tollgate's `ssm` feature; set the value itself in the variable without _PARAM, or turn the feature on",
            )),
            #[cfg(feature = "ssm")]
            (Some(param), None) => Ok(Some(SecretSource::Ssm {
                name: param.trim().to_string(),
            })),
            (None, Some(value)) => Ok(Some(SecretSource::Value(SecretString::from(
                value.to_string(),
            )))),
            (None, None) => Ok(None),
        }
    }
}

/// Where a secret's value lives.
#[derive(Debug, Clone)]
pub enum SecretSource {
    /// An SSM Parameter Store parameter (SecureString, fetched with decryption). Read only with
    /// the `ssm` feature; without it, reading one is [`crate::secrets::SecretError::Misconfigured`]
    /// (logged), and [`Env::secret_source`] never makes one.
    Ssm {
        /// The parameter's name, as `GetParameter` takes it.
        name: String,
    },
    /// The value itself, from a plain environment variable (local runs only).
    Value(SecretString),
}

/// Settings every function shares: the guards in front of the handler.
#[derive(Debug, Clone)]
pub struct GuardSettings {
    /// Logical function name: the kill-switch key and the rate-limit counter scope.
    pub function: String,
    /// Where the client address comes from (`CLIENT_IP_SOURCE`): the connection's peer, or
    /// CloudFront's viewer address once the origin secret proves the request came through it.
    pub client_ip_source: ClientIpSource,
    /// The layers counted and their limits, in the `ip=10/1h,client=60/1m,global=2000/1d` syntax.
    pub rate_limits: RateLimits,
    /// Longest time a kill-switch flip takes to apply.
    pub kill_switch_cache: Duration,
    /// How long past `kill_switch_cache` the last state read keeps serving while the control
    /// table fails; after that requests get 503 (fail closed).
    pub kill_switch_stale: Duration,
    /// How long a secret read from SSM is served from memory before it is read again: the
    /// delay before a rotated secret takes effect, traded against one SSM call per request.
    pub secrets_ttl: Duration,
    /// Pause after a failing secret store (SSM) before it is asked again for that secret.
    pub secrets_cooldown: Duration,
    /// The table of the rate-limit counters (`RATE_LIMIT_TABLE`; no default).
    pub rate_limit_table: String,
    /// The table of the kill switches and published limits (`CONTROL_TABLE`; no default).
    pub control_table: String,
    /// The key and TTL attribute names of the counters in `rate_limit_table` (default: a table
    /// of their own, `pk` and `expires_at`; see [`crate::table`]).
    pub rate_limit_attributes: Attributes,
    /// The key attribute names of the switches and published limits in `control_table`.
    pub control_attributes: Attributes,
    /// The token our own services send to skip the per-caller layers (`INTERNAL_TOKEN`); `None`:
    /// no caller is internal.
    pub internal_token: Option<SecretSource>,
    /// The secret CloudFront adds to each request it forwards (`ORIGIN_VERIFY_SECRET`): without
    /// it, a viewer-address header would be the client's to forge.
    pub origin_verify_secret: Option<SecretSource>,
    /// The largest body accepted (`MAX_BODY_BYTES`); larger is refused with 413 before any
    /// guard spends a DynamoDB request on it.
    pub max_body_bytes: usize,
    /// Prefix stripped before routing (`/api` behind CloudFront).
    pub base_path: String,
    /// Keys remembered as full, per process.
    pub block_cache_capacity: usize,
    /// How long a full key is remembered at most.
    pub block_cache_max_age: Duration,
    /// Origins whose pages may call the API (`CORS_ALLOWED_ORIGINS`); empty: CORS off. Feature
    /// `cors`.
    #[cfg(feature = "cors")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cors")))]
    pub cors: Cors,
    /// The CloudWatch namespace of the guards' metrics (`METRICS_NAMESPACE`); `None`: no
    /// metric lines are written.
    pub metrics_namespace: Option<String>,
}

impl GuardSettings {
    /// Reads the shared settings; `function` names the guarded function (its kill-switch key,
    /// its counters' scope, its metrics dimension), `limits_var` its limits variable and
    /// `default_limits` their default. The two tables have no default: `RATE_LIMIT_TABLE` and
    /// `CONTROL_TABLE` must name them.
    pub fn from_env(
        env: &Env,
        function: &str,
        limits_var: &str,
        default_limits: &str,
    ) -> Result<Self, ConfigError> {
        let rate_limits = RateLimits::parse(env.get(limits_var).unwrap_or(default_limits))
            .map_err(|e| ConfigError::new(limits_var, e.to_string()))?;
        let client_ip_source: ClientIpSource =
            env.parse_or("CLIENT_IP_SOURCE", ClientIpSource::Peer)?;
        let origin_verify_secret = env.secret_source("ORIGIN_VERIFY_SECRET")?;
        if client_ip_source == ClientIpSource::Cloudfront && origin_verify_secret.is_none() {
            return Err(ConfigError::new(
                "ORIGIN_VERIFY_SECRET_PARAM",
                "CLIENT_IP_SOURCE=cloudfront needs the origin-verify secret (ORIGIN_VERIFY_SECRET_PARAM or ORIGIN_VERIFY_SECRET)",
            ));
        }
        let base_path = env.string_or("BASE_PATH", "");
        check_base_path(&base_path).map_err(|reason| ConfigError::new("BASE_PATH", reason))?;
        let max_body_bytes: usize = env.parse_or("MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES)?;
        check_max_body_bytes(max_body_bytes)
            .map_err(|reason| ConfigError::new("MAX_BODY_BYTES", reason))?;
        #[cfg(feature = "cors")]
        let cors = Cors::parse(env.get(ORIGINS_VAR).unwrap_or_default())
            .map_err(|reason| ConfigError::new(ORIGINS_VAR, reason))?;
        let mut builder = Self::builder(
            function,
            env.required(RATE_LIMIT_TABLE_VAR)?,
            env.required(CONTROL_TABLE_VAR)?,
        )
        .rate_limits(rate_limits)
        .client_ip_source(client_ip_source, origin_verify_secret)
        .kill_switch_cache(
            env.seconds_or("KILL_SWITCH_CACHE_SECONDS", 5, 0)?,
            env.seconds_or(
                "KILL_SWITCH_STALE_SECONDS",
                DEFAULT_KILL_SWITCH_STALE.as_secs(),
                0,
            )?,
        )
        .secrets_cache(
            env.seconds_or("SECRETS_TTL_SECONDS", 300, 0)?,
            env.seconds_or("SECRETS_COOLDOWN_SECONDS", 5, 1)?,
        )
        .internal_token(env.secret_source("INTERNAL_TOKEN")?)
        .max_body_bytes(max_body_bytes)
        .base_path(&base_path)
        .block_cache(
            env.parse_or("RATE_LIMIT_BLOCK_CACHE_SIZE", DEFAULT_BLOCK_CACHE_SIZE)?,
            env.seconds_or(
                "RATE_LIMIT_BLOCK_CACHE_SECONDS",
                crate::ratelimit::DEFAULT_BLOCK_CACHE_MAX_AGE.as_secs(),
                0,
            )?,
        );
        #[cfg(feature = "cors")]
        {
            builder = builder.cors(cors);
        }
        if let Some(namespace) = env.get(METRICS_NAMESPACE_VAR) {
            builder = builder.metrics_namespace(namespace.trim());
        }
        builder.build()
    }

    /// Settings for `function` (its kill-switch key, its counters' scope, its metrics
    /// dimension) over the two tables, with every other setting at its default until a
    /// [`GuardSettingsBuilder`] method says otherwise: no limit, the peer's address, a 5 s
    /// kill-switch cache served stale for 60 s, secrets cached 300 s with a 5 s cooldown,
    /// 16 KiB bodies, a block cache of 10,000 keys for 5 s at most, no CORS, no metrics.
    pub fn builder(
        function: &str,
        rate_limit_table: impl Into<String>,
        control_table: impl Into<String>,
    ) -> GuardSettingsBuilder {
        GuardSettingsBuilder(GuardSettings {
            function: function.to_string(),
            client_ip_source: ClientIpSource::Peer,
            rate_limits: RateLimits::default(),
            kill_switch_cache: Duration::from_secs(5),
            kill_switch_stale: DEFAULT_KILL_SWITCH_STALE,
            secrets_ttl: Duration::from_secs(300),
            secrets_cooldown: Duration::from_secs(5),
            rate_limit_table: rate_limit_table.into(),
            control_table: control_table.into(),
            rate_limit_attributes: Attributes::default(),
            control_attributes: Attributes::default(),
            internal_token: None,
            origin_verify_secret: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            base_path: String::new(),
            block_cache_capacity: DEFAULT_BLOCK_CACHE_SIZE,
            block_cache_max_age: crate::ratelimit::DEFAULT_BLOCK_CACHE_MAX_AGE,
            #[cfg(feature = "cors")]
            cors: Cors::default(),
            metrics_namespace: None,
        })
    }
}

/// How long past its cache time the last kill-switch state read keeps serving while the control
/// table fails, by default (`kill_switch::DEFAULT_STALE_WINDOW`; here so that the settings
/// have it without the `kill-switch` feature).
pub(crate) const DEFAULT_KILL_SWITCH_STALE: Duration = Duration::from_secs(60);

/// The largest body a guarded route reads by default (16 KiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 16 * 1024;
/// Keys remembered as full per process by default.
pub const DEFAULT_BLOCK_CACHE_SIZE: usize = 10_000;

fn check_base_path(base_path: &str) -> Result<(), &'static str> {
    if !base_path.is_empty() && (!base_path.starts_with('/') || base_path.ends_with('/')) {
        return Err("must start with '/' and not end with '/' (e.g. /api), or be empty");
    }
    Ok(())
}

fn check_max_body_bytes(max: usize) -> Result<(), &'static str> {
    match max {
        0 => Err("must be greater than 0"),
        _ => Ok(()),
    }
}

/// [`GuardSettings`] built in code rather than read from the environment: typed values, checked
/// once by [`GuardSettingsBuilder::build`], whose errors name the setting.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until build()"]
pub struct GuardSettingsBuilder(GuardSettings);

impl GuardSettingsBuilder {
    /// The limits, e.g. `"ip=10/1h,global=2000/1d".parse()?` (the syntax of
    /// [`RateLimits::parse`]).
    pub fn rate_limits(mut self, limits: RateLimits) -> Self {
        self.0.rate_limits = limits;
        self
    }

    /// Where the client address comes from; `Cloudfront` needs the origin-verify secret.
    pub fn client_ip_source(
        mut self,
        source: ClientIpSource,
        origin_verify_secret: Option<SecretSource>,
    ) -> Self {
        self.0.client_ip_source = source;
        self.0.origin_verify_secret = origin_verify_secret;
        self
    }

    /// How long a kill-switch state is cached (the longest a flip takes to apply), and how
    /// long past that the last state read keeps serving while the control table fails.
    pub fn kill_switch_cache(mut self, cache: Duration, stale: Duration) -> Self {
        self.0.kill_switch_cache = cache;
        self.0.kill_switch_stale = stale;
        self
    }

    /// How long a secret is cached, and the pause after a failing secret store.
    pub fn secrets_cache(mut self, ttl: Duration, cooldown: Duration) -> Self {
        self.0.secrets_ttl = ttl;
        self.0.secrets_cooldown = cooldown;
        self
    }

    /// The secret our own services present in `X-Internal-Token` (none: no internal callers).
    pub fn internal_token(mut self, token: Option<SecretSource>) -> Self {
        self.0.internal_token = token;
        self
    }

    /// The largest body a route reads (413 beyond).
    pub fn max_body_bytes(mut self, max: usize) -> Self {
        self.0.max_body_bytes = max;
        self
    }

    /// The prefix stripped before routing (`/api` behind CloudFront; empty: none).
    pub fn base_path(mut self, base_path: &str) -> Self {
        self.0.base_path = base_path.to_string();
        self
    }

    /// Keys remembered as full per process (0: off), and for how long at most (which bounds
    /// how long an operator's reset takes to reach a warm process).
    pub fn block_cache(mut self, capacity: usize, max_age: Duration) -> Self {
        self.0.block_cache_capacity = capacity;
        self.0.block_cache_max_age = max_age;
        self
    }

    /// The origins whose pages may call the API. Feature `cors`.
    #[cfg(feature = "cors")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cors")))]
    pub fn cors(mut self, cors: Cors) -> Self {
        self.0.cors = cors;
        self
    }

    /// Keeps the counters in an existing single-table design (`rate_limit_table`): its key
    /// names, a sort key value and prefix for the counters, its TTL attribute.
    pub fn rate_limit_attributes(mut self, attributes: Attributes) -> Self {
        self.0.rate_limit_attributes = attributes;
        self
    }

    /// Keeps the kill switches and published limits in an existing single-table design
    /// (`control_table`); it may be the same table as the counters', under another prefix.
    pub fn control_attributes(mut self, attributes: Attributes) -> Self {
        self.0.control_attributes = attributes;
        self
    }

    /// Writes metric lines in this CloudWatch namespace.
    pub fn metrics_namespace(mut self, namespace: &str) -> Self {
        self.0.metrics_namespace = Some(namespace.to_string());
        self
    }

    /// The settings, or the first one that cannot be used.
    pub fn build(self) -> Result<GuardSettings, ConfigError> {
        let s = self.0;
        if s.client_ip_source == ClientIpSource::Cloudfront && s.origin_verify_secret.is_none() {
            return Err(ConfigError::new(
                "client_ip_source",
                "cloudfront needs the origin-verify secret",
            ));
        }
        check_base_path(&s.base_path).map_err(|r| ConfigError::new("base_path", r))?;
        check_max_body_bytes(s.max_body_bytes)
            .map_err(|r| ConfigError::new("max_body_bytes", r))?;
        for (name, value) in [
            ("rate_limit_table", &s.rate_limit_table),
            ("control_table", &s.control_table),
            ("function", &s.function),
        ] {
            if value.trim().is_empty() {
                return Err(ConfigError::new(name, "must not be empty"));
            }
        }
        Ok(s)
    }
}

/// The variable naming the rate-limit counters' table.
pub const RATE_LIMIT_TABLE_VAR: &str = "RATE_LIMIT_TABLE";
/// The variable naming the control table (kill switches, published limits).
pub const CONTROL_TABLE_VAR: &str = "CONTROL_TABLE";
/// The variable naming the metrics' CloudWatch namespace.
pub const METRICS_NAMESPACE_VAR: &str = "METRICS_NAMESPACE";

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS_VAR: &str = "MY_RATE_LIMITS";
    const DEFAULT_LIMITS: &str = "ip=300/1m,client=60/1m";

    fn settings(pairs: &[(&str, &str)]) -> Result<GuardSettings, ConfigError> {
        let mut env = Env::from_pairs([
            (RATE_LIMIT_TABLE_VAR, "limits"),
            (CONTROL_TABLE_VAR, "control"),
        ]);
        for (k, v) in pairs {
            env.set(*k, *v);
        }
        GuardSettings::from_env(&env, "my-function", LIMITS_VAR, DEFAULT_LIMITS)
    }

    #[test]
    fn defaults_follow_the_contract() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.client_ip_source, ClientIpSource::Peer);
        assert_eq!(s.kill_switch_cache, Duration::from_secs(5));
        assert_eq!(s.kill_switch_stale, Duration::from_secs(60));
        assert_eq!(s.secrets_ttl, Duration::from_secs(300));
        assert_eq!(s.secrets_cooldown, Duration::from_secs(5));
        assert_eq!(s.max_body_bytes, 16 * 1024);
        assert_eq!(s.rate_limits.to_string(), DEFAULT_LIMITS);
        #[cfg(feature = "cors")]
        assert!(
            !s.cors.is_enabled(),
            "CORS is off unless origins are listed"
        );
    }

    #[test]
    fn the_builder_has_the_environments_defaults_and_names_a_bad_setting() {
        let built = GuardSettings::builder("my-function", "limits", "control")
            .rate_limits(DEFAULT_LIMITS.parse().unwrap())
            .build()
            .unwrap();
        let read = settings(&[]).unwrap();
        assert_eq!(format!("{built:?}"), format!("{read:?}"));
        let err = GuardSettings::builder("f", "limits", "control")
            .base_path("api/")
            .build()
            .unwrap_err();
        assert_eq!(err.var, "base_path");
        let err = GuardSettings::builder("f", "limits", "control")
            .client_ip_source(ClientIpSource::Cloudfront, None)
            .build()
            .unwrap_err();
        assert_eq!(err.var, "client_ip_source");
        let err = GuardSettings::builder("f", "", "control")
            .build()
            .unwrap_err();
        assert_eq!(err.var, "rate_limit_table");
    }

    #[test]
    fn the_tables_have_no_default_and_metrics_are_off_unless_named() {
        let env = Env::from_pairs([(CONTROL_TABLE_VAR, "control")]);
        let err = GuardSettings::from_env(&env, "f", LIMITS_VAR, DEFAULT_LIMITS).unwrap_err();
        assert_eq!(err.var, RATE_LIMIT_TABLE_VAR);
        let env = Env::from_pairs([(RATE_LIMIT_TABLE_VAR, "limits")]);
        let err = GuardSettings::from_env(&env, "f", LIMITS_VAR, DEFAULT_LIMITS).unwrap_err();
        assert_eq!(err.var, CONTROL_TABLE_VAR);
        let s = settings(&[]).unwrap();
        assert_eq!(
            (s.rate_limit_table.as_str(), s.control_table.as_str()),
            ("limits", "control")
        );
        assert_eq!(s.metrics_namespace, None);
        let s = settings(&[(METRICS_NAMESPACE_VAR, " Mine ")]).unwrap();
        assert_eq!(s.metrics_namespace.as_deref(), Some("Mine"));
        let s = settings(&[("SECRETS_COOLDOWN_SECONDS", "7")]).unwrap();
        assert_eq!(s.secrets_cooldown, Duration::from_secs(7));
    }

    #[test]
    fn bad_values_name_their_variable() {
        let err = settings(&[(LIMITS_VAR, "ip=ten/1h")]).unwrap_err();
        assert_eq!(err.var, LIMITS_VAR);
        let err = settings(&[("CLIENT_IP_SOURCE", "xff")]).unwrap_err();
        assert_eq!(err.var, "CLIENT_IP_SOURCE");
        let err = settings(&[("SECRETS_COOLDOWN_SECONDS", "0")]).unwrap_err();
        assert_eq!(err.var, "SECRETS_COOLDOWN_SECONDS");
        let err = settings(&[("KILL_SWITCH_STALE_SECONDS", "-1")]).unwrap_err();
        assert_eq!(err.var, "KILL_SWITCH_STALE_SECONDS");
        let err = settings(&[("BASE_PATH", "api/")]).unwrap_err();
        assert_eq!(err.var, "BASE_PATH");
        #[cfg(feature = "cors")]
        for origins in ["*", "https://app.example.com/", "garbage"] {
            let err = settings(&[("CORS_ALLOWED_ORIGINS", origins)]).unwrap_err();
            assert_eq!(err.var, "CORS_ALLOWED_ORIGINS", "{origins}");
        }
    }

    #[test]
    fn a_limits_list_without_entries_names_its_variable() {
        for empty in [",", " , ,"] {
            let err = settings(&[(LIMITS_VAR, empty)]).unwrap_err();
            assert_eq!(err.var, LIMITS_VAR, "{empty:?}");
            assert!(err.to_string().contains("=off"), "{err}");
        }
        let err = settings(&[(LIMITS_VAR, "global=off,global=1/1d")]).unwrap_err();
        assert_eq!(err.var, LIMITS_VAR);
        // Only layers turned off on purpose: explicit, so accepted.
        let s = settings(&[(LIMITS_VAR, "ip=off,client=off")]).unwrap();
        assert_eq!(s.rate_limits.iter().count(), 0);
        assert!(s.rate_limits.is_off(crate::ratelimit::Layer::Client));
    }

    #[test]
    fn cloudfront_mode_requires_the_origin_secret() {
        let err = settings(&[("CLIENT_IP_SOURCE", "cloudfront")]).unwrap_err();
        assert_eq!(err.var, "ORIGIN_VERIFY_SECRET_PARAM");
        assert!(settings(&[
            ("CLIENT_IP_SOURCE", "cloudfront"),
            ("ORIGIN_VERIFY_SECRET", "s")
        ])
        .is_ok());
    }

    #[test]
    fn a_secret_comes_from_one_place_only() {
        let env = Env::from_pairs([("INTERNAL_TOKEN_PARAM", "/p"), ("INTERNAL_TOKEN", "v")]);
        assert!(env.secret_source("INTERNAL_TOKEN").is_err());
        let env = Env::from_pairs([("INTERNAL_TOKEN_PARAM", "/p")]);
        #[cfg(feature = "ssm")]
        assert!(matches!(
            env.secret_source("INTERNAL_TOKEN").unwrap(),
            Some(SecretSource::Ssm { name }) if name == "/p"
        ));
        // Without the feature nothing could read the parameter: refused at start, named.
        #[cfg(not(feature = "ssm"))]
        assert_eq!(
            env.secret_source("INTERNAL_TOKEN").unwrap_err().var,
            "INTERNAL_TOKEN_PARAM"
        );
    }
}
