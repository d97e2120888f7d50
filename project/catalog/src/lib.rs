//! The project's names, each written once: the functions, the tables and the variables that
//! name them, the routes idempotency keys are scoped to, and the limits variables with their
//! defaults.
//!
//! These facts used to live where each was first needed (the guards, each function, the CLI)
//! and a test kept the copies in sync. Here they are data: the functions read their settings
//! through them, the CLI resolves the same tables and limits from them, the tests name their
//! tables with them, xtask reads them directly, and `tollgate catalog --json` prints them
//! ([`Catalog`] is that JSON's shape). This crate depends on serde alone, so xtask (which never
//! links the AWS SDK) reads the same constants; `tollgate_functions::catalog` re-exports it.
//!
//! Only names live here. What a table looks like is `template.yaml`'s business (read by the
//! `tollgate-template` crate); what a limit means is `tollgate::ratelimit`'s.

use serde::Serialize;

/// Where the variables are read from (`tollgate::config::Env`).
pub trait Vars {
    /// The variable's value; empty (or blank) counts as unset.
    fn var(&self, key: &str) -> Option<&str>;
}

/// The functions read their settings from the guard crate's `Env`, where a blank value counts as
/// unset: the catalog's variables are read the same way.
#[cfg(feature = "env")]
impl Vars for tollgate::config::Env {
    fn var(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

/// One DynamoDB table: the template resource, the variable naming it and its default name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Table {
    /// The resource's logical id in `template.yaml`, e.g. `RateLimitTable`.
    pub logical_id: &'static str,
    /// The variable the CLI and the tests read the table's name from; unique per table.
    pub variable: &'static str,
    /// The variable the function that owns the table reads. The same as [`Table::variable`]
    /// except for the idempotency tables: each function calls its own `IDEMPOTENCY_TABLE`,
    /// which cannot name two tables in one shell.
    pub function_variable: &'static str,
    /// The name when the variable is unset (the local stack's name).
    pub default: &'static str,
}

impl Table {
    /// The table's name as the CLI reads it: [`Table::variable`], else the default.
    pub fn resolve(&self, env: &impl Vars) -> String {
        env.var(self.variable).unwrap_or(self.default).trim().into()
    }

    /// The table's name as its function reads it: [`Table::function_variable`], else the default.
    pub fn resolve_for_function(&self, env: &impl Vars) -> String {
        env.var(self.function_variable)
            .unwrap_or(self.default)
            .trim()
            .into()
    }
}

/// Rate-limit counters, shared by both functions.
pub const RATE_LIMITS: Table =
    same_variable("RateLimitTable", "RATE_LIMIT_TABLE", "tollgate-rate-limits");
/// Kill switches, shared by both functions.
pub const CONTROL: Table = same_variable("ControlTable", "CONTROL_TABLE", "tollgate-control");
/// The transfer function's API clients (token hashes).
pub const CLIENTS: Table = same_variable("ClientsTable", "CLIENTS_TABLE", "tollgate-clients");
/// The transfer function's accounts.
pub const ACCOUNTS: Table = same_variable("AccountsTable", "ACCOUNTS_TABLE", "tollgate-accounts");
/// The transfer function's transfers.
pub const TRANSFERS: Table =
    same_variable("TransfersTable", "TRANSFERS_TABLE", "tollgate-transfers");
/// The transfer function's idempotency records.
pub const TRANSFER_IDEMPOTENCY: Table = Table {
    logical_id: "TransferIdempotencyTable",
    variable: "TRANSFER_IDEMPOTENCY_TABLE",
    function_variable: IDEMPOTENCY_TABLE_VARIABLE,
    default: "tollgate-transfer-idempotency",
};
/// The ephemeral-key function's idempotency records.
pub const SESSION_IDEMPOTENCY: Table = Table {
    logical_id: "SessionIdempotencyTable",
    variable: "SESSION_IDEMPOTENCY_TABLE",
    function_variable: IDEMPOTENCY_TABLE_VARIABLE,
    default: "tollgate-session-idempotency",
};

/// What each function calls its own idempotency table.
const IDEMPOTENCY_TABLE_VARIABLE: &str = "IDEMPOTENCY_TABLE";

/// Every table of the template, in its order.
pub const TABLES: &[Table] = &[
    RATE_LIMITS,
    CONTROL,
    CLIENTS,
    ACCOUNTS,
    TRANSFERS,
    TRANSFER_IDEMPOTENCY,
    SESSION_IDEMPOTENCY,
];

const fn same_variable(
    logical_id: &'static str,
    variable: &'static str,
    default: &'static str,
) -> Table {
    Table {
        logical_id,
        variable,
        function_variable: variable,
        default,
    }
}

/// The table a template resource is.
pub fn table(logical_id: &str) -> Option<&'static Table> {
    TABLES.iter().find(|t| t.logical_id == logical_id)
}

/// One function: its name, the route its idempotency keys are scoped to, its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Function {
    /// The logical name: kill-switch key, rate-limit scope, metrics dimension.
    pub name: &'static str,
    /// The method and route its idempotency records are scoped to, e.g. `POST /transfers`.
    pub route: &'static str,
    /// The variable holding its limits, e.g. `TRANSFER_RATE_LIMITS`.
    pub limits_variable: &'static str,
    /// Its limits when the variable is unset.
    pub default_limits: &'static str,
    /// Its idempotency table (in the JSON: the table's logical id).
    #[serde(serialize_with = "logical_id")]
    pub idempotency_table: Table,
}

impl Function {
    /// Its limits as configured in `env`: the variable, else the default.
    pub fn limits<'a>(&self, env: &'a impl Vars) -> &'a str {
        env.var(self.limits_variable).unwrap_or(self.default_limits)
    }
}

fn logical_id<S: serde::Serializer>(table: &Table, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(table.logical_id)
}

/// Short-lived OpenAI Realtime client secrets (`POST /session`).
pub const EPHEMERAL_KEY: Function = Function {
    name: "ephemeral-key",
    route: "POST /session",
    limits_variable: "SESSION_RATE_LIMITS",
    default_limits: "ip=10/1h,global=2000/1d",
    idempotency_table: SESSION_IDEMPOTENCY,
};

/// Money transfers (`POST /transfers`).
pub const TRANSFER: Function = Function {
    name: "transfer",
    route: "POST /transfers",
    limits_variable: "TRANSFER_RATE_LIMITS",
    default_limits: "ip=300/1m,client=60/1m",
    idempotency_table: TRANSFER_IDEMPOTENCY,
};

/// Every function, in name order.
pub const FUNCTIONS: &[Function] = &[EPHEMERAL_KEY, TRANSFER];

/// The function called `name`.
pub fn function(name: &str) -> Option<&'static Function> {
    FUNCTIONS.iter().find(|f| f.name == name)
}

/// The functions' names, `ephemeral-key, transfer`, for messages that list them.
pub fn function_names() -> String {
    FUNCTIONS
        .iter()
        .map(|f| f.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The whole catalog, as `tollgate catalog --json` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Catalog {
    pub functions: &'static [Function],
    pub tables: &'static [Table],
}

/// The catalog.
pub const CATALOG: Catalog = Catalog {
    functions: FUNCTIONS,
    tables: TABLES,
};
