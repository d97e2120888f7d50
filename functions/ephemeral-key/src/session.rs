//! `POST /session`: a short-lived OpenAI Realtime client secret for a browser voice client.
//!
//! Anyone may call this route, and every secret it mints costs money, so the order matters:
//!
//! 1. kill switch, client address, internal token (layers, in the crate's `stack`);
//! 2. the body (an optional voice from the allowlist) and the optional `Idempotency-Key` (one
//!    key, at least 16 characters), checked here and answered after the `ip` layer;
//! 3. a valid request whose key this process holds completed (the replay cache) is that answer
//!    again, here, before the cooldowns and the limits: it calls nothing upstream and costs no
//!    DynamoDB request, so it needs no quota and no cooldown may hold it back;
//! 4. cooldowns: while the provider is failing, or refusing our API key, answer 503 at once
//!    (no quota used, no upstream, SSM or DynamoDB call);
//! 5. limits: `ip` (skipped for internal callers) counts every request, valid or not (lesson
//!    002), so a 400 costs its `ip` unit; `global`, the spend cap, counts only valid requests,
//!    the ones that will call upstream. A valid request with a key that a full layer refuses
//!    may still be the retry of one whose answer was lost: one eventually consistent read of
//!    the key's record (none for a key this process knows) turns a completed one of the same
//!    body into the replay, counting nothing (the contract: a replay consumes no quota, even
//!    after a layer filled); anything else keeps the 429;
//! 6. the idempotency claim (two-phase, scoped to the client address): a retry after a lost
//!    response gets the same unexpired secret back, with all its quota given back; a 409 or 422
//!    gets its `global` unit back;
//! 7. the API key (SSM, cached) and the upstream call.
//!
//! A failure on our side (upstream, secret store, our tables) gives the caller's quota back, so
//! an outage never locks a caller out (lesson 000), and frees the idempotency key for a retry.

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
use tollgate::idempotency::{
    fingerprint, AbsentKeys, Claim, Existing, IdempotencyKey, IdempotencyStore, Lease, Scope,
    StoredResponse,
};
use tollgate::internal::secrets_equal;
use tollgate::json::strict_object;
use tollgate::layers::Caller;
use tollgate::ratelimit::{Admission, Decision, Layer};
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
    pub absent: AbsentKeys,
    pub cooldown: Cooldown,
}

#[derive(Serialize)]
struct Minted<'a> {
    client_secret: &'a str,
    expires_at: u64,
    model: &'a str,
    voice: &'a str,
}

impl Sessions {
    pub async fn post(
        &self,
        gate: &Gate,
        req: &Request,
        admission: &mut Admission,
    ) -> Result<Response<Body>, SessionError> {
        // The kill switch and the client address ran as layers (the crate's `stack`).
        let caller = *req.extensions().get::<Caller>().ok_or(ApiError::Internal)?;
        let ip = caller.addr.to_string();
        // Validated first but answered after the `ip` layer: an invalid request costs its `ip`
        // unit (lesson 002) and no `global` unit, since it never calls upstream. A valid one is
        // counted in both with one check, so a full layer in the block cache costs no write.
        let parsed = self.parse(gate, req);
        let keyed = match &parsed {
            Ok((_, canonical, Some(key))) => Some((
                Scope::new(&ip, crate::FUNCTION.route, key),
                fingerprint(canonical),
            )),
            _ => None,
        };
        // The retry of a request this process has answered is that answer again, before any
        // limit and any cooldown: it calls nothing upstream and costs no DynamoDB request, so
        // it needs no quota, and a layer that filled since must not refuse it.
        if let Some((scope, fingerprint)) = &keyed {
            if let Some(Existing::Replay(stored)) = self.idempotency.cached(scope, fingerprint) {
                tracing::info!(
                    decision = "replayed",
                    source = "replay_cache",
                    "idempotent replay"
                );
                return Ok(stored.replay());
            }
        }
        self.cooling_down(gate)?;
        let layers: &[(Layer, &str)] = match parsed {
            Ok(_) => &[(Layer::Ip, &ip), (Layer::Global, "")],
            Err(_) => &[(Layer::Ip, &ip)],
        };
        if let Err(refused) = gate.limit(admission, &caller, layers).await {
            if let (ApiError::RateLimited(decision), Some((scope, fingerprint))) =
                (&refused, &keyed)
            {
                if let Some(stored) = self
                    .replay_refused(gate, scope, fingerprint, decision)
                    .await
                {
                    return Ok(stored.replay());
                }
            }
            return Err(refused.into());
        }
        let (voice, _, _) = parsed?;

        let lease = match &keyed {
            None => None,
            Some((scope, fingerprint)) => {
                // A duplicate this process has seen completed since the check above, or seen
                // with another body, is answered without a claim.
                let found = match self.idempotency.cached(scope, fingerprint) {
                    Some(existing) => Ok(Claim::Existing(existing)),
                    None => {
                        let lease = self.lease();
                        self.idempotency.claim(scope, fingerprint, lease).await
                    }
                };
                match found {
                    Ok(Claim::Acquired(lease)) => Some(lease),
                    Ok(Claim::Existing(existing)) => {
                        match existing {
                            Existing::Replay(_) => {
                                // The retry of a request that already got its secret uses no
                                // quota.
                                gate.refund(admission).await;
                                tracing::info!(decision = "replayed", "idempotent replay");
                            }
                            // 409 or 422: no upstream call, so no spend; the address's unit
                            // stays spent, as for any refused request.
                            Existing::InProgress { .. } | Existing::KeyReused => {
                                gate.refund_layer(admission, Layer::Global).await;
                            }
                        }
                        return existing.into_result();
                    }
                    Err(e) => {
                        gate.refund(admission).await;
                        return Err(e.into());
                    }
                }
            }
        };

        match self.mint(gate, &voice).await {
            Ok(secret) => {
                let response = self.minted(&secret, &voice);
                if let Some(lease) = &lease {
                    self.complete(lease, &response, secret.expires_at).await;
                }
                Ok(response)
            }
            Err(e) => {
                if let Some(lease) = &lease {
                    if let Err(release) = self.idempotency.release(lease).await {
                        tracing::warn!(error = %release, "could not release the idempotency key; it frees itself when the lease ends");
                    }
                }
                gate.refund(admission).await;
                Err(e)
            }
        }
    }

    /// The voice, the body as a value for the fingerprint, and the `Idempotency-Key` if any.
    fn parse(
        &self,
        gate: &Gate,
        req: &Request,
    ) -> Result<(String, Value, Option<IdempotencyKey>), SessionError> {
        let (voice, canonical) = self.voice(gate.body(req)?)?;
        // Scoped to the address, which others may share (a NAT): a guessable key would hand
        // one person's secret to another, so it must be long.
        let key = IdempotencyKey::from_headers(req.headers())?
            .map(IdempotencyKey::unguessable)
            .transpose()?;
        Ok((voice, canonical, key))
    }

    /// 503 while a cooldown runs: the upstream failing, or refusing our API key.
    fn cooling_down(&self, gate: &Gate) -> Result<(), SessionError> {
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

    /// For a valid request with a key that a limit refused: the stored secret if the key's
    /// first request got it (its answer lost), else `None` and the 429 stands. One eventually
    /// consistent read at most, none for a key this process already knows; a key found without
    /// a record is remembered as long as the block cache remembers the refusal, so a repeated
    /// fresh key costs no second read. Another body or a request still in progress keeps the
    /// 429 rather than a 422 or 409: the layer is full either way, and the answer should not
    /// depend on what the store holds under a key the limits refused.
    async fn replay_refused(
        &self,
        gate: &Gate,
        scope: &Scope,
        fingerprint: &str,
        refusal: &Decision,
    ) -> Option<StoredResponse> {
        let max_age = gate.settings().block_cache_max_age.as_millis() as u64;
        let until = refusal
            .reset_at_ms
            .min(refusal.now_ms.saturating_add(max_age));
        let stored = self
            .idempotency
            .replay_refused(scope, fingerprint, &self.absent, until)
            .await?;
        tracing::info!(
            decision = "replayed",
            layer = %refusal.limit.layer(),
            "idempotent replay of a request a full layer refused"
        );
        Some(stored)
    }

    /// The lease of a claim: long enough for a secret fetch and two upstream calls.
    fn lease(&self) -> std::time::Duration {
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

    /// Stores the response under the key until the secret expires.
    async fn complete(&self, lease: &Lease, response: &Response<Body>, expires_at: u64) {
        let stored = StoredResponse::capture(response);
        if let Err(e) = self
            .idempotency
            .complete(lease, &stored, Some(expires_at))
            .await
        {
            // The client has its secret; a retry after the lease ends would mint another.
            tracing::warn!(error = %e, "could not store the minted secret under the idempotency key");
        }
    }
}
