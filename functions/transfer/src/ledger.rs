//! Accounts and transfers in DynamoDB, and the one transaction that moves money.
//!
//! A transfer is one `TransactWriteItems` of four writes:
//!
//! | # | write | condition |
//! |---|---|---|
//! | 0 | the idempotency record, completed with the 201 response | key free or expired |
//! | 1 | debit `from` | exists, owned by the caller, currency as expected, balance ≥ amount |
//! | 2 | credit `to` | exists, currency as expected |
//! | 3 | the transfer record | id unused |
//!
//! Either all four commit or none does: there is no moment where money moved and the key does
//! not say so, or the key says done and money did not move. When the transaction is cancelled,
//! the cancellation reasons (with `ALL_OLD` items) say why, without a second read.
//!
//! The request names no currency, so the transaction states the one it expects: a per-process
//! cache of account currencies (immutable after creation) or the default. A wrong guess shows in
//! the cancellation items and the transaction is sent once more with the real currency.
//!
//! Each attempt carries a `ClientRequestToken`: when a committed transaction's response is lost
//! and the same attempt is sent again (by the SDK or by us), DynamoDB answers it as already done
//! instead of applying it twice; should the token have lapsed, the claim on the key still holds
//! and the record it returns is recognised as our own.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, Put, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};
use aws_sdk_dynamodb::Client;
use http::header::{HeaderValue, LOCATION};
use http::StatusCode;
use lambda_http::{Body, Response};
use serde::Serialize;
use tollgate::clock::SharedClock;
use tollgate::http::json_response;
use tollgate::idempotency::{Existing, IdempotencyStore, Scope, StoredResponse};
use tollgate::ApiError;

use crate::domain::{AccountId, TransferRequest};

/// Attempts per request when DynamoDB reports a conflict with another transaction on the same
/// accounts, or an ambiguous failure (the outcome of a sent transaction is unknown).
const MAX_ATTEMPTS: u32 = 6;
const CURRENCY_CACHE_CAPACITY: usize = 10_000;

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

/// What one attempt of the transaction came to.
enum Attempt {
    Committed,
    /// Cancelled: the key was taken, or an account condition failed.
    Cancelled(Vec<CancellationReason>),
    /// Worth sending again: a conflict with another transaction on the same items, or a
    /// transport failure after which the outcome is unknown.
    Retry {
        same_token: bool,
    },
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

    fn cached_currency(&self, account: &AccountId) -> Option<String> {
        self.currencies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(account.as_str())
            .cloned()
    }

    fn remember_currency(&self, account: &str, currency: &str) {
        let mut cache = self.currencies.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CURRENCY_CACHE_CAPACITY {
            cache.clear();
        }
        cache.insert(account.to_string(), currency.to_string());
    }

    /// Executes a transfer under an idempotency key: the 201, a stored refusal, or a replay.
    pub async fn transfer(
        &self,
        client_id: &str,
        scope: &Scope,
        fingerprint: &str,
        req: &TransferRequest,
        request_id: &str,
    ) -> Result<Response<Body>, ApiError> {
        let transfer_id = tollgate::ids::new_id("tr");
        let created_at = humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + Duration::from_millis(self.clock.now_ms()),
        )
        .to_string();
        let transfer = Transfer {
            transfer_id: transfer_id.clone(),
            from: req.from.to_string(),
            to: req.to.to_string(),
            amount: req.amount.get(),
            memo: req.memo.clone(),
            created_at,
        };
        let mut created = json_response(StatusCode::CREATED, &transfer);
        if let Ok(location) =
            HeaderValue::from_str(&format!("{}/transfers/{transfer_id}", self.base_path))
        {
            created.headers_mut().insert(LOCATION, location);
        }
        let stored = StoredResponse::capture(&created);

        let mut currency = self
            .cached_currency(&req.from)
            .or_else(|| self.cached_currency(&req.to))
            .unwrap_or_else(|| self.default_currency.clone());
        // The token changes only when the transaction's parameters do.
        let mut generation = 0;
        for attempt in 0..MAX_ATTEMPTS {
            let token = format!("{}-{generation}", &transfer_id[3..]);
            let items = self.transaction(
                client_id,
                scope,
                fingerprint,
                &stored,
                req,
                &currency,
                &transfer,
            );
            match self.send(items, &token).await? {
                Attempt::Committed => {
                    tracing::info!(transfer_id = %transfer_id, amount = req.amount.get(), "transfer committed");
                    return Ok(created);
                }
                Attempt::Retry { same_token } => {
                    if !same_token {
                        generation += 1;
                    }
                    backoff(attempt).await;
                }
                Attempt::Cancelled(reasons) => {
                    match self.explain(client_id, fingerprint, req, &currency, &reasons) {
                        Explained::Done(existing) => {
                            return match existing {
                                // Our own commit, whose response was lost on the way back.
                                Existing::Replay(r) if r == stored => Ok(created),
                                other => other.into_result(),
                            };
                        }
                        Explained::Refused(refusal) => {
                            return self
                                .store_refusal(scope, fingerprint, refusal, request_id)
                                .await
                        }
                        Explained::Currency(actual) => {
                            currency = actual;
                            generation += 1;
                        }
                        Explained::Raced => {
                            generation += 1;
                            backoff(attempt).await;
                        }
                    }
                }
            }
        }
        tracing::warn!("transfer gave up after repeated conflicts; nothing committed");
        Err(ApiError::Unavailable { retry_after: 1 })
    }

    #[allow(clippy::too_many_arguments)]
    fn transaction(
        &self,
        client_id: &str,
        scope: &Scope,
        fingerprint: &str,
        stored: &StoredResponse,
        req: &TransferRequest,
        currency: &str,
        transfer: &Transfer,
    ) -> Vec<TransactWriteItem> {
        let amount = AttributeValue::N(req.amount.get().to_string());
        let debit = Update::builder()
            .table_name(&self.accounts)
            .key("pk", AttributeValue::S(req.from.to_string()))
            .update_expression("SET #balance = #balance - :amount")
            .condition_expression(
                "attribute_exists(#pk) AND #owner = :client AND #currency = :currency AND #balance >= :amount",
            )
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_names("#balance", "balance")
            .expression_attribute_names("#owner", "client_id")
            .expression_attribute_names("#currency", "currency")
            .expression_attribute_values(":amount", amount.clone())
            .expression_attribute_values(":client", AttributeValue::S(client_id.into()))
            .expression_attribute_values(":currency", AttributeValue::S(currency.into()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .expect("debit is complete");
        let credit = Update::builder()
            .table_name(&self.accounts)
            .key("pk", AttributeValue::S(req.to.to_string()))
            .update_expression("SET #balance = #balance + :amount")
            .condition_expression("attribute_exists(#pk) AND #currency = :currency")
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_names("#balance", "balance")
            .expression_attribute_names("#currency", "currency")
            .expression_attribute_values(":amount", amount)
            .expression_attribute_values(":currency", AttributeValue::S(currency.into()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .expect("credit is complete");
        let mut record = HashMap::from([
            (
                "pk".to_string(),
                AttributeValue::S(transfer.transfer_id.clone()),
            ),
            ("client_id".to_string(), AttributeValue::S(client_id.into())),
            ("from".to_string(), AttributeValue::S(transfer.from.clone())),
            ("to".to_string(), AttributeValue::S(transfer.to.clone())),
            (
                "amount".to_string(),
                AttributeValue::N(transfer.amount.to_string()),
            ),
            ("currency".to_string(), AttributeValue::S(currency.into())),
            (
                "created_at".to_string(),
                AttributeValue::S(transfer.created_at.clone()),
            ),
            (
                "idempotency_pk".to_string(),
                AttributeValue::S(scope.pk().into()),
            ),
        ]);
        if let Some(memo) = &transfer.memo {
            record.insert("memo".into(), AttributeValue::S(memo.clone()));
        }
        let record = Put::builder()
            .table_name(&self.transfers)
            .set_item(Some(record))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .expect("transfer record is complete");
        vec![
            self.idempotency.completed_put(scope, fingerprint, stored),
            TransactWriteItem::builder().update(debit).build(),
            TransactWriteItem::builder().update(credit).build(),
            TransactWriteItem::builder().put(record).build(),
        ]
    }

    async fn send(&self, items: Vec<TransactWriteItem>, token: &str) -> Result<Attempt, ApiError> {
        let result = self
            .ddb
            .transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(token)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Attempt::Committed),
            Err(SdkError::ServiceError(e)) => match e.err() {
                TransactWriteItemsError::TransactionCanceledException(c) => {
                    let reasons = c.cancellation_reasons().to_vec();
                    let conflict = |r: &CancellationReason| r.code() == Some("TransactionConflict");
                    if reasons.first().is_some_and(conflict) {
                        // Another request with this key is being committed right now.
                        Ok(Attempt::Cancelled(reasons))
                    } else if reasons.iter().any(conflict) {
                        Ok(Attempt::Retry { same_token: false })
                    } else {
                        Ok(Attempt::Cancelled(reasons))
                    }
                }
                TransactWriteItemsError::TransactionInProgressException(_) => {
                    // The same token is still being applied: ask again, same token.
                    Ok(Attempt::Retry { same_token: true })
                }
                TransactWriteItemsError::IdempotentParameterMismatchException(_) => {
                    Ok(Attempt::Retry { same_token: false })
                }
                other => {
                    tracing::error!(error = ?other, "transfer transaction refused");
                    Err(ApiError::Unavailable { retry_after: 1 })
                }
            },
            Err(
                e @ (SdkError::DispatchFailure(_)
                | SdkError::ResponseError(_)
                | SdkError::TimeoutError(_)),
            ) => {
                // The transaction may have committed. Sending the same attempt again with the
                // same token is safe: DynamoDB will not apply it twice.
                tracing::warn!(error = %e, "transfer outcome unknown; sending the same attempt again");
                Ok(Attempt::Retry { same_token: true })
            }
            Err(e) => {
                tracing::error!(error = %e, "transfer transaction could not be sent");
                Err(ApiError::Internal)
            }
        }
    }

    /// Reads a cancellation: a taken key, a refusal to store, or a reason to try again.
    fn explain(
        &self,
        client_id: &str,
        fingerprint: &str,
        req: &TransferRequest,
        guess: &str,
        reasons: &[CancellationReason],
    ) -> Explained {
        let failed = |i: usize| {
            reasons
                .get(i)
                .filter(|r| r.code() == Some("ConditionalCheckFailed"))
        };
        match reasons.first().and_then(|r| r.code()) {
            Some("TransactionConflict") => {
                return Explained::Done(Existing::InProgress { retry_after: 1 })
            }
            Some("ConditionalCheckFailed") => {
                return match self.idempotency.existing_in(&reasons[0], fingerprint) {
                    Some(existing) => Explained::Done(existing),
                    // The record expired between the claim and now: try again.
                    None => Explained::Raced,
                };
            }
            _ => {}
        }
        let item_of = |i: usize| failed(i).map(|r| r.item());
        // from
        let from_currency = match item_of(1) {
            Some(None) => return Explained::Refused(ApiError::AccountNotFound),
            Some(Some(item)) => {
                if s(item, "client_id") != Some(client_id) {
                    return Explained::Refused(ApiError::Forbidden);
                }
                s(item, "currency").unwrap_or_default().to_string()
            }
            None => guess.to_string(),
        };
        self.remember_currency(req.from.as_str(), &from_currency);
        // to
        let to_currency = match item_of(2) {
            Some(None) => return Explained::Refused(ApiError::AccountNotFound),
            Some(Some(item)) => s(item, "currency").unwrap_or_default().to_string(),
            None => guess.to_string(),
        };
        self.remember_currency(req.to.as_str(), &to_currency);
        if from_currency != to_currency {
            return Explained::Refused(ApiError::CurrencyMismatch);
        }
        if from_currency != guess {
            return Explained::Currency(from_currency);
        }
        match item_of(1) {
            Some(Some(item)) if n(item, "balance").unwrap_or(0) < req.amount.get() => {
                Explained::Refused(ApiError::InsufficientFunds)
            }
            // The conditions hold now: the accounts changed under us. Try again.
            _ => Explained::Raced,
        }
    }

    /// Stores a refusal under the key (conditionally: a racing duplicate's record wins) and
    /// answers with it.
    async fn store_refusal(
        &self,
        scope: &Scope,
        fingerprint: &str,
        refusal: ApiError,
        request_id: &str,
    ) -> Result<Response<Body>, ApiError> {
        tracing::info!(
            code = refusal.code(),
            "transfer refused; storing the outcome under the key"
        );
        let response = refusal.to_response(request_id);
        let stored = StoredResponse::capture(&response);
        match self.idempotency.store(scope, fingerprint, &stored).await? {
            None => Ok(stored.to_response()),
            // Our own write, whose answer was lost and retried by the SDK: not a replay.
            Some(Existing::Replay(r)) if r == stored => Ok(stored.to_response()),
            Some(existing) => existing.into_result(),
        }
    }

    /// Creates an account for `client_id`.
    pub async fn create_account(
        &self,
        client_id: &str,
        balance: u64,
        currency: &str,
    ) -> Result<Account, LedgerError> {
        let account_id = tollgate::ids::new_id("acc");
        self.ddb
            .put_item()
            .table_name(&self.accounts)
            .item("pk", AttributeValue::S(account_id.clone()))
            .item("client_id", AttributeValue::S(client_id.into()))
            .item("currency", AttributeValue::S(currency.into()))
            .item("balance", AttributeValue::N(balance.to_string()))
            .item(
                "created_at",
                AttributeValue::N((self.clock.now_ms() / 1000).to_string()),
            )
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await
            .map_err(|e| ledger_error("create account", e))?;
        Ok(Account {
            account_id,
            balance,
            currency: currency.into(),
            client_id: client_id.into(),
        })
    }

    /// Adds `amount` to an existing account in one conditional write (tests and demos). The
    /// condition also keeps the balance at most [`MAX_BALANCE`].
    pub async fn deposit(&self, account_id: &str, amount: u64) -> Result<Account, AccountError> {
        let ceiling = MAX_BALANCE
            .checked_sub(amount)
            .ok_or(AccountError::BalanceLimit)?;
        let result = self
            .ddb
            .update_item()
            .table_name(&self.accounts)
            .key("pk", AttributeValue::S(account_id.into()))
            .update_expression("SET #balance = #balance + :amount")
            .condition_expression("attribute_exists(pk) AND #balance <= :ceiling")
            .expression_attribute_names("#balance", "balance")
            .expression_attribute_values(":amount", AttributeValue::N(amount.to_string()))
            .expression_attribute_values(":ceiling", AttributeValue::N(ceiling.to_string()))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(out) => out
                .attributes()
                .and_then(account_of)
                .ok_or(AccountError::NotFound),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                match e.err() {
                    UpdateItemError::ConditionalCheckFailedException(c) if c.item().is_some() => {
                        Err(AccountError::BalanceLimit)
                    }
                    _ => Err(AccountError::NotFound),
                }
            }
            Err(e) => Err(ledger_error("deposit", e).into()),
        }
    }

    /// An account, read strongly consistent.
    pub async fn account(&self, account_id: &str) -> Result<Option<Account>, LedgerError> {
        let out = self
            .ddb
            .get_item()
            .table_name(&self.accounts)
            .key("pk", AttributeValue::S(account_id.into()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| ledger_error("read account", e))?;
        Ok(out.item().and_then(account_of))
    }

    /// A transfer and the client that made it.
    pub async fn transfer_record(
        &self,
        transfer_id: &str,
    ) -> Result<Option<(Transfer, String)>, LedgerError> {
        let out = self
            .ddb
            .get_item()
            .table_name(&self.transfers)
            .key("pk", AttributeValue::S(transfer_id.into()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| ledger_error("read transfer", e))?;
        Ok(out.item().and_then(|item| {
            Some((
                Transfer {
                    transfer_id: s(item, "pk")?.into(),
                    from: s(item, "from")?.into(),
                    to: s(item, "to")?.into(),
                    amount: n(item, "amount")?,
                    memo: s(item, "memo").map(str::to_string),
                    created_at: s(item, "created_at")?.into(),
                },
                s(item, "client_id")?.to_string(),
            ))
        }))
    }
}

enum Explained {
    Done(Existing),
    Refused(ApiError),
    Currency(String),
    Raced,
}

async fn backoff(attempt: u32) {
    let jitter = tollgate::ids::random_u64() % 16;
    tokio::time::sleep(Duration::from_millis(10 * (1 << attempt.min(4)) + jitter)).await;
}

fn s<'a>(item: &'a HashMap<String, AttributeValue>, key: &str) -> Option<&'a str> {
    item.get(key)?.as_s().ok().map(String::as_str)
}

fn n(item: &HashMap<String, AttributeValue>, key: &str) -> Option<u64> {
    item.get(key)?.as_n().ok()?.parse().ok()
}

fn account_of(item: &HashMap<String, AttributeValue>) -> Option<Account> {
    Some(Account {
        account_id: s(item, "pk")?.into(),
        balance: n(item, "balance")?,
        currency: s(item, "currency")?.into(),
        client_id: s(item, "client_id")?.into(),
    })
}
