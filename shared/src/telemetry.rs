//! JSON logs for CloudWatch through `tracing`.
//!
//! One line per event, with the span fields (request id, route) flattened in, so a log query
//! can follow one request and count decisions per layer. `RUST_LOG` sets the level (default
//! `info`). Secrets never reach a log: they are `SecretString`s, which do not print.

use tracing_subscriber::EnvFilter;

/// Installs the JSON subscriber once; later calls do nothing.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(true)
        .with_span_list(false)
        .flatten_event(true)
        .with_target(false)
        .without_time()
        .try_init();
}
