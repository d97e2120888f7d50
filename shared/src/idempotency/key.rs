//! The `Idempotency-Key` header, parsed once.

use std::fmt;

use http::HeaderMap;

/// Header name.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// Longest key accepted.
pub const MAX_KEY_LEN: usize = 255;
/// Shortest key accepted where keys are scoped to something others share (the client address
/// of a public route): long enough that nobody guesses another's key (a UUID v4 has 36).
pub const MIN_UNGUESSABLE_KEY_LEN: usize = 16;

/// A client's idempotency key: 1 to 255 visible ASCII characters. The structured-field string
/// form (`"abc"`, draft-ietf-httpapi-idempotency-key-header) and the bare form `abc` are the
/// same key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

/// Why a header value is not a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// No `Idempotency-Key` field, on a route that requires one.
    #[error("idempotency key missing")]
    Missing,
    /// The field is present but blank: a client bug, refused rather than taken as "no key".
    #[error("idempotency key empty")]
    Empty,
    /// Longer than [`MAX_KEY_LEN`]: a bound on what one record's partition key may hold.
    #[error("idempotency key too long")]
    TooLong,
    /// A byte outside visible ASCII: keys are compared byte for byte and stored in a partition
    /// key, so no whitespace or encoding may make two spellings of one key.
    #[error("idempotency key not visible ASCII")]
    NotVisibleAscii,
    /// Two `Idempotency-Key` fields, or one holding a list: which key the client meant is
    /// anybody's guess, and taking the first would attach the request to a key it may not own.
    #[error("more than one idempotency key")]
    Multiple,
    /// Shorter than [`MIN_UNGUESSABLE_KEY_LEN`] where that is required.
    #[error("idempotency key too short to be unguessable")]
    TooShort,
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
            KeyError::Multiple => {
                "Send exactly one Idempotency-Key header holding exactly one key, not a list."
            }
            KeyError::TooShort => {
                "The Idempotency-Key must be at least 16 characters here, e.g. a UUID v4: keys are scoped to the client address, which others may share."
            }
        }
    }
}

impl IdempotencyKey {
    /// The key of a request, from every `Idempotency-Key` field it carries (`Ok(None)` when it
    /// carries none). Two fields are [`KeyError::Multiple`], and so is one field holding a list,
    /// the form a proxy gives repeated fields when it joins them: a bare value with a `,`, or a
    /// quoted sf-string followed by `,` and more. A `,` inside a quoted key is part of the key.
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<Self>, KeyError> {
        let mut values = headers.get_all(IDEMPOTENCY_KEY_HEADER).iter();
        let Some(value) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() || is_list(value.as_bytes()) {
            return Err(KeyError::Multiple);
        }
        Self::parse(Some(value.as_bytes())).map(Some)
    }

    /// A key that did not come from a header: an SQS message id, a job's name. The same rules
    /// as a header's value (visible ASCII, at most [`MAX_KEY_LEN`]), without the quoting.
    pub fn new(key: &str) -> Result<Self, KeyError> {
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(KeyError::NotVisibleAscii);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong);
        }
        Ok(Self(key.to_string()))
    }

    /// Parses a header value (`None` when the header is absent).
    pub fn parse(raw: Option<&[u8]>) -> Result<Self, KeyError> {
        let raw = raw.ok_or(KeyError::Missing)?;
        let raw = std::str::from_utf8(raw).map_err(|_| KeyError::NotVisibleAscii)?;
        let raw = raw.trim_matches(|c| c == ' ' || c == '\t');
        let key = match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
            Some(inner) => unescape_sf_string(inner)?,
            None => raw.to_string(),
        };
        Self::new(&key)
    }

    /// The key, if it is at least [`MIN_UNGUESSABLE_KEY_LEN`] characters long.
    pub fn unguessable(self) -> Result<Self, KeyError> {
        match self.0.len() >= MIN_UNGUESSABLE_KEY_LEN {
            true => Ok(self),
            false => Err(KeyError::TooShort),
        }
    }

    /// The key as the client sent it (validated), for scoping its record.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether one field's value is a list of members (RFC 8941 list syntax, as far as keys go).
fn is_list(raw: &[u8]) -> bool {
    let raw = raw.trim_ascii();
    let Some(quoted) = raw.strip_prefix(b"\"") else {
        return raw.contains(&b',');
    };
    // The end of the sf-string: the first quote not escaped by a backslash.
    let mut escaped = false;
    for (i, &b) in quoted.iter().enumerate() {
        match (escaped, b) {
            (false, b'\\') => escaped = true,
            (false, b'"') => return quoted[i + 1..].trim_ascii_start().starts_with(b","),
            _ => escaped = false,
        }
    }
    false
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

    fn from_fields(values: &[&str]) -> Result<Option<String>, KeyError> {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append(
                IDEMPOTENCY_KEY_HEADER,
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        IdempotencyKey::from_headers(&headers).map(|k| k.map(|k| k.0))
    }

    #[test]
    fn one_field_with_one_key_is_the_key() {
        assert_eq!(from_fields(&[]), Ok(None));
        assert_eq!(from_fields(&["abc"]), Ok(Some("abc".into())));
        assert_eq!(from_fields(&[" \"abc\" "]), Ok(Some("abc".into())));
        assert_eq!(from_fields(&["\"a,b\""]), Ok(Some("a,b".into())));
        assert_eq!(from_fields(&["\"a\\\",b\""]), Ok(Some("a\",b".into())));
        // Not a list, still not a key.
        assert_eq!(from_fields(&["\"a\" b"]), Err(KeyError::NotVisibleAscii));
        assert_eq!(from_fields(&[""]), Err(KeyError::Empty));
    }

    #[test]
    fn two_fields_or_a_list_are_multiple() {
        for fields in [
            &["a", "b"][..],
            &["a", "a"],
            &["\"a\"", "\"b\""],
            &["a,b"],
            &["a, b"],
            &["a,"],
            &[",a"],
            &["\"a\", \"b\""],
            &["\"a\",b"],
            &["\"a\\\"\" , \"b\""],
        ] {
            assert_eq!(from_fields(fields), Err(KeyError::Multiple), "{fields:?}");
        }
        assert!(KeyError::Multiple.detail().contains("exactly one"));
    }

    #[test]
    fn an_unguessable_key_has_at_least_16_characters() {
        let key = |s: &str| IdempotencyKey::parse(Some(s.as_bytes())).unwrap();
        assert_eq!(
            key(&"k".repeat(MIN_UNGUESSABLE_KEY_LEN - 1)).unguessable(),
            Err(KeyError::TooShort)
        );
        // The length is the key's, not the header's: the quotes do not count.
        assert_eq!(
            key("\"fifteen-chars-x\"").unguessable(),
            Err(KeyError::TooShort)
        );
        let uuid = "0b6f6a3e-4c4e-4b8a-9f0e-3d2c1b0a9f8e";
        assert_eq!(key(uuid).unguessable().unwrap().as_str(), uuid);
        assert!(key(&"k".repeat(MIN_UNGUESSABLE_KEY_LEN))
            .unguessable()
            .is_ok());
        assert!(KeyError::TooShort
            .detail()
            .contains(&MIN_UNGUESSABLE_KEY_LEN.to_string()));
    }
}
