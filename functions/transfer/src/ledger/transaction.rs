//! The transaction that moves money: [`Ledger::transfer`], the transfer's three items, and what
//! their cancellation means. The four writes are in [the ledger's](super) doc; the key's record
//! (write 0), the attempts, the tokens, how each DynamoDB answer is read and how an unknown
//! outcome is resolved are the library's ([`tollgate::idempotency::transaction`]).
//!
//! The request names no currency, so the transaction states the one it expects: a per-process
//! cache of account currencies (immutable after creation) or the default. A wrong guess shows in
//! the cancellation items, and the transaction is built once more with the real currency
//! ([`Explained::Rebuild`]).
//!
//! | an item's condition failed (`ALL_OLD`) | meaning | answer |
//! |---|---|---|
//! | debit or credit, no item | the account does not exist | 404 `account_not_found`, stored |
//! | debit, another client's account | not the caller's to debit | 403, stored |
//! | debit or credit, another currency than guessed | the two accounts differ | 422 `currency_mismatch`, stored |
//! | the same, both in one other currency | a wrong guess | rebuilt with that currency |
//! | debit, balance below the amount | | 402 `insufficient_funds`, stored |
//! | credit, balance past the ceiling | | 422 `balance_limit_exceeded`, stored |
//! | none of these now | the accounts changed under us | sent again ([`Explained::Raced`]) |

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, Put, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};
use http::header::{HeaderValue, LOCATION};
use http::StatusCode;
use lambda_http::{Body, Response};
use tollgate::http::json_response;
use tollgate::idempotency::{Explained, Outcome, Scope, TransactionEffect};
use tollgate::{ApiError, ClientError};

use crate::error::TransferError;

use super::items::{n, s};
use super::{Ledger, Transfer, MAX_BALANCE};
use crate::domain::{AccountId, TransferRequest};

const CURRENCY_CACHE_CAPACITY: usize = 10_000;

/// One transfer as a [`TransactionEffect`]: the debit, the credit and the transfer record, and
/// the currency they expect (a guess the cancellation may correct).
struct Move<'a> {
    ledger: &'a Ledger,
    client_id: &'a str,
    scope: &'a Scope,
    req: &'a TransferRequest,
    transfer: &'a Transfer,
    /// Renders a refusal's problem.
    request_id: &'a str,
    currency: String,
}

impl TransactionEffect for Move<'_> {
    fn items(&mut self) -> Vec<TransactWriteItem> {
        self.ledger.transaction(
            self.client_id,
            self.scope,
            self.req,
            &self.currency,
            self.transfer,
        )
    }

    fn explain(&mut self, reasons: &[CancellationReason]) -> Explained {
        match self
            .ledger
            .explain(self.client_id, self.req, &self.currency, reasons)
        {
            Reading::Refused(refusal) => {
                tracing::info!(
                    code = refusal.code(),
                    "transfer refused; storing the outcome under the key"
                );
                Explained::Refused(refusal.to_response(self.request_id))
            }
            Reading::Currency(actual) => {
                self.currency = actual;
                Explained::Rebuild
            }
            Reading::Raced => Explained::Raced,
        }
    }
}

/// What a cancellation of the transfer's items says.
enum Reading {
    Refused(TransferError),
    /// Both accounts hold this currency, not the one guessed.
    Currency(String),
    Raced,
}

impl Ledger {
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
    ) -> Result<Response<Body>, TransferError> {
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
        let currency = self
            .cached_currency(&req.from)
            .or_else(|| self.cached_currency(&req.to))
            .unwrap_or_else(|| self.default_currency.clone());
        let mut effect = Move {
            ledger: self,
            client_id,
            scope,
            req,
            transfer: &transfer,
            request_id,
            currency,
        };
        let outcome = self
            .idempotency
            .commit(scope, fingerprint, created, &mut effect)
            .await?;
        if let Outcome::Committed(_) = &outcome {
            tracing::info!(transfer_id = %transfer_id, amount = req.amount.get(), "transfer committed");
        }
        Ok(outcome.into_response())
    }

    /// The transfer's items after the key's record: debit, credit, transfer record. Public for
    /// the bench (`stress/src/bench/floor.rs`), whose bare side sends exactly these items.
    pub fn transaction(
        &self,
        client_id: &str,
        scope: &Scope,
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
        // The ceiling keeps `balance + amount <= MAX_BALANCE` without arithmetic in the
        // condition (amounts are at most 2^53 - 1, so the subtraction cannot underflow).
        let ceiling = MAX_BALANCE - req.amount.get();
        let credit = Update::builder()
            .table_name(&self.accounts)
            .key("pk", AttributeValue::S(req.to.to_string()))
            .update_expression("SET #balance = #balance + :amount")
            .condition_expression(
                "attribute_exists(#pk) AND #currency = :currency AND #balance <= :ceiling",
            )
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_names("#balance", "balance")
            .expression_attribute_names("#currency", "currency")
            .expression_attribute_values(":amount", amount)
            .expression_attribute_values(":ceiling", AttributeValue::N(ceiling.to_string()))
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
            TransactWriteItem::builder().update(debit).build(),
            TransactWriteItem::builder().update(credit).build(),
            TransactWriteItem::builder().put(record).build(),
        ]
    }

    /// Reads a cancellation of the transfer's items (`reasons[0]` the debit's, `[1]` the
    /// credit's): a refusal to store, a wrong currency guess, or a race.
    fn explain(
        &self,
        client_id: &str,
        req: &TransferRequest,
        guess: &str,
        reasons: &[CancellationReason],
    ) -> Reading {
        let item_of = |i: usize| {
            reasons
                .get(i)
                .filter(|r| r.code() == Some("ConditionalCheckFailed"))
                .map(|r| r.item())
        };
        // from
        let from_currency = match item_of(0) {
            Some(None) => return Reading::Refused(TransferError::AccountNotFound),
            Some(Some(item)) => {
                if s(item, "client_id") != Some(client_id) {
                    return Reading::Refused(ApiError::Forbidden.into());
                }
                s(item, "currency").unwrap_or_default().to_string()
            }
            None => guess.to_string(),
        };
        self.remember_currency(req.from.as_str(), &from_currency);
        // to
        let to_currency = match item_of(1) {
            Some(None) => return Reading::Refused(TransferError::AccountNotFound),
            Some(Some(item)) => s(item, "currency").unwrap_or_default().to_string(),
            None => guess.to_string(),
        };
        self.remember_currency(req.to.as_str(), &to_currency);
        if from_currency != to_currency {
            return Reading::Refused(TransferError::CurrencyMismatch);
        }
        if from_currency != guess {
            return Reading::Currency(from_currency);
        }
        if let Some(Some(item)) = item_of(0) {
            if n(item, "balance").unwrap_or(0) < req.amount.get() {
                return Reading::Refused(TransferError::InsufficientFunds);
            }
        }
        if let Some(Some(item)) = item_of(1) {
            if n(item, "balance").unwrap_or(0) > MAX_BALANCE - req.amount.get() {
                return Reading::Refused(TransferError::BalanceLimitExceeded);
            }
        }
        // The conditions hold now: the accounts changed under us. Try again.
        Reading::Raced
    }
}
