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

use std::path::{Path, PathBuf};
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

/// The workspace root (`template.yaml`, `openapi.yaml`, `README.md`): the nearest directory with
/// a `Cargo.lock` at or above the running package's `CARGO_MANIFEST_DIR`, read when the code runs
/// (`cargo test` and `cargo run` set it; `cargo xtask` passes its own to the harness). Not the
/// compiled-in value, but as the fallback: clones that share a target directory (the cache in
/// `$HOME` is one) share its binaries, and a clone whose files are older than another clone's
/// build does not rebuild them, so a compiled-in path can be the other clone's: its README and
/// template read in place of this one's, or a panic once it is deleted.
pub fn workspace_root() -> PathBuf {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR");
    let dir = dir.map_or(env!("CARGO_MANIFEST_DIR").into(), PathBuf::from);
    root_above(&dir).unwrap_or(dir)
}

/// The nearest directory with a `Cargo.lock` at or above `dir`.
fn root_above(dir: &Path) -> Option<PathBuf> {
    let mut dirs = dir.ancestors();
    dirs.find(|d| d.join("Cargo.lock").is_file())
        .map(Path::to_path_buf)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_is_the_nearest_directory_with_a_lock_file() {
        let clone = std::env::temp_dir().join(format!("tollgate-root-{}", std::process::id()));
        let member = clone.join("functions/transfer");
        std::fs::create_dir_all(&member).unwrap();
        std::fs::write(clone.join("Cargo.lock"), "").unwrap();
        assert_eq!(root_above(&member), Some(clone.clone()));
        assert_eq!(root_above(&clone), Some(clone.clone()));
        std::fs::remove_dir_all(&clone).unwrap();
        assert_eq!(root_above(&member), None, "no lock file above: none");
        let here = workspace_root();
        assert!(here.join("template.yaml").is_file(), "{}", here.display());
    }
}
