//! `tollgate catalog [--json]`: the names the code is written against, as data.
//!
//! xtask cannot link the library (it stays free of the AWS SDK), yet it starts the functions,
//! sets their limits and names them in reports. Instead of keeping its own copies it asks this
//! command. `--json` prints [`tollgate_functions::catalog::Catalog`] as one object:
//!
//! ```json
//! {"functions": [{"name": "ephemeral-key", "route": "POST /session",
//!                 "limits_variable": "SESSION_RATE_LIMITS", "default_limits": "ip=10/1h,global=2000/1d",
//!                 "idempotency_table": "SessionIdempotencyTable"}, …],
//!  "tables": [{"logical_id": "RateLimitTable", "variable": "RATE_LIMIT_TABLE",
//!              "function_variable": "RATE_LIMIT_TABLE", "default": "tollgate-rate-limits"}, …]}
//! ```
//!
//! It reads no stack and no DynamoDB: these are facts of the build, not of a deployment.

use tollgate_functions::catalog::CATALOG;

use crate::output::Reply;

pub(crate) fn run() -> Reply {
    let mut human =
        String::from("functions (name, idempotency route, limits variable = default):\n");
    for f in CATALOG.functions {
        human.push_str(&format!(
            "  {} ({}) {}={}\n",
            f.name, f.route, f.limits_variable, f.default_limits
        ));
    }
    human.push_str("tables (template resource, variable = default):\n");
    for t in CATALOG.tables {
        let function_variable = if t.function_variable == t.variable {
            String::new()
        } else {
            format!(" (the function reads {})", t.function_variable)
        };
        human.push_str(&format!(
            "  {} {}={}{function_variable}\n",
            t.logical_id, t.variable, t.default
        ));
    }
    Reply::new()
        .field("functions", CATALOG.functions)
        .field("tables", CATALOG.tables)
        .human(human)
}
