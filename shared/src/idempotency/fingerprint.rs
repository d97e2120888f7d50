//! The request fingerprint: SHA-256 over the RFC 8785 (JCS) canonical form of the JSON body.
//!
//! Comparing bodies as strings would turn a client library's reordering of fields or change of
//! white space into a spurious 422 (lesson 004). The canonical form sorts members by code point,
//! drops white space and fixes number and string notation, so equal JSON values fingerprint
//! equally and different ones (another amount) do not.

use sha2::{Digest, Sha256};

/// Hex SHA-256 of the canonical form of `value`.
pub fn fingerprint(value: &serde_json::Value) -> String {
    // Serialising a serde_json::Value cannot fail; fall back to an empty body if it ever did.
    let canonical = serde_jcs::to_vec(value).unwrap_or_default();
    hex::encode(Sha256::digest(&canonical))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn order_and_white_space_do_not_matter() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"from":"a","to":"b","amount":100}"#).unwrap();
        let b: serde_json::Value =
            serde_json::from_str("{ \"amount\" : 100,\n \"to\":\"b\", \"from\": \"a\" }").unwrap();
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_ne!(
            fingerprint(&a),
            fingerprint(&json!({"from": "a", "to": "b", "amount": 101}))
        );
    }
}
