//! Which DynamoDB table each template resource is, by name: the variables the functions read and
//! their defaults.
//!
//! The functions learn their table names from variables that the SAM template fills with `!Ref`;
//! the CLI reads the same variables with the same defaults, so in a shell with the functions'
//! environment it touches the functions' tables.
//!
//! One exception: both functions call their idempotency table `IDEMPOTENCY_TABLE`, which cannot
//! name two tables in one shell. The CLI reads `TRANSFER_IDEMPOTENCY_TABLE` and
//! `SESSION_IDEMPOTENCY_TABLE` instead (and ignores `IDEMPOTENCY_TABLE`); the defaults are the
//! functions' defaults.

use tollgate::config::{Env, DEFAULT_CONTROL_TABLE, DEFAULT_RATE_LIMIT_TABLE};

/// One table: its logical id in `template.yaml`, the variable naming it, the default name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableName {
    pub logical_id: &'static str,
    pub env_var: &'static str,
    pub default: &'static str,
}

impl TableName {
    /// The table's name in `env`.
    pub fn resolve(&self, env: &Env) -> String {
        env.string_or(self.env_var, self.default)
    }
}

pub const RATE_LIMITS: TableName = TableName {
    logical_id: "RateLimitTable",
    env_var: "RATE_LIMIT_TABLE",
    default: DEFAULT_RATE_LIMIT_TABLE,
};
pub const CONTROL: TableName = TableName {
    logical_id: "ControlTable",
    env_var: "CONTROL_TABLE",
    default: DEFAULT_CONTROL_TABLE,
};
pub const CLIENTS: TableName = TableName {
    logical_id: "ClientsTable",
    env_var: "CLIENTS_TABLE",
    default: transfer::config::DEFAULT_CLIENTS_TABLE,
};
pub const ACCOUNTS: TableName = TableName {
    logical_id: "AccountsTable",
    env_var: "ACCOUNTS_TABLE",
    default: transfer::config::DEFAULT_ACCOUNTS_TABLE,
};
pub const TRANSFERS: TableName = TableName {
    logical_id: "TransfersTable",
    env_var: "TRANSFERS_TABLE",
    default: transfer::config::DEFAULT_TRANSFERS_TABLE,
};
/// The transfer function's `IDEMPOTENCY_TABLE`.
pub const TRANSFER_IDEMPOTENCY: TableName = TableName {
    logical_id: "TransferIdempotencyTable",
    env_var: "TRANSFER_IDEMPOTENCY_TABLE",
    default: transfer::config::DEFAULT_IDEMPOTENCY_TABLE,
};
/// The ephemeral-key function's `IDEMPOTENCY_TABLE`.
pub const SESSION_IDEMPOTENCY: TableName = TableName {
    logical_id: "SessionIdempotencyTable",
    env_var: "SESSION_IDEMPOTENCY_TABLE",
    default: ephemeral_key::config::DEFAULT_IDEMPOTENCY_TABLE,
};

/// Every table of the template.
pub const TABLES: &[TableName] = &[
    RATE_LIMITS,
    CONTROL,
    CLIENTS,
    ACCOUNTS,
    TRANSFERS,
    TRANSFER_IDEMPOTENCY,
    SESSION_IDEMPOTENCY,
];

/// The table a template resource is.
pub fn by_logical_id(logical_id: &str) -> Option<&'static TableName> {
    TABLES.iter().find(|t| t.logical_id == logical_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::config::GuardSettings;

    /// The defaults here are the functions' defaults (they keep theirs inline).
    #[test]
    fn defaults_are_the_functions_defaults() {
        let empty = Env::default();
        let transfer = transfer::config::TransferSettings::from_env(&empty).unwrap();
        assert_eq!(CLIENTS.default, transfer.clients_table);
        assert_eq!(ACCOUNTS.default, transfer.accounts_table);
        assert_eq!(TRANSFERS.default, transfer.transfers_table);
        assert_eq!(TRANSFER_IDEMPOTENCY.default, transfer.idempotency_table);

        let with_key = Env::from_pairs([("OPENAI_API_KEY", "unused")]);
        let session = ephemeral_key::config::SessionSettings::from_env(&with_key).unwrap();
        assert_eq!(SESSION_IDEMPOTENCY.default, session.idempotency_table);

        let guard = GuardSettings::from_env(
            &empty,
            transfer::FUNCTION,
            transfer::LIMITS_VAR,
            transfer::DEFAULT_LIMITS,
        )
        .unwrap();
        assert_eq!(RATE_LIMITS.default, guard.rate_limit_table);
        assert_eq!(CONTROL.default, guard.control_table);
    }

    #[test]
    fn variables_are_read_like_the_functions_read_them() {
        let env = Env::from_pairs([("CLIENTS_TABLE", " custom "), ("ACCOUNTS_TABLE", "")]);
        assert_eq!(CLIENTS.resolve(&env), "custom");
        assert_eq!(ACCOUNTS.resolve(&env), "tollgate-accounts");
        assert_eq!(by_logical_id("ControlTable"), Some(&CONTROL));
        assert_eq!(by_logical_id("Nope"), None);
    }
}
