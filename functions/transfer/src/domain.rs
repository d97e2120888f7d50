//! Transfer requests, parsed once into types that cannot hold invalid values.
//!
//! Bad input gets 400 with a `detail` written here, in our words; nothing of a parser's error
//! text reaches the client, and nothing is written before the body is known to be valid.

use std::fmt;

use serde_json::Value;
use tollgate::json::strict_object;

/// Longest memo, in characters.
pub const MAX_MEMO_CHARS: usize = 140;

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
    pub fn parse(value: &Value, max: u64) -> Result<Self, String> {
        let Value::Number(n) = value else {
            return Err(
                "amount must be an integer number of minor units, not a string or other type."
                    .into(),
            );
        };
        if let Some(v) = n.as_u64() {
            if v == 0 {
                return Err("amount must be greater than 0.".into());
            }
            if v > max {
                return Err(format!("amount must be at most {max}."));
            }
            return Ok(Self(v));
        }
        if n.as_i64().is_some() {
            return Err("amount must be greater than 0.".into());
        }
        if n.as_f64()
            .is_some_and(|f| f.fract() == 0.0 && f > max as f64)
        {
            return Err(format!("amount must be at most {max}."));
        }
        Err("amount must be an integer number of minor units (no fraction or exponent).".into())
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
    /// Parses and validates a body. `Err` is the 400 `detail`.
    pub fn parse(body: &[u8], max_amount: u64) -> Result<Self, String> {
        let object = strict_object(body).map_err(|e| e.detail().to_string())?;
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
                _ => {
                    return Err(
                        "Unknown field: only from, to, amount and memo are accepted.".into(),
                    )
                }
            }
        }
        let from = from.ok_or("from is required.")?;
        let to = to.ok_or("to is required.")?;
        let amount = amount.ok_or("amount is required.")?;
        if from == to {
            return Err("from and to must be different accounts.".into());
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

fn account(v: &Value, field: &str) -> Result<AccountId, String> {
    v.as_str().and_then(AccountId::parse).ok_or_else(|| {
        format!("{field} must be an account id (1 to 64 characters: letters, digits, _ or -).")
    })
}

fn memo_of(v: &Value) -> Result<Option<String>, String> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) if s.chars().count() <= MAX_MEMO_CHARS => Ok(Some(s.clone())),
        Value::String(_) => Err(format!("memo must be at most {MAX_MEMO_CHARS} characters.")),
        _ => Err("memo must be a string.".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u64 = 1_000_000;

    fn parse(body: &str) -> Result<TransferRequest, String> {
        TransferRequest::parse(body.as_bytes(), MAX)
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
