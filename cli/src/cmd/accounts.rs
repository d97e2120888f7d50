//! `tollgate accounts create|show|deposit`: accounts of the transfer function.
//!
//! All three go through [`transfer::ledger::Ledger`], the code the function itself uses, so an
//! account made here is exactly one the function can move money from. A deposit is the ledger's
//! single conditional write (`balance = balance + amount`, account must exist), a one-item
//! transaction under a token: atomic with respect to transfers running at the same time, with no
//! read-modify-write window, and applied once however often it is resent with its token.

use std::time::Duration;

use clap::Subcommand;
use tollgate::idempotency::IdempotencyStore;
use transfer::config::is_currency_code;
use transfer::domain::AccountId;
use transfer::ledger::{Account, AccountError, Ledger};

use super::{amount, Deps};
use crate::error::CliError;
use crate::output::Reply;
use tollgate_functions::catalog;

/// Currency when neither `--currency` nor `DEFAULT_CURRENCY` is given (the function's default).
const DEFAULT_CURRENCY: &str = "JPY";
/// Longest client id accepted (ids are `cl_` and 32 hex digits; demo ids may differ).
const MAX_CLIENT_ID: usize = 128;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Creates an account owned by a client.
    Create {
        /// The owner's client id (from `clients create`).
        #[arg(long)]
        client: String,
        /// Opening balance in minor units (a non-negative whole number).
        #[arg(long, allow_negative_numbers = true)]
        balance: String,
        /// ISO 4217 code, three upper-case letters [default: DEFAULT_CURRENCY or JPY].
        #[arg(long)]
        currency: Option<String>,
    },
    /// Shows an account: balance, currency and owner.
    Show {
        /// The account id.
        id: String,
    },
    /// Adds to an account's balance in one atomic write, applied once per token.
    Deposit {
        /// The account id.
        id: String,
        /// Amount in minor units (a positive whole number).
        #[arg(long, allow_negative_numbers = true)]
        amount: String,
        /// The deposit's idempotency token (1 to 36 letters, digits, `-` or `_`) [default: a
        /// new random one, printed]. Rerunning a deposit whose answer was lost with the same
        /// token within ten minutes does not add the amount again.
        #[arg(long)]
        token: Option<String>,
    },
}

pub(crate) async fn run(command: &Command, deps: &Deps<'_>) -> Result<Reply, CliError> {
    let ledger = ledger(deps);
    let accounts = catalog::ACCOUNTS.resolve(deps.env);
    match command {
        Command::Create {
            client,
            balance,
            currency,
        } => {
            let client = client.trim();
            if client.is_empty()
                || client.len() > MAX_CLIENT_ID
                || !client.bytes().all(|b| b.is_ascii_graphic())
            {
                return Err(CliError::new(
                    "--client must be a client id such as cl_0123... (visible ASCII, no spaces)",
                ));
            }
            let balance = amount("--balance", balance, true)?;
            let currency = match currency {
                Some(c) => c.trim().to_string(),
                None => deps.env.string_or("DEFAULT_CURRENCY", DEFAULT_CURRENCY),
            };
            if !is_currency_code(&currency) {
                return Err(CliError::new(format!(
                    "--currency must be three upper-case letters such as JPY (got {currency:?})"
                )));
            }
            let clients_table = catalog::CLIENTS.resolve(deps.env);
            let clients = tollgate_functions::clients::ClientStore::new(
                deps.ddb.clone(),
                &clients_table,
                deps.clock.clone(),
                std::time::Duration::ZERO,
            );
            let known = clients.exists(client).await.map_err(|e| {
                CliError::store(format!("looking up client {client} in {clients_table}"), &e)
            })?;
            if !known {
                return Err(CliError::new(format!(
                    "no client {client} in {clients_table}: create it first with `tollgate clients create --name N`"
                )));
            }
            let account = ledger
                .create_account(client, balance, &currency)
                .await
                .map_err(|e| CliError::store(format!("creating an account in {accounts}"), &e))?;
            Ok(account_reply(&account))
        }
        Command::Show { id } => {
            let id = account_id(id)?;
            match ledger.account(id.as_str()).await {
                Ok(Some(account)) => Ok(account_reply(&account)),
                Ok(None) => Err(CliError::new(format!("no account {id} in {accounts}"))),
                Err(e) => Err(CliError::store(format!("reading account {id}"), &e)),
            }
        }
        Command::Deposit {
            id,
            amount: raw,
            token,
        } => {
            let id = account_id(id)?;
            let amount = amount("--amount", raw, false)?;
            let token = match token {
                Some(t) => deposit_token(t)?,
                None => format!("dep-{}", tollgate::ids::random_hex(16)),
            };
            match ledger.deposit(id.as_str(), amount, &token).await {
                Ok(account) => Ok(account_reply(&account).field("deposit_token", &token)),
                Err(AccountError::NotFound) => {
                    Err(CliError::new(format!("no account {id} in {accounts}")))
                }
                Err(AccountError::BalanceLimit) => Err(CliError::new(format!(
                    "the balance of {id} would exceed {}",
                    transfer::ledger::MAX_BALANCE
                ))),
                Err(AccountError::Store(e)) => {
                    Err(CliError::store(format!("depositing to account {id}"), &e))
                }
            }
        }
    }
}

/// The function's ledger over the tables named in the environment. The idempotency store and
/// default currency only matter to transfers, which the CLI does not make.
fn ledger(deps: &Deps<'_>) -> Ledger {
    let idempotency = IdempotencyStore::new(
        deps.ddb.clone(),
        catalog::TRANSFER_IDEMPOTENCY.resolve(deps.env),
        deps.clock.clone(),
        Duration::from_secs(86_400),
    );
    Ledger::new(
        deps.ddb.clone(),
        catalog::ACCOUNTS.resolve(deps.env),
        catalog::TRANSFERS.resolve(deps.env),
        idempotency,
        deps.clock.clone(),
        DEFAULT_CURRENCY,
        "",
    )
}

fn account_id(raw: &str) -> Result<AccountId, CliError> {
    AccountId::parse(raw.trim()).ok_or_else(|| {
        CliError::new(format!(
            "{raw:?} is not an account id (1 to 64 of A-Z a-z 0-9 _ -)"
        ))
    })
}

/// A deposit token as DynamoDB takes a `ClientRequestToken`: 1 to 36 characters (kept to a
/// plain alphabet so it can be typed and quoted anywhere).
fn deposit_token(raw: &str) -> Result<String, CliError> {
    let t = raw.trim();
    let ok = !t.is_empty()
        && t.len() <= 36
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !ok {
        return Err(CliError::new(
            "--token must be 1 to 36 letters, digits, - or _ (e.g. the deposit_token a lost deposit printed)",
        ));
    }
    Ok(t.to_string())
}

fn account_reply(account: &Account) -> Reply {
    Reply::new()
        .field("account_id", &account.account_id)
        .field("balance", account.balance)
        .field("currency", &account.currency)
        .field("client_id", &account.client_id)
}
