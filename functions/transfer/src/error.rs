//! What only the transfer function answers, beside the shared [`ApiError`]s.
//!
//! The shared errors are the guards' (limits, kill switch, authentication) and the generic ones,
//! the transaction's outcome-unknown 503 included; these are about money and the ledger. Both render through [`ClientError`], so the
//! problem+json shape is `tollgate::problem`'s alone; here are only the words.

use http::StatusCode;
use tollgate::problem::Answer;
use tollgate::{ApiError, ClientError};

/// An error of the transfer routes, as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransferError {
    /// One of the errors every function may answer.
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("account not found")]
    AccountNotFound,
    #[error("transfer not found")]
    TransferNotFound,
    #[error("insufficient funds")]
    InsufficientFunds,
    #[error("currency mismatch")]
    CurrencyMismatch,
    /// The credit would take the receiving account past the largest balance it may hold.
    #[error("balance limit exceeded")]
    BalanceLimitExceeded,
}

impl ClientError for TransferError {
    fn as_api_error(&self) -> Option<&ApiError> {
        match self {
            TransferError::Api(e) => Some(e),
            _ => None,
        }
    }

    fn answer(&self) -> Answer {
        match self {
            TransferError::Api(e) => e.answer(),
            TransferError::AccountNotFound => Answer::new(
                StatusCode::NOT_FOUND,
                "account_not_found",
                "Account not found",
                "No such account.",
            ),
            TransferError::TransferNotFound => Answer::new(
                StatusCode::NOT_FOUND,
                "transfer_not_found",
                "Transfer not found",
                "No such transfer.",
            ),
            TransferError::InsufficientFunds => Answer::new(
                StatusCode::PAYMENT_REQUIRED,
                "insufficient_funds",
                "Insufficient funds",
                "The balance of the from account is too low for this amount.",
            ),
            TransferError::CurrencyMismatch => Answer::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "currency_mismatch",
                "Currency mismatch",
                "The two accounts hold different currencies.",
            ),
            TransferError::BalanceLimitExceeded => Answer::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "balance_limit_exceeded",
                "Balance limit exceeded",
                "The transfer would take the to account past the largest balance an account may hold.",
            ),
        }
    }
}

tollgate::lift_api_errors!(TransferError:
    tollgate_functions::clients::ClientStoreError,
    tollgate::idempotency::KeyError,
    tollgate::idempotency::IdempotencyError,
    tollgate::idempotency::TransactionError,
    crate::domain::InvalidTransfer,
    crate::ledger::LedgerError,
);
