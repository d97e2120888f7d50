//! The stored items' types and codecs: what an account or transfer item holds, and reading its
//! attributes.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;

/// An account as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Account {
    pub account_id: String,
    pub balance: u64,
    pub currency: String,
    pub client_id: String,
}

/// A transfer as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Transfer {
    pub transfer_id: String,
    pub from: String,
    pub to: String,
    pub amount: u64,
    pub memo: Option<String>,
    pub created_at: String,
}

pub(super) fn s<'a>(item: &'a HashMap<String, AttributeValue>, key: &str) -> Option<&'a str> {
    item.get(key)?.as_s().ok().map(String::as_str)
}

pub(super) fn n(item: &HashMap<String, AttributeValue>, key: &str) -> Option<u64> {
    item.get(key)?.as_n().ok()?.parse().ok()
}

pub(super) fn account_of(item: &HashMap<String, AttributeValue>) -> Option<Account> {
    Some(Account {
        account_id: s(item, "pk")?.into(),
        balance: n(item, "balance")?,
        currency: s(item, "currency")?.into(),
        client_id: s(item, "client_id")?.into(),
    })
}
