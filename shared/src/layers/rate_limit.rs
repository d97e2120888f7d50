//! [`RateLimitLayer`]: counts the request in one or more limits, each keyed by a
//! [`KeyExtractor`], in DynamoDB ([`crate::ratelimit`]), and answers 429 when one is full.

use std::sync::Arc;
use std::task::{Context, Poll};

use lambda_http::{Body, Request, Response};
use tower_layer::Layer;
use tower_service::Service;

use super::keys::{AdmissionSlot, KeyExtractor};
use super::{reject, take_ready, ResponseFuture};
use crate::problem::ApiError;
use crate::ratelimit::{LimitCheck, RateLimit, RateLimiter, Verdict};

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
        self.slot.counted()
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
///
/// A layer whose every limit is configured off (each [`RateLimitLayer::limit`] given `None`),
/// and that gives nothing back on a 5xx, is not there: the request goes straight to the inner
/// service, its [`RateLimitLayer::only_if`] condition unevaluated, with no [`Admitted`] of its
/// own (there is nothing to give back). So a function whose limits variable turns a layer off
/// pays nothing for the layer.
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
        if self.limits.is_empty() && !self.refund_server_errors {
            // Every limit of this layer configured off: nothing to count, check or give back,
            // so the request goes straight to the service that was polled ready (no clone of
            // it, no future of our own, no `only_if` evaluated, no `Admitted` of our own: an
            // outer layer's, if any, is already in the extensions).
            return Box::pin(self.inner.call(req));
        }
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
