//! Strict JSON request bodies.
//!
//! `serde_json::Value` silently keeps the last of two members with the same name, so a client
//! and the server could disagree about what was asked (`{"amount": 1, "amount": 1000}`). Bodies
//! are read here as an ordered list of members, refusing duplicates, before any field is looked
//! at. Errors carry fixed, client-safe wording.

use std::collections::HashSet;
use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

/// Why a body is not a usable JSON object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// Not JSON, or JSON whose top level is not an object (an array, a string, ...).
    #[error("body is not a JSON object")]
    NotAnObject,
    /// A member name appears twice: parsers disagree on which one wins, so the fingerprint and
    /// the handler could read two different requests from one body.
    #[error("body has a duplicate member name")]
    DuplicateMember,
}

impl BodyError {
    /// The 400 `detail` a client sees.
    pub fn detail(self) -> &'static str {
        match self {
            BodyError::NotAnObject => "The body must be a JSON object.",
            BodyError::DuplicateMember => "The body has a duplicate member name.",
        }
    }
}

/// A JSON object's members in document order, and the object as a value (for fingerprints).
#[derive(Debug, Clone, PartialEq)]
pub struct StrictObject {
    /// The members as written, for a handler that must refuse unknown or repeated ones.
    pub members: Vec<(String, Value)>,
    /// The same object as one value: what the fingerprint canonicalises.
    pub value: Value,
}

struct Members(Vec<(String, Value)>);

const DUPLICATE: &str = "duplicate member";

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut seen = HashSet::new();
                let mut members = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    if !seen.insert(k.clone()) {
                        return Err(serde::de::Error::custom(DUPLICATE));
                    }
                    members.push((k, v));
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(V)
    }
}

/// Parses `body` as one JSON object with unique member names.
pub fn strict_object(body: &[u8]) -> Result<StrictObject, BodyError> {
    let members: Members = serde_json::from_slice(body).map_err(|e| {
        // Our own marker, not the parser's wording, decides the category.
        if e.to_string().starts_with(DUPLICATE) {
            BodyError::DuplicateMember
        } else {
            BodyError::NotAnObject
        }
    })?;
    let value = Value::Object(members.0.iter().cloned().collect());
    Ok(StrictObject {
        members: members.0,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_only_and_no_duplicates() {
        assert_eq!(strict_object(b"[]").unwrap_err(), BodyError::NotAnObject);
        assert_eq!(strict_object(b"").unwrap_err(), BodyError::NotAnObject);
        assert_eq!(strict_object(b"{} x").unwrap_err(), BodyError::NotAnObject);
        assert_eq!(
            strict_object(br#"{"a":1,"b":{"a":2},"a":3}"#).unwrap_err(),
            BodyError::DuplicateMember
        );
        let o = strict_object(br#" {"b":1, "a":"x"} "#).unwrap();
        assert_eq!(o.members[0].0, "b");
        assert_eq!(o.value["a"], "x");
    }
}
