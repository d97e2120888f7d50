//! The stack `cargo xtask deploy` recorded in `.dev/deployed.json`: the CLI finds it with no
//! table variable exported, uses the table names from the stack's outputs, and says on stderr
//! which stack it talks to. DynamoDB Local stands in for the region's endpoint
//! (`DYNAMODB_ENDPOINT`, which the deployed path honours as the functions do).

use tollgate::config::Env;
use tollgate_cli::connect::{self, Target};
use tollgate_cli::Context;
use tollgate_template as template;
use tollgate_tests::dynamo;

use crate::harness::{prefixed_names, single_object, table_defs, unique_prefix};

/// A directory holding `.dev/deployed.json` with `outputs`, and a subdirectory to run from.
struct DeployedDir(std::path::PathBuf);

impl DeployedDir {
    fn new(prefix: &str, outputs: serde_json::Value) -> Self {
        let dir = std::env::temp_dir().join(format!("tollgate-deployed-{prefix}"));
        std::fs::create_dir_all(dir.join(".dev")).unwrap();
        std::fs::create_dir_all(dir.join("web/sub")).unwrap();
        let record = serde_json::json!({
            "stack_name": "acme-prod",
            "region": "eu-west-1",
            "parameters": {"Frontend": "cloudfront"},
            "outputs": outputs,
            "deployed_at": 1,
        });
        std::fs::write(dir.join(connect::DEPLOYED_FILE), record.to_string()).unwrap();
        Self(dir)
    }
}

impl Drop for DeployedDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn the_deployed_stacks_tables_are_used_without_exported_names_and_named_on_stderr() {
    let (ddb, _) = dynamo::client();
    let prefix = unique_prefix();
    let (tables, _) = prefixed_names(&prefix);
    for def in table_defs() {
        template::create_table(&ddb, &tables[def.logical_id.as_str()], &def)
            .await
            .unwrap();
    }
    let outputs: serde_json::Map<_, _> = tables
        .iter()
        .map(|(id, name)| (format!("{id}Name"), name.clone().into()))
        .collect();
    let dir = DeployedDir::new(&prefix, outputs.into());
    let env = Env::from_pairs([("DYNAMODB_ENDPOINT", dynamo::endpoint())]);
    let ctx = Context::new(env, dir.0.join("web/sub"));

    let out = tollgate_cli::run(&ctx, ["clients", "create", "--name", "Acme", "--json"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stderr
            .starts_with("tollgate: stack acme-prod in eu-west-1 (from "),
        "{}",
        out.stderr
    );
    let client = single_object(&out.stdout);
    let id = client["client_id"].as_str().unwrap();
    // Written to the stack's clients table, found through its output alone.
    let items = dynamo::scan_all(&ddb, &tables["ClientsTable"]).await;
    assert!(
        items
            .iter()
            .any(|i| i["pk"].as_s().unwrap() == &format!("client#{id}")),
        "{items:?}"
    );
}

#[test]
fn a_running_local_stack_wins_and_an_exported_table_name_wins_over_the_outputs() {
    let prefix = unique_prefix();
    let dir = DeployedDir::new(
        &prefix,
        serde_json::json!({"ClientsTableName": "from-stack"}),
    );
    let Target::Deployed(deployed) = connect::resolve(&Env::default(), &dir.0, None).unwrap()
    else {
        panic!("the record was not found");
    };
    assert_eq!(
        deployed.env(&Env::default()).get("CLIENTS_TABLE"),
        Some("from-stack")
    );
    let exported = Env::from_pairs([("CLIENTS_TABLE", "mine")]);
    assert_eq!(deployed.env(&exported).get("CLIENTS_TABLE"), Some("mine"));

    std::fs::write(
        dir.0.join(connect::STACK_FILE),
        r#"{"dynamodb_endpoint": "http://127.0.0.1:8000"}"#,
    )
    .unwrap();
    assert!(matches!(
        connect::resolve(&Env::default(), &dir.0, None).unwrap(),
        Target::Local { .. }
    ));
    // Named explicitly, a deployment record is read as one.
    let named = dir.0.join(connect::DEPLOYED_FILE);
    assert!(matches!(
        connect::resolve(&Env::default(), &dir.0, Some(&named)).unwrap(),
        Target::Deployed(d) if d.stack_name == "acme-prod"
    ));
}
