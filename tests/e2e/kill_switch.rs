//! The kill switch, flipped through `PUT /internal/kill-switch`, stops `POST /session` within
//! `KILL_SWITCH_CACHE_SECONDS` and lets it serve again after it is turned off.

use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::stack::{session_lock, stack, unique_key};
use crate::{expect_status, http};

/// `KILL_SWITCH_CACHE_SECONDS` (default 5) plus a margin.
const APPLY_WITHIN: Duration = Duration::from_secs(7);

fn flip(enabled: bool, message: &str) -> http::Response {
    let stack = stack();
    let token = stack.internal_token.as_deref().expect(
        "the stack file has no internal_token (INTERNAL_TOKEN_PARAM in SSM?): cannot flip the switch",
    );
    http::put(format!("{}/internal/kill-switch", stack.ephemeral_key_url))
        .header("X-Internal-Token", token)
        .json(&serde_json::json!({"function": "ephemeral-key", "enabled": enabled, "message": message}))
        .send()
}

/// Turns the switch off again however the test ends, so a failure does not leave the
/// developer's stack refusing sessions.
struct SwitchOff;

impl Drop for SwitchOff {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = flip(false, "");
        }
    }
}

/// Polls `POST /session` until `done` accepts an answer or [`APPLY_WITHIN`] passes. The polls
/// carry the internal token when the stack has one, so they do not use up the per-address
/// quota that every local request shares (127.0.0.1).
pub(crate) fn session_until(what: &str, done: impl Fn(&http::Response) -> bool) -> http::Response {
    let url = format!("{}/session", stack().ephemeral_key_url);
    let deadline = Instant::now() + APPLY_WITHIN;
    loop {
        let mut req = http::post(&url);
        if let Some(token) = &stack().internal_token {
            req = req.header("X-Internal-Token", token);
        }
        let resp = req.json(&serde_json::json!({})).send();
        if done(&resp) {
            return resp;
        }
        if resp.status == 429 || Instant::now() >= deadline {
            panic!(
                "{what} within {}s; last answer HTTP {}: {}",
                APPLY_WITHIN.as_secs(),
                resp.status,
                resp.text()
            );
        }
        sleep(Duration::from_millis(250));
    }
}

#[test]
#[ignore = "needs the local stack: run by cargo xtask test"]
fn the_kill_switch_stops_sessions_and_lets_them_resume() {
    let _serial = session_lock();
    let message = unique_key("e2e: back soon");
    let _off = SwitchOff;

    let on = flip(true, &message);
    expect_status(&on, 200, "PUT /internal/kill-switch (on)");
    assert_eq!(on.json()["enabled"], true);

    let refused = session_until("POST /session was not refused", |r| r.status == 403);
    let problem = refused.json();
    assert_eq!(problem["code"], "service_disabled", "{problem}");
    assert_eq!(
        problem["detail"],
        message.as_str(),
        "the operator's message is shown"
    );
    assert!(refused
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/problem+json")));

    let off = flip(false, "");
    expect_status(&off, 200, "PUT /internal/kill-switch (off)");
    assert_eq!(off.json()["enabled"], false);

    let served = session_until("POST /session did not serve again", |r| r.status == 200);
    assert!(served.json()["client_secret"]
        .as_str()
        .is_some_and(|s| s.starts_with("ek_")));
}
