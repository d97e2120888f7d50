//! `tollgate kill-switch on|off|status --function NAME`: a function's off switch.
//!
//! Writes go through [`KillSwitch::set`], the same item the functions read. Running functions
//! cache the flag for up to `KILL_SWITCH_CACHE_SECONDS` (default 5), so a flip applies within
//! that time, not at once; the human output says so. The status is read strongly consistent.

use std::time::Duration;

use clap::{Args, Subcommand};
use tollgate::kill_switch::{KillSwitch, SetError, SwitchState, MAX_MESSAGE_CHARS};

use super::{function, Deps};
use crate::error::CliError;
use crate::output::Reply;
use tollgate_functions::catalog;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Turns the switch on: the function answers every request with 403 and the message.
    On {
        #[command(flatten)]
        function: FunctionArg,
        /// Shown to callers as the problem's detail [default: a generic "temporarily disabled"].
        #[arg(long, allow_hyphen_values = true)]
        message: Option<String>,
    },
    /// Turns the switch off: the function serves again.
    Off {
        #[command(flatten)]
        function: FunctionArg,
    },
    /// Shows whether the switch is on, and its message.
    Status {
        #[command(flatten)]
        function: FunctionArg,
    },
}

#[derive(Debug, Args)]
pub struct FunctionArg {
    /// The function: ephemeral-key or transfer.
    #[arg(long = "function", value_name = "NAME")]
    name: String,
}

pub(crate) async fn run(command: &Command, deps: &Deps<'_>) -> Result<Reply, CliError> {
    let table = catalog::CONTROL.resolve(deps.env);
    // No cache: every call reads or writes the table itself.
    let switch = KillSwitch::new(deps.ddb.clone(), &table, deps.clock.clone(), Duration::ZERO);
    let (state, flipped) = match command {
        Command::Status { function: f } => {
            let name = function(&f.name)?.name;
            let state = switch
                .status(name)
                .await
                .map_err(|e| CliError::store(format!("reading the kill switch in {table}"), &e))?;
            (state, false)
        }
        Command::On {
            function: f,
            message,
        } => (
            set(&switch, &table, &f.name, true, message.as_deref()).await?,
            true,
        ),
        Command::Off { function: f } => (set(&switch, &table, &f.name, false, None).await?, true),
    };
    let mut reply = Reply::new()
        .field("function", &state.function)
        .field("enabled", state.enabled)
        .field("message", &state.message);
    if flipped {
        let effect = if state.enabled {
            "refuses requests"
        } else {
            "serves again"
        };
        reply = reply.note(format!(
            "{} {effect} within KILL_SWITCH_CACHE_SECONDS (default 5 s): running instances cache the flag.",
            state.function
        ));
    }
    Ok(reply)
}

async fn set(
    switch: &KillSwitch,
    table: &str,
    name: &str,
    enabled: bool,
    message: Option<&str>,
) -> Result<SwitchState, CliError> {
    let name = function(name)?.name;
    switch
        .set(name, enabled, message)
        .await
        .map_err(|e| match e {
            SetError::MessageTooLong => CliError::new(format!(
                "--message is longer than {MAX_MESSAGE_CHARS} characters"
            )),
            SetError::Store(e) => {
                CliError::store(format!("writing the kill switch in {table}"), &e)
            }
        })
}
