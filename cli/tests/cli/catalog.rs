//! `tollgate catalog --json`: the catalog as one object a serde struct reads, with no stack.

use serde::Deserialize;
use tollgate::config::Env;
use tollgate_cli::Context;
use tollgate_functions::catalog;

use crate::harness::single_object;

/// The shape a tool such as xtask reads (it cannot link the library, so it has its own).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Catalog {
    functions: Vec<Function>,
    tables: Vec<Table>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Function {
    name: String,
    route: String,
    limits_variable: String,
    default_limits: String,
    idempotency_table: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    logical_id: String,
    variable: String,
    function_variable: String,
    default: String,
}

#[tokio::test]
async fn the_catalog_is_one_object_that_a_struct_reads_without_a_stack() {
    // No stack file and no DynamoDB: the command must not need either.
    let dir = std::env::temp_dir().join(format!("tollgate-catalog-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ctx = Context::new(
        Env::from_pairs([("DYNAMODB_ENDPOINT", "http://127.0.0.1:1")]),
        &dir,
    );
    let out = tollgate_cli::run(&ctx, ["catalog", "--json"]).await;
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.code, 0, "{out:?}");
    let read: Catalog = serde_json::from_value(single_object(&out.stdout)).unwrap();

    let functions: Vec<_> = read
        .functions
        .iter()
        .map(|f| {
            (
                f.name.as_str(),
                f.route.as_str(),
                f.limits_variable.as_str(),
                f.default_limits.as_str(),
                f.idempotency_table.as_str(),
            )
        })
        .collect();
    let expected: Vec<_> = catalog::FUNCTIONS
        .iter()
        .map(|f| {
            (
                f.name,
                f.route,
                f.limits_variable,
                f.default_limits,
                f.idempotency_table.logical_id,
            )
        })
        .collect();
    assert_eq!(functions, expected);

    let tables: Vec<_> = read
        .tables
        .iter()
        .map(|t| {
            (
                t.logical_id.as_str(),
                t.variable.as_str(),
                t.function_variable.as_str(),
                t.default.as_str(),
            )
        })
        .collect();
    let expected: Vec<_> = catalog::TABLES
        .iter()
        .map(|t| (t.logical_id, t.variable, t.function_variable, t.default))
        .collect();
    assert_eq!(tables, expected);

    let human = tollgate_cli::run(&ctx, ["catalog"]).await;
    assert_eq!(human.code, 0, "{human:?}");
    assert!(
        human.stdout.contains(catalog::TRANSFER.limits_variable),
        "{}",
        human.stdout
    );
}
