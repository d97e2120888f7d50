//! Atomic mode as one call: [`IdempotencyStore::commit`] claims the key, applies the caller's
//! effect and stores the response in one `TransactWriteItems`, and reads every answer DynamoDB
//! can give it. The caller says only what its effect writes ([`TransactionEffect::items`]) and
//! what a cancellation of those writes means ([`TransactionEffect::explain`]).
//!
//! The transaction's first item is the key's record, completed with the caller's response and
//! conditioned on the key being free (or expired); the effect's items follow. Either all commit
//! or none does: there is no moment where the effect happened and the key does not say so, or
//! the key says done and the effect did not happen. When the key is taken, the cancellation
//! reason carries the record (`ALL_OLD`), so a duplicate is answered without a second read.
//!
//! Each attempt carries a `ClientRequestToken`, and the items of one token are built once and
//! resent byte for byte: when a committed transaction's answer is lost and the same attempt is
//! sent again, DynamoDB answers it as already done instead of applying it twice (a resend whose
//! parameters differ would get `IdempotentParameterMismatch` instead). Should the token have
//! lapsed, the claim on the key still holds, and the record it returns names this call (each
//! record written here carries the call's own random marker), so it is recognised as ours.
//!
//! The SDK does not retry the transaction itself: every attempt is this module's, so it knows
//! what DynamoDB said to each one, and decides from that, never from the last attempt alone. It
//! tracks, per token, whether a send may have committed:
//!
//! - a send whose outcome is unknown (timeout, dispatch failure, lost response, a 5xx,
//!   `TransactionInProgress`: the token is still being applied) makes the token *unknown*;
//! - only a definite answer for that same token clears it: success (a token that committed is
//!   answered as done), a cancellation (while an earlier send of the token is in flight DynamoDB
//!   answers `TransactionInProgress`, so a cancellation means no send of it committed), or a
//!   refusal that the same items would always get (a validation error, a missing table).
//!   Throttling does not: it refused this send, and says nothing of an earlier one in flight;
//! - while the token is unknown it is resent, same items byte for byte, until DynamoDB answers
//!   definitely; a new token (the effect's items rebuilt, a race) normally follows a
//!   cancellation, so the old one is settled; a token given up on while unknown
//!   (`IdempotentParameterMismatch`) stays unknown for the rest of the call.
//!
//! When the attempts end with some token unknown, a strongly consistent read of the key's record
//! (written in the same transaction as the effect) can settle it only one way: our own record
//! means committed, another request's record is its answer (replay, 409, 422). No record proves
//! nothing (DynamoDB may still be applying the transaction), so then, or when the read fails
//! too, the answer is [`TransactionError::OutcomeUnknown`]: the client must retry with the same
//! key. [`TransactionError::NotCommitted`] (nothing committed, the key free) is answered only
//! when DynamoDB said so for every token sent.
//!
//! | DynamoDB answers | meaning | next |
//! |---|---|---|
//! | success | committed | [`Outcome::Committed`] |
//! | cancelled, key item `ConditionalCheckFailed` | the key is taken | replay, 409 or 422 (ours: committed) |
//! | cancelled, key item `TransactionConflict` | a duplicate is committing now | 409 + `Retry-After` |
//! | cancelled, an effect item's condition | the effect's to [`explain`](TransactionEffect::explain) | store its refusal / resend with a new token |
//! | cancelled, an effect item's `TransactionConflict`, or an item throttled | not committed | resend, new token |
//! | `TransactionInProgress` | this token is being applied | resend, same token (unknown until it answers) |
//! | `IdempotentParameterMismatch` | this token was used with other items | resend, new token (the old one stays as it was) |
//! | throttling, `ProvisionedThroughputExceeded`, `RequestLimitExceeded` | this send not applied | resend, same token (unknown stays unknown) |
//! | 500, timeout, dispatch failure, lost response | unknown | resend, same token |
//! | a validation error, a missing table | not applied, and no send of these items can be | 503, nothing committed |
//! | any other error (denied access, credentials) | this send not applied: a misconfiguration or a bug | resolve if unknown, else 503 |
//!
//! Time: no attempt starts after [`SEND_BUDGET`], each attempt ends by [`SENDS_END`], and the
//! read that resolves an unknown outcome by [`ANSWER_BY`], all from the call's start: inside a
//! 10-second function timeout, so the client hears our answer (and its instruction) rather than
//! the platform's.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{CancellationReason, TransactWriteItem};
use lambda_http::{Body, Response};

use super::{Existing, IdempotencyError, IdempotencyStore, Record, RecordState, Scope};
use super::{StoredResponse, WrittenBy};
use crate::aws::Failure;

/// Attempts per call: every send of the transaction, whatever came back (conflicts, throttling,
/// unknown outcomes). The SDK makes one attempt per send.
pub const MAX_ATTEMPTS: u32 = 6;
/// No new attempt starts after this much time from the call's start.
pub const SEND_BUDGET: Duration = Duration::from_secs(5);
/// Every attempt ends by then: its SDK attempt timeout is cut to what is left (at most the
/// usual 3 seconds).
pub const SENDS_END: Duration = Duration::from_secs(7);
/// The answer is ready by then, the read resolving an unknown outcome included: a function's
/// timeout of 10 seconds leaves the rest to the guards before the call and the response after.
pub const ANSWER_BY: Duration = Duration::from_secs(8);
/// Less time than this left for the resolving read: not worth sending, the outcome is unknown.
const SHORTEST_READ: Duration = Duration::from_millis(200);
/// `Retry-After` of the answers this module decides itself (409 on a key conflict, the 503s).
const RETRY_AFTER: u64 = 1;

/// The caller's effect in [`IdempotencyStore::commit`]: the writes that commit together with the
/// key's record, and what a cancellation of them means.
///
/// Both methods are called between attempts, never concurrently; the implementor may keep what
/// it learns (a value read from a cancellation, for the next [`items`](Self::items)).
pub trait TransactionEffect {
    /// The effect's items; the key's record is put before them, so a transaction holds at most
    /// 99 of these. Called for the first attempt, and again only after [`Self::explain`]
    /// answered [`Explained::Rebuild`] or [`Explained::Raced`]: the items of one attempt are
    /// resent byte for byte, so anything time-dependent in them is fixed once per build.
    fn items(&mut self) -> Vec<TransactWriteItem>;

    /// Reads a cancellation in which the key's record did not fail: `reasons` are those of the
    /// effect's own items, index 0 being the first item [`Self::items`] returned. Ask for
    /// `ReturnValuesOnConditionCheckFailure::AllOld` on the items to see what failed without a
    /// second read.
    fn explain(&mut self, reasons: &[CancellationReason]) -> Explained;
}

/// What a cancellation of the effect's items means, as [`TransactionEffect::explain`] reads it.
#[derive(Debug)]
pub enum Explained {
    /// The effect is refused for good (insufficient funds, say): this response (a 4xx) is stored
    /// under the key, so a retry with the same key gets it again, and answered
    /// ([`Outcome::Refused`]). A 5xx is never stored: it is answered as our failure
    /// ([`TransactionError::NotCommitted`]).
    Refused(Response<Body>),
    /// The items were built on a wrong guess that the cancellation corrected: call
    /// [`TransactionEffect::items`] again and send those at once, under a new token.
    Rebuild,
    /// The conditions hold now: what they test changed under us. Build the items again and
    /// send them after a back-off, under a new token.
    Raced,
}

/// How [`IdempotencyStore::commit`] came out when the client gets a stored answer: the caller can
/// tell its own effect from a replay (for metrics, logs or hooks). Every variant's response is
/// what the client should get.
#[derive(Debug)]
pub enum Outcome {
    /// This call's transaction committed: the effect happened, and the response given to
    /// `commit` is stored under the key. Also when an earlier attempt of this call committed
    /// and its answer was lost (found by the key's record).
    Committed(Response<Body>),
    /// An earlier request with this key and the same body finished: its stored response,
    /// marked `Idempotent-Replayed: true`. Nothing was written now.
    Replayed(Response<Body>),
    /// [`TransactionEffect::explain`] refused the effect, and its response is now stored under
    /// the key (nothing else was written).
    Refused(Response<Body>),
}

impl Outcome {
    /// The response for the client, whatever the outcome.
    pub fn into_response(self) -> Response<Body> {
        match self {
            Outcome::Committed(r) | Outcome::Replayed(r) | Outcome::Refused(r) => r,
        }
    }
}

/// Why [`IdempotencyStore::commit`] has no stored answer for the client. Each variant becomes
/// its problem through [`crate::ApiError`] (`?` lifts it into a function's own error enum).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransactionError {
    /// A request with this key and body is being processed now: 409 `request_in_progress`.
    #[error("a request with this idempotency key is in progress")]
    InProgress {
        /// Seconds until the other request's lease lapses.
        retry_after: u64,
    },
    /// The key was used before with another body: 422 `idempotency_key_reused`.
    #[error("idempotency key reused with another request body")]
    KeyReused,
    /// DynamoDB refused every token sent (or the refusal could not be stored, with nothing sent
    /// before it that may have committed): nothing was written, the key is free, and a retry
    /// runs anew. 503.
    #[error("transaction not committed")]
    NotCommitted {
        /// Seconds before a retry is worth sending.
        retry_after: u64,
    },
    /// Some send may or may not have committed and the key's record cannot say which: the
    /// client must retry with the same idempotency key (which gets it the outcome), never a new
    /// one. 503 whose detail says so.
    #[error("transaction outcome unknown")]
    OutcomeUnknown {
        /// Seconds before a retry (with the same key) is worth sending.
        retry_after: u64,
    },
    /// The transaction could not be sent at all (the request could not be built or signed): a
    /// bug or a misconfiguration, nothing written. 500.
    #[error("transaction could not be sent")]
    NotSent,
}

/// What one attempt of the transaction came to.
enum Attempt {
    Committed,
    /// Cancelled: the key was taken, or an effect condition failed. Definite for the token.
    Cancelled(Vec<CancellationReason>),
    /// Cancelled by a conflict with another transaction on an effect item, or an item's
    /// partition throttled: nothing of this token committed; worth sending again with a new
    /// token.
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
        error: TransactionError,
        definite: bool,
    },
}

/// What is known of the tokens sent for one call.
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
    /// The current `ClientRequestToken` of the call whose marker is `call` (32 hex digits, so
    /// the token stays within DynamoDB's 36 characters).
    fn token(&self, call: &WrittenBy) -> String {
        format!("{}-{}", call.as_str(), self.generation)
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

/// How a call whose outcome was unknown came out, found by reading the key's record.
enum Resolved {
    /// Our transaction committed.
    Committed,
    /// Nothing of ours committed; the key holds another request's record.
    Existing(Existing),
    /// No record (DynamoDB may still be applying ours), or the record could not be read.
    Unknown,
}

/// A key found taken, as the client is answered: a replay, 409 or 422.
fn taken(existing: Existing) -> Result<Outcome, TransactionError> {
    match existing {
        Existing::Replay(stored) => Ok(Outcome::Replayed(stored.replay())),
        Existing::KeyReused => Err(TransactionError::KeyReused),
        Existing::InProgress { retry_after } => Err(TransactionError::InProgress { retry_after }),
    }
}

impl IdempotencyStore {
    /// Atomic mode in one call: commits `effect`'s items together with the key's record holding
    /// `response`, in one `TransactWriteItems`, and answers what the client should get.
    ///
    /// `response` is what a new request is answered (a 2xx or 4xx: 5xx are never stored); it is
    /// built before the effect runs, so it can say only what the effect will have done (the new
    /// resource's id, its `Location`). A duplicate this process has seen completed is answered
    /// from the replay cache with no DynamoDB request. See the module's doc for every answer of
    /// DynamoDB and what it comes to.
    ///
    /// ```no_run
    /// use aws_sdk_dynamodb::types::{
    ///     AttributeValue, CancellationReason, TransactWriteItem, Update,
    /// };
    /// use lambda_http::{Body, Response};
    /// use tollgate::idempotency::{Explained, IdempotencyStore, Outcome, Scope, TransactionEffect};
    /// use tollgate::{ApiError, ClientError};
    ///
    /// /// Adds one to a counter that may not pass 10.
    /// struct Increment;
    ///
    /// impl TransactionEffect for Increment {
    ///     fn items(&mut self) -> Vec<TransactWriteItem> {
    ///         let update = Update::builder()
    ///             .table_name("counters")
    ///             .key("pk", AttributeValue::S("visits".into()))
    ///             .update_expression("ADD #n :one")
    ///             .condition_expression("attribute_not_exists(#n) OR #n < :max")
    ///             .expression_attribute_names("#n", "n")
    ///             .expression_attribute_values(":one", AttributeValue::N("1".into()))
    ///             .expression_attribute_values(":max", AttributeValue::N("10".into()))
    ///             .build()
    ///             .expect("table, key and expression are set");
    ///         vec![TransactWriteItem::builder().update(update).build()]
    ///     }
    ///
    ///     fn explain(&mut self, _reasons: &[CancellationReason]) -> Explained {
    ///         // Our only condition failed: the counter is full, for good.
    ///         Explained::Refused(ApiError::Forbidden.to_response("request-id"))
    ///     }
    /// }
    ///
    /// async fn increment(
    ///     store: &IdempotencyStore,
    ///     scope: &Scope,
    ///     fingerprint: &str,
    /// ) -> Result<Response<Body>, ApiError> {
    ///     let done = Response::builder()
    ///         .status(201)
    ///         .body(Body::from("counted"))
    ///         .expect("a valid response");
    ///     let outcome = store.commit(scope, fingerprint, done, &mut Increment).await?;
    ///     if let Outcome::Replayed(_) = &outcome {
    ///         tracing::info!("a retry of a request already counted");
    ///     }
    ///     Ok(outcome.into_response())
    /// }
    /// ```
    pub async fn commit<E: TransactionEffect + ?Sized>(
        &self,
        scope: &Scope,
        fingerprint: &str,
        response: Response<Body>,
        effect: &mut E,
    ) -> Result<Outcome, TransactionError> {
        // A duplicate this process has seen completed: the same answer, no DynamoDB request.
        if let Some(existing) = self.cached(scope, fingerprint) {
            tracing::info!(
                decision = "replayed",
                source = "replay_cache",
                "idempotent replay"
            );
            return taken(existing);
        }
        let stored = StoredResponse::capture(&response);
        debug_assert!(stored.status < 500, "5xx outcomes are never stored");
        // The record's expiry, kept for the replay cache once the transaction has committed.
        let expires_at = self.expires_at();
        // Names this call in its tokens and in the records it writes.
        let call = WrittenBy::new();
        // The token changes only when the transaction's items do, and the items of a token are
        // built once: a resend is the same request, byte for byte.
        let mut tokens = Tokens::default();
        let mut built: Option<(u32, Vec<TransactWriteItem>)> = None;
        let mut failure = TransactionError::NotCommitted {
            retry_after: RETRY_AFTER,
        };
        let started = Instant::now();
        for attempt in 0..MAX_ATTEMPTS {
            let elapsed = started.elapsed();
            if attempt > 0 && elapsed >= SEND_BUDGET {
                tracing::warn!(attempt, "transaction out of time for another attempt");
                break;
            }
            let items = match &built {
                Some((g, items)) if *g == tokens.generation => items.clone(),
                _ => {
                    let mut items = vec![self.completed_put_by(
                        scope,
                        fingerprint,
                        &stored,
                        expires_at,
                        Some(&call),
                    )];
                    items.extend(effect.items());
                    built = Some((tokens.generation, items.clone()));
                    items
                }
            };
            let token = tokens.token(&call);
            match self
                .send(items, &token, SENDS_END.saturating_sub(elapsed))
                .await
            {
                Attempt::Committed => {
                    self.remember(scope, fingerprint, &stored, expires_at);
                    return Ok(Outcome::Committed(response));
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
                    match reasons.first().and_then(|r| r.code()) {
                        Some("TransactionConflict") => {
                            return Err(TransactionError::InProgress {
                                retry_after: RETRY_AFTER,
                            });
                        }
                        Some("ConditionalCheckFailed") => {
                            match self.live_record_in(scope, &reasons[0]) {
                                // Our own commit, whose answer was lost on the way back.
                                Some(record) if record.is_written_by(&call) => {
                                    return Ok(Outcome::Committed(response));
                                }
                                Some(record) => {
                                    return taken(record.verdict(fingerprint, self.now_ms()));
                                }
                                // The record expired between the claim and now: try again.
                                None => {
                                    tokens.next();
                                    backoff(attempt).await;
                                    continue;
                                }
                            }
                        }
                        _ => {}
                    }
                    match effect.explain(&reasons[1..]) {
                        Explained::Refused(refusal) => {
                            let unknown = tokens.outcome_unknown();
                            // Boxed, as every rare path's DynamoDB request here (see `send`).
                            let store =
                                self.store_refusal(scope, fingerprint, refusal, &call, unknown);
                            return Box::pin(store).await;
                        }
                        Explained::Rebuild => tokens.next(),
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
                error = %failure,
                "transaction failed; DynamoDB refused every token sent: nothing committed, the key is free"
            );
            return Err(failure);
        }
        let left = ANSWER_BY.saturating_sub(started.elapsed());
        match Box::pin(self.resolve(scope, fingerprint, &call, left)).await {
            Resolved::Committed => {
                tracing::info!("transaction committed (found by reading the key's record after an unknown outcome)");
                Ok(Outcome::Committed(response))
            }
            Resolved::Existing(existing) => taken(existing),
            Resolved::Unknown => {
                tracing::error!("transaction outcome unknown: a send may have committed (or may still be committing) and neither DynamoDB nor the key's record says so; the client must retry with the same key");
                Err(TransactionError::OutcomeUnknown {
                    retry_after: RETRY_AFTER,
                })
            }
        }
    }

    /// After the attempts, with some token's outcome unknown: did the transaction commit? The
    /// key's record is written in the same transaction as the effect, so a strongly consistent
    /// read finds ours if it committed. Finding no record proves nothing: a send DynamoDB is
    /// still applying commits after the read. One attempt, within `left`.
    async fn resolve(
        &self,
        scope: &Scope,
        fingerprint: &str,
        call: &WrittenBy,
        left: Duration,
    ) -> Resolved {
        if left < SHORTEST_READ {
            tracing::warn!("no time left to read the key's record");
            return Resolved::Unknown;
        }
        match self.read_once(scope, left).await {
            Ok(None) => Resolved::Unknown,
            Ok(Some(record)) => match &record.state {
                RecordState::Completed(_)
                    if record.is_written_by(call) && record.fingerprint == fingerprint =>
                {
                    Resolved::Committed
                }
                _ => Resolved::Existing(record.verdict(fingerprint, self.now_ms())),
            },
            Err(e) => {
                tracing::error!(error = %e, source = ?std::error::Error::source(&e), "cannot read the key's record to resolve an unknown outcome");
                Resolved::Unknown
            }
        }
    }

    /// One attempt, exactly one request, ending within `within`: the SDK's own retries are off
    /// for the transaction, so that an attempt whose outcome is unknown is never hidden behind a
    /// later, clearer failure.
    async fn send(&self, items: Vec<TransactWriteItem>, token: &str, within: Duration) -> Attempt {
        let send = self
            .ddb
            .transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(token)
            .customize()
            .config_override(crate::aws::dynamodb_one_attempt_within(within))
            .send();
        // Boxed: the SDK's future is kilobytes, and inline it would be held by every future above
        // this one (the commit, the handler, its route), each made and moved once per request.
        let result = Box::pin(send).await;
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
                        tracing::info!("transaction conflicted with another on an effect item; sending it again");
                        Attempt::Conflicted
                    } else if reasons.iter().any(|r| {
                        matches!(
                            r.code(),
                            Some("ThrottlingError" | "ProvisionedThroughputExceeded")
                        )
                    }) {
                        tracing::warn!("transaction throttled on an item; sending it again");
                        Attempt::Conflicted
                    } else {
                        Attempt::Cancelled(reasons)
                    };
                }
                TransactWriteItemsError::TransactionInProgressException(_) => {
                    // This token is still being applied: it may commit. Ask again, same token.
                    tracing::warn!(
                        "transaction with this token still in progress; sending it again"
                    );
                    return Attempt::Unknown;
                }
                TransactWriteItemsError::IdempotentParameterMismatchException(_) => {
                    // Not ours to reuse (items are resent byte for byte, so this is unexpected).
                    tracing::warn!(
                        "transaction token reused with other items; sending with a new token"
                    );
                    return Attempt::Mismatch;
                }
                _ => {}
            }
        }
        match crate::aws::failure(&e) {
            Failure::Unknown => {
                // The transaction may have committed. Sending the same attempt again with the
                // same token is safe: DynamoDB will not apply it twice.
                tracing::warn!(error = %e, error_code = e.code(), "transaction outcome unknown; sending the same attempt again");
                Attempt::Unknown
            }
            Failure::Throttled => {
                tracing::warn!(
                    error_code = e.code(),
                    "transaction throttled; sending the same attempt again"
                );
                Attempt::Throttled
            }
            Failure::Refused => match &e {
                SdkError::ServiceError(se) => {
                    // A missing table, denied access, a validation error: nothing was applied,
                    // and resending will not help. 503 like every other failure of a table; the
                    // log says what to check. Only a refusal the same items always get says
                    // that an earlier send was refused too.
                    let definite = matches!(
                        se.err().code(),
                        Some("ValidationException" | "ResourceNotFoundException")
                    );
                    tracing::error!(error = ?se.err(), "transaction refused; check the table names and the function's permissions");
                    Attempt::Failed {
                        error: TransactionError::NotCommitted {
                            retry_after: RETRY_AFTER,
                        },
                        definite,
                    }
                }
                _ => {
                    // Never sent.
                    tracing::error!(error = %e, "transaction could not be sent");
                    Attempt::Failed {
                        error: TransactionError::NotSent,
                        definite: true,
                    }
                }
            },
        }
    }

    /// The live record in a cancellation reason of the key's item, kept in the replay cache.
    fn live_record_in(&self, scope: &Scope, reason: &CancellationReason) -> Option<Record> {
        let record = self.record(reason.item()?)?;
        if !record.is_live(self.now_ms()) {
            return None;
        }
        self.remember_record(scope, &record);
        Some(record)
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
        refusal: Response<Body>,
        call: &WrittenBy,
        unknown: bool,
    ) -> Result<Outcome, TransactionError> {
        let failed = || match unknown {
            true => TransactionError::OutcomeUnknown {
                retry_after: RETRY_AFTER,
            },
            false => TransactionError::NotCommitted {
                retry_after: RETRY_AFTER,
            },
        };
        let stored = StoredResponse::capture(&refusal);
        if stored.status >= 500 {
            tracing::error!(
                status = stored.status,
                "an effect's refusal is a 5xx, which is never stored; answering 503"
            );
            return Err(failed());
        }
        match self
            .put_completed(scope, fingerprint, &stored, Some(call))
            .await
        {
            Ok(None) => Ok(Outcome::Refused(stored.to_response())),
            // Our own write, whose answer was lost and which was sent again: not a replay.
            Ok(Some(record)) if record.is_written_by(call) => {
                Ok(Outcome::Refused(stored.to_response()))
            }
            Ok(Some(record)) => taken(record.verdict(fingerprint, self.now_ms())),
            Err(e @ IdempotencyError::OutcomeUnknown { .. }) => {
                tracing::error!(error = %e, source = ?std::error::Error::source(&e), "the refusal may or may not be stored under the key; the client must retry with the same key");
                Err(TransactionError::OutcomeUnknown {
                    retry_after: RETRY_AFTER,
                })
            }
            Err(e) if unknown => {
                tracing::error!(error = %e, source = ?std::error::Error::source(&e), "cannot store the refusal, and an earlier token may have committed; the client must retry with the same key");
                Err(failed())
            }
            Err(e) => {
                tracing::error!(error = %e, source = ?std::error::Error::source(&e), "idempotency store failed");
                Err(failed())
            }
        }
    }
}

async fn backoff(attempt: u32) {
    let jitter = crate::ids::random_u64() % 16;
    tokio::time::sleep(Duration::from_millis(10 * (1 << attempt.min(4)) + jitter)).await;
}

#[cfg(test)]
mod tests {
    use super::{Tokens, WrittenBy};

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
        let call = WrittenBy::new();
        let mut t = Tokens::default();
        t.unknown();
        t.next();
        assert!(t.outcome_unknown(), "the old token may yet commit");
        // A definite answer for the new token says nothing of the old one.
        t.definite();
        assert!(t.outcome_unknown());
        assert_ne!(t.token(&call), Tokens::default().token(&call));
    }

    #[test]
    fn each_error_is_its_problem() {
        use super::TransactionError as E;
        use crate::{ApiError, ClientError};
        let answer = |e: E| ApiError::from(e).answer();
        let cases = [
            (
                E::InProgress { retry_after: 3 },
                409,
                "request_in_progress",
                Some(3),
            ),
            (E::KeyReused, 422, "idempotency_key_reused", None),
            (
                E::NotCommitted { retry_after: 1 },
                503,
                "temporarily_unavailable",
                Some(1),
            ),
            (
                E::OutcomeUnknown { retry_after: 1 },
                503,
                "temporarily_unavailable",
                Some(1),
            ),
            (E::NotSent, 500, "internal_error", None),
        ];
        for (e, status, code, retry_after) in cases {
            let a = answer(e.clone());
            assert_eq!(
                (a.status.as_u16(), a.code, a.retry_after),
                (status, code, retry_after),
                "{e:?}"
            );
        }
        // Only the unknown outcome tells the client to keep its key; "nothing committed" must not.
        let same_key = |e: E| answer(e).detail.contains("same Idempotency-Key");
        assert!(same_key(E::OutcomeUnknown { retry_after: 1 }));
        assert!(!same_key(E::NotCommitted { retry_after: 1 }));
    }

    #[test]
    fn tokens_fit_dynamodb_and_differ_between_calls() {
        let (a, b) = (WrittenBy::new(), WrittenBy::new());
        let mut t = Tokens::default();
        for _ in 0..super::MAX_ATTEMPTS {
            assert!(t.token(&a).len() <= 36, "{}", t.token(&a));
            t.next();
        }
        assert_ne!(Tokens::default().token(&a), Tokens::default().token(&b));
    }
}
