//! The `Idempotency-Key` header, parsed once.

use std::fmt;

/// Header name.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// Longest key accepted.
pub const MAX_KEY_LEN: usize = 255;

/// A client's idempotency key: 1 to 255 visible ASCII characters. The structured-field string
/// form (`"abc"`, draft-ietf-httpapi-idempotency-key-header) and the bare form `abc` are the
/// same key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

/// Why a header value is not a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("idempotency key missing")]
    Missing,
    #[error("idempotency key empty")]
    Empty,
    #[error("idempotency key too long")]
    TooLong,
    #[error("idempotency key not visible ASCII")]
    NotVisibleAscii,
}

impl KeyError {
    /// The 400 `detail` a client sees.
    pub fn detail(self) -> &'static str {
        match self {
            KeyError::Missing => "The Idempotency-Key header is required.",
            KeyError::Empty => "The Idempotency-Key header is empty.",
            KeyError::TooLong => "The Idempotency-Key must be at most 255 characters.",
            KeyError::NotVisibleAscii => {
                "The Idempotency-Key must consist of visible ASCII characters only."
            }
        }
    }
}

impl IdempotencyKey {
    /// Parses a header value (`None` when the header is absent).
    pub fn parse(raw: Option<&[u8]>) -> Result<Self, KeyError> {
        let raw = raw.ok_or(KeyError::Missing)?;
        let raw = std::str::from_utf8(raw).map_err(|_| KeyError::NotVisibleAscii)?;
        let raw = raw.trim_matches(|c| c == ' ' || c == '\t');
        let key = match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
            Some(inner) => unescape_sf_string(inner)?,
            None => raw.to_string(),
        };
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(KeyError::NotVisibleAscii);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong);
        }
        Ok(Self(key))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// RFC 8941 sf-string content: `\"` and `\\` are the only escapes.
fn unescape_sf_string(inner: &str) -> Result<String, KeyError> {
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('"' | '\\')) => out.push(e),
                _ => return Err(KeyError::NotVisibleAscii),
            },
            '"' => return Err(KeyError::NotVisibleAscii),
            c => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<String, KeyError> {
        IdempotencyKey::parse(Some(s.as_bytes())).map(|k| k.0)
    }

    #[test]
    fn quoted_and_bare_forms_are_the_same_key() {
        assert_eq!(parse("abc-123").unwrap(), "abc-123");
        assert_eq!(parse("\"abc-123\"").unwrap(), "abc-123");
        assert_eq!(parse("\"a\\\"b\"").unwrap(), "a\"b");
    }

    #[test]
    fn refuses_what_is_not_a_key() {
        assert_eq!(IdempotencyKey::parse(None), Err(KeyError::Missing));
        assert_eq!(parse(""), Err(KeyError::Empty));
        assert_eq!(parse("\"\""), Err(KeyError::Empty));
        assert_eq!(parse(&"k".repeat(256)), Err(KeyError::TooLong));
        assert!(parse(&"k".repeat(255)).is_ok());
        assert_eq!(parse("has space"), Err(KeyError::NotVisibleAscii));
        assert_eq!(parse("ключ"), Err(KeyError::NotVisibleAscii));
        assert_eq!(parse("tab\there"), Err(KeyError::NotVisibleAscii));
        assert!(IdempotencyKey::parse(Some(&[0xff, 0x41])).is_err());
    }
}
