//! `tollgate idempotency show --client C --route R --key K`: the live record under a key.
//!
//! Records are scoped to (caller, route, key), as the functions store them:
//!
//! | route | caller (`--client`) | table |
//! |---|---|---|
//! | `POST /transfers` | the client id | `TRANSFER_IDEMPOTENCY_TABLE` |
//! | `POST /session` | the client address (IPv6 by its /64) | `SESSION_IDEMPOTENCY_TABLE` |
//!
//! The key is read as the `Idempotency-Key` header is (`"abc"` and `abc` are the same key). An
//! expired record counts as absent, as it does for the functions, even before DynamoDB's TTL
//! removes it.

use std::time::Duration;

use clap::Subcommand;
use tollgate::idempotency::{IdempotencyKey, IdempotencyStore, Record, RecordState, Scope};

use super::{client_addr, rfc3339, Deps};
use crate::error::CliError;
use crate::output::Reply;
use tollgate_functions::catalog::{self, Function};

/// The functions whose routes store records, and whether the caller is an address.
const ROUTES: &[(Function, Caller)] = &[
    (catalog::TRANSFER, Caller::ClientId),
    (catalog::EPHEMERAL_KEY, Caller::Address),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    ClientId,
    Address,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Shows the live record under a key: its state, body fingerprint, expiry and stored response.
    Show {
        /// The caller the key belongs to: the client id (POST /transfers) or the client address
        /// (POST /session).
        #[arg(long)]
        client: String,
        /// The method and route: "POST /transfers" or "POST /session".
        #[arg(long)]
        route: String,
        /// The idempotency key as the client sent it.
        #[arg(long, allow_hyphen_values = true)]
        key: String,
    },
}

pub(crate) async fn run(command: &Command, deps: &Deps<'_>) -> Result<Reply, CliError> {
    let Command::Show { client, route, key } = command;
    let route_norm = route.split_whitespace().collect::<Vec<_>>().join(" ");
    let (function, caller_kind) = ROUTES
        .iter()
        .find(|(f, _)| f.route.eq_ignore_ascii_case(&route_norm))
        .ok_or_else(|| {
            let known: Vec<_> = ROUTES
                .iter()
                .map(|(f, _)| format!("{:?}", f.route))
                .collect();
            CliError::new(format!(
                "unknown route {route:?} (expected {})",
                known.join(" or ")
            ))
        })?;
    let caller = match caller_kind {
        Caller::Address => client_addr(client)?,
        Caller::ClientId if client.trim().is_empty() => {
            return Err(CliError::new("--client must not be empty"))
        }
        Caller::ClientId => client.trim().to_string(),
    };
    let key = IdempotencyKey::parse(Some(key.as_bytes()))
        .map_err(|e| CliError::new(format!("--key: {e}")))?;
    let table = function.idempotency_table.resolve(deps.env);
    // The TTL only matters to writes; reading needs none.
    let store = IdempotencyStore::new(
        deps.ddb.clone(),
        &table,
        deps.clock.clone(),
        Duration::from_secs(86_400),
    );
    let route = function.route;
    let scope = Scope::new(&caller, route, &key);
    match store.read(&scope).await {
        Ok(Some(record)) => Ok(record_reply(&record)),
        Ok(None) => Err(CliError::new(format!(
            "no live record for key {key:?} of {caller} on {route} in {table}",
            key = key.as_str()
        ))),
        Err(e) => Err(CliError::store(format!("reading {table}"), &e)),
    }
}

/// A record as JSON. The body is shown as text when it is UTF-8 (every body the functions store
/// is JSON), else as base64; `body_encoding` says which.
fn record_reply(record: &Record) -> Reply {
    let reply = |state: &str| {
        Reply::new()
            .field("state", state)
            .field("fingerprint", &record.fingerprint)
            .field("expires_at", record.expires_at)
    };
    match &record.state {
        RecordState::Completed(response) => {
            let (body, encoding) = match std::str::from_utf8(&response.body) {
                Ok(text) => (text.to_string(), "utf-8"),
                Err(_) => (aws_smithy_types::base64::encode(&response.body), "base64"),
            };
            let headers: serde_json::Map<String, serde_json::Value> = response
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::from(v.as_str())))
                .collect();
            reply("completed")
                .field("status", response.status)
                .field("headers", headers)
                .field("body", body)
                .field("body_encoding", encoding)
                .field("lease_until_ms", None::<u64>)
                .note(format!(
                    "Counts as absent after {}.",
                    rfc3339(record.expires_at)
                ))
        }
        RecordState::InProgress { lease_until_ms, .. } => reply("in_progress")
            .field("status", None::<u16>)
            .field("headers", None::<()>)
            .field("body", None::<String>)
            .field("body_encoding", None::<String>)
            .field("lease_until_ms", lease_until_ms)
            .note(format!(
                "A request holds this key; its lease ends {} (then a retry may claim it again).",
                rfc3339(lease_until_ms / 1000)
            )),
    }
}
