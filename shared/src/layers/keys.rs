//! What a limit counts a request under ([`KeyExtractor`]), and what one request has consumed in
//! the limits of its stack ([`AdmissionSlot`]). Always compiled: the idempotency layers scope
//! their keys by the same extractors, and [`super::RespondLayer`] reads the slot; the layer that
//! counts, [`super::RateLimitLayer`], needs the `ratelimit` feature.

use std::sync::{Arc, Mutex};

use lambda_http::Request;

use super::address::Caller;
use crate::ratelimit::Admission;

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
/// `RateLimit` fields), filled by each [`super::RateLimitLayer`]. A handler that counts limits itself
/// (with [`crate::ratelimit::RateLimiter::check`]) takes the admission out and puts it back, so the response
/// carries its fields too.
#[derive(Debug, Clone, Default)]
pub struct AdmissionSlot(Arc<Mutex<Admission>>);

impl AdmissionSlot {
    /// Everything counted so far, leaving the slot empty.
    pub fn take(&self) -> Admission {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// How many counters the slot holds.
    #[cfg(feature = "ratelimit")]
    pub(super) fn counted(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).counted()
    }

    /// Adds `admission` to what the slot holds.
    pub fn put(&self, admission: Admission) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .absorb(admission);
    }
}
