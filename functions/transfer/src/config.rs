//! The transfer function's own settings.

use std::time::Duration;

use tollgate::config::{ConfigError, Env};
use tollgate_functions::catalog;

/// The largest amount a transfer may ever move: 2^53 - 1. Idempotency fingerprints are SHA-256
/// over the RFC 8785 canonical body, and RFC 8785 writes numbers as IEEE doubles, which hold
/// every integer only up to 2^53: above it, two different amounts canonicalise to the same bytes
/// and a changed amount would replay the first answer instead of getting 422.
pub const MAX_EXACT_AMOUNT: u64 = (1 << 53) - 1;

/// Settings beyond the shared guards.
#[derive(Debug, Clone)]
pub struct TransferSettings {
    pub clients_table: String,
    pub accounts_table: String,
    pub transfers_table: String,
    pub idempotency_table: String,
    /// How long a key's record is kept (`IDEMPOTENCY_TTL_SECONDS`, default one day).
    pub idempotency_ttl: Duration,
    /// Largest amount one transfer may move, in minor units.
    pub max_amount: u64,
    /// The currency a transfer is first tried in when neither account's is known yet.
    pub default_currency: String,
    /// How long a verified token is remembered per process.
    pub token_cache: Duration,
}

impl TransferSettings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let max_amount: u64 = env.parse_or("MAX_TRANSFER_AMOUNT", 1_000_000_000_000)?;
        if max_amount == 0 || max_amount > MAX_EXACT_AMOUNT {
            return Err(ConfigError::new(
                "MAX_TRANSFER_AMOUNT",
                format!("must be between 1 and {MAX_EXACT_AMOUNT} (2^53 - 1: the body's fingerprint is over RFC 8785 JSON, whose numbers are IEEE doubles, so larger amounts could not be told apart)"),
            ));
        }
        let default_currency = env.string_or("DEFAULT_CURRENCY", "JPY");
        if !is_currency_code(&default_currency) {
            return Err(ConfigError::new(
                "DEFAULT_CURRENCY",
                "must be a three-letter ISO 4217 code such as JPY",
            ));
        }
        Ok(Self {
            clients_table: catalog::CLIENTS.resolve_for_function(env),
            accounts_table: catalog::ACCOUNTS.resolve_for_function(env),
            transfers_table: catalog::TRANSFERS.resolve_for_function(env),
            idempotency_table: catalog::TRANSFER_IDEMPOTENCY.resolve_for_function(env),
            idempotency_ttl: env.seconds_or("IDEMPOTENCY_TTL_SECONDS", 86_400, 60)?,
            max_amount,
            default_currency,
            token_cache: env.seconds_or("TOKEN_CACHE_SECONDS", 60, 0)?,
        })
    }
}

/// Three upper-case ASCII letters.
pub fn is_currency_code(s: &str) -> bool {
    s.len() == 3 && s.bytes().all(|b| b.is_ascii_uppercase())
}
