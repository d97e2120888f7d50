//! Internal callers: our own services, recognised by a token rather than by address.
//!
//! Lesson 001: our edge and orchestrator reached the API from a handful of shared addresses and
//! were throttled by the per-address limit meant for strangers. A request carrying the real
//! internal token skips the `ip` and `client` layers; a wrong token is just another request and
//! is counted like one. The comparison is over SHA-256 digests in constant time, so neither the
//! token's length nor its first differing byte shows in the response time.

use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Header that carries the internal token.
pub const INTERNAL_TOKEN_HEADER: &str = "x-internal-token";

/// Compares two secrets in constant time over their SHA-256 digests.
pub fn secrets_equal(presented: &[u8], expected: &[u8]) -> bool {
    let a = Sha256::digest(presented);
    let b = Sha256::digest(expected);
    a.as_slice().ct_eq(b.as_slice()).into()
}

/// Whether `presented` is the internal token. An empty expected token never matches.
pub fn is_internal_token(presented: Option<&str>, expected: &SecretString) -> bool {
    let expected = expected.expose_secret();
    match presented {
        Some(p) if !expected.is_empty() => secrets_equal(p.as_bytes(), expected.as_bytes()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_token_matches() {
        let token = SecretString::from("s3cret-token");
        assert!(is_internal_token(Some("s3cret-token"), &token));
        assert!(!is_internal_token(Some("s3cret-token "), &token));
        assert!(!is_internal_token(Some("s3cret"), &token));
        assert!(!is_internal_token(Some(""), &token));
        assert!(!is_internal_token(None, &token));
        assert!(!is_internal_token(Some(""), &SecretString::from("")));
    }
}
