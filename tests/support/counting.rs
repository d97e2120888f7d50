//! Counts the requests an SDK client actually sends, per operation, with an SDK interceptor.
//!
//! `read_before_transmit` runs once per HTTP attempt, so retries count too: this is what the
//! bill and DynamoDB's capacity see.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    AfterDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;

/// Shared per-operation request counts.
#[derive(Debug, Clone, Default)]
pub struct RequestCounter(Arc<Mutex<HashMap<String, usize>>>);

impl RequestCounter {
    /// Requests sent for `operation` (e.g. `UpdateItem`).
    pub fn get(&self, operation: &str) -> usize {
        self.0.lock().unwrap().get(operation).copied().unwrap_or(0)
    }

    /// Requests sent, all operations.
    pub fn total(&self) -> usize {
        self.0.lock().unwrap().values().sum()
    }

    /// All counts, for assertion messages.
    pub fn snapshot(&self) -> HashMap<String, usize> {
        self.0.lock().unwrap().clone()
    }

    /// Forgets the counts so far.
    pub fn reset(&self) {
        self.0.lock().unwrap().clear();
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "RequestCounter"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = cfg
            .load::<Metadata>()
            .map(|m| m.name().to_string())
            .unwrap_or_else(|| "unknown".into());
        *self.0.lock().unwrap().entry(op).or_default() += 1;
        Ok(())
    }
}

/// The time an SDK client's requests spend from the hand-over to the HTTP client until the
/// response is read and deserialized, summed over attempts since the last [`WireClock::take`]:
/// what a call spends on the wire, in DynamoDB and in the SDK's reading of the answer, as
/// opposed to in the caller's own code. The bench's floor splits a request's latency with it.
#[derive(Debug, Clone, Default)]
pub struct WireClock(Arc<Mutex<WireState>>);

#[derive(Debug, Default)]
struct WireState {
    sent: Option<std::time::Instant>,
    total: std::time::Duration,
}

impl WireClock {
    /// The wire time since the last call, and a fresh start.
    pub fn take(&self) -> std::time::Duration {
        let mut state = self.0.lock().unwrap();
        state.sent = None;
        std::mem::take(&mut state.total)
    }
}

impl Intercept for WireClock {
    fn name(&self) -> &'static str {
        "WireClock"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.lock().unwrap().sent = Some(std::time::Instant::now());
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        _context: &AfterDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let mut state = self.0.lock().unwrap();
        if let Some(sent) = state.sent.take() {
            state.total += sent.elapsed();
        }
        Ok(())
    }
}
