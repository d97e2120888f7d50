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
use crate::cors::{Cors, ORIGINS_VAR};
use crate::ratelimit::RateLimits;

/// A setting that could not be used. Display names the variable; it is shown to operators at
/// start, never to API clients.
#[derive(Debug, thiserror::Error)]
#[error("configuration variable {var}: {reason}")]
pub struct ConfigError {
    /// The environment variable at fault.
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
    /// `<NAME>` holding the value itself. Setting both is ambiguous and refused.
    pub fn secret_source(&self, name: &str) -> Result<Option<SecretSource>, ConfigError> {
        let param_var = format!("{name}_PARAM");
        match (self.get(&param_var), self.get(name)) {
            (Some(_), Some(_)) => Err(ConfigError::new(
                name,
                format!("set either {param_var} (SSM parameter name) or {name} (value), not both"),
            )),
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
    /// An SSM Parameter Store parameter (SecureString, fetched with decryption).
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
    /// Origins whose pages may call the API (`CORS_ALLOWED_ORIGINS`); empty: CORS off.
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
        if !base_path.is_empty() && (!base_path.starts_with('/') || base_path.ends_with('/')) {
            return Err(ConfigError::new(
                "BASE_PATH",
                "must start with '/' and not end with '/' (e.g. /api), or be empty",
            ));
        }
        let max_body_bytes: usize = env.parse_or("MAX_BODY_BYTES", 16 * 1024)?;
        if max_body_bytes == 0 {
            return Err(ConfigError::new("MAX_BODY_BYTES", "must be greater than 0"));
        }
        let block_cache_capacity: usize = env.parse_or("RATE_LIMIT_BLOCK_CACHE_SIZE", 10_000)?;
        let cors = Cors::parse(env.get(ORIGINS_VAR).unwrap_or_default())
            .map_err(|reason| ConfigError::new(ORIGINS_VAR, reason))?;
        Ok(Self {
            function: function.to_string(),
            client_ip_source,
            rate_limits,
            kill_switch_cache: env.seconds_or("KILL_SWITCH_CACHE_SECONDS", 5, 0)?,
            kill_switch_stale: env.seconds_or(
                "KILL_SWITCH_STALE_SECONDS",
                crate::kill_switch::DEFAULT_STALE_WINDOW.as_secs(),
                0,
            )?,
            secrets_ttl: env.seconds_or("SECRETS_TTL_SECONDS", 300, 0)?,
            secrets_cooldown: env.seconds_or("SECRETS_COOLDOWN_SECONDS", 5, 1)?,
            rate_limit_table: env.required(RATE_LIMIT_TABLE_VAR)?,
            control_table: env.required(CONTROL_TABLE_VAR)?,
            internal_token: env.secret_source("INTERNAL_TOKEN")?,
            origin_verify_secret,
            max_body_bytes,
            base_path,
            block_cache_capacity,
            block_cache_max_age: env.seconds_or(
                "RATE_LIMIT_BLOCK_CACHE_SECONDS",
                crate::ratelimit::DEFAULT_BLOCK_CACHE_MAX_AGE.as_secs(),
                0,
            )?,
            cors,
            metrics_namespace: env.get(METRICS_NAMESPACE_VAR).map(|n| n.trim().to_string()),
        })
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
        assert!(
            !s.cors.is_enabled(),
            "CORS is off unless origins are listed"
        );
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
        assert!(matches!(
            env.secret_source("INTERNAL_TOKEN").unwrap(),
            Some(SecretSource::Ssm { name }) if name == "/p"
        ));
    }
}
