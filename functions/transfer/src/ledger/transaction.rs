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
//! knows what DynamoDB said to each one, and decides from that, never from the last attempt
//! alone. It tracks, per token, whether a send may have committed:
//!
//! - a send whose outcome is unknown (timeout, dispatch failure, lost response, a 5xx,
//!   `TransactionInProgress`: the token is still being applied) makes the token *unknown*;
//! - only a definite answer for that same token clears it: success (a token that committed is
//!   answered as done), a cancellation (while an earlier send of the token is in flight DynamoDB
//!   answers `TransactionInProgress`, so a cancellation means no send of it committed), or a
//!   refusal that the same items would always get (a validation error, a missing table).
//!   Throttling does not: it refused this send, and says nothing of an earlier one in flight;
//! - while the token is unknown the ledger resends it, same items byte for byte, until DynamoDB
//!   answers definitely; a new token (a currency learnt, a race) normally follows a cancellation,
//!   so the old one is settled; a token given up on while unknown (`IdempotentParameterMismatch`)
//!   stays unknown for the rest of the request.
//!
//! When the attempts end with some token unknown, a strongly consistent read of the key's record
//! (written in the same transaction as the money) can settle it only one way: our own record
//! means committed (201), another request's record is its answer (replay, 409, 422). No record
//! proves nothing (DynamoDB may still be applying the transaction), so then, or when the read
//! fails too, the client gets the 503 whose `detail` says the outcome is unknown and to retry
//! with the same key. The plain 503 (nothing committed, the key free) is answered only when
//! DynamoDB said so for every token sent.
//!
//! | DynamoDB answers | meaning | next |
//! |---|---|---|
//! | success | committed | 201 |
//! | cancelled, key item `ConditionalCheckFailed` | the key is taken | replay, 409 or 422 (ours: 201) |
//! | cancelled, key item `TransactionConflict` | a duplicate is committing now | 409 + `Retry-After` |
//! | cancelled, an account condition | a refusal, or a wrong currency guess, or a race | store the refusal / resend with a new token |
//! | cancelled, an account `TransactionConflict` or an item throttled | not committed | resend, new token |
//! | `TransactionInProgress` | this token is being applied | resend, same token (unknown until it answers) |
//! | `IdempotentParameterMismatch` | this token was used with other items | resend, new token (the old one stays as it was) |
//! | throttling, `ProvisionedThroughputExceeded`, `RequestLimitExceeded` | this send not applied | resend, same token (unknown stays unknown) |
//! | 500, timeout, dispatch failure, lost response | unknown | resend, same token |
//! | a validation error, a missing table | not applied, and no send of these items can be | 503, nothing committed |
//! | any other error (denied access, credentials) | this send not applied: a misconfiguration or a bug | resolve if unknown, else 503 |
//!
//! Time: no attempt starts after [`SEND_BUDGET`], each attempt ends by [`SENDS_END`], and the
//! read that resolves an unknown outcome by [`ANSWER_BY`], inside the function's 10-second
//! timeout, so the client hears our answer (and its instruction) rather than the platform's.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, Put, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};
use http::header::{HeaderValue, LOCATION};
use http::StatusCode;
use lambda_http::{Body, Response};
use tollgate::aws::Failure;
use tollgate::http::json_response;
use tollgate::idempotency::{Existing, IdempotencyError, RecordState, Scope, StoredResponse};
use tollgate::{ApiError, ClientError};

use crate::error::TransferError;

use super::items::{n, s};
use super::{Ledger, Transfer, MAX_BALANCE};
use crate::domain::{AccountId, TransferRequest};

/// Attempts per request: every send of the transaction, whatever came back (conflicts,
/// throttling, unknown outcomes). The SDK makes one attempt per send.
const MAX_ATTEMPTS: u32 = 6;
/// No new attempt starts after this much time from the transfer's start.
const SEND_BUDGET: Duration = Duration::from_secs(5);
/// Every attempt ends by then: its SDK attempt timeout is cut to what is left (at most the
/// usual 3 seconds).
const SENDS_END: Duration = Duration::from_secs(7);
/// The answer is ready by then, the read resolving an unknown outcome included: the function's
/// timeout is 10 seconds, and the guards before the ledger and the response need the rest.
const ANSWER_BY: Duration = Duration::from_secs(8);
/// Less time than this left for the resolving read: not worth sending, the outcome is unknown.
const SHORTEST_READ: Duration = Duration::from_millis(200);
const CURRENCY_CACHE_CAPACITY: usize = 10_000;

/// What one attempt of the transaction came to.
enum Attempt {
    Committed,
    /// Cancelled: the key was taken, or an account condition failed. Definite for the token.
    Cancelled(Vec<CancellationReason>),
    /// Cancelled by a conflict with another transaction on an account, or an item's partition
    /// throttled: nothing of this token committed; worth sending again with a new token.
    Conflicted,
    /// Refused for throughput before it was applied: the same token again. Says nothing of an
    /// earlier send of this token that may still be in flight.
    Throttled,
    /// The token was used with other items: a new token. Says nothing of our earlier sends.
    Mismatch,
    /// Perhaps applied, or being applied: sending the same attempt again is safe (DynamoDB
    /// applies a token once) and will tell.
    Unknown,
    /// Not applied, and sending it again will not help. `definite` when no send of these items
    /// can have been applied either (the same request is always refused the same way).
    Failed {
        error: TransferError,
        definite: bool,
    },
}

/// What the ledger knows of the tokens it has sent for one transfer.
#[derive(Debug, Default)]
struct Tokens {
    /// The current token's number: it changes only when the items do.
    generation: u32,
    /// A send of the current token had an unknown outcome and DynamoDB has not answered the
    /// token definitely since.
    current_unknown: bool,
    /// A token given up on while it was unknown: it may have committed (or may yet).
    earlier_unknown: bool,
}

impl Tokens {
    fn token(&self, transfer_id: &str) -> String {
        format!("{}-{}", &transfer_id[3..], self.generation)
    }

    /// A send of the current token may have committed.
    fn unknown(&mut self) {
        self.current_unknown = true;
    }

    /// DynamoDB answered the current token definitely: nothing of it committed.
    fn definite(&mut self) {
        self.current_unknown = false;
    }

    /// A new token for new items; the current one keeps what is known of it.
    fn next(&mut self) {
        self.earlier_unknown |= self.current_unknown;
        self.current_unknown = false;
        self.generation += 1;
    }

    /// Whether some token sent may have committed.
    fn outcome_unknown(&self) -> bool {
        self.current_unknown || self.earlier_unknown
    }
}

/// How a transfer whose outcome was unknown came out, found by reading the key's record.
enum Resolved {
    /// Our transaction committed.
    Committed,
    /// Nothing of ours committed; the key holds another request's record.
    Existing(Existing),
    /// No record (DynamoDB may still be applying ours), or the record could not be read.
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
        let mut tokens = Tokens::default();
        let mut built: Option<(u32, Vec<TransactWriteItem>)> = None;
        let mut failure = TransferError::from(ApiError::Unavailable { retry_after: 1 });
        let started = std::time::Instant::now();
        for attempt in 0..MAX_ATTEMPTS {
            let elapsed = started.elapsed();
            if attempt > 0 && elapsed >= SEND_BUDGET {
                tracing::warn!(attempt, "transfer out of time for another attempt");
                break;
            }
            let token = tokens.token(&transfer_id);
            let items = match &built {
                Some((g, items)) if *g == tokens.generation => items.clone(),
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
                    built = Some((tokens.generation, items.clone()));
                    items
                }
            };
            match self
                .send(items, &token, SENDS_END.saturating_sub(elapsed))
                .await
            {
                Attempt::Committed => {
                    tracing::info!(transfer_id = %transfer_id, amount = req.amount.get(), "transfer committed");
                    self.idempotency
                        .remember(scope, fingerprint, &stored, expires_at);
                    return Ok(created);
                }
                Attempt::Unknown => {
                    tokens.unknown();
                    backoff(attempt).await;
                }
                Attempt::Throttled => backoff(attempt).await,
                Attempt::Conflicted => {
                    tokens.definite();
                    tokens.next();
                    backoff(attempt).await;
                }
                Attempt::Mismatch => {
                    tokens.next();
                    backoff(attempt).await;
                }
                Attempt::Failed { error, definite } => {
                    if definite {
                        tokens.definite();
                    }
                    failure = error;
                    break;
                }
                Attempt::Cancelled(reasons) => {
                    tokens.definite();
                    match self.explain(client_id, scope, fingerprint, req, &currency, &reasons) {
                        Explained::Done(existing) => {
                            return match existing {
                                // Our own commit, whose response was lost on the way back.
                                Existing::Replay(r) if r == stored => Ok(created),
                                other => other.into_result(),
                            };
                        }
                        Explained::Refused(refusal) => {
                            let unknown = tokens.outcome_unknown();
                            return self
                                .store_refusal(scope, fingerprint, refusal, request_id, unknown)
                                .await;
                        }
                        Explained::Currency(actual) => {
                            currency = actual;
                            tokens.next();
                        }
                        Explained::Raced => {
                            tokens.next();
                            backoff(attempt).await;
                        }
                    }
                }
            }
        }
        if !tokens.outcome_unknown() {
            tracing::warn!(
                code = failure.code(),
                "transfer failed; DynamoDB refused every token sent: nothing committed, the key is free"
            );
            return Err(failure);
        }
        let left = ANSWER_BY.saturating_sub(started.elapsed());
        match self.resolve(scope, fingerprint, &stored, left).await {
            Resolved::Committed => {
                tracing::info!(transfer_id = %transfer_id, amount = req.amount.get(), "transfer committed (found by reading the key's record after an unknown outcome)");
                Ok(created)
            }
            Resolved::Existing(existing) => existing.into_result(),
            Resolved::Unknown => {
                tracing::error!(transfer_id = %transfer_id, "transfer outcome unknown: a send may have committed (or may still be committing) and neither DynamoDB nor the key's record says so; the client must retry with the same key");
                Err(TransferError::OutcomeUnknown { retry_after: 1 })
            }
        }
    }

    /// After the attempts, with some token's outcome unknown: did the transaction commit? The
    /// key's record is written in the same transaction as the money, so a strongly consistent
    /// read finds ours if it committed. Finding no record proves nothing: a send DynamoDB is
    /// still applying commits after the read. One attempt, within `left`.
    async fn resolve(
        &self,
        scope: &Scope,
        fingerprint: &str,
        ours: &StoredResponse,
        left: Duration,
    ) -> Resolved {
        if left < SHORTEST_READ {
            tracing::warn!("no time left to read the key's record");
            return Resolved::Unknown;
        }
        match self.idempotency.read_once(scope, left).await {
            Ok(None) => Resolved::Unknown,
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

    /// One attempt, exactly one request, ending within `within`: the SDK's own retries are off
    /// for the transaction, so that an attempt whose outcome is unknown is never hidden behind a
    /// later, clearer failure.
    async fn send(&self, items: Vec<TransactWriteItem>, token: &str, within: Duration) -> Attempt {
        let result = self
            .ddb
            .transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(token)
            .customize()
            .config_override(tollgate::aws::dynamodb_one_attempt_within(within))
            .send()
            .await;
        let e = match result {
            Ok(_) => return Attempt::Committed,
            Err(e) => e,
        };
        if let SdkError::ServiceError(se) = &e {
            match se.err() {
                TransactWriteItemsError::TransactionCanceledException(c) => {
                    let reasons = c.cancellation_reasons().to_vec();
                    let conflict = |r: &CancellationReason| r.code() == Some("TransactionConflict");
                    return if reasons.first().is_some_and(conflict) {
                        // Another request with this key is being committed right now.
                        Attempt::Cancelled(reasons)
                    } else if reasons.iter().any(conflict) {
                        tracing::info!("transfer conflicted with another transaction on an account; sending it again");
                        Attempt::Conflicted
                    } else if reasons.iter().any(|r| {
                        matches!(
                            r.code(),
                            Some("ThrottlingError" | "ProvisionedThroughputExceeded")
                        )
                    }) {
                        tracing::warn!("transfer throttled on an item; sending it again");
                        Attempt::Conflicted
                    } else {
                        Attempt::Cancelled(reasons)
                    };
                }
                TransactWriteItemsError::TransactionInProgressException(_) => {
                    // This token is still being applied: it may commit. Ask again, same token.
                    tracing::warn!("transfer with this token still in progress; sending it again");
                    return Attempt::Unknown;
                }
                TransactWriteItemsError::IdempotentParameterMismatchException(_) => {
                    // Not ours to reuse (items are resent byte for byte, so this is unexpected).
                    tracing::warn!(
                        "transfer token reused with other items; sending with a new token"
                    );
                    return Attempt::Mismatch;
                }
                _ => {}
            }
        }
        match tollgate::aws::failure(&e) {
            Failure::Unknown => {
                // The transaction may have committed. Sending the same attempt again with the
                // same token is safe: DynamoDB will not apply it twice.
                tracing::warn!(error = %e, error_code = e.code(), "transfer outcome unknown; sending the same attempt again");
                Attempt::Unknown
            }
            Failure::Throttled => {
                tracing::warn!(
                    error_code = e.code(),
                    "transfer throttled; sending the same attempt again"
                );
                Attempt::Throttled
            }
            Failure::Refused => match &e {
                SdkError::ServiceError(se) => {
                    // A missing table, denied access, a validation error: nothing was applied,
                    // and resending will not help. 503 like every other failure of our tables
                    // (the reads answer so too); the log says what to check. Only a refusal
                    // the same items always get says that an earlier send was refused too.
                    let definite = matches!(
                        se.err().code(),
                        Some("ValidationException" | "ResourceNotFoundException")
                    );
                    tracing::error!(error = ?se.err(), "transfer transaction refused; check the table names and the function's permissions");
                    Attempt::Failed {
                        error: ApiError::Unavailable { retry_after: 1 }.into(),
                        definite,
                    }
                }
                _ => {
                    // Never sent.
                    tracing::error!(error = %e, "transfer transaction could not be sent");
                    Attempt::Failed {
                        error: ApiError::Internal.into(),
                        definite: true,
                    }
                }
            },
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
    ///
    /// `unknown`: a token given up on earlier may have committed, so a failure here cannot say
    /// "nothing committed" either. A store whose own outcome is unknown cannot say "key free".
    async fn store_refusal(
        &self,
        scope: &Scope,
        fingerprint: &str,
        refusal: TransferError,
        request_id: &str,
        unknown: bool,
    ) -> Result<Response<Body>, TransferError> {
        tracing::info!(
            code = refusal.code(),
            "transfer refused; storing the outcome under the key"
        );
        let response = refusal.to_response(request_id);
        let stored = StoredResponse::capture(&response);
        match self.idempotency.store(scope, fingerprint, &stored).await {
            Ok(None) => Ok(stored.to_response()),
            // Our own write, whose answer was lost and which was sent again: not a replay.
            Ok(Some(Existing::Replay(r))) if r == stored => Ok(stored.to_response()),
            Ok(Some(existing)) => existing.into_result(),
            Err(e @ IdempotencyError::OutcomeUnknown { .. }) => {
                tracing::error!(error = %e, source = ?std::error::Error::source(&e), "the refusal may or may not be stored under the key; the client must retry with the same key");
                Err(TransferError::OutcomeUnknown { retry_after: 1 })
            }
            Err(e) if unknown => {
                tracing::error!(error = %e, source = ?std::error::Error::source(&e), "cannot store the refusal, and an earlier token may have committed; the client must retry with the same key");
                Err(TransferError::OutcomeUnknown { retry_after: 1 })
            }
            Err(e) => Err(e.into()),
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

#[cfg(test)]
mod tests {
    use super::Tokens;

    #[test]
    fn only_a_definite_answer_for_the_same_token_clears_unknown() {
        let mut t = Tokens::default();
        assert!(!t.outcome_unknown());
        t.unknown();
        assert!(t.outcome_unknown());
        // A cancellation of the same token: nothing of it committed.
        t.definite();
        assert!(!t.outcome_unknown());
        // A new token after a definite answer starts clean.
        t.next();
        assert_eq!(t.generation, 1);
        assert!(!t.outcome_unknown());
    }

    #[test]
    fn a_token_given_up_on_while_unknown_stays_unknown() {
        let mut t = Tokens::default();
        t.unknown();
        t.next();
        assert!(t.outcome_unknown(), "the old token may yet commit");
        // A definite answer for the new token says nothing of the old one.
        t.definite();
        assert!(t.outcome_unknown());
        assert_ne!(t.token("tr_abc"), Tokens::default().token("tr_abc"));
    }
}
