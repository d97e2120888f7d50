//! `tollgate limits show|reset --function NAME --layer L [--key K] [--limits SPEC]`: one
//! rate-limit counter of the current window.
//!
//! The limits are the ones the function counts under, as it published them in the control table
//! once a process of it had answered its first request ([`tollgate::published_limits`]): not the
//! operator's shell's `SESSION_RATE_LIMITS` / `TRANSFER_RATE_LIMITS`, which need not be the
//! deployed configuration (a stack parameter, a variable only the functions get). A wrong limit,
//! window or shard count would report another limit than the one enforced, or read and reset
//! counters nobody counts. When nothing is published (no process of the function has answered a
//! request against this control table yet), the command says it cannot know the limits instead of
//! guessing; `--limits SPEC` states them explicitly. Every reply says which it used (`limits`,
//! `limits_source`, `limits_published_at`).
//!
//! The key is the one the function counts under:
//!
//! - `ip`: the client address as counted (IPv6 by its /64; a plain address is normalised);
//! - `client`: a verified client id;
//! - `global`: no key (`--key` is ignored).
//!
//! A layer the limits turn off (`global=off`) has no counter: the command says so.
//!
//! A reset empties the current window's counter ([`RateLimiter::reset`]); every instance that
//! asks DynamoDB sees that at once. Two kinds of memory delay it, each bounded:
//!
//! - a warm instance that saw the key full refuses it from its block cache without asking, for
//!   at most `RATE_LIMIT_BLOCK_CACHE_SECONDS` (default 5; the published value) after the reset;
//! - a sliding layer's reset also voids the previous window (the `void` mark on the current
//!   item, see `tollgate::ratelimit`'s counter), and an instance that holds that window's counts
//!   in memory learns it from its next increment, so it stops counting them then.

use std::time::Duration;

use clap::{Args, Subcommand};
use tollgate::published_limits::{LimitsRecord, PublishedLimits, PublishedLimitsError};
use tollgate::ratelimit::{
    Layer, RateLimit, RateLimiter, RateLimits, WindowKind, DEFAULT_BLOCK_CACHE_MAX_AGE,
};

use super::{client_addr, function, rfc3339, Deps};
use crate::error::{chain, CliError};
use crate::output::Reply;
use tollgate_functions::catalog::{self, Function};

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Shows the counter: count so far, the limit and when the window ends.
    Show(CounterArgs),
    /// Empties the counter so the key may be admitted again (see the note it prints).
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
    /// The function's limits, stated explicitly (e.g. ip=10/1h,global=2000/1d) instead of
    /// those it published in the control table.
    #[arg(long, value_name = "SPEC")]
    limits: Option<String>,
}

/// The limits in force, by where they came from.
enum InForce {
    /// The function published them (at a time, with its block cache's age).
    Published(PublishedLimits),
    /// `--limits`.
    Flag(RateLimits),
}

/// One counter, resolved.
struct Counter {
    function: &'static Function,
    limit: RateLimit,
    key: String,
    in_force: InForce,
}

pub(crate) async fn run(command: &Command, deps: &Deps<'_>) -> Result<Reply, CliError> {
    let args = match command {
        Command::Show(a) | Command::Reset(a) => a,
    };
    let function = function(&args.function)?;
    let layer: Layer = args
        .layer
        .trim()
        .parse()
        .map_err(|e| CliError::new(format!("--layer: {e}")))?;
    let in_force = in_force(function, args.limits.as_deref(), deps).await?;
    let counter = counter(function, layer, args, in_force)?;
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
                .limits_fields(&counter.in_force)
                .note(format!(
                    "Limit {} ({}); this window ends {}.",
                    counter.limit,
                    counter.in_force.describe(counter.function),
                    rfc3339(usage.window_ends_at)
                )))
        }
        Command::Reset(_) => {
            limiter
                .reset(&counter.limit, &counter.key)
                .await
                .map_err(|e| CliError::store(format!("resetting the counter in {table}"), &e))?;
            let block_cache = match &counter.in_force {
                InForce::Published(p) => Some(p.block_cache_max_age),
                InForce::Flag(_) => None,
            };
            Ok(counter
                .reply()
                .field("reset", true)
                .limits_fields(&counter.in_force)
                .field("block_cache_seconds", block_cache.map(|d| d.as_secs()))
                .note(reset_note(&counter.limit, block_cache)))
        }
    }
}

/// The limits to use: `--limits`, else what the function published, else an error saying why
/// the CLI cannot know them.
async fn in_force(
    function: &Function,
    flag: Option<&str>,
    deps: &Deps<'_>,
) -> Result<InForce, CliError> {
    if let Some(spec) = flag {
        return RateLimits::parse(spec)
            .map(InForce::Flag)
            .map_err(|e| CliError::new(format!("--limits: {e}")));
    }
    let table = catalog::CONTROL.resolve(deps.env);
    let record = LimitsRecord::new(deps.ddb.clone(), &table, deps.clock.clone());
    match record.read(function.name).await {
        Ok(Some(published)) => Ok(InForce::Published(published)),
        Ok(None) => Err(CliError::new(format!(
            "cannot know {name}'s limits: it has published none in {table} (no process of \
             {name} has answered a request against this table yet), so state them with --limits SPEC \
             (the value of its {var}, by default {default})",
            name = function.name,
            var = function.limits_variable,
            default = function.default_limits,
        ))),
        Err(e @ PublishedLimitsError::Store { .. }) => Err(CliError::store(
            format!("reading the published limits in {table}"),
            &e,
        )),
        Err(e) => Err(CliError::new(format!(
            "cannot use the limits {} published in {table} ({}), so state them with \
             --limits SPEC",
            function.name,
            chain(&e)
        ))),
    }
}

impl InForce {
    fn limits(&self) -> &RateLimits {
        match self {
            InForce::Published(p) => &p.limits,
            InForce::Flag(limits) => limits,
        }
    }

    /// The limits and where they came from, for the human form and the error lines.
    fn describe(&self, function: &Function) -> String {
        match self {
            InForce::Published(p) => format!(
                "{} as {} published them at {}",
                p.limits,
                function.name,
                rfc3339(p.published_at)
            ),
            InForce::Flag(limits) => format!("{limits} as given with --limits"),
        }
    }
}

impl Reply {
    /// The limits in force and where they came from.
    fn limits_fields(self, in_force: &InForce) -> Self {
        let (source, published_at) = match in_force {
            InForce::Published(p) => ("published", Some(p.published_at)),
            InForce::Flag(_) => ("--limits", None),
        };
        self.field("limits", in_force.limits().to_string())
            .field("limits_source", source)
            .field("limits_published_at", published_at)
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

/// What a reset does not change at once, and for how long: the truth about warm instances.
fn reset_note(limit: &RateLimit, block_cache: Option<Duration>) -> String {
    let memory = match block_cache {
        Some(Duration::ZERO) => "The reset applies at once: the function's block cache is off, \
                                 so no instance refuses the key from memory."
            .to_string(),
        Some(age) => format!(
            "Warm function instances that saw this key full may keep refusing it from memory \
             (their block cache) for at most {} s after this reset (RATE_LIMIT_BLOCK_CACHE_SECONDS, \
             as published); every other request sees the reset at once.",
            age.as_secs()
        ),
        None => format!(
            "Warm function instances that saw this key full may keep refusing it from memory \
             (their block cache) for at most RATE_LIMIT_BLOCK_CACHE_SECONDS after this reset \
             (default {} s; with --limits the function's own value is not read); every other \
             request sees the reset at once.",
            DEFAULT_BLOCK_CACHE_MAX_AGE.as_secs()
        ),
    };
    match limit.kind() {
        WindowKind::Fixed => memory,
        WindowKind::Sliding => format!(
            "{memory} The previous window is voided too: an instance that holds its counts in \
             memory stops counting them at its next increment for this key."
        ),
    }
}

fn counter(
    function: &'static Function,
    layer: Layer,
    args: &CounterArgs,
    in_force: InForce,
) -> Result<Counter, CliError> {
    let limits = in_force.limits();
    if limits.is_off(layer) {
        return Err(CliError::new(format!(
            "{}'s {layer} layer is off ({}; set by {}): it counts nothing, so there is no counter",
            function.name,
            in_force.describe(function),
            function.limits_variable
        )));
    }
    let limit = *limits.get(layer).ok_or_else(|| {
        CliError::new(format!(
            "{} has no {layer} layer ({}; set by {})",
            function.name,
            in_force.describe(function),
            function.limits_variable
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
        in_force,
    })
}

fn required_key(args: &CounterArgs, layer: Layer) -> Result<&str, CliError> {
    args.key
        .as_deref()
        .filter(|k| !k.trim().is_empty())
        .ok_or_else(|| CliError::new(format!("--key is required for the {layer} layer")))
}
