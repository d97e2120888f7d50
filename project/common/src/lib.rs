//! `tollgate-functions`: what this repository's two functions (`ephemeral-key`, `transfer`)
//! share and no other user of the `tollgate` guard crate would.
//!
//! The guard crate knows no function, table, route or provider of this deployment; these do:
//!
//! - [`catalog`]: the functions, tables and limits variables, each named once (the
//!   `tollgate-catalog` crate, read from [`tollgate::config::Env`]);
//! - [`guard_settings`]: a function's guard settings with this deployment's defaults (its
//!   tables' local names, its limits variable, the `Tollgate` metrics namespace);
//! - [`clients`]: the transfer API's clients and their bearer tokens (the CLI creates them);
//! - [`serve`]: the entry point both functions run.

pub mod auth;
pub mod catalog;
pub mod clients;
pub mod serve;

use tollgate::config::{
    ConfigError, Env, GuardSettings, CONTROL_TABLE_VAR, METRICS_NAMESPACE_VAR, RATE_LIMIT_TABLE_VAR,
};

/// The CloudWatch namespace of this deployment's metrics (the template's alarms watch it).
pub const METRICS_NAMESPACE: &str = "Tollgate";

/// `function`'s guard settings from `env`, with this deployment's defaults for what the guard
/// crate leaves unset: the shared tables' names (the local stack's, from the catalog), the
/// function's own limits variable and default, and the metrics namespace.
pub fn guard_settings(
    env: &Env,
    function: &catalog::Function,
) -> Result<GuardSettings, ConfigError> {
    GuardSettings::from_env(
        &with_defaults(env),
        function.name,
        function.limits_variable,
        function.default_limits,
    )
}

/// `env` with this deployment's defaults added where a variable is unset.
pub fn with_defaults(env: &Env) -> Env {
    let mut env = env.clone();
    let defaults = [
        (
            RATE_LIMIT_TABLE_VAR,
            catalog::RATE_LIMITS.resolve_for_function(&env),
        ),
        (
            CONTROL_TABLE_VAR,
            catalog::CONTROL.resolve_for_function(&env),
        ),
        (METRICS_NAMESPACE_VAR, METRICS_NAMESPACE.to_string()),
    ];
    for (var, default) in defaults {
        if env.get(var).is_none() {
            env.set(var, default);
        }
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_runs_on_the_deployments_tables_and_namespace_by_default() {
        let s = guard_settings(&Env::default(), &catalog::TRANSFER).unwrap();
        assert_eq!(s.function, catalog::TRANSFER.name);
        assert_eq!(s.rate_limit_table, catalog::RATE_LIMITS.default);
        assert_eq!(s.control_table, catalog::CONTROL.default);
        assert_eq!(s.metrics_namespace.as_deref(), Some(METRICS_NAMESPACE));
        assert_eq!(s.rate_limits.to_string(), catalog::TRANSFER.default_limits);
        let env = Env::from_pairs([
            ("RATE_LIMIT_TABLE", "mine"),
            (catalog::TRANSFER.limits_variable, "ip=1/1m"),
        ]);
        let s = guard_settings(&env, &catalog::TRANSFER).unwrap();
        assert_eq!(s.rate_limit_table, "mine");
        assert_eq!(s.rate_limits.to_string(), "ip=1/1m");
        let err = guard_settings(
            &Env::from_pairs([(catalog::TRANSFER.limits_variable, "ip=ten/1h")]),
            &catalog::TRANSFER,
        )
        .unwrap_err();
        assert_eq!(err.var, catalog::TRANSFER.limits_variable);
    }
}

#[cfg(test)]
mod library_names {
    use std::path::Path;

    use super::catalog;

    fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path
                .extension()
                .is_some_and(|e| e == "rs" || e == "md" || e == "toml")
            {
                out.push((
                    path.display().to_string(),
                    std::fs::read_to_string(&path).unwrap(),
                ));
            }
        }
    }

    /// The guard crate is a library for any Lambda: none of this deployment's functions,
    /// tables, limits variables or routes may appear in it (its sources, manifest, README).
    #[test]
    fn the_guard_crate_names_nothing_of_this_deployment() {
        // Where cargo runs this test from, not the compiled-in path (another clone's, when
        // clones share a target directory: see `tollgate_tests::workspace_root`).
        let here = std::env::var("CARGO_MANIFEST_DIR").unwrap();
        let library = Path::new(&here).join("../../shared");
        let mut files = Vec::new();
        sources(&library.join("src"), &mut files);
        for extra in ["Cargo.toml", "README.md"] {
            if let Ok(text) = std::fs::read_to_string(library.join(extra)) {
                files.push((extra.to_string(), text));
            }
        }
        assert!(files.len() > 20, "found the library's sources");
        let mut names: Vec<String> = Vec::new();
        for f in catalog::FUNCTIONS {
            names.push(f.name.to_string());
            names.push(f.limits_variable.to_string());
            names.push(f.route.to_string());
            names.push(f.route.split_once(' ').unwrap().1.to_string());
        }
        for t in catalog::TABLES {
            names.push(t.default.to_string());
            names.push(t.logical_id.to_string());
        }
        for (path, text) in &files {
            for name in &names {
                assert!(!text.contains(name.as_str()), "{path} names {name:?}");
            }
        }
    }
}
