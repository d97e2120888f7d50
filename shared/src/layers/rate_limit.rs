//! [`RateLimitLayer`]: counts the request in one or more limits, each keyed by a
//! [`KeyExtractor`], in DynamoDB ([`crate::ratelimit`]), and answers 429 when one is full.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use lambda_http::{Body, Request, Response};
use tower_layer::Layer;
use tower_service::Service;

use super::address::Caller;
use super::{reject, take_ready, ResponseFuture};
use crate::problem::ApiError;
use crate::ratelimit::{Admission, LimitCheck, RateLimit, RateLimiter, Verdict};

/// A key extractor needed an extension that no outer layer put there: the stack is assembled
/// in the wrong order (a 500, logged; never a request counted under a wrong key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0} missing from the request's extensions: is its layer outside this one?")]
pub struct MissingExtension(pub &'static str);

/// What a limit counts a request under.
///
/// Key only on what the stack has verified or what the platform vouches for (the address
/// [`super::ClientAddressLayer`] found, an identity an authentication layer checked, the route
/// [`super::RoutesLayer`] matched), never on a value the client merely sends: a client that can
/// choose its key can mint a fresh quota per request.
///
/// # Example: one budget per route
///
/// ```
/// use lambda_http::Request;
/// use tollgate::gate::Gate;
/// use tollgate::layers::{KeyExtractor, MissingExtension, RateLimitLayer, RoutePath};
/// use tollgate::ratelimit::RateLimit;
///
/// /// The route [`RoutesLayer`](tollgate::layers::RoutesLayer) matched, which must be outside.
/// struct PerRoute;
///
/// impl KeyExtractor for PerRoute {
///     fn key(&self, req: &Request) -> Result<Option<String>, MissingExtension> {
///         let route = req.extensions().get::<RoutePath>();
///         let route = route.ok_or(MissingExtension("RoutePath"))?;
///         Ok(Some(route.0.clone()))
///     }
/// }
///
/// fn per_route(gate: &Gate) -> RateLimitLayer {
///     // A `global`-layer budget of 500 a minute, one counter per route.
///     let limit = "global=500/1m".parse::<RateLimit>().ok();
///     gate.rate_limit_layer().limit(limit, PerRoute)
/// }
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key of `req` for this limit; `Ok(None)`: the request is not counted in it.
    fn key(&self, req: &Request) -> Result<Option<String>, MissingExtension>;
}

/// The client address of [`Caller`] (so [`super::ClientAddressLayer`] must be outside): one key
/// per IPv4 address or IPv6 /64. Internal callers are not counted.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientAddress;

impl KeyExtractor for ClientAddress {
    fn key(&self, req: &Request) -> Result<Option<String>, MissingExtension> {
        let caller = req
            .extensions()
            .get::<Caller>()
            .ok_or(MissingExtension("Caller"))?;
        Ok((!caller.internal).then(|| caller.addr.to_string()))
    }
}

/// One key for every request: a cap on the whole function (a spend cap), internal callers
/// included.
#[derive(Debug, Clone, Copy, Default)]
pub struct Global;

impl KeyExtractor for Global {
    fn key(&self, _: &Request) -> Result<Option<String>, MissingExtension> {
        Ok(Some(String::new()))
    }
}

/// An identity a layer has verified, as it puts it in the request's extensions (a client id
/// after its token was checked, a tenant after its signature was).
pub trait Identity: Clone + Send + Sync + 'static {
    /// The key it is counted under.
    fn id(&self) -> &str;
}

/// The verified identity `T` from the request's extensions: the layer that verifies it must be
/// outside this one, so that only verified values are ever counted (a client id merely sent
/// would let a client spend another's quota, or dodge its own by sending a new one each time).
/// Internal callers are not counted. With `optional`, a request without `T` is not counted
/// (for a limit checked ahead of authentication, from what this process already verified);
/// without, a missing `T` is a misordered stack.
#[derive(Debug)]
pub struct Verified<T> {
    optional: bool,
    _identity: std::marker::PhantomData<fn() -> T>,
}

impl<T> Verified<T> {
    /// The identity `T`, which must be there.
    pub fn new() -> Self {
        Self {
            optional: false,
            _identity: std::marker::PhantomData,
        }
    }

    /// The identity `T` when it is there; requests without it are not counted.
    pub fn if_present() -> Self {
        Self {
            optional: true,
            _identity: std::marker::PhantomData,
        }
    }
}

impl<T> Default for Verified<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Identity> KeyExtractor for Verified<T> {
    fn key(&self, req: &Request) -> Result<Option<String>, MissingExtension> {
        if req.extensions().get::<Caller>().is_some_and(|c| c.internal) {
            return Ok(None);
        }
        match req.extensions().get::<T>() {
            Some(identity) => Ok(Some(identity.id().to_string())),
            None if self.optional => Ok(None),
            None => Err(MissingExtension(std::any::type_name::<T>())),
        }
    }
}

/// What one request has consumed in the limits of one stack, shared by its layers: put in the
/// request's extensions by [`super::RespondLayer`] (which reads the tightest decision for the
/// `RateLimit` fields), filled by each [`RateLimitLayer`]. A handler that counts limits itself
/// (with [`RateLimiter::check`]) takes the admission out and puts it back, so the response
/// carries its fields too.
#[derive(Debug, Clone, Default)]
pub struct AdmissionSlot(Arc<Mutex<Admission>>);

impl AdmissionSlot {
    /// Everything counted so far, leaving the slot empty.
    pub fn take(&self) -> Admission {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Adds `admission` to what the slot holds.
    pub fn put(&self, admission: Admission) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .absorb(admission);
    }
}

/// The units a request was counted in so far, in its extensions once a [`RateLimitLayer`]
/// counted it: an inner service gives them back when the request turned out to cost nothing
/// (a replay) or failed on our side (so an outage never locks a caller out, lesson 000).
#[derive(Debug, Clone)]
pub struct Admitted {
    limiter: Arc<RateLimiter>,
    slot: AdmissionSlot,
}

impl Admitted {
    /// Gives back every unit counted so far.
    pub async fn refund(&self) {
        let mut admission = self.slot.take();
        self.limiter.refund(&mut admission).await;
        self.slot.put(admission);
    }

    /// Gives back the units counted in `layer` only.
    pub async fn refund_layer(&self, layer: crate::ratelimit::Layer) {
        let mut admission = self.slot.take();
        self.limiter.refund_layer(&mut admission, layer).await;
        self.slot.put(admission);
    }

    /// How many counters the request holds.
    pub fn counted(&self) -> usize {
        self.slot
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .counted()
    }
}

type Limits = Arc<[(RateLimit, Arc<dyn KeyExtractor>)]>;
type Condition = Arc<dyn Fn(&Request) -> bool + Send + Sync>;

/// Counts each request in its limits, in order, in one check: when one is full the request is
/// answered 429 and every unit it holds in this stack is given back (a 429 leaves the counters
/// as it found them). A limit whose extractor gives no key does not count the request.
///
/// With [`RateLimitLayer::known_full_only`] the layer counts nothing and only refuses what the
/// block cache knows to be full, at no cost: ahead of an earlier limit, for a request whose
/// later limit this process can already tell is full.
#[derive(Clone)]
pub struct RateLimitLayer {
    limiter: Arc<RateLimiter>,
    limits: Vec<(RateLimit, Arc<dyn KeyExtractor>)>,
    known_full_only: bool,
    only_if: Option<Condition>,
    refund_server_errors: bool,
}

impl std::fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field(
                "limits",
                &self.limits.iter().map(|(l, _)| l).collect::<Vec<_>>(),
            )
            .field("known_full_only", &self.known_full_only)
            .finish()
    }
}

impl RateLimitLayer {
    /// A layer counting in `limiter`'s table, with no limit yet.
    pub fn new(limiter: Arc<RateLimiter>) -> Self {
        Self {
            limiter,
            limits: Vec::new(),
            known_full_only: false,
            only_if: None,
            refund_server_errors: false,
        }
    }

    /// Adds `limit`, keyed by `key`; `None` (a layer configured off) adds nothing.
    pub fn limit(mut self, limit: Option<RateLimit>, key: impl KeyExtractor) -> Self {
        if let Some(limit) = limit {
            self.limits.push((limit, Arc::new(key)));
        }
        self
    }

    /// Refuse only what the block cache knows is full; count nothing.
    pub fn known_full_only(mut self) -> Self {
        self.known_full_only = true;
        self
    }

    /// Give back every unit the request holds in this stack when the inner service answers
    /// with a 5xx: a failure on our side (a provider, our tables) costs the caller nothing, so
    /// an outage never locks a caller out (lesson 000).
    pub fn refund_server_errors(mut self) -> Self {
        self.refund_server_errors = true;
        self
    }

    /// Apply the layer only to requests for which `condition` holds; the others pass
    /// uncounted (to the layers that count them).
    pub fn only_if(mut self, condition: impl Fn(&Request) -> bool + Send + Sync + 'static) -> Self {
        self.only_if = Some(Arc::new(condition));
        self
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimitService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService {
            inner,
            limiter: self.limiter.clone(),
            limits: self.limits.clone().into(),
            known_full_only: self.known_full_only,
            only_if: self.only_if.clone(),
            refund_server_errors: self.refund_server_errors,
        }
    }
}

/// The service of [`RateLimitLayer`].
#[derive(Clone)]
pub struct RateLimitService<S> {
    inner: S,
    limiter: Arc<RateLimiter>,
    limits: Limits,
    known_full_only: bool,
    only_if: Option<Condition>,
    refund_server_errors: bool,
}

impl<S: std::fmt::Debug> std::fmt::Debug for RateLimitService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S> Service<Request> for RateLimitService<S>
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

    fn call(&mut self, mut req: Request) -> Self::Future {
        let mut inner = take_ready(&mut self.inner);
        let limiter = self.limiter.clone();
        let limits = self.limits.clone();
        let known_full_only = self.known_full_only;
        let refund_server_errors = self.refund_server_errors;
        let applies = self
            .only_if
            .as_ref()
            .is_none_or(|condition| condition(&req));
        Box::pin(async move {
            if !applies {
                return inner.call(req).await;
            }
            let mut keys = Vec::with_capacity(limits.len());
            for (limit, extractor) in limits.iter() {
                match extractor.key(&req) {
                    Ok(Some(key)) => keys.push((limit, key)),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::error!(error = %e, "rate limit cannot key the request");
                        return Ok(reject(&req, &ApiError::Internal));
                    }
                }
            }
            let checks: Vec<LimitCheck<'_>> = keys
                .iter()
                .map(|(limit, key)| LimitCheck { limit, key })
                .collect();
            if known_full_only {
                if let Some(decision) = limiter.blocked(&checks) {
                    tracing::info!(decision = "rejected", layer = %decision.limit.layer(), source = "block_cache", "rate limited");
                    return Ok(reject(&req, &ApiError::RateLimited(decision)));
                }
                return inner.call(req).await;
            }
            let slot = req
                .extensions()
                .get::<AdmissionSlot>()
                .cloned()
                .unwrap_or_default();
            if !checks.is_empty() {
                let mut admission = slot.take();
                let verdict = limiter.check(&mut admission, &checks).await;
                slot.put(admission);
                match verdict {
                    Ok(Verdict::Admitted) => {}
                    Ok(Verdict::Rejected(decision)) => {
                        return Ok(reject(&req, &ApiError::RateLimited(decision)))
                    }
                    Err(e) => return Ok(reject(&req, &ApiError::from(e))),
                }
            }
            drop(checks);
            let admitted = Admitted { limiter, slot };
            req.extensions_mut().insert(admitted.clone());
            let response = inner.call(req).await?;
            if refund_server_errors && response.status().is_server_error() {
                admitted.refund().await;
            }
            Ok(response)
        })
    }
}
