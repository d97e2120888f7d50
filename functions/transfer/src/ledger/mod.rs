//! Accounts and transfers in DynamoDB, and the one transaction that moves money.
//!
//! A transfer is one `TransactWriteItems` of four writes:
//!
//! | # | write | condition |
//! |---|---|---|
//! | 0 | the idempotency record, completed with the 201 response | key free or expired |
//! | 1 | debit `from` | exists, owned by the caller, currency as expected, balance ≥ amount |
//! | 2 | credit `to` | exists, currency as expected, balance + amount ≤ [`MAX_BALANCE`] |
//! | 3 | the transfer record | id unused |
//!
//! Either all four commit or none does: there is no moment where money moved and the key does
//! not say so, or the key says done and money did not move. When the transaction is cancelled,
//! the cancellation reasons (with `ALL_OLD` items) say why, without a second read.
//!
//! The ledger is three files:
//!
//! - `transaction.rs`: [`Ledger::transfer`], writes 1 to 3 above and what their cancellation
//!   means (a refusal to store, a wrong currency guess, a race). Write 0, the attempts, how each
//!   DynamoDB answer is read and how an unknown outcome is resolved are the library's
//!   ([`IdempotencyStore::commit`]);
//! - `accounts.rs`: the operator's account operations ([`Ledger::create_account`],
//!   [`Ledger::deposit`], [`Ledger::account`]) and [`Ledger::transfer_record`];
//! - `items.rs`: the stored items' codecs and the [`Account`] and [`Transfer`] types.

use std::collections::HashMap;
use std::sync::Mutex;

use aws_sdk_dynamodb::Client;
use tollgate::clock::SharedClock;
use tollgate::idempotency::IdempotencyStore;
use tollgate::ApiError;

mod accounts;
mod items;
mod transaction;

pub use items::{Account, Transfer};

/// The accounts or transfers table could not be used.
#[derive(Debug, thiserror::Error)]
#[error("ledger {operation} failed")]
pub struct LedgerError {
    operation: &'static str,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

fn ledger_error(
    operation: &'static str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> LedgerError {
    LedgerError {
        operation,
        source: Box::new(e),
    }
}

impl From<LedgerError> for ApiError {
    fn from(e: LedgerError) -> Self {
        tracing::error!(error = %e, source = ?std::error::Error::source(&e), "ledger store failed");
        ApiError::Unavailable { retry_after: 1 }
    }
}

/// Largest balance an account may hold: amounts stay within a signed 64-bit integer, which
/// every client language can represent.
pub const MAX_BALANCE: u64 = i64::MAX as u64;

/// Why `create_account` or `deposit` did nothing.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("no such account")]
    NotFound,
    #[error("the balance would exceed {MAX_BALANCE}")]
    BalanceLimit,
    #[error(transparent)]
    Store(#[from] LedgerError),
}

/// Accounts, transfers and the transfer transaction.
#[derive(Debug)]
pub struct Ledger {
    ddb: Client,
    accounts: String,
    transfers: String,
    idempotency: IdempotencyStore,
    clock: SharedClock,
    default_currency: String,
    /// Prefix of the `Location` of a new transfer (`BASE_PATH`), so the link works behind
    /// CloudFront's `/api`.
    base_path: String,
    currencies: Mutex<HashMap<String, String>>,
}

impl Ledger {
    pub fn new(
        ddb: Client,
        accounts: impl Into<String>,
        transfers: impl Into<String>,
        idempotency: IdempotencyStore,
        clock: SharedClock,
        default_currency: impl Into<String>,
        base_path: impl Into<String>,
    ) -> Self {
        Self {
            ddb,
            accounts: accounts.into(),
            transfers: transfers.into(),
            idempotency,
            clock,
            default_currency: default_currency.into(),
            base_path: base_path.into(),
            currencies: Mutex::new(HashMap::new()),
        }
    }

    pub fn idempotency(&self) -> &IdempotencyStore {
        &self.idempotency
    }
}
