//! `POST /session`: a client secret for a browser voice client.

use crate::stack::{session_lock, stack};
use crate::{expect_status, http};

#[test]
#[ignore = "needs the local stack: run by cargo xtask test"]
fn a_session_gets_a_client_secret() {
    let _serial = session_lock();
    let stack = stack();
    let resp = http::post(format!("{}/session", stack.ephemeral_key_url))
        .json(&serde_json::json!({}))
        .send();
    expect_status(&resp, 200, "POST /session");
    assert_eq!(resp.header("cache-control"), Some("no-store"));
    let body = resp.json();
    let secret = body["client_secret"].as_str().expect("client_secret");
    assert!(secret.starts_with("ek_"), "client_secret {secret:?}");
    if stack.openai_stand_in {
        assert!(
            secret.starts_with("ek_local_"),
            "the stack says it uses the stand-in, but {secret:?} is not one of its secrets"
        );
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let expires_at = body["expires_at"].as_u64().expect("expires_at");
    assert!(
        expires_at > now,
        "expires_at {expires_at} is not in the future (now {now})"
    );
    assert!(
        body["model"].is_string() && body["voice"].is_string(),
        "{body}"
    );
}
