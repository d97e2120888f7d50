//! Test support: real DynamoDB Local, HTTP stand-ins for what cannot run here, and Lambda events.
//!
//! Every test makes its own tables ([`dynamo::Tables::create`]) so tests run in parallel without
//! seeing each other's counters. `DYNAMODB_ENDPOINT` must point at DynamoDB Local; `cargo xtask
//! test` starts one and sets it.
//!
//! The stress harness (`stress/`, `tollgate-stress`) builds on the same library: its fault
//! proxy, OpenAI stand-in, event builder and tables are these, so each exists once.

pub mod capacity;
pub mod cli_args;
pub mod counting;
pub mod dynamo;
pub mod events;
pub mod fault_proxy;
pub mod http;
pub mod openai;
pub mod pipeline;
pub mod session;
pub mod ssm;
pub mod transfer;

use std::sync::Arc;

use tollgate::clock::{ManualClock, SharedClock};

/// A fixed start time, one second after a whole hour and day, so hour and day windows are
/// predictable: 2036-01-01T00:00:01Z. In the future on purpose: DynamoDB Local runs a TTL
/// deletion job on the machine's clock, and a test item whose `expires_at` (computed from this
/// clock) were already past could be deleted in the middle of a test.
pub const T0_MS: u64 = 2_082_758_401_000;

/// A manual clock at [`T0_MS`] and the same clock as a [`SharedClock`].
pub fn manual_clock() -> (ManualClock, SharedClock) {
    let clock = ManualClock::at(T0_MS);
    (clock.clone(), Arc::new(clock))
}

/// A clock that moves on by `step_ms` every time it is read, over a [`ManualClock`] the test
/// can still move by hand: code that reads "now" twice sees two times, as it would in production
/// when an attempt is resent a little later.
#[derive(Debug, Clone)]
pub struct TickingClock {
    pub manual: ManualClock,
    step_ms: u64,
}

impl TickingClock {
    pub fn new(manual: ManualClock, step_ms: u64) -> Self {
        Self { manual, step_ms }
    }
}

impl tollgate::clock::Clock for TickingClock {
    fn now_ms(&self) -> tollgate::clock::UnixMillis {
        self.manual
            .advance(std::time::Duration::from_millis(self.step_ms));
        self.manual.now_ms()
    }
}

/// The response body as JSON.
pub fn json_body(resp: &lambda_http::Response<lambda_http::Body>) -> serde_json::Value {
    serde_json::from_slice(resp.body().as_ref()).unwrap_or_else(|e| {
        panic!(
            "body is not JSON ({e}): {:?}",
            String::from_utf8_lossy(resp.body().as_ref())
        )
    })
}

/// The response body as text.
pub fn text_body(resp: &lambda_http::Response<lambda_http::Body>) -> String {
    String::from_utf8_lossy(resp.body().as_ref()).into_owned()
}
