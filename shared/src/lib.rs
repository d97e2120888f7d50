#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
// docs.rs (nightly, `--cfg docsrs`) marks each gated item with the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
//!
//! ## Modules
//!
//! Every module answers one of the incidents in the project's lessons:
//!
//! | module | guards against |
//! |---|---|
//! | [`ratelimit`] | a limit that never reopens (rejected requests increment nothing), limits keyed on unverified values, floods that cost a DynamoDB write each |
//! | [`client_addr`] | spoofed `X-Forwarded-For`; one IPv6 host posing as 2^64 clients |
//! | [`internal`] | our own services throttled by a per-address limit they share |
//! | [`kill_switch`] | a bill that runs away faster than a deploy can stop it |
//! | [`secrets`], [`cooldown`] | retry storms against a failing secret store or provider |
//! | [`cors`] | a page on another origin that works only where a platform happened to add CORS, or `*` beside credentials |
//! | [`problem`] | error bodies that leak host names, parameter names or upstream messages |
//!
//! [`published_limits`] is where each function says which limits it counts under, so that an
//! operator's tools report those rather than their own shell's.
//!
//! [`gate`] composes the guards in the order the contract fixes; the functions call it before
//! doing any work of their own. Time comes from a [`clock::Clock`] so windows, TTLs and cooldowns
//! are tested without sleeping.

pub mod aws;
pub mod client_addr;
pub mod clock;
pub mod config;
pub mod cooldown;
#[cfg(feature = "cors")]
#[cfg_attr(docsrs, doc(cfg(feature = "cors")))]
pub mod cors;
pub mod expiring;
#[cfg(all(feature = "ratelimit", feature = "kill-switch"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "ratelimit", feature = "kill-switch"))))]
pub mod gate;
pub mod http;
#[cfg(feature = "idempotency")]
#[cfg_attr(docsrs, doc(cfg(feature = "idempotency")))]
pub mod idempotency;
pub mod ids;
pub mod internal;
pub mod json;
#[cfg(feature = "kill-switch")]
#[cfg_attr(docsrs, doc(cfg(feature = "kill-switch")))]
pub mod kill_switch;
pub mod layers;
pub mod metrics;
pub mod problem;
#[cfg(feature = "ratelimit")]
#[cfg_attr(docsrs, doc(cfg(feature = "ratelimit")))]
pub mod published_limits;
pub mod ratelimit;
pub mod secrets;
pub mod table;
pub mod telemetry;

pub use problem::{ApiError, ClientError};
