//! The session function's own settings.

use std::time::Duration;

use tollgate::config::{ConfigError, Env, SecretSource};
use tollgate_functions::catalog;

/// Settings beyond the shared guards.
#[derive(Debug, Clone)]
pub struct SessionSettings {
    /// The OpenAI API key: `OPENAI_API_KEY_PARAM` (SSM) or `OPENAI_API_KEY` (local).
    pub api_key: SecretSource,
    /// Scheme and host of the upstream, without a trailing slash.
    pub base_url: String,
    pub model: String,
    /// Voices a client may pick; the first is the default.
    pub voices: Vec<String>,
    /// Lifetime of a minted client secret.
    pub expires_after: Duration,
    /// Longest wait for the upstream's answer.
    pub upstream_timeout: Duration,
    /// Pause after a failing upstream before it is asked again (`UPSTREAM_COOLDOWN_SECONDS`),
    /// or the upstream's own `Retry-After` when that is longer.
    pub upstream_cooldown: Duration,
    /// Pause after the upstream refused the API key even as freshly read from SSM
    /// (`UPSTREAM_AUTH_COOLDOWN_SECONDS`). Longer than the upstream cooldown: a refused key
    /// heals only when an operator replaces it, and each probe costs an upstream call and an
    /// SSM read.
    pub auth_cooldown: Duration,
    pub idempotency_table: String,
    /// Longest a record is kept; a record also never outlives its secret.
    pub idempotency_ttl: Duration,
}

impl SessionSettings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let api_key = env.secret_source("OPENAI_API_KEY")?.ok_or_else(|| {
            ConfigError::new(
                "OPENAI_API_KEY_PARAM",
                "set OPENAI_API_KEY_PARAM to the SSM parameter holding the OpenAI API key (or OPENAI_API_KEY locally)",
            )
        })?;
        let base_url = env
            .string_or("OPENAI_BASE_URL", "https://api.openai.com")
            .trim_end_matches('/')
            .to_string();
        let uri: http::Uri = base_url
            .parse()
            .map_err(|_| ConfigError::new("OPENAI_BASE_URL", "not a URL"))?;
        if !matches!(uri.scheme_str(), Some("https" | "http")) || uri.host().is_none() {
            return Err(ConfigError::new(
                "OPENAI_BASE_URL",
                "must be an http(s) URL such as https://api.openai.com",
            ));
        }
        let model = env.string_or("REALTIME_MODEL", "gpt-realtime");
        let voices: Vec<String> = env
            .string_or("REALTIME_VOICES", "marin,cedar")
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        if voices.is_empty()
            || voices.iter().any(|v| {
                v.len() > 32
                    || !v
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            })
        {
            return Err(ConfigError::new(
                "REALTIME_VOICES",
                "a comma-separated list of voice names (letters, digits, _ or -), e.g. marin,cedar",
            ));
        }
        let expires_after = env.seconds_or("REALTIME_EXPIRES_AFTER_SECONDS", 600, 10)?;
        if expires_after > Duration::from_secs(7200) {
            return Err(ConfigError::new(
                "REALTIME_EXPIRES_AFTER_SECONDS",
                "must be between 10 and 7200",
            ));
        }
        Ok(Self {
            api_key,
            base_url,
            model,
            voices,
            expires_after,
            upstream_timeout: env.seconds_or("UPSTREAM_TIMEOUT_SECONDS", 5, 1)?,
            upstream_cooldown: env.seconds_or("UPSTREAM_COOLDOWN_SECONDS", 5, 1)?,
            auth_cooldown: env.seconds_or("UPSTREAM_AUTH_COOLDOWN_SECONDS", 60, 1)?,
            idempotency_table: catalog::SESSION_IDEMPOTENCY.resolve_for_function(env),
            idempotency_ttl: env.seconds_or("IDEMPOTENCY_TTL_SECONDS", 86_400, 60)?,
        })
    }

    pub fn default_voice(&self) -> &str {
        &self.voices[0]
    }
}
