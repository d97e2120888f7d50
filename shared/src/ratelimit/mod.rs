//! Rate limits counted in DynamoDB with limit-bounded conditional increments.
//!
//! The rule that keeps a limit from locking clients out forever (lesson 000): **a request that a
//! layer rejects increments nothing**. The increment carries the limit in its condition
//! (`attribute_not_exists(count) OR count < :limit`), so a counter stops at its limit however
//! fast clients retry, and reopens when its window ends.
//!
//! How layers combine: they are checked in order `ip` → `client` → `global`, one `UpdateItem`
//! each. When a layer rejects, the layers this request already incremented are given back (a
//! conditional decrement that never goes below zero), so a 429 leaves every counter as it found
//! it. A request that the limiter admits and that later fails for another reason (a bad token,
//! bad input) stays counted: that is how failed authentications are limited (lesson 002).
//!
//! Each layer's window is fixed (epoch-aligned, the default) or sliding (`:sliding`, see
//! [`sliding`]: at most the limit in any span of one window, for one write per key and window
//! more, the seal that reads the previous window and closes it to late increments), and its limit lives in one item or is spread over shards (`:shards=N`, see
//! [`RateLimiter`]'s `check`: a hot key's writes over N items, never more than the limit in
//! total, and each window counted in the one layout it recorded first, so that a change of N
//! never over-admits).
//!
//! Keys known to be full are remembered in a bounded in-process [`BlockCache`] until they would
//! admit again (or a few seconds, so an operator's reset reaches warm instances quickly): from a
//! failed increment, or from the admission that took the last unit. A flood against a full key
//! therefore costs no DynamoDB request, in every layer and every shard.

//!
//! The limiter, its counters and its block cache need the `ratelimit` feature. Without it this
//! module holds only plain data the rest of the crate uses: the limits' syntax ([`RateLimits`],
//! which the settings carry), a full layer's [`Decision`] (which [`crate::ApiError`] carries)
//! and a request's [`Admission`] (which the response fields read).

use std::time::Duration;

mod admission;
#[cfg(feature = "ratelimit")]
mod block_cache;
#[cfg(feature = "ratelimit")]
mod counter;
mod decision;
#[cfg(feature = "ratelimit")]
mod limiter;
#[cfg(feature = "ratelimit")]
#[cfg_attr(docsrs, doc(cfg(feature = "ratelimit")))]
pub mod sliding;
mod spec;

pub use admission::Admission;
#[cfg(feature = "ratelimit")]
#[cfg_attr(docsrs, doc(cfg(feature = "ratelimit")))]
pub use block_cache::BlockCache;
pub use decision::Decision;
#[cfg(feature = "ratelimit")]
#[cfg_attr(docsrs, doc(cfg(feature = "ratelimit")))]
pub use limiter::{LimitCheck, LimiterError, RateLimiter, Usage, Verdict, SHARD_TRIES};
pub use spec::{
    Layer, RateLimit, RateLimits, Shards, SpecError, WindowKind, AUTO_SHARD_UNITS, MAX_SHARDS,
};

/// How long a full key is remembered per process at most (`RATE_LIMIT_BLOCK_CACHE_SECONDS`).
pub const DEFAULT_BLOCK_CACHE_MAX_AGE: Duration = Duration::from_secs(5);
