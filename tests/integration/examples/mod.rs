//! The examples of `examples/`, each run as its README says: its service built exactly as its
//! `main` builds it (from the environment its `template.yaml` gives the function), on tables
//! made from its `template.yaml`, in DynamoDB Local, sent the README's requests and checked
//! for the README's answers. And each template passes cfn-lint and `sam validate --lint`.

mod idempotent_transaction;
mod kill_switched_secret;
mod rate_limited;
mod sqs_idempotent;
mod watch;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use tollgate::config::Env;
use tollgate_tests::dynamo::unique_prefix;

use serde_norway::Value;

use crate::deploy::template::{at, get_att_arn, one_or_many, Template};
use crate::deploy::tools;

/// The examples, by directory under `examples/`.
const EXAMPLES: &[&str] = &[
    "rate-limited",
    "idempotent-transaction",
    "sqs-idempotent",
    "kill-switched-secret",
];

fn example_dir(example: &str) -> PathBuf {
    tools::repo_root().join("examples").join(example)
}

fn example_template(example: &str) -> Template {
    Template::load_from(&example_dir(example).join("template.yaml"))
}

/// The `Environment.Variables` of the example's one function in its `template`, by name.
fn function_variables(example: &str, template: &Template) -> Vec<(String, Value)> {
    let functions = template.ids_of_type("AWS::Serverless::Function");
    let [function] = functions.iter().collect::<Vec<_>>()[..] else {
        panic!(
            "{example}'s template has {} functions, not one",
            functions.len()
        );
    };
    at(
        template.resource(function),
        &["Properties", "Environment", "Variables"],
    )
    .as_mapping()
    .expect("Variables is a mapping")
    .iter()
    .map(|(name, value)| {
        let name = name.as_str().expect("variable names are strings");
        (name.to_string(), value.clone())
    })
    .collect()
}

/// One test's tables of `example`, each made as its `template.yaml` defines it, by logical id.
pub struct ExampleTables(HashMap<String, String>);

impl ExampleTables {
    pub async fn create(ddb: &aws_sdk_dynamodb::Client, example: &str) -> Self {
        let text = std::fs::read_to_string(example_dir(example).join("template.yaml"))
            .expect("the example's template.yaml is readable");
        let defs = tollgate_template::table_definitions(&text).expect("the template's tables");
        assert!(!defs.is_empty(), "{example}'s template defines no table");
        let prefix = unique_prefix();
        let mut names = HashMap::new();
        for def in &defs {
            let name = format!("{prefix}-{}", def.logical_id);
            tollgate_template::create_table(ddb, &name, def)
                .await
                .unwrap_or_else(|e| panic!("create table {name}: {e:?}"));
            names.insert(def.logical_id.clone(), name);
        }
        Self(names)
    }

    /// The table made for the template's `logical_id`.
    pub fn name(&self, logical_id: &str) -> &str {
        self.0
            .get(logical_id)
            .unwrap_or_else(|| panic!("the template has no table {logical_id}"))
    }

    /// The environment `template.yaml` gives the example's function, as Lambda would set it:
    /// a `!Ref` to a table is this test's table, a `!Ref` to a parameter its default; then
    /// `extra` on top (what the README sets for a local run, or a test's own limits).
    pub fn function_env(&self, example: &str, extra: &[(&str, &str)]) -> Env {
        self.function_env_without(example, &[], extra)
    }

    /// [`Self::function_env`] with the variables `unset` left out (a README's local run that
    /// replaces one, e.g. a secret's SSM name by its plain value).
    pub fn function_env_without(
        &self,
        example: &str,
        unset: &[&str],
        extra: &[(&str, &str)],
    ) -> Env {
        let template = example_template(example);
        let mut env = Env::from_pairs(Vec::<(String, String)>::new());
        for (name, value) in function_variables(example, &template) {
            let name = name.as_str();
            if unset.contains(&name) {
                continue;
            }
            let value = match (value.as_str(), value.get("Ref").and_then(Value::as_str)) {
                (Some(literal), _) => literal.to_string(),
                (None, Some(id)) => match self.0.get(id) {
                    Some(table) => table.clone(),
                    None => at(template.parameter(id), &["Default"])
                        .as_str()
                        .unwrap_or_else(|| panic!("parameter {id} has no string default"))
                        .to_string(),
                },
                _ => panic!("{example}: {name} is neither a string nor a !Ref"),
            };
            env.set(name, value);
        }
        for (k, v) in extra {
            env.set(*k, *v);
        }
        env
    }
}

#[test]
fn every_example_template_passes_cfn_lint() {
    for example in EXAMPLES {
        let mut cmd = Command::new(tools::find("cfn-lint"));
        cmd.current_dir(example_dir(example)).arg("template.yaml");
        let out = tools::run(&mut cmd);
        tools::assert_success(&cmd, &out);
    }
}

#[test]
fn every_example_template_passes_sam_validate_lint() {
    for example in EXAMPLES {
        let mut cmd = tools::offline_sam(
            &tools::find("sam"),
            &format!("examples_sam_validate_lint_{example}"),
        );
        cmd.current_dir(example_dir(example)).args([
            "validate",
            "--lint",
            "--template",
            "template.yaml",
        ]);
        let out = tools::run(&mut cmd);
        tools::assert_success(&cmd, &out);
    }
}

/// Each example depends on the library alone, as an adopter's crate would: no crate of this
/// project's side (`tollgate-functions`, the catalog, the template reader) may creep in. The one
/// exception is the workspace-hack, which has no code (a feature set, so that `cargo lambda
/// watch -p example-…` reuses the workspace's artifacts) and says to delete it when copying.
#[test]
fn every_example_depends_on_the_library_only() {
    const HACK: &str = "tollgate-workspace-hack.workspace = true";
    for example in EXAMPLES {
        let manifest = std::fs::read_to_string(example_dir(example).join("Cargo.toml")).unwrap();
        let deps = manifest
            .split("[dependencies]")
            .nth(1)
            .expect("a [dependencies] table");
        for line in deps.lines().filter(|l| !l.trim_start().starts_with('#')) {
            if line.trim() == HACK {
                continue;
            }
            let name = line.split(['=', '.', ' ']).next().unwrap_or_default();
            assert!(
                !name.starts_with("tollgate-") && !line.contains("path"),
                "{example} depends on {line:?}: an adopter has only `tollgate`"
            );
        }
        assert!(manifest.contains("tollgate.workspace = true"), "{example}");
        assert!(
            example_dir(example).join("README.md").is_file(),
            "{example} has no README.md"
        );
    }
}

/// Least privilege in each example's template: every statement names its actions (no
/// wildcard), and every DynamoDB action is granted on one of the template's own tables, by
/// `!GetAtt <Table>.Arn` (no `*`, no index, no other table); no role or policy besides the
/// function's own `Policies`.
#[test]
fn every_example_grants_named_actions_on_its_own_tables_only() {
    for example in EXAMPLES {
        let template = Template::load_from(&example_dir(example).join("template.yaml"));
        let tables = template.ids_of_type("AWS::DynamoDB::Table");
        for ty in [
            "AWS::IAM::Role",
            "AWS::IAM::Policy",
            "AWS::IAM::ManagedPolicy",
        ] {
            assert!(
                template.ids_of_type(ty).is_empty(),
                "{example} declares {ty}"
            );
        }
        let mut dynamodb_grants = 0;
        for function in template.ids_of_type("AWS::Serverless::Function") {
            let policies = at(template.resource(&function), &["Properties", "Policies"]);
            for policy in one_or_many(policies) {
                // SAM policy templates (SQSPollerPolicy) are scoped by SAM to what they name.
                let Some(statements) = policy.get("Statement") else {
                    continue;
                };
                for statement in one_or_many(statements) {
                    let actions = one_or_many(at(statement, &["Action"]));
                    for action in &actions {
                        let action = action.as_str().expect("actions are strings");
                        assert!(!action.contains('*'), "{example}: {action}");
                    }
                    let on_dynamodb = actions
                        .iter()
                        .any(|a| a.as_str().is_some_and(|a| a.starts_with("dynamodb:")));
                    if !on_dynamodb {
                        continue;
                    }
                    for resource in one_or_many(at(statement, &["Resource"])) {
                        let table = get_att_arn(resource).unwrap_or_else(|| {
                            panic!("{example}: DynamoDB granted on {resource:?}, not a table's Arn")
                        });
                        assert!(
                            tables.contains(table),
                            "{example}: {table} is not its table"
                        );
                        dynamodb_grants += 1;
                    }
                }
            }
        }
        assert!(
            dynamodb_grants > 0,
            "{example} grants nothing on its tables"
        );
    }
}
