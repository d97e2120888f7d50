//! `tollgate limits show|reset --function NAME --layer L [--key K]`: one rate-limit counter of
//! the current window.
//!
//! The limit comes from the function's own variable (`SESSION_RATE_LIMITS`,
//! `TRANSFER_RATE_LIMITS`) or its default, parsed by the library, so the CLI looks at the counter
//! the function is counting right now, under the key the function uses:
//!
//! - `ip`: the client address as counted (IPv6 by its /64; a plain address is normalised);
//! - `client`: a verified client id;
//! - `global`: no key (`--key` is ignored).
//!
//! A layer the variable turns off (`global=off`) has no counter: the command says so.
//!
//! A reset deletes the current window's counter ([`RateLimiter::reset`]). Warm function instances
//! that already saw the key full remember that in their in-process block cache until the window
//! ends and keep refusing it without asking DynamoDB; the reset reaches them only through new
//! instances (the library offers no way to tell running instances).

use clap::{Args, Subcommand};
use tollgate::ratelimit::{Layer, RateLimit, RateLimiter, RateLimits};

use super::{client_addr, function, rfc3339, Deps};
use crate::error::CliError;
use crate::output::Reply;
use tollgate::catalog::{self, Function};

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Shows the counter: count so far, the limit and when the window ends.
    Show(CounterArgs),
    /// Empties the counter so the key may be admitted again at once.
    Reset(CounterArgs),
}

#[derive(Debug, Args)]
pub struct CounterArgs {
    /// The function: ephemeral-key or transfer.
    #[arg(long, value_name = "NAME")]
    function: String,
    /// ip, client or global.
    #[arg(long)]
    layer: String,
    /// The client address (ip), the client id (client); not used for global.
    #[arg(long)]
    key: Option<String>,
}

/// One counter, resolved.
struct Counter {
    function: &'static Function,
    limit: RateLimit,
    key: String,
}

pub(crate) async fn run(command: &Command, deps: &Deps<'_>) -> Result<Reply, CliError> {
    let args = match command {
        Command::Show(a) | Command::Reset(a) => a,
    };
    let counter = counter(args, deps)?;
    let table = catalog::RATE_LIMITS.resolve(deps.env);
    // No block cache: it is for request floods, and the CLI makes one call.
    let limiter = RateLimiter::new(
        deps.ddb.clone(),
        &table,
        counter.function.name,
        deps.clock.clone(),
    );
    match command {
        Command::Show(_) => {
            let usage = limiter
                .usage(&counter.limit, &counter.key)
                .await
                .map_err(|e| CliError::store(format!("reading the counter in {table}"), &e))?;
            Ok(counter
                .reply()
                .field("count", usage.count)
                .field("limit", usage.limit)
                .field("window_ends_at", usage.window_ends_at)
                .note(format!(
                    "Limit {}; this window ends {}.",
                    counter.limit,
                    rfc3339(usage.window_ends_at)
                )))
        }
        Command::Reset(_) => {
            limiter
                .reset(&counter.limit, &counter.key)
                .await
                .map_err(|e| CliError::store(format!("resetting the counter in {table}"), &e))?;
            Ok(counter.reply().field("reset", true).note(
                "Warm function instances that saw this key full keep refusing it from memory \
                 (their block cache) until the window ends; new instances see the reset at once.",
            ))
        }
    }
}

impl Counter {
    /// The fields naming the counter.
    fn reply(&self) -> Reply {
        Reply::new()
            .field("function", self.function.name)
            .field("layer", self.limit.layer().as_str())
            .field("key", &self.key)
    }
}

fn counter(args: &CounterArgs, deps: &Deps<'_>) -> Result<Counter, CliError> {
    let function = function(&args.function)?;
    let layer: Layer = args
        .layer
        .trim()
        .parse()
        .map_err(|e| CliError::new(format!("--layer: {e}")))?;
    let var = function.limits_variable;
    let spec = function.limits(deps.env);
    let limits = RateLimits::parse(spec)
        .map_err(|e| CliError::new(format!("configuration variable {var}: {e}")))?;
    if limits.is_off(layer) {
        return Err(CliError::new(format!(
            "{}'s {layer} layer is off ({var}={limits}): it counts nothing, so there is no counter",
            function.name
        )));
    }
    let limit = *limits.get(layer).ok_or_else(|| {
        CliError::new(format!(
            "{} has no {layer} layer ({var}={limits})",
            function.name
        ))
    })?;
    let key = match layer {
        Layer::Global => String::new(),
        Layer::Ip => client_addr(required_key(args, layer)?)?,
        Layer::Client => required_key(args, layer)?.trim().to_string(),
    };
    Ok(Counter {
        function,
        limit,
        key: RateLimiter::layer_key(layer, &key).to_string(),
    })
}

fn required_key(args: &CounterArgs, layer: Layer) -> Result<&str, CliError> {
    args.key
        .as_deref()
        .filter(|k| !k.trim().is_empty())
        .ok_or_else(|| CliError::new(format!("--key is required for the {layer} layer")))
}
