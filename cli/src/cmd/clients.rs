//! `tollgate clients create --name N`: a new API client and its bearer token;
//! `tollgate clients revoke ID`: its token stops working.
//!
//! [`ClientStore::create`] draws the token and stores only its SHA-256, so this reply is the one
//! and only time the token exists in readable form. Nothing else the CLI prints contains it.

use std::time::Duration;

use clap::Subcommand;
use secrecy::ExposeSecret;
use tollgate_functions::clients::ClientStore;

use super::Deps;
use crate::error::CliError;
use crate::output::Reply;
use tollgate_functions::catalog;

/// Longest client name accepted (a label for people, not an identifier).
const MAX_NAME_CHARS: usize = 100;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Creates a client; prints its id and bearer token (shown this once only).
    Create {
        /// A label for people (who the client is).
        #[arg(long)]
        name: String,
    },
    /// Revokes a client: its token stops working (within TOKEN_CACHE_SECONDS in warm functions).
    Revoke {
        /// The client id (`cl_…`).
        id: String,
    },
}

pub(crate) async fn run(command: &Command, deps: &Deps<'_>) -> Result<Reply, CliError> {
    match command {
        Command::Create { name } => create(name, deps).await,
        Command::Revoke { id } => revoke(id.trim(), deps).await,
    }
}

async fn revoke(id: &str, deps: &Deps<'_>) -> Result<Reply, CliError> {
    let table = catalog::CLIENTS.resolve(deps.env);
    let store = ClientStore::new(deps.ddb.clone(), &table, deps.clock.clone(), Duration::ZERO);
    let revoked = store
        .revoke(id)
        .await
        .map_err(|e| CliError::store(format!("revoking client {id} in {table}"), &e))?;
    if !revoked {
        return Err(CliError::new(format!("no client {id} in {table}")));
    }
    Ok(Reply::new()
        .field("client_id", id)
        .field("revoked", true)
        .note("Warm functions stop accepting the token within TOKEN_CACHE_SECONDS."))
}

async fn create(name: &str, deps: &Deps<'_>) -> Result<Reply, CliError> {
    let name = name.trim();
    if name.is_empty()
        || name.chars().count() > MAX_NAME_CHARS
        || name.chars().any(char::is_control)
    {
        return Err(CliError::new(format!(
            "--name must be 1 to {MAX_NAME_CHARS} printable characters"
        )));
    }
    let table = catalog::CLIENTS.resolve(deps.env);
    let store = ClientStore::new(deps.ddb.clone(), &table, deps.clock.clone(), Duration::ZERO);
    let client = store
        .create(name)
        .await
        .map_err(|e| CliError::store(format!("creating a client in {table}"), &e))?;
    Ok(Reply::new()
        .field("client_id", &client.client_id)
        .field("token", client.token.expose_secret())
        .field("name", &client.name)
        .note("The token is shown only now: only its hash is stored. Keep it somewhere safe."))
}
