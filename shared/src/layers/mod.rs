//! The guards as [tower](https://docs.rs/tower) layers over `lambda_http`, so a function's guard order is one
//! `ServiceBuilder` read top to bottom, and `lambda_http::run` (or `run_concurrent`) takes the
//! stack as it is.
//!
//! Every service here is `Service<Request, Response = Response<Body>, Error = lambda_http::Error>`,
//! `Clone + Send`, with `Send + 'static` futures. A guard that refuses a request answers it
//! itself, with the problem+json body of [`crate::problem`] (never an error's `Display` text),
//! and marks the response with [`Rejected`] so [`RespondLayer`] can count it. What a guard
//! learns it passes inward in the request's extensions:
//!
//! | layer | answers | headers it adds | passes inward |
//! |---|---|---|---|
//! | [`RespondLayer`] | 500 for an inner `Err` | `X-Request-Id`; `RateLimit`, `RateLimit-Policy` of the tightest layer passed | [`RequestId`], the request's admission slot |
//! | [`CorsLayer`] | 204 to a listed origin's preflight of a served path | `Access-Control-*`, `Vary: Origin` | nothing |
//! | [`RoutesLayer`] | 404 outside the routes, 405 (`Allow`), 413 | `Allow` | [`RoutePath`] |
//! | [`KillSwitchLayer`] | 403 `service_disabled`, 503 when the switch cannot be read | `Retry-After` on 503 | nothing |
//! | [`ClientAddressLayer`] | 400/403 (no trustworthy address), 503 (origin secret unreadable) | | [`Caller`] |
//! | [`RateLimitLayer`] | 429, 503 when the counters cannot be written | `Retry-After`, `RateLimit*` | [`Admitted`] |
//! | [`IdempotencyLayer::replays`] | the stored answer of a retry (from memory; after a 429, from the table) | `Idempotent-Replayed: true` | nothing |
//! | [`IdempotencyLayer::claims`] | the stored answer, 409 (`Retry-After`), 422, 400 for a malformed key, 503 when the table fails | `Idempotent-Replayed: true`, `Retry-After` | [`Claimed`] |
//!
//! Ordering rules, and why:
//!
//! 1. [`RespondLayer`] outermost: every answer, refusals included, carries the request id.
//! 2. CORS and routes before any guard: a preflight or a request for no route spends nothing
//!    (no kill-switch read, no counter).
//! 3. The kill switch first among the guards: a flipped switch costs nothing else.
//! 4. The client address before any limit, and **the address limit before authentication**:
//!    a failed authentication is then already counted (lesson 002), so guessing tokens is
//!    limited like anything else.
//! 5. **An identity limit only after verification**: [`Verified`] counts the identity that an
//!    inner layer put in the extensions after checking it, never a value the client merely
//!    sent (an unverified id would let a client spend another's quota, or dodge its own).
//!
//! Each guard's layer comes with the guard's feature: [`CorsLayer`] with `cors`,
//! [`KillSwitchLayer`] with `kill-switch`, [`RateLimitLayer`] and [`Admitted`] with `ratelimit`,
//! [`IdempotencyLayer`] with `idempotency`. The others, and the key extractors, are always here.
//!
//! CORS is ours rather than tower-http's `CorsLayer`: that one answers every preflight with
//! one fixed method list (ours lists the methods of the route asked for, and routes a
//! preflight to no route, or from an origin not listed, like any other `OPTIONS`: a 405 that
//! spends nothing), and it accepts a request with several `Origin` fields by their first one
//! (ours treats it as not listed).
//!
//! Each layer's future is allocated and moved once per request, and an async function's future
//! is as large as its largest await: an AWS SDK request's future is kilobytes. So a guard whose
//! DynamoDB or SSM call is rare (a cache refill: the kill switch's read, a secret's fetch) boxes
//! that call, and the futures every request pays for stay under a kilobyte (a test measures
//! them); [`handler_fn`] makes the handler's future inside its own box. A guard of your own
//! ([`Guard`]) should do the same with its rare calls.

mod address;
mod check;
#[cfg(feature = "cors")]
mod cors;
mod guard;
#[cfg(feature = "idempotency")]
mod idempotency;
mod keys;
#[cfg(feature = "kill-switch")]
mod kill_switch;
#[cfg(feature = "ratelimit")]
mod rate_limit;
mod respond;
mod routes;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use lambda_http::{Body, Request, Response};

pub use address::{Caller, ClientAddressLayer, ClientAddressSource};
pub use check::CheckLayer;
#[cfg(feature = "cors")]
#[cfg_attr(docsrs, doc(cfg(feature = "cors")))]
pub use cors::{CorsLayer, CorsService};
pub use guard::{Guard, GuardLayer, Guarded};
#[cfg(feature = "idempotency")]
#[cfg_attr(docsrs, doc(cfg(feature = "idempotency")))]
pub use idempotency::{
    Claimed, IdempotencyLayer, IdempotencyService, IdempotentRequest, InProgress, KeyedJson,
    RecordExpiry, ReplayHook,
};
pub use keys::{
    AdmissionSlot, ClientAddress, Global, Identity, KeyExtractor, MissingExtension, Verified,
};
#[cfg(feature = "kill-switch")]
#[cfg_attr(docsrs, doc(cfg(feature = "kill-switch")))]
pub use kill_switch::KillSwitchLayer;
#[cfg(feature = "ratelimit")]
#[cfg_attr(docsrs, doc(cfg(feature = "ratelimit")))]
pub use rate_limit::{Admitted, RateLimitLayer, RateLimitService};
pub use respond::{RequestId, RespondLayer, RespondService};
pub use routes::{Methods, RouteMethods, RoutePath, RoutesLayer};

use crate::problem::{ApiError, ClientError};

/// The future every service here returns.
pub type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<Response<Body>, lambda_http::Error>> + Send + 'static>>;

/// Marks a response a guard (or a handler, through [`handler_fn`]) refused with one of the
/// shared errors, in the response's extensions: what [`RespondLayer`]'s metrics count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected(pub ApiError);

/// The problem+json answer to `req` for `error`, marked [`Rejected`] when it is a shared error.
pub fn reject(req: &Request, error: &impl ClientError) -> Response<Body> {
    rejected(&respond::request_id_of(req), error)
}

/// `error`'s answer for the request `id`, marked [`Rejected`] when it is a shared error.
fn rejected(id: &str, error: &impl ClientError) -> Response<Body> {
    let mut response = error.to_response(id);
    if let Some(api) = error.as_api_error() {
        response.extensions_mut().insert(Rejected(api.clone()));
    }
    response
}

/// A handler as the innermost service: `f` answers with a response or an error that knows
/// how it is told to a client ([`ClientError`]); the error becomes its problem+json response.
pub fn handler_fn<F, Fut, E>(f: F) -> HandlerFn<F>
where
    F: Fn(Request) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<Response<Body>, E>> + Send + 'static,
    E: ClientError + Send + 'static,
{
    HandlerFn(f)
}

/// See [`handler_fn`].
#[derive(Clone)]
pub struct HandlerFn<F>(F);

impl<F> std::fmt::Debug for HandlerFn<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HandlerFn")
    }
}

impl<F, Fut, E> tower_service::Service<Request> for HandlerFn<F>
where
    F: Fn(Request) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<Response<Body>, E>> + Send + 'static,
    E: ClientError + Send + 'static,
{
    type Response = Response<Body>;
    type Error = lambda_http::Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let id = respond::request_id_of(&req);
        // The handler's future is made inside the box, not moved into it: an async block that
        // captures a future and awaits it holds it twice (the capture and the await's slot).
        let f = self.0.clone();
        Box::pin(async move { Ok(f(req).await.unwrap_or_else(|e| rejected(&id, &e))) })
    }
}

/// The clone of `inner` to call, leaving a fresh clone in its place: the one that was polled
/// ready is the one called (tower's rule for services that are cloned into their futures).
fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}
