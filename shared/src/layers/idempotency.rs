//! [`IdempotencyLayer`]: idempotency keys around any effect (its doc says how).

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use lambda_http::{Body, Request, Response};
use tower_layer::Layer;
use tower_service::Service;

use super::{reject, take_ready, KeyExtractor, Rejected, ResponseFuture};
use crate::idempotency::{
    fingerprint, AbsentKeys, Claim, Existing, IdempotencyKey, IdempotencyStore, KeyError, Lease,
    RecordState, Scope, StoredResponse,
};
use crate::problem::ApiError;
use crate::ratelimit::Layer as LimitLayer;

/// What a request is for idempotency.
pub trait IdempotentRequest: Send + Sync + 'static {
    /// The request's scope and fingerprint; `Ok(None)`: it carries no key and is not
    /// idempotent; `Err`: it is refused (a malformed key, a missing one where it is required).
    fn identify(&self, req: &Request) -> Result<Option<(Scope, String)>, ApiError>;
}

/// The key from `Idempotency-Key`, the caller from a [`KeyExtractor`] (a verified identity, or
/// the client address for a public route), the route's name, and the SHA-256 of the body's
/// RFC 8785 canonical JSON (an empty body is `{}`).
pub struct KeyedJson {
    route: String,
    caller: Box<dyn KeyExtractor>,
    required: bool,
    unguessable: bool,
}

impl std::fmt::Debug for KeyedJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedJson")
            .field("route", &self.route)
            .field("required", &self.required)
            .finish_non_exhaustive()
    }
}

impl KeyedJson {
    /// Keys scoped to `route` (e.g. `POST /orders`) and the caller `caller` gives. A key is
    /// optional until [`Self::required`].
    pub fn new(route: &str, caller: impl KeyExtractor) -> Self {
        Self {
            route: route.to_string(),
            caller: Box::new(caller),
            required: false,
            unguessable: false,
        }
    }

    /// A request without a key is refused with 400.
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }

    /// Keys must be long enough that nobody guesses another's: for a scope others may share
    /// (the client address behind a NAT).
    pub fn unguessable(mut self) -> Self {
        self.unguessable = true;
        self
    }
}

impl IdempotentRequest for KeyedJson {
    fn identify(&self, req: &Request) -> Result<Option<(Scope, String)>, ApiError> {
        let key = match IdempotencyKey::from_headers(req.headers())? {
            Some(key) if self.unguessable => key.unguessable()?,
            Some(key) => key,
            None if self.required => return Err(KeyError::Missing.into()),
            None => return Ok(None),
        };
        let body: &[u8] = req.body().as_ref();
        let value = if body.iter().all(u8::is_ascii_whitespace) {
            serde_json::Value::Object(Default::default())
        } else {
            serde_json::from_slice(body).map_err(|_| ApiError::BadRequest {
                detail: "The body must be JSON.".into(),
            })?
        };
        let caller = self.caller.key(req).map_err(|e| {
            tracing::error!(error = %e, "idempotency cannot scope the request");
            ApiError::Internal
        })?;
        let Some(caller) = caller else {
            tracing::error!("idempotency scope has no caller for this request");
            return Err(ApiError::Internal);
        };
        Ok(Some((
            Scope::new(&caller, &self.route, &key),
            fingerprint(&value),
        )))
    }
}

/// The key this request holds, in its extensions while the inner service runs under
/// [`IdempotencyLayer::claims`]: the effect can tag what it writes with the scope, and should
/// finish before `lease_until_ms` (after it, a duplicate may claim the key again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// Where the record lives.
    pub scope: Scope,
    /// The request's fingerprint.
    pub fingerprint: String,
    /// When the claim's lease ends (Unix milliseconds).
    pub lease_until_ms: u64,
}

/// What a duplicate gets while the first request with its key is still in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InProgress {
    /// 409 `request_in_progress` with `Retry-After` (until the first one's lease ends).
    Conflict,
    /// Read the record again until the first one's answer is stored (then replay it), for at
    /// most this long; then 409 as above.
    Wait(Duration),
}

/// The expiry (Unix seconds) of the record an answer is stored in, when it must end before the
/// store's TTL (a secret that expires sooner than that): put it in the inner response's
/// extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordExpiry(pub u64);

/// Changes an answer before it is sent: a replayed one (Powertools' `response_hook`; the stored
/// answer is unchanged), or one the key refused.
pub type ReplayHook = Arc<dyn Fn(Response<Body>) -> Response<Body> + Send + Sync>;

#[derive(Clone)]
enum Mode {
    Replays {
        absent: Arc<AbsentKeys>,
        absent_for: Duration,
    },
    Claims {
        lease: Duration,
        in_progress: InProgress,
        spend: Vec<LimitLayer>,
    },
}

/// Idempotency keys around any effect, as a layer (the two-phase mode of
/// [`crate::idempotency`]: claim, run the inner service, store its answer or free the key).
///
/// Two places in a stack, each one layer:
///
/// - [`IdempotencyLayer::replays`], outside the limits: the retry of a request this process has
///   answered is that answer again, before any limit, any cooldown and any DynamoDB request (a
///   replay needs no quota); and a request a full limit refused (429) whose key holds its
///   completed answer (its first answer was lost) gets that answer instead, for one eventually
///   consistent read at most.
/// - [`IdempotencyLayer::claims`], inside the limits, around the effect: the key is claimed
///   with a conditional write; a duplicate gets the stored answer (its units given back: a
///   replay consumes no quota), 409 + `Retry-After` while the first is in progress (or, with
///   [`InProgress::Wait`], its answer once it comes, within a bound), 422 for another body (the
///   units of the `spend` layers given back: no effect ran). The inner answer is stored under
///   the key unless it is a 5xx, in which case the key is freed for a retry.
///
/// What a request is, for idempotency, is an [`IdempotentRequest`]: its scope (caller, route,
/// key) and the fingerprint of its payload. [`KeyedJson`] is the usual one: the key from a
/// header, the caller from a [`KeyExtractor`], the fingerprint of the JSON body's canonical form.
///
/// # Example: an idempotent POST around an effect outside DynamoDB
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use lambda_http::{Body, Request, Response};
/// use tollgate::clock::SystemClock;
/// use tollgate::gate::Gate;
/// use tollgate::idempotency::IdempotencyStore;
/// use tollgate::layers::{
///     handler_fn, ClientAddress, IdempotencyLayer, InProgress, KeyedJson, Methods,
/// };
/// use tollgate::ratelimit::Layer;
/// use tollgate::ApiError;
/// use tower::ServiceBuilder;
///
/// fn methods(path: &str) -> Option<&'static str> {
///     (path == "/emails").then_some("POST")
/// }
///
/// /// Sends the email; runs once per key (a retry gets this answer again, byte for byte).
/// async fn send_email(_req: Request) -> Result<Response<Body>, ApiError> {
///     let queued = Body::from(r#"{"queued":true}"#);
///     Ok(Response::builder().status(202).body(queued).map_err(|_| ApiError::Internal)?)
/// }
///
/// fn stack(gate: &Gate, ddb: aws_sdk_dynamodb::Client) -> impl tower::Service<Request> {
///     let day = Duration::from_secs(86_400);
///     let store = IdempotencyStore::new(ddb, "my-idempotency", Arc::new(SystemClock), day)
///         .with_replay_cache(1_000);
///     // `Idempotency-Key` required, scoped to the client address and this route.
///     let request = KeyedJson::new("POST /emails", ClientAddress).required().unguessable();
///     ServiceBuilder::new()
///         .layer(gate.respond_layer())
///         .layer(gate.routes_layer(Methods(methods)))
///         .layer(gate.kill_switch_layer())
///         .layer(gate.client_address_layer())
///         .layer(gate.rate_limit_layer().limit(gate.rate_limit(Layer::Ip), ClientAddress))
///         // Claim for 30 s (longer than the effect takes); a 409 or 422 gives back the `ip`
///         // unit, since no email was sent; a duplicate waits up to 2 s for the first answer.
///         .layer(
///             IdempotencyLayer::claims(store, request, Duration::from_secs(30), &[Layer::Ip])
///                 .in_progress(InProgress::Wait(Duration::from_secs(2))),
///         )
///         .service(handler_fn(send_email))
/// }
/// ```
#[derive(Clone)]
pub struct IdempotencyLayer {
    store: IdempotencyStore,
    request: Arc<dyn IdempotentRequest>,
    mode: Mode,
    on_replay: Option<ReplayHook>,
    on_rejection: Option<ReplayHook>,
}

impl std::fmt::Debug for IdempotencyLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("table", &self.store.table())
            .finish_non_exhaustive()
    }
}

impl IdempotencyLayer {
    /// Outside the limits: replays from the process's replay cache, and after a 429 the stored
    /// answer of a request whose first answer was lost. A key looked up and found without a
    /// record is remembered in `absent` for `absent_for` at most (and never past the limit's
    /// reset), so a flood of refused fresh keys costs one read each at most.
    pub fn replays(
        store: IdempotencyStore,
        request: impl IdempotentRequest,
        absent: Arc<AbsentKeys>,
        absent_for: Duration,
    ) -> Self {
        Self {
            store,
            request: Arc::new(request),
            mode: Mode::Replays { absent, absent_for },
            on_replay: None,
            on_rejection: None,
        }
    }

    /// Around the effect: claim for `lease` (longer than the effect can take: a claim whose
    /// lease ended may be taken again), then store the inner answer or free the key. A 409 or
    /// 422 gives back the units of `spend` (the layers that pay for the effect, which did not
    /// run); a replay gives back every unit.
    pub fn claims(
        store: IdempotencyStore,
        request: impl IdempotentRequest,
        lease: Duration,
        spend: &[LimitLayer],
    ) -> Self {
        Self {
            store,
            request: Arc::new(request),
            mode: Mode::Claims {
                lease,
                in_progress: InProgress::Conflict,
                spend: spend.to_vec(),
            },
            on_replay: None,
            on_rejection: None,
        }
    }

    /// What a duplicate of a request in progress gets (claims only; default: 409).
    pub fn in_progress(mut self, policy: InProgress) -> Self {
        if let Mode::Claims { in_progress, .. } = &mut self.mode {
            *in_progress = policy;
        }
        self
    }

    /// Changes every answer the key refused (409 while in progress, 422 for another body)
    /// before it is sent: a header pointing at the first request, a log line.
    pub fn on_rejection(
        mut self,
        hook: impl Fn(Response<Body>) -> Response<Body> + Send + Sync + 'static,
    ) -> Self {
        self.on_rejection = Some(Arc::new(hook));
        self
    }

    /// Changes every replayed answer before it is sent.
    pub fn on_replay(
        mut self,
        hook: impl Fn(Response<Body>) -> Response<Body> + Send + Sync + 'static,
    ) -> Self {
        self.on_replay = Some(Arc::new(hook));
        self
    }
}

impl<S> Layer<S> for IdempotencyLayer {
    type Service = IdempotencyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of [`IdempotencyLayer`].
#[derive(Clone)]
pub struct IdempotencyService<S> {
    inner: S,
    layer: IdempotencyLayer,
}

impl<S> std::fmt::Debug for IdempotencyService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.layer.fmt(f)
    }
}

impl IdempotencyLayer {
    fn replay(&self, stored: &StoredResponse, source: &str) -> Response<Body> {
        tracing::info!(decision = "replayed", source, "idempotent replay");
        let response = stored.replay();
        match &self.on_replay {
            Some(hook) => hook(response),
            None => response,
        }
    }

    /// The stored answer of a request in progress, once it comes within `wait`.
    async fn wait_for(&self, scope: &Scope, fingerprint: &str, wait: Duration) -> Option<Existing> {
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(50);
        while started.elapsed() + pause <= wait {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
            match self.store.read(scope).await {
                Ok(Some(record)) if matches!(record.state, RecordState::Completed(_)) => {
                    return Some(record.verdict(fingerprint, self.store.now_ms()));
                }
                Ok(Some(_)) => {}
                // Released or expired: the duplicate may claim it now.
                Ok(None) => return None,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read a record in progress");
                    return None;
                }
            }
        }
        None
    }
}

impl<S> Service<Request> for IdempotencyService<S>
where
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = lambda_http::Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let mut inner = take_ready(&mut self.inner);
        let layer = self.layer.clone();
        Box::pin(async move {
            match &layer.mode {
                Mode::Replays { absent, absent_for } => {
                    // Refusals are the claim's business, inside the limits.
                    let Ok(Some((scope, fp))) = layer.request.identify(&req) else {
                        return inner.call(req).await;
                    };
                    if let Some(Existing::Replay(stored)) = layer.store.cached(&scope, &fp) {
                        return Ok(layer.replay(&stored, "replay_cache"));
                    }
                    let response = inner.call(req).await?;
                    let Some(Rejected(ApiError::RateLimited(decision))) =
                        response.extensions().get::<Rejected>()
                    else {
                        return Ok(response);
                    };
                    let until = decision.reset_at_ms.min(
                        decision
                            .now_ms
                            .saturating_add(absent_for.as_millis() as u64),
                    );
                    match layer.store.replay_refused(&scope, &fp, absent, until).await {
                        Some(stored) => {
                            tracing::info!(layer = %decision.limit.layer(), "replaying the answer of a request a full layer refused");
                            Ok(layer.replay(&stored, "refused"))
                        }
                        None => Ok(response),
                    }
                }
                Mode::Claims {
                    lease,
                    in_progress,
                    spend,
                } => {
                    let (scope, fp) = match layer.request.identify(&req) {
                        Ok(Some(identified)) => identified,
                        Ok(None) => return inner.call(req).await,
                        Err(e) => return Ok(reject(&req, &e)),
                    };
                    let admitted = Units::of(&req);
                    let claimed = match layer.store.cached(&scope, &fp) {
                        Some(existing) => Ok(Claim::Existing(existing)),
                        None => layer.store.claim(&scope, &fp, *lease).await,
                    };
                    let existing = match claimed {
                        Ok(Claim::Acquired(lease)) => {
                            let mut req = req;
                            req.extensions_mut().insert(Claimed {
                                scope,
                                fingerprint: fp,
                                lease_until_ms: lease.lease_until_ms,
                            });
                            return run(&layer.store, lease, inner, req).await;
                        }
                        Ok(Claim::Existing(Existing::InProgress { retry_after })) => {
                            match in_progress {
                                InProgress::Wait(wait) => layer
                                    .wait_for(&scope, &fp, *wait)
                                    .await
                                    .unwrap_or(Existing::InProgress { retry_after }),
                                InProgress::Conflict => Existing::InProgress { retry_after },
                            }
                        }
                        Ok(Claim::Existing(existing)) => existing,
                        Err(e) => {
                            // Our table failed: the request cost the caller nothing.
                            admitted.refund().await;
                            return Ok(reject(&req, &ApiError::from(e)));
                        }
                    };
                    match existing {
                        Existing::Replay(stored) => {
                            // A replay consumes no quota.
                            admitted.refund().await;
                            Ok(layer.replay(&stored, "store"))
                        }
                        refused => {
                            // No effect ran: what pays for it is given back; the rest (the
                            // address's unit) stays spent, as for any refused request.
                            admitted.refund_layers(spend).await;
                            let error = match refused {
                                Existing::InProgress { retry_after } => {
                                    ApiError::RequestInProgress { retry_after }
                                }
                                _ => ApiError::IdempotencyKeyReused,
                            };
                            let response = reject(&req, &error);
                            Ok(match &layer.on_rejection {
                                Some(hook) => hook(response),
                                None => response,
                            })
                        }
                    }
                }
            }
        })
    }
}

/// The effect under a held claim: its answer stored (a 5xx never is: the key is freed).
async fn run<S>(
    store: &IdempotencyStore,
    lease: Lease,
    mut inner: S,
    req: Request,
) -> Result<Response<Body>, lambda_http::Error>
where
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error>,
{
    let response = match inner.call(req).await {
        Ok(response) => response,
        Err(e) => {
            release(store, &lease).await;
            return Err(e);
        }
    };
    if response.status().is_server_error() {
        release(store, &lease).await;
        return Ok(response);
    }
    let expiry = response.extensions().get::<RecordExpiry>().map(|e| e.0);
    let stored = StoredResponse::capture(&response);
    if let Err(e) = store.complete(&lease, &stored, expiry).await {
        // The client has its answer; a retry after the lease ends would run the effect again.
        tracing::warn!(error = %e, "could not store the answer under the idempotency key");
    }
    Ok(response)
}

async fn release(store: &IdempotencyStore, lease: &Lease) {
    if let Err(e) = store.release(lease).await {
        tracing::warn!(error = %e, "could not release the idempotency key; it frees itself when the lease ends");
    }
}

/// The units a request holds in the limits of its stack ([`super::Admitted`], when a
/// [`super::RateLimitLayer`] counted it), to give back. Without the `ratelimit` feature nothing
/// counts a request, and there is nothing to give back.
struct Units(#[cfg(feature = "ratelimit")] Option<super::Admitted>);

impl Units {
    #[cfg(feature = "ratelimit")]
    fn of(req: &Request) -> Self {
        Self(req.extensions().get::<super::Admitted>().cloned())
    }

    #[cfg(not(feature = "ratelimit"))]
    fn of(_: &Request) -> Self {
        Self()
    }

    /// Gives back every unit.
    async fn refund(&self) {
        #[cfg(feature = "ratelimit")]
        if let Some(admitted) = &self.0 {
            admitted.refund().await;
        }
    }

    /// Gives back the units of `layers`.
    async fn refund_layers(&self, layers: &[LimitLayer]) {
        #[cfg(feature = "ratelimit")]
        if let Some(admitted) = &self.0 {
            for layer in layers {
                admitted.refund_layer(*layer).await;
            }
        }
        #[cfg(not(feature = "ratelimit"))]
        let _ = layers;
    }
}
