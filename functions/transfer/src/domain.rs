//! Transfer requests, parsed once into types that cannot hold invalid values.
//!
//! Bad input gets 400 with a `detail` written here, in our words ([`InvalidTransfer::detail`]);
//! nothing of a parser's error text reaches the client, and nothing is written before the body
//! is known to be valid.

use std::fmt;

use serde_json::Value;
use tollgate::json::{strict_object, BodyError};
use tollgate::ApiError;

/// Longest memo, in characters.
pub const MAX_MEMO_CHARS: usize = 140;

/// Why a `POST /transfers` body was refused. Display is for logs; the client sees
/// [`Self::detail`], as a 400 (the one mapping is the `From` impl below).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTransfer {
    #[error(transparent)]
    Body(#[from] BodyError),
    #[error("unknown field")]
    UnknownField,
    #[error("{0} missing")]
    Missing(&'static str),
    #[error("{0} is not an account id")]
    NotAnAccount(&'static str),
    #[error("from and to are the same account")]
    SameAccount,
    #[error("amount is not a number")]
    AmountNotANumber,
    #[error("amount is not positive")]
    AmountNotPositive,
    #[error("amount over the maximum {max}")]
    AmountOverMax { max: u64 },
    #[error("amount is not an integer")]
    AmountNotAnInteger,
    #[error("memo is not a string")]
    MemoNotAString,
    #[error("memo too long")]
    MemoTooLong,
}

impl InvalidTransfer {
    /// The 400 `detail` a client sees.
    pub fn detail(&self) -> String {
        match self {
            Self::Body(e) => e.detail().to_string(),
            Self::UnknownField => {
                "Unknown field: only from, to, amount and memo are accepted.".into()
            }
            Self::Missing(field) => format!("{field} is required."),
            Self::NotAnAccount(field) => format!(
                "{field} must be an account id (1 to 64 characters: letters, digits, _ or -)."
            ),
            Self::SameAccount => "from and to must be different accounts.".into(),
            Self::AmountNotANumber => {
                "amount must be an integer number of minor units, not a string or other type."
                    .into()
            }
            Self::AmountNotPositive => "amount must be greater than 0.".into(),
            Self::AmountOverMax { max } => format!("amount must be at most {max}."),
            Self::AmountNotAnInteger => {
                "amount must be an integer number of minor units (no fraction or exponent).".into()
            }
            Self::MemoNotAString => "memo must be a string.".into(),
            Self::MemoTooLong => format!("memo must be at most {MAX_MEMO_CHARS} characters."),
        }
    }
}

impl From<InvalidTransfer> for ApiError {
    fn from(e: InvalidTransfer) -> Self {
        ApiError::BadRequest { detail: e.detail() }
    }
}

/// An account id: 1 to 64 characters of `A-Z a-z 0-9 _ -`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct AccountId(String);

impl AccountId {
    pub fn parse(s: &str) -> Option<Self> {
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        ok.then(|| Self(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A transfer id as the ledger mints them (`tollgate::ids::new_id("tr")`): `tr_` and 32
/// lower-case hex digits, the `TransferId` pattern in `openapi.yaml`.
///
/// Anything else cannot name a transfer, so `GET /transfers/{id}` answers 404 without asking
/// DynamoDB (which would refuse an over-long key with an error that is not the client's).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TransferId(String);

impl TransferId {
    const PREFIX: &'static str = "tr_";
    const HEX_DIGITS: usize = 32;

    pub fn parse(s: &str) -> Option<Self> {
        let hex = s.strip_prefix(Self::PREFIX)?;
        let ok = hex.len() == Self::HEX_DIGITS
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then(|| Self(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A positive amount in minor units, at most the configured maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Amount(u64);

impl Amount {
    pub fn get(self) -> u64 {
        self.0
    }

    /// Parses a JSON value; `max` is `MAX_TRANSFER_AMOUNT`.
    pub fn parse(value: &Value, max: u64) -> Result<Self, InvalidTransfer> {
        let Value::Number(n) = value else {
            return Err(InvalidTransfer::AmountNotANumber);
        };
        if let Some(v) = n.as_u64() {
            if v == 0 {
                return Err(InvalidTransfer::AmountNotPositive);
            }
            if v > max {
                return Err(InvalidTransfer::AmountOverMax { max });
            }
            return Ok(Self(v));
        }
        if n.as_i64().is_some() {
            return Err(InvalidTransfer::AmountNotPositive);
        }
        if n.as_f64()
            .is_some_and(|f| f.fract() == 0.0 && f > max as f64)
        {
            return Err(InvalidTransfer::AmountOverMax { max });
        }
        Err(InvalidTransfer::AmountNotAnInteger)
    }
}

/// A valid `POST /transfers` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferRequest {
    pub from: AccountId,
    pub to: AccountId,
    pub amount: Amount,
    pub memo: Option<String>,
    /// The body as a JSON value, for the fingerprint.
    pub canonical: Value,
}

impl TransferRequest {
    /// Parses and validates a body.
    pub fn parse(body: &[u8], max_amount: u64) -> Result<Self, InvalidTransfer> {
        let object = strict_object(body)?;
        let mut from = None;
        let mut to = None;
        let mut amount = None;
        let mut memo = None;
        for (name, v) in &object.members {
            match name.as_str() {
                "from" => from = Some(account(v, "from")?),
                "to" => to = Some(account(v, "to")?),
                "amount" => amount = Some(Amount::parse(v, max_amount)?),
                "memo" => memo = memo_of(v)?,
                _ => return Err(InvalidTransfer::UnknownField),
            }
        }
        let from = from.ok_or(InvalidTransfer::Missing("from"))?;
        let to = to.ok_or(InvalidTransfer::Missing("to"))?;
        let amount = amount.ok_or(InvalidTransfer::Missing("amount"))?;
        if from == to {
            return Err(InvalidTransfer::SameAccount);
        }
        Ok(Self {
            from,
            to,
            amount,
            memo,
            canonical: object.value,
        })
    }
}

fn account(v: &Value, field: &'static str) -> Result<AccountId, InvalidTransfer> {
    v.as_str()
        .and_then(AccountId::parse)
        .ok_or(InvalidTransfer::NotAnAccount(field))
}

fn memo_of(v: &Value) -> Result<Option<String>, InvalidTransfer> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) if s.chars().count() <= MAX_MEMO_CHARS => Ok(Some(s.clone())),
        Value::String(_) => Err(InvalidTransfer::MemoTooLong),
        _ => Err(InvalidTransfer::MemoNotAString),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u64 = 1_000_000;

    fn parse(body: &str) -> Result<TransferRequest, String> {
        TransferRequest::parse(body.as_bytes(), MAX).map_err(|e| e.detail())
    }

    #[test]
    fn transfer_ids_are_exactly_what_the_ledger_mints() {
        let minted = tollgate::ids::new_id("tr");
        assert_eq!(TransferId::parse(&minted).unwrap().as_str(), minted);
        assert!(TransferId::parse("tr_0123456789abcdef0123456789abcdef").is_some());
        for bad in [
            "",
            "tr_",
            "tr_x",
            "tr_0123",
            "tr_0123456789ABCDEF0123456789abcdef",
            "tr_0123456789abcdef0123456789abcde",
            "tr_0123456789abcdef0123456789abcdef0",
            "tr_0123456789abcdef0123456789abcdeg",
            "TR_0123456789abcdef0123456789abcdef",
            "acc_0123456789abcdef0123456789abcdef",
            "tr-0123456789abcdef0123456789abcdef",
            "tr_0123456789abcdef0123456789abcdé",
        ] {
            assert!(TransferId::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn accepts_a_valid_transfer() {
        let t = parse(r#"{"from":"acc_a","to":"acc_b","amount":250,"memo":"rent"}"#).unwrap();
        assert_eq!(
            (t.from.as_str(), t.to.as_str(), t.amount.get()),
            ("acc_a", "acc_b", 250)
        );
        assert_eq!(t.memo.as_deref(), Some("rent"));
        assert!(parse(r#"{"from":"a","to":"b","amount":1}"#)
            .unwrap()
            .memo
            .is_none());
    }

    /// The details are the API's words: pinned whole, so a refactor cannot reword them.
    #[test]
    fn details_are_exactly_the_documented_texts() {
        let cases = [
            ("[1]", "The body must be a JSON object."),
            (
                r#"{"from":"a","from":"b"}"#,
                "The body has a duplicate member name.",
            ),
            (
                r#"{"fee":1}"#,
                "Unknown field: only from, to, amount and memo are accepted.",
            ),
            (r#"{"to":"b","amount":1}"#, "from is required."),
            (r#"{"from":"a","amount":1}"#, "to is required."),
            (r#"{"from":"a","to":"b"}"#, "amount is required."),
            (
                r#"{"from":"a b","to":"b","amount":1}"#,
                "from must be an account id (1 to 64 characters: letters, digits, _ or -).",
            ),
            (
                r#"{"from":"a","to":7,"amount":1}"#,
                "to must be an account id (1 to 64 characters: letters, digits, _ or -).",
            ),
            (
                r#"{"from":"a","to":"a","amount":1}"#,
                "from and to must be different accounts.",
            ),
            (
                r#"{"from":"a","to":"b","amount":"1"}"#,
                "amount must be an integer number of minor units, not a string or other type.",
            ),
            (
                r#"{"from":"a","to":"b","amount":-1}"#,
                "amount must be greater than 0.",
            ),
            (
                r#"{"from":"a","to":"b","amount":2000000}"#,
                "amount must be at most 1000000.",
            ),
            (
                r#"{"from":"a","to":"b","amount":2e6}"#,
                "amount must be at most 1000000.",
            ),
            (
                r#"{"from":"a","to":"b","amount":0.5}"#,
                "amount must be an integer number of minor units (no fraction or exponent).",
            ),
            (
                r#"{"from":"a","to":"b","amount":1,"memo":[]}"#,
                "memo must be a string.",
            ),
        ];
        for (body, detail) in cases {
            assert_eq!(parse(body).unwrap_err(), detail, "{body}");
        }
        let long = format!(
            r#"{{"from":"a","to":"b","amount":1,"memo":"{}"}}"#,
            "m".repeat(141)
        );
        assert_eq!(
            parse(&long).unwrap_err(),
            "memo must be at most 140 characters."
        );
        let e = TransferRequest::parse(b"{}", MAX).unwrap_err();
        assert_eq!(
            ApiError::from(e),
            ApiError::BadRequest {
                detail: "from is required.".into()
            }
        );
    }

    #[test]
    fn refuses_every_bad_input_with_its_own_detail() {
        let cases = [
            ("", "JSON object"),
            ("not json", "JSON object"),
            ("[1,2]", "JSON object"),
            ("\"str\"", "JSON object"),
            (
                r#"{"from":"a","to":"b","amount":1,"amount":2}"#,
                "duplicate",
            ),
            (
                r#"{"from":"a","to":"b","amount":1,"fee":2}"#,
                "Unknown field",
            ),
            (r#"{"from":"a","to":"b","amount":0}"#, "greater than 0"),
            (r#"{"from":"a","to":"b","amount":-5}"#, "greater than 0"),
            (r#"{"from":"a","to":"b","amount":1.5}"#, "no fraction"),
            (r#"{"from":"a","to":"b","amount":1e3}"#, "no fraction"),
            (r#"{"from":"a","to":"b","amount":"100"}"#, "not a string"),
            (
                r#"{"from":"a","to":"b","amount":1000001}"#,
                "at most 1000000",
            ),
            (
                r#"{"from":"a","to":"b","amount":18446744073709551616}"#,
                "at most",
            ),
            (r#"{"from":"a","to":"a","amount":1}"#, "different"),
            (r#"{"to":"b","amount":1}"#, "from is required"),
            (r#"{"from":"a b","to":"b","amount":1}"#, "account id"),
            (
                r#"{"from":"a","to":"b","amount":1,"memo":7}"#,
                "memo must be a string",
            ),
        ];
        for (body, expected) in cases {
            let err = parse(body).unwrap_err();
            assert!(err.contains(expected), "{body}: {err}");
        }
        let long = format!(
            r#"{{"from":"a","to":"b","amount":1,"memo":"{}"}}"#,
            "é".repeat(141)
        );
        assert!(parse(&long).unwrap_err().contains("140"));
        let ok = format!(
            r#"{{"from":"a","to":"b","amount":1,"memo":"{}"}}"#,
            "é".repeat(140)
        );
        assert!(parse(&ok).is_ok());
    }
}
