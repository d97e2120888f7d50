//! The project's names, each written once: the `tollgate-catalog` crate (`project/catalog`),
//! re-exported, read from [`tollgate::config::Env`] (its `env` feature).

pub use tollgate_catalog::*;

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::config::Env;

    #[test]
    fn names_and_variables_are_unique() {
        let mut ids: Vec<_> = TABLES.iter().map(|t| t.logical_id).collect();
        let mut vars: Vec<_> = TABLES.iter().map(|t| t.variable).collect();
        let mut defaults: Vec<_> = TABLES.iter().map(|t| t.default).collect();
        for list in [&mut ids, &mut vars, &mut defaults] {
            let len = list.len();
            list.sort();
            list.dedup();
            assert_eq!(list.len(), len, "{list:?}");
        }
        for f in FUNCTIONS {
            assert!(TABLES.contains(&f.idempotency_table), "{}", f.name);
        }
    }

    #[test]
    fn variables_are_read_like_the_functions_read_them() {
        let env = Env::from_pairs([
            ("CLIENTS_TABLE", " custom "),
            ("ACCOUNTS_TABLE", ""),
            ("IDEMPOTENCY_TABLE", "own"),
            ("TRANSFER_RATE_LIMITS", "ip=1/1m"),
        ]);
        assert_eq!(CLIENTS.resolve(&env), "custom");
        assert_eq!(ACCOUNTS.resolve(&env), "tollgate-accounts");
        assert_eq!(TRANSFER_IDEMPOTENCY.resolve_for_function(&env), "own");
        assert_eq!(
            TRANSFER_IDEMPOTENCY.resolve(&env),
            "tollgate-transfer-idempotency"
        );
        assert_eq!(TRANSFER.limits(&env), "ip=1/1m");
        assert_eq!(EPHEMERAL_KEY.limits(&env), EPHEMERAL_KEY.default_limits);
        assert_eq!(table("ControlTable"), Some(&CONTROL));
        assert_eq!(table("Nope"), None);
        assert_eq!(function("transfer"), Some(&TRANSFER));
        assert_eq!(function_names(), "ephemeral-key, transfer");
    }
}
