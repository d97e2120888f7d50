//! The operator's account operations (create, deposit, read) and reading a transfer back: single
//! items, apart from the transaction that moves money between accounts.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};

use super::items::{account_of, n, s};
use super::{ledger_error, Account, AccountError, Ledger, LedgerError, Transfer, MAX_BALANCE};

impl Ledger {
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

    /// Adds `amount` to an existing account in one conditional write (operators, tests and
    /// demos). The condition also keeps the balance at most [`MAX_BALANCE`].
    ///
    /// The write is a one-item transaction under `token` (a `ClientRequestToken`, 1 to 36
    /// characters): a deposit whose answer was lost and that is sent again, by the SDK or by the
    /// operator rerunning the command with the same token within DynamoDB's ten-minute window,
    /// is applied once. A plain `UpdateItem` (`ADD`) resent after a lost answer adds twice.
    pub async fn deposit(
        &self,
        account_id: &str,
        amount: u64,
        token: &str,
    ) -> Result<Account, AccountError> {
        let ceiling = MAX_BALANCE
            .checked_sub(amount)
            .ok_or(AccountError::BalanceLimit)?;
        let update = Update::builder()
            .table_name(&self.accounts)
            .key("pk", AttributeValue::S(account_id.into()))
            .update_expression("SET #balance = #balance + :amount")
            .condition_expression("attribute_exists(pk) AND #balance <= :ceiling")
            .expression_attribute_names("#balance", "balance")
            .expression_attribute_values(":amount", AttributeValue::N(amount.to_string()))
            .expression_attribute_values(":ceiling", AttributeValue::N(ceiling.to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .expect("deposit is complete");
        let result = self
            .ddb
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().update(update).build())
            .client_request_token(token)
            .send()
            .await;
        match result {
            // A transaction returns no item: read the account (strongly consistent) to show it.
            Ok(_) => self
                .account(account_id)
                .await?
                .ok_or(AccountError::NotFound),
            Err(SdkError::ServiceError(e)) => match e.err() {
                TransactWriteItemsError::TransactionCanceledException(c) => {
                    let failed = c
                        .cancellation_reasons()
                        .first()
                        .filter(|r| r.code() == Some("ConditionalCheckFailed"));
                    match failed {
                        Some(r) if r.item().is_some() => Err(AccountError::BalanceLimit),
                        Some(_) => Err(AccountError::NotFound),
                        None => Err(ledger_error("deposit", TransactionCancelled).into()),
                    }
                }
                _ => Err(ledger_error("deposit", e.into_err()).into()),
            },
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

/// A deposit's transaction was cancelled for a reason other than its condition (a conflict).
#[derive(Debug, thiserror::Error)]
#[error("deposit transaction cancelled")]
struct TransactionCancelled;
