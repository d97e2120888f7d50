//! The transaction that moves money: [`Ledger::transfer`], its attempts, how each answer is
//! read, and how an unknown outcome is resolved. The four writes are in [the ledger's](super)
//! doc.
//!
//! The request names no currency, so the transaction states the one it expects: a per-process
//! cache of account currencies (immutable after creation) or the default. A wrong guess shows in
//! the cancellation items and the transaction is sent once more with the real currency.
//!
//! Each attempt carries a `ClientRequestToken`, and the items of one token are built once and
//! resent byte for byte: when a committed transaction's response is lost and the same attempt is
//! sent again, DynamoDB answers it as already done instead of applying it twice (a resend whose
//! parameters differ would get `IdempotentParameterMismatch` instead). Should the token have
//! lapsed, the claim on the key still holds and the record it returns is recognised as our own.
//!
//! The SDK does not retry the transaction itself: every attempt is the ledger's, so the ledger
//! knows when an attempt's outcome is unknown (timeout, dispatch failure, lost response, a 500,
//! `TransactionInProgress`). After such an attempt no later failure proves that nothing was
//! committed, so before answering 5xx the ledger resolves the outcome with a strongly consistent
//! read of the key's record (written in the same transaction as the money): our own record means
//! committed (201), no record means nothing was (503, key free), and a read that fails too gives
//! the 503 whose `detail` says the outcome is unknown and to retry with the same key.
//!
//! | DynamoDB answers | meaning | next |
//! |---|---|---|
//! | success | committed | 201 |
//! | cancelled, key item `ConditionalCheckFailed` | the key is taken | replay, 409 or 422 (ours: 201) |
//! | cancelled, key item `TransactionConflict` | a duplicate is committing now | 409 + `Retry-After` |
//! | cancelled, an account condition | a refusal, or a wrong currency guess, or a race | store the refusal / resend with a new token |
//! | cancelled, an account `TransactionConflict` | another transfer on the same account | resend, new token |
//! | `TransactionInProgress` | this token is being applied | resend, same token (outcome unknown) |
//! | `IdempotentParameterMismatch` | this token was used with other items | resend, new token |
//! | throttling, `ProvisionedThroughputExceeded`, `RequestLimitExceeded` | not applied | resend, same token |
//! | 500, timeout, dispatch failure, lost response | unknown | resend, same token |
//! | any other error (a missing table, a validation error) | not applied: a misconfiguration or a bug | resolve if unknown, else 503 |

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, Put, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};
use http::header::{HeaderValue, LOCATION};
use http::StatusCode;
use lambda_http::{Body, Response};
use tollgate::http::json_response;
use tollgate::idempotency::{Existing, RecordState, Scope, StoredResponse};
use tollgate::{ApiError, ClientError};

use crate::error::TransferError;

use super::items::{n, s};
use super::{Ledger, Transfer, MAX_BALANCE};
use crate::domain::{AccountId, TransferRequest};

/// Attempts per request: every send of the transaction, whatever came back (conflicts,
/// throttling, unknown outcomes). The SDK makes one attempt per send.
const MAX_ATTEMPTS: u32 = 6;
/// No new attempt starts after this much time: with the SDK's 3-second attempt timeout, the
/// attempts, the read that resolves an unknown outcome (one attempt) and the answer fit in the
/// function's 10-second timeout, so the client hears our answer rather than the platform's.
const SEND_BUDGET: Duration = Duration::from_secs(5);
const CURRENCY_CACHE_CAPACITY: usize = 10_000;

/// What one attempt of the transaction came to.
enum Attempt {
    Committed,
    /// Cancelled: the key was taken, or an account condition failed.
    Cancelled(Vec<CancellationReason>),
    /// Not applied, worth sending again: throttled, or a conflict with another transaction on
    /// the same accounts. `same_token` when the same items may be resent as they are.
    Retry {
        same_token: bool,
    },
    /// Perhaps applied: sending the same attempt again is safe (DynamoDB applies a token once),
    /// and a failure after this one proves nothing.
    Unknown,
    /// Not applied, and sending it again will not help.
    Failed(TransferError),
}

/// How a transfer that was not answered by DynamoDB came out, found by reading the key's record.
enum Resolved {
    /// Our transaction committed.
    Committed,
    /// Nothing of ours committed; the key holds another request's record.
    Existing(Existing),
    /// Nothing committed: the key is free.
    NotCommitted,
    /// The record could not be read either.
    Unknown,
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
        // A duplicate this process has seen completed: the same answer, no DynamoDB request.
        if let Some(existing) = self.idempotency.cached(scope, fingerprint) {
            tracing::info!(
                decision = "replayed",
                source = "replay_cache",
                "idempotent replay"
            );
            return existing.into_result();
        }
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
        // The record's expiry, kept for the replay cache once the transaction has committed.
        let expires_at = self.idempotency.expires_at();

        let mut currency = self
            .cached_currency(&req.from)
            .or_else(|| self.cached_currency(&req.to))
            .unwrap_or_else(|| self.default_currency.clone());
        // The token changes only when the transaction's items do, and the items of a token are
        // built once: a resend is the same request, byte for byte.
        let mut generation = 0;
        let mut built: Option<(u32, Vec<TransactWriteItem>)> = None;
        // Some attempt may have committed: no later failure proves otherwise.
        let mut unknown = false;
        let mut failure = TransferError::from(ApiError::Unavailable { retry_after: 1 });
        let started = std::time::Instant::now();
        for attempt in 0..MAX_ATTEMPTS {
            if attempt > 0 && started.elapsed() >= SEND_BUDGET {
                tracing::warn!(attempt, "transfer out of time for another attempt");
                break;
            }
            let token = format!("{}-{generation}", &transfer_id[3..]);
            let items = match &built {
                Some((g, items)) if *g == generation => items.clone(),
                _ => {
                    let items = self.transaction(
                        client_id,
                        scope,
                        fingerprint,
                        (&stored, expires_at),
                        req,
                        &currency,
                        &transfer,
                    );
                    built = Some((generation, items.clone()));
                    items
                }
            };
            match self.send(items, &token).await {
                Attempt::Committed => {
                    tracing::info!(transfer_id = %transfer_id, amount = req.amount.get(), "transfer committed");
                    self.idempotency
                        .remember(scope, fingerprint, &stored, expires_at);
                    return Ok(created);
                }
                Attempt::Unknown => {
                    unknown = true;
                    backoff(attempt).await;
                }
                Attempt::Retry { same_token } => {
                    if !same_token {
                        generation += 1;
                    }
                    backoff(attempt).await;
                }
                Attempt::Failed(e) => {
                    failure = e;
                    break;
                }
                Attempt::Cancelled(reasons) => {
                    match self.explain(client_id, scope, fingerprint, req, &currency, &reasons) {
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
        if !unknown {
            tracing::warn!(
                code = failure.code(),
                "transfer failed; nothing committed, the key is free"
            );
            return Err(failure);
        }
        match self.resolve(scope, fingerprint, &stored).await {
            Resolved::Committed => {
                tracing::info!(transfer_id = %transfer_id, amount = req.amount.get(), "transfer committed (found by reading the key's record after an unknown outcome)");
                Ok(created)
            }
            Resolved::Existing(existing) => existing.into_result(),
            Resolved::NotCommitted => {
                tracing::warn!(
                    code = failure.code(),
                    "transfer failed; its key's record shows nothing committed, the key is free"
                );
                Err(failure)
            }
            Resolved::Unknown => {
                tracing::error!(transfer_id = %transfer_id, "transfer outcome unknown: an attempt may have committed and the key's record cannot be read; the client must retry with the same key");
                Err(TransferError::OutcomeUnknown { retry_after: 1 })
            }
        }
    }

    /// After an attempt with an unknown outcome: did the transaction commit? The key's record is
    /// written in the same transaction as the money, so a strongly consistent read of it says.
    async fn resolve(&self, scope: &Scope, fingerprint: &str, ours: &StoredResponse) -> Resolved {
        match self.idempotency.read_once(scope).await {
            Ok(None) => Resolved::NotCommitted,
            Ok(Some(record)) => match &record.state {
                RecordState::Completed(r) if r == ours && record.fingerprint == fingerprint => {
                    Resolved::Committed
                }
                _ => Resolved::Existing(record.verdict(fingerprint, self.clock.now_ms())),
            },
            Err(e) => {
                tracing::error!(error = %e, source = ?std::error::Error::source(&e), "cannot read the key's record to resolve an unknown outcome");
                Resolved::Unknown
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn transaction(
        &self,
        client_id: &str,
        scope: &Scope,
        fingerprint: &str,
        // The response to store under the key, and the record's expiry.
        stored: (&StoredResponse, u64),
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
            self.idempotency
                .completed_put(scope, fingerprint, stored.0, stored.1),
            TransactWriteItem::builder().update(debit).build(),
            TransactWriteItem::builder().update(credit).build(),
            TransactWriteItem::builder().put(record).build(),
        ]
    }

    /// One attempt, exactly one request: the SDK's own retries are off for the transaction, so
    /// that an attempt whose outcome is unknown is never hidden behind a later, clearer failure.
    async fn send(&self, items: Vec<TransactWriteItem>, token: &str) -> Attempt {
        let result = self
            .ddb
            .transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(token)
            .customize()
            .config_override(tollgate::aws::dynamodb_one_attempt())
            .send()
            .await;
        let e = match result {
            Ok(_) => return Attempt::Committed,
            Err(e) => e,
        };
        match &e {
            SdkError::ServiceError(se) => match se.err() {
                TransactWriteItemsError::TransactionCanceledException(c) => {
                    let reasons = c.cancellation_reasons().to_vec();
                    let conflict = |r: &CancellationReason| r.code() == Some("TransactionConflict");
                    if reasons.first().is_some_and(conflict) {
                        // Another request with this key is being committed right now.
                        Attempt::Cancelled(reasons)
                    } else if reasons.iter().any(conflict) {
                        tracing::info!("transfer conflicted with another transaction on an account; sending it again");
                        Attempt::Retry { same_token: false }
                    } else if reasons.iter().any(|r| {
                        matches!(
                            r.code(),
                            Some("ThrottlingError" | "ProvisionedThroughputExceeded")
                        )
                    }) {
                        tracing::warn!("transfer throttled on an item; sending it again");
                        Attempt::Retry { same_token: false }
                    } else {
                        Attempt::Cancelled(reasons)
                    }
                }
                TransactWriteItemsError::TransactionInProgressException(_) => {
                    // This token is still being applied: it may commit. Ask again, same token.
                    tracing::warn!("transfer with this token still in progress; sending it again");
                    Attempt::Unknown
                }
                TransactWriteItemsError::IdempotentParameterMismatchException(_) => {
                    // Not ours to reuse (items are resent byte for byte, so this is unexpected).
                    tracing::warn!(
                        "transfer token reused with other items; sending with a new token"
                    );
                    Attempt::Retry { same_token: false }
                }
                TransactWriteItemsError::InternalServerError(_) => {
                    tracing::warn!(error_code = se.err().meta().code(), "transfer got a DynamoDB 500; outcome unknown, sending the same attempt again");
                    Attempt::Unknown
                }
                TransactWriteItemsError::ProvisionedThroughputExceededException(_)
                | TransactWriteItemsError::RequestLimitExceeded(_)
                | TransactWriteItemsError::ThrottlingException(_) => {
                    tracing::warn!(
                        error_code = se.err().meta().code(),
                        "transfer throttled; sending the same attempt again"
                    );
                    Attempt::Retry { same_token: true }
                }
                other => {
                    if se.raw().status().is_server_error() {
                        tracing::warn!(
                            error_code = other.meta().code(),
                            "transfer got a 5xx; outcome unknown, sending the same attempt again"
                        );
                        return Attempt::Unknown;
                    }
                    if other.meta().code().is_some_and(|c| c.contains("Throttl")) {
                        tracing::warn!(
                            error_code = other.meta().code(),
                            "transfer throttled; sending the same attempt again"
                        );
                        return Attempt::Retry { same_token: true };
                    }
                    // A missing table, denied access, a validation error: nothing was applied,
                    // and resending will not help. 503 like every other failure of our tables
                    // (the reads answer so too); the log says what to check.
                    tracing::error!(error = ?other, "transfer transaction refused; check the table names and the function's permissions");
                    Attempt::Failed(ApiError::Unavailable { retry_after: 1 }.into())
                }
            },
            SdkError::DispatchFailure(_)
            | SdkError::ResponseError(_)
            | SdkError::TimeoutError(_) => {
                // The transaction may have committed. Sending the same attempt again with the
                // same token is safe: DynamoDB will not apply it twice.
                tracing::warn!(error = %e, "transfer outcome unknown; sending the same attempt again");
                Attempt::Unknown
            }
            _ => {
                tracing::error!(error = %e, "transfer transaction could not be sent");
                Attempt::Failed(ApiError::Internal.into())
            }
        }
    }

    /// Reads a cancellation: a taken key, a refusal to store, or a reason to try again.
    fn explain(
        &self,
        client_id: &str,
        scope: &Scope,
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
                return match self
                    .idempotency
                    .existing_in(scope, &reasons[0], fingerprint)
                {
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
            Some(None) => return Explained::Refused(TransferError::AccountNotFound),
            Some(Some(item)) => {
                if s(item, "client_id") != Some(client_id) {
                    return Explained::Refused(ApiError::Forbidden.into());
                }
                s(item, "currency").unwrap_or_default().to_string()
            }
            None => guess.to_string(),
        };
        self.remember_currency(req.from.as_str(), &from_currency);
        // to
        let to_currency = match item_of(2) {
            Some(None) => return Explained::Refused(TransferError::AccountNotFound),
            Some(Some(item)) => s(item, "currency").unwrap_or_default().to_string(),
            None => guess.to_string(),
        };
        self.remember_currency(req.to.as_str(), &to_currency);
        if from_currency != to_currency {
            return Explained::Refused(TransferError::CurrencyMismatch);
        }
        if from_currency != guess {
            return Explained::Currency(from_currency);
        }
        if let Some(Some(item)) = item_of(1) {
            if n(item, "balance").unwrap_or(0) < req.amount.get() {
                return Explained::Refused(TransferError::InsufficientFunds);
            }
        }
        if let Some(Some(item)) = item_of(2) {
            if n(item, "balance").unwrap_or(0) > MAX_BALANCE - req.amount.get() {
                return Explained::Refused(TransferError::BalanceLimitExceeded);
            }
        }
        // The conditions hold now: the accounts changed under us. Try again.
        Explained::Raced
    }

    /// Stores a refusal under the key (conditionally: a racing duplicate's record wins) and
    /// answers with it.
    async fn store_refusal(
        &self,
        scope: &Scope,
        fingerprint: &str,
        refusal: TransferError,
        request_id: &str,
    ) -> Result<Response<Body>, TransferError> {
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
}

enum Explained {
    Done(Existing),
    Refused(TransferError),
    Currency(String),
    Raced,
}

async fn backoff(attempt: u32) {
    let jitter = tollgate::ids::random_u64() % 16;
    tokio::time::sleep(Duration::from_millis(10 * (1 << attempt.min(4)) + jitter)).await;
}
