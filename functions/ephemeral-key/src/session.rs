//! `POST /session`: a short-lived OpenAI Realtime client secret for a browser voice client.
//!
//! Anyone may call this route, and every secret it mints costs money, so the order matters.
//! It is the crate's `stack`, one layer per step, read top to bottom:
//!
//! 1. kill switch, client address, internal token;
//! 2. [`Sessions::parse`]: the body (an optional voice from the allowlist) and the optional
//!    `Idempotency-Key` (one key, at least 16 characters), put in the extensions as [`Parsed`]
//!    and answered (400) only after the `ip` layer;
//! 3. replays ([`tollgate::layers::IdempotencyLayer::replays`]): a valid request whose key this
//!    process holds completed is that answer again, before the cooldowns and the limits: it
//!    calls nothing upstream and costs no DynamoDB request, so it needs no quota and no
//!    cooldown may hold it back. After a 429, a valid keyed request may still be the retry of
//!    one whose answer was lost: one eventually consistent read of the key's record (none for a
//!    key this process knows) turns a completed one of the same body into the replay, counting
//!    nothing (the contract: a replay consumes no quota, even after a layer filled);
//! 4. cooldowns ([`Sessions::cooling_down`]): while the provider is failing, or refusing our
//!    API key, answer 503 at once (no quota used, no upstream, SSM or DynamoDB call);
//! 5. limits: `ip` (skipped for internal callers) counts every request, valid or not (lesson
//!    002), so a 400 costs its `ip` unit; `global`, the spend cap, counts only valid requests
//!    ([`ValidOnly`]), the ones that will call upstream. A 5xx below gives every unit back, so
//!    an outage never locks a caller out (lesson 000);
//! 6. the idempotency claim (two-phase, scoped to the client address,
//!    [`tollgate::layers::IdempotencyLayer::claims`]): a retry after a lost response gets the
//!    same unexpired secret back, with all its quota given back; a 409 or 422 gets its `global`
//!    unit back; a failure frees the key for a retry;
//! 7. [`Sessions::post`]: the API key (SSM, cached) and the upstream call.

use http::header::{HeaderValue, CACHE_CONTROL};
use http::StatusCode;
use lambda_http::{Body, Request, Response};
use secrecy::ExposeSecret;
use serde::Serialize;
use serde_json::Value;
use tollgate::config::SecretSource;
use tollgate::cooldown::Cooldown;
use tollgate::gate::Gate;
use tollgate::http::json_response;
use tollgate::idempotency::{fingerprint, AbsentKeys, IdempotencyKey, IdempotencyStore, Scope};
use tollgate::internal::secrets_equal;
use tollgate::json::strict_object;
use tollgate::layers::{Caller, IdempotentRequest, KeyExtractor, MissingExtension, RecordExpiry};
use tollgate::ApiError;

use crate::error::SessionError;

use crate::config::SessionSettings;
use crate::upstream::{ClientSecret, SecretRequest, Upstream, UpstreamError};

/// The cooldown key of the upstream.
const UPSTREAM: &str = "openai";
/// The cooldown key of a refused API key (`UPSTREAM_AUTH_COOLDOWN_SECONDS`).
const UPSTREAM_KEY: &str = "openai-api-key";

/// What `POST /session` needs besides the gate.
#[derive(Debug)]
pub struct Sessions {
    pub settings: SessionSettings,
    pub upstream: Upstream,
    pub idempotency: IdempotencyStore,
    /// Keys a refused request was looked up for and found without a record (bounded and
    /// aged like the block cache: `RATE_LIMIT_BLOCK_CACHE_SIZE`, `RATE_LIMIT_BLOCK_CACHE_SECONDS`).
    pub absent: std::sync::Arc<AbsentKeys>,
    pub cooldown: Cooldown,
}

#[derive(Serialize)]
struct Minted<'a> {
    client_secret: &'a str,
    expires_at: u64,
    model: &'a str,
    voice: &'a str,
}

/// What [`Sessions::parse`] made of a request, in its extensions.
#[derive(Debug, Clone)]
pub struct Parsed(pub Result<Valid, SessionError>);

/// A valid request: the voice, the fingerprint of its body, and the key if any (the
/// fingerprint is computed once here, for both idempotency layers).
#[derive(Debug, Clone)]
pub struct Valid {
    pub voice: String,
    pub fingerprint: String,
    pub key: Option<IdempotencyKey>,
}

/// The spend cap counts valid requests only: an invalid one never calls upstream.
#[derive(Debug, Clone, Copy)]
pub struct ValidOnly;

impl KeyExtractor for ValidOnly {
    fn key(&self, req: &Request) -> Result<Option<String>, MissingExtension> {
        match req.extensions().get::<Parsed>() {
            Some(Parsed(Ok(_))) => Ok(Some(String::new())),
            Some(Parsed(Err(_))) => Ok(None),
            None => Err(MissingExtension("Parsed")),
        }
    }
}

/// A valid request with a key, scoped to the client address (which others may share behind a
/// NAT: so the key must be unguessable, see [`Sessions::parse`]).
#[derive(Debug, Clone, Copy)]
pub struct SessionKey;

impl IdempotentRequest for SessionKey {
    fn identify(&self, req: &Request) -> Result<Option<(Scope, String)>, ApiError> {
        let (Some(Parsed(Ok(valid))), Some(caller)) = (
            req.extensions().get::<Parsed>(),
            req.extensions().get::<Caller>(),
        ) else {
            // An invalid request is answered by the route, after the `ip` layer.
            return Ok(None);
        };
        Ok(valid.key.as_ref().map(|key| {
            (
                Scope::new(&caller.addr.to_string(), crate::FUNCTION.route, key),
                valid.fingerprint.clone(),
            )
        }))
    }
}

impl Sessions {
    /// The route's own work, inside every guard: 400 for an invalid request, else the secret.
    /// The answer carries its record's expiry, the secret's, for the claim around it.
    pub async fn post(&self, gate: &Gate, req: &Request) -> Result<Response<Body>, SessionError> {
        let Some(Parsed(parsed)) = req.extensions().get::<Parsed>() else {
            tracing::error!("POST /session runs inside the parse layer");
            return Err(ApiError::Internal.into());
        };
        let valid = parsed.clone()?;
        let secret = self.mint(gate, &valid.voice).await?;
        let mut response = self.minted(&secret, &valid.voice);
        response
            .extensions_mut()
            .insert(RecordExpiry(secret.expires_at));
        Ok(response)
    }

    /// The voice, the body as a value for the fingerprint, and the `Idempotency-Key` if any.
    pub fn parse(&self, req: &Request) -> Parsed {
        Parsed(self.parse_valid(req))
    }

    fn parse_valid(&self, req: &Request) -> Result<Valid, SessionError> {
        let (voice, canonical) = self.voice(req.body().as_ref())?;
        // Scoped to the address, which others may share (a NAT): a guessable key would hand
        // one person's secret to another, so it must be long.
        let key = IdempotencyKey::from_headers(req.headers())?
            .map(IdempotencyKey::unguessable)
            .transpose()?;
        Ok(Valid {
            voice,
            fingerprint: fingerprint(&canonical),
            key,
        })
    }

    /// 503 while a cooldown runs: the upstream failing, or refusing our API key.
    pub fn cooling_down(&self, gate: &Gate) -> Result<(), SessionError> {
        let waits = [
            (UPSTREAM, "upstream_cooldown"),
            (UPSTREAM_KEY, "upstream_key_cooldown"),
        ]
        .into_iter()
        .filter_map(|(key, layer)| Some((self.cooldown.remaining(key)?, layer)));
        match waits.max() {
            Some((retry_after, layer)) => {
                tracing::info!(decision = "rejected", layer, "upstream cooling down");
                gate.metrics().emit(tollgate::metrics::Event::Cooldown);
                Err(SessionError::Upstream { retry_after })
            }
            None => Ok(()),
        }
    }

    /// The lease of a claim: long enough for a secret fetch and two upstream calls.
    pub fn lease(&self) -> std::time::Duration {
        self.settings.upstream_timeout * 2 + std::time::Duration::from_secs(5)
    }

    /// The voice asked for (or the default) and the body as a value for the fingerprint.
    fn voice(&self, body: &[u8]) -> Result<(String, Value), SessionError> {
        let bad = |detail: String| SessionError::from(ApiError::BadRequest { detail });
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok((
                self.settings.default_voice().to_string(),
                Value::Object(Default::default()),
            ));
        }
        let object = strict_object(body)?;
        let mut voice = self.settings.default_voice().to_string();
        for (name, value) in &object.members {
            match (name.as_str(), value) {
                ("voice", Value::String(v)) if self.settings.voices.contains(v) => {
                    voice = v.clone()
                }
                ("voice", _) => {
                    return Err(bad(format!(
                        "voice must be one of: {}.",
                        self.settings.voices.join(", ")
                    )))
                }
                _ => return Err(bad("Unknown field: only voice is accepted.".into())),
            }
        }
        Ok((voice, object.value))
    }

    /// The API key, the upstream call, and the one retry after the key was refused.
    async fn mint(&self, gate: &Gate, voice: &str) -> Result<ClientSecret, SessionError> {
        let request = SecretRequest {
            model: &self.settings.model,
            voice,
            expires_after_secs: self.settings.expires_after.as_secs(),
        };
        let key = gate
            .secrets()
            .get(&self.settings.api_key)
            .await
            .inspect_err(|_| {
                tracing::info!(
                    decision = "failed",
                    layer = "secrets",
                    "API key unavailable"
                );
            })?;
        let result = match self.upstream.mint(&key, &request).await {
            Err(UpstreamError::Refused { status }) => {
                // The key may have been rotated since we cached it: read it again (one read for
                // all the requests it refused, at most one per key cooldown) and retry once.
                let fresh = gate
                    .secrets()
                    .refetch_refused(&self.settings.api_key, &key, self.settings.auth_cooldown)
                    .await?;
                if secrets_equal(
                    fresh.expose_secret().as_bytes(),
                    key.expose_secret().as_bytes(),
                ) {
                    // The secret store holds the very key that was refused: a retry cannot help.
                    Err(UpstreamError::Refused { status })
                } else {
                    tracing::warn!(
                        status,
                        "upstream refused the cached API key; retrying once with the one just read"
                    );
                    self.upstream.mint(&fresh, &request).await
                }
            }
            other => other,
        };
        match result {
            Ok(secret) => {
                self.cooldown.clear(UPSTREAM);
                Ok(secret)
            }
            Err(UpstreamError::Refused { status }) => {
                // Only an operator can heal this. Until then, each probe would cost an upstream
                // call and an SSM read: cool down for longer than for a failing upstream.
                let retry_after = self
                    .cooldown
                    .start(UPSTREAM_KEY, self.settings.auth_cooldown);
                let parameter = match &self.settings.api_key {
                    SecretSource::Ssm { name } => name.as_str(),
                    SecretSource::Value(_) => "(none: the plain OPENAI_API_KEY variable)",
                };
                tracing::error!(
                    status,
                    parameter,
                    retry_after,
                    "OpenAI refused the API key, also as just read from the secret store: put a valid OpenAI API key into the SSM parameter named by OPENAI_API_KEY_PARAM; until then POST /session answers 503 and tries the key again once per UPSTREAM_AUTH_COOLDOWN_SECONDS"
                );
                gate.metrics()
                    .emit(tollgate::metrics::Event::UpstreamKeyRefused);
                Err(SessionError::Upstream { retry_after })
            }
            Err(e) => {
                let pause = e
                    .retry_after()
                    .map(std::time::Duration::from_secs)
                    .unwrap_or_default()
                    .max(self.settings.upstream_cooldown);
                let retry_after = self.cooldown.start(UPSTREAM, pause);
                tracing::warn!(error = %e, retry_after, "upstream failed; cooling down");
                gate.metrics()
                    .emit(tollgate::metrics::Event::UpstreamFailure);
                Err(SessionError::Upstream { retry_after })
            }
        }
    }

    fn minted(&self, secret: &ClientSecret, voice: &str) -> Response<Body> {
        let mut response = json_response(
            StatusCode::OK,
            &Minted {
                client_secret: &secret.value,
                expires_at: secret.expires_at,
                model: &self.settings.model,
                voice,
            },
        );
        // A secret: no cache anywhere may keep it.
        response
            .headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        response
    }
}
