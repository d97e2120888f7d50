//! End-to-end tests: the local stack driven over HTTP the way a client uses it.
//!
//! They need a running stack (both functions under `cargo lambda watch`, DynamoDB Local, the
//! OpenAI stand-in or the real API) and find it through its stack file: `TOLLGATE_STACK_FILE`,
//! else `.dev/stack.json` of `cargo xtask dev`. Hence every test is `#[ignore]`d: a plain
//! `cargo test` has no stack. `cargo xtask test` starts a private stack and runs them with
//! `--ignored`; against your own `cargo xtask dev`, run
//! `cargo test -p tollgate-tests --test e2e -- --ignored`.
//!
//! They leave the stack as they found it, except for the money they move and the quota they
//! use: each run makes about three `POST /session` calls, and the default limit is 10 per hour
//! per address (every local request comes from 127.0.0.1).

mod cli;
mod gateway;
use tollgate_tests::http;
mod kill_switch;
mod readme;
mod session;
mod stack;
mod transfer;

/// Panics with the body when the status is not `expected`, and says what to do about a 429.
#[track_caller]
pub fn expect_status(resp: &http::Response, expected: u16, what: &str) {
    if resp.status == expected {
        return;
    }
    let hint = if resp.status == 429 {
        "\nhint: a rate limit of the stack is used up (SESSION_RATE_LIMITS, TRANSFER_RATE_LIMITS; \
         every local request comes from 127.0.0.1): restart the stack, or wait Retry-After seconds"
    } else {
        ""
    };
    panic!(
        "{what}: expected HTTP {expected}, got {}: {}{hint}",
        resp.status,
        resp.text()
    );
}
