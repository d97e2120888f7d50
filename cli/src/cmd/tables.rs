//! `tollgate tables create [--template PATH]`: the template's DynamoDB tables, in DynamoDB Local.
//!
//! Definitions come from `template.yaml` ([`tollgate_template`]), names from the variables the
//! catalog gives each table ([`tollgate_functions::catalog`]). Tables that exist are left alone and reported (their
//! key schema is checked against the template). Every table is known by name before any is
//! created, so a template with a table the CLI cannot name changes nothing.
//!
//! Only for a local target (the stack file, or `DYNAMODB_ENDPOINT`): deployed tables belong to
//! the SAM stack, and tables made beside it by hand would be tables CloudFormation does not know.

use std::path::{Path, PathBuf};

use clap::Subcommand;

use super::Deps;
use crate::error::CliError;
use crate::output::Reply;
use tollgate_functions::catalog;
use tollgate_template::{self as template, Outcome};

/// The template's file name, looked for in the working directory and its parents.
const TEMPLATE_FILE: &str = "template.yaml";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Creates every AWS::DynamoDB::Table of the template that does not exist yet, with TTL
    /// where the template enables it.
    Create {
        /// The SAM template [default: the nearest template.yaml].
        #[arg(long, value_name = "PATH")]
        template: Option<PathBuf>,
    },
}

#[derive(serde::Serialize)]
struct TableReport {
    logical_id: &'static str,
    name: String,
    created: bool,
    ttl_attribute: Option<String>,
}

pub(crate) async fn run(command: &Command, deps: &Deps<'_>) -> Result<Reply, CliError> {
    let Command::Create { template } = command;
    if !deps.target.is_local() {
        return Err(CliError::new(
            "tables create is for DynamoDB Local: start the local stack (cargo xtask dev) or set DYNAMODB_ENDPOINT; deployed tables belong to the SAM stack",
        ));
    }
    let path = template_path(deps.cwd, template.as_deref())?;
    let text = std::fs::read_to_string(&path)
        .map_err(|e| CliError::new(format!("cannot read {}: {e}", path.display())))?;
    let defs = template::table_definitions(&text)
        .map_err(|e| CliError::new(format!("{}: {e}", path.display())))?;
    let named = defs
        .iter()
        .map(|def| {
            catalog::table(&def.logical_id)
                .map(|t| (t, t.resolve(deps.env), def))
                .ok_or_else(|| {
                    CliError::new(format!(
                        "{}: no table name variable is known for {}; add it to shared/catalog/src/lib.rs",
                        path.display(),
                        def.logical_id
                    ))
                })
        })
        .collect::<Result<Vec<_>, _>>()?;

    let mut reports = Vec::new();
    for (table, name, def) in named {
        let outcome = template::create_table(&deps.ddb, &name, def)
            .await
            .map_err(|e| CliError::new(crate::error::chain(&e)))?;
        reports.push(TableReport {
            logical_id: table.logical_id,
            name,
            created: outcome == Outcome::Created,
            ttl_attribute: def.ttl_attribute.clone(),
        });
    }

    let names = |created: bool| -> Vec<&str> {
        reports
            .iter()
            .filter(|r| r.created == created)
            .map(|r| r.name.as_str())
            .collect()
    };
    let human: String = reports
        .iter()
        .map(|r| {
            let ttl = r
                .ttl_attribute
                .as_deref()
                .map(|a| format!(", TTL on {a}"))
                .unwrap_or_default();
            let what = if r.created { "created" } else { "exists " };
            format!("{what} {} ({}{ttl})\n", r.name, r.logical_id)
        })
        .collect();
    Ok(Reply::new()
        .field("created", names(true))
        .field("existing", names(false))
        .field("tables", &reports)
        .human(human))
}

/// `explicit` relative to `cwd`, else the nearest `template.yaml`.
fn template_path(cwd: &Path, explicit: Option<&Path>) -> Result<PathBuf, CliError> {
    match explicit {
        Some(path) => Ok(cwd.join(path)),
        None => cwd
            .ancestors()
            .map(|dir| dir.join(TEMPLATE_FILE))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                CliError::new(format!(
                    "no {TEMPLATE_FILE} in {} or its parents; pass --template",
                    cwd.display()
                ))
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The project's own template: every table it defines is in the catalog, and the reverse.
    #[test]
    fn the_project_template_matches_the_catalog() {
        let tables = template::table_definitions(include_str!("../../../template.yaml")).unwrap();
        let mut ids: Vec<_> = tables.iter().map(|t| t.logical_id.as_str()).collect();
        let mut known: Vec<_> = catalog::TABLES.iter().map(|t| t.logical_id).collect();
        ids.sort();
        known.sort();
        assert_eq!(ids, known);
    }
}
