//! Deployment checks for `template.yaml` (and the `samconfig.toml` next to it), all offline:
//! nothing here calls AWS or needs credentials.
//!
//! - cfn-lint and `sam validate` accept the template with no error and no warning;
//! - the functions' IAM policies are least privilege: ephemeral-key, which any browser can
//!   reach, cannot touch the money tables; no wildcard actions; DynamoDB access only to named
//!   tables, with exactly the actions the code uses;
//! - exactly one frontend (CloudFront or HTTP API) is created for a given `Frontend`;
//! - the browser page behind CloudFront: a private bucket read only by the distribution, each
//!   path routed to the page or its function, the security headers and the CSP (`page.rs`).
//!
//! cfn-lint and sam come from the venv `cargo xtask setup` creates (see `tools::find`).

mod page;
pub(crate) mod template;
pub(crate) mod tools;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::process::Command;

use serde_norway::Value;

use template::{get_att_arn, one_or_many, strings, Template};

const SESSION_FUNCTION: &str = "EphemeralKeyFunction";
const TRANSFER_FUNCTION: &str = "TransferFunction";

/// Tables holding clients, balances and the record of money moved.
const MONEY_TABLES: &[&str] = &[
    "ClientsTable",
    "AccountsTable",
    "TransfersTable",
    "TransferIdempotencyTable",
];

#[test]
fn cfn_lint_passes() {
    let mut cmd = Command::new(tools::find("cfn-lint"));
    cmd.current_dir(tools::repo_root()).arg("template.yaml");
    let out = tools::run(&mut cmd);
    tools::assert_success(&cmd, &out);
}

/// `sam validate --lint` runs cfn-lint through SAM CLI, with `samconfig.toml` loaded (so a
/// broken samconfig fails here too). It needs neither network nor credentials.
#[test]
fn sam_validate_lint_passes() {
    let mut cmd = tools::offline_sam(&tools::find("sam"), "sam_validate_lint_passes");
    cmd.args(["validate", "--lint", "--template", "template.yaml"]);
    let out = tools::run(&mut cmd);
    tools::assert_success(&cmd, &out);
}

/// Plain `sam validate` runs the SAM translator, the same code as CloudFormation's
/// `AWS::Serverless` transform, which catches what a schema check cannot. It needs a region;
/// it would call IAM only to resolve managed policies given by name, which the template does
/// not use (and `offline_sam` makes any such call fail). An empty config file, because
/// samconfig.toml's `lint = true` would turn this into the lint run above.
#[test]
fn sam_translates_the_template() {
    let config = Path::new(env!("CARGO_TARGET_TMPDIR")).join("samconfig-empty.toml");
    fs::write(&config, "version = 0.1\n").expect("write an empty samconfig");
    let mut cmd = tools::offline_sam(&tools::find("sam"), "sam_translates_the_template");
    cmd.args(["validate", "--template", "template.yaml", "--config-file"])
        .arg(&config);
    let out = tools::run(&mut cmd);
    tools::assert_success(&cmd, &out);
}

#[test]
fn session_function_cannot_touch_money_tables() {
    let template = Template::load();

    // All IAM comes from the functions' own `Policies` (SAM builds each role from them), so
    // those are the whole picture: no role of their own, no policy attached from elsewhere.
    for ty in [
        "AWS::IAM::Role",
        "AWS::IAM::Policy",
        "AWS::IAM::ManagedPolicy",
        "AWS::IAM::RolePolicy",
    ] {
        assert!(
            template.ids_of_type(ty).is_empty(),
            "template.yaml declares {ty} resources {:?}; grant function permissions through \
             the function's Policies so these checks see all of them",
            template.ids_of_type(ty)
        );
    }
    for function in [SESSION_FUNCTION, TRANSFER_FUNCTION] {
        let props = properties(&template, function);
        assert!(
            props.get("Role").is_none(),
            "{function} sets Role; use Policies so its permissions stay visible here"
        );
    }

    // Nothing in ephemeral-key's definition (policies, environment, events) nor in the
    // Globals it inherits names a money table.
    let session = template.resource(SESSION_FUNCTION);
    for (what, value) in [(SESSION_FUNCTION, session), ("Globals", template.globals())] {
        for s in strings(value) {
            for table in MONEY_TABLES {
                assert!(
                    !s.contains(table),
                    "{what} refers to money table {table} (in `{s}`)"
                );
            }
        }
    }
    let granted = dynamodb_grants(&template, SESSION_FUNCTION);
    for table in MONEY_TABLES {
        assert!(
            !granted.contains_key(*table),
            "{SESSION_FUNCTION} may use {table}: {:?}",
            granted[*table]
        );
    }

    // Neither function: a wildcard action, or DynamoDB on anything but a named table.
    for function in [SESSION_FUNCTION, TRANSFER_FUNCTION] {
        for statement in statements(&template, function) {
            assert_no_wildcards(&template, function, statement);
        }
    }
}

/// The exact DynamoDB actions per table, as the code uses them. A change here is a change of
/// privilege: update this list in the same commit, deliberately.
#[test]
fn function_policies_grant_exactly_the_documented_actions() {
    let template = Template::load();

    let expected_session = grants(&[
        ("RateLimitTable", &["dynamodb:UpdateItem"]),
        ("ControlTable", &["dynamodb:GetItem", "dynamodb:PutItem"]),
        (
            "SessionIdempotencyTable",
            &[
                "dynamodb:GetItem",
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
                "dynamodb:DeleteItem",
            ],
        ),
    ]);
    assert_eq!(
        dynamodb_grants(&template, SESSION_FUNCTION),
        expected_session,
        "{SESSION_FUNCTION}'s DynamoDB permissions"
    );

    let expected_transfer = grants(&[
        ("RateLimitTable", &["dynamodb:UpdateItem"]),
        // PutItem of its own published limits only: see the test below.
        ("ControlTable", &["dynamodb:GetItem", "dynamodb:PutItem"]),
        ("ClientsTable", &["dynamodb:GetItem"]),
        (
            "AccountsTable",
            &["dynamodb:GetItem", "dynamodb:UpdateItem"],
        ),
        ("TransfersTable", &["dynamodb:GetItem", "dynamodb:PutItem"]),
        (
            "TransferIdempotencyTable",
            &["dynamodb:GetItem", "dynamodb:PutItem"],
        ),
    ]);
    assert_eq!(
        dynamodb_grants(&template, TRANSFER_FUNCTION),
        expected_transfer,
        "{TRANSFER_FUNCTION}'s DynamoDB permissions"
    );

    // Secrets: transfer has no business with the OpenAI key.
    let transfer_policy = properties(&template, TRANSFER_FUNCTION)
        .get("Policies")
        .expect("TransferFunction has Policies");
    assert!(
        !strings(transfer_policy)
            .iter()
            .any(|s| s.contains("OpenAiApiKeyParam")),
        "{TRANSFER_FUNCTION} may read the OpenAI API key"
    );
    // Every non-DynamoDB action either function has, for review.
    for (function, expected) in [
        (SESSION_FUNCTION, ["kms:Decrypt", "ssm:GetParameter"]),
        (TRANSFER_FUNCTION, ["kms:Decrypt", "ssm:GetParameter"]),
    ] {
        let others: BTreeSet<&str> = statements(&template, function)
            .into_iter()
            .flat_map(|st| actions(function, st))
            .filter(|a| !a.starts_with("dynamodb:"))
            .collect();
        assert_eq!(
            others,
            expected.into_iter().collect(),
            "{function}'s non-DynamoDB actions"
        );
    }
}

/// Transfer writes to the control table only to publish the limits it counts under
/// (`tollgate::published_limits`), so its `PutItem` there is conditioned on that one key: it can
/// read its kill switch but not flip one (the session function's internal route does that).
#[test]
fn transfer_writes_only_its_own_published_limits_to_the_control_table() {
    let template = Template::load();
    let own_key = tollgate::published_limits::key(tollgate_functions::catalog::TRANSFER.name);
    let writes: Vec<&Value> = statements(&template, TRANSFER_FUNCTION)
        .into_iter()
        .filter(|st| {
            actions(TRANSFER_FUNCTION, st)
                .iter()
                .any(|a| *a != "dynamodb:GetItem" && a.starts_with("dynamodb:"))
                && one_or_many(
                    st.get("Resource")
                        .expect("a DynamoDB statement has Resource"),
                )
                .into_iter()
                .any(|r| get_att_arn(r) == Some("ControlTable"))
        })
        .collect();
    assert_eq!(writes.len(), 1, "one statement writes the control table");
    let statement = writes[0];
    assert_eq!(
        actions(TRANSFER_FUNCTION, statement),
        ["dynamodb:PutItem"],
        "{statement:?}"
    );
    let leading_keys = statement
        .get("Condition")
        .and_then(|c| c.get("ForAllValues:StringEquals"))
        .and_then(|c| c.get("dynamodb:LeadingKeys"))
        .unwrap_or_else(|| {
            panic!("the control-table write must be limited by dynamodb:LeadingKeys: {statement:?}")
        });
    let keys: Vec<&str> = one_or_many(leading_keys)
        .into_iter()
        .map(|k| k.as_str().expect("a key is a plain string"))
        .collect();
    assert_eq!(keys, [own_key.as_str()], "{statement:?}");
}

/// `Frontend` picks CloudFront or an HTTP API; the other must not exist, in particular no
/// public function URL behind an HTTP API. The page bucket belongs to the CloudFront frontend:
/// with an HTTP API nothing would serve it. SAM cannot put a condition on a function's
/// `FunctionUrlConfig` or `Events`, so the frontends are separate resources with conditions.
#[test]
fn exactly_one_frontend_is_created() {
    let template = Template::load();
    for function in [SESSION_FUNCTION, TRANSFER_FUNCTION] {
        let props = properties(&template, function);
        for key in ["FunctionUrlConfig", "Events"] {
            assert!(
                props.get(key).is_none(),
                "{function} has {key}, which SAM creates unconditionally"
            );
        }
    }
    let expected_condition = |ty: &str| {
        if ty.starts_with("AWS::CloudFront::")
            || ty.starts_with("AWS::S3::")
            || ty == "AWS::Lambda::Url"
        {
            Some("UseCloudFront")
        } else if ty.starts_with("AWS::ApiGatewayV2::") || ty.starts_with("AWS::Serverless::Http") {
            Some("UseHttpApi")
        } else {
            None
        }
    };
    let mut frontends = BTreeSet::new();
    for (id, resource) in template.resources() {
        let id = id.as_str().expect("logical ids are strings");
        let ty = resource.get("Type").and_then(Value::as_str).unwrap_or("");
        let condition = resource.get("Condition").and_then(Value::as_str);
        if let Some(expected) = expected_condition(ty) {
            assert_eq!(
                condition,
                Some(expected),
                "{id} ({ty}) must carry Condition {expected}"
            );
            frontends.insert(expected);
        }
        // Permissions that let a frontend invoke a function exist only with that frontend.
        if ty == "AWS::Lambda::Permission" {
            assert!(
                matches!(condition, Some("UseCloudFront" | "UseHttpApi")),
                "{id}: an invoke permission without a frontend condition"
            );
        }
    }
    assert_eq!(
        frontends,
        BTreeSet::from(["UseCloudFront", "UseHttpApi"]),
        "both frontends are defined"
    );
}

fn properties<'a>(template: &'a Template, function: &str) -> &'a Value {
    let resource = template.resource(function);
    assert_eq!(
        resource.get("Type").and_then(Value::as_str),
        Some("AWS::Serverless::Function"),
        "{function} is a SAM function"
    );
    resource
        .get("Properties")
        .unwrap_or_else(|| panic!("{function} has Properties"))
}

/// The statements of `function`'s one inline policy document. Policy names, managed policy
/// ARNs and SAM policy templates (e.g. DynamoDBCrudPolicy) are refused: they hide what is
/// granted.
fn statements<'a>(template: &'a Template, function: &str) -> Vec<&'a Value> {
    let policies = properties(template, function)
        .get("Policies")
        .and_then(Value::as_sequence)
        .unwrap_or_else(|| panic!("{function} has a Policies list"));
    assert_eq!(
        policies.len(),
        1,
        "{function} has one policy document, with every statement in it"
    );
    let document = &policies[0];
    assert!(
        document.get("Statement").is_some(),
        "{function}'s policy is an inline document (Version, Statement), not a policy name or a \
         SAM policy template: {document:?}"
    );
    one_or_many(document.get("Statement").expect("checked above"))
}

fn actions<'a>(function: &str, statement: &'a Value) -> Vec<&'a str> {
    assert!(
        statement.get("NotAction").is_none() && statement.get("NotResource").is_none(),
        "{function}: NotAction/NotResource grant everything else: {statement:?}"
    );
    let actions = statement
        .get("Action")
        .unwrap_or_else(|| panic!("{function}: statement without Action: {statement:?}"));
    one_or_many(actions)
        .into_iter()
        .map(|a| {
            a.as_str()
                .unwrap_or_else(|| panic!("{function}: actions are plain strings, got {a:?}"))
        })
        .collect()
}

fn assert_no_wildcards(template: &Template, function: &str, statement: &Value) {
    let actions = actions(function, statement);
    for action in &actions {
        assert!(
            !action.contains('*'),
            "{function}: wildcard action `{action}`"
        );
    }
    if !actions.iter().any(|a| a.starts_with("dynamodb:")) {
        return;
    }
    let tables = template.ids_of_type("AWS::DynamoDB::Table");
    let resources = statement
        .get("Resource")
        .unwrap_or_else(|| panic!("{function}: DynamoDB statement without Resource"));
    for resource in one_or_many(resources) {
        for s in strings(resource) {
            assert!(
                !s.contains('*'),
                "{function}: wildcard DynamoDB resource `{s}`"
            );
        }
        match get_att_arn(resource) {
            Some(id) if tables.contains(id) => {}
            _ => panic!(
                "{function}: DynamoDB access only to a table of this template, as \
                 !GetAtt <Table>.Arn; got {resource:?}"
            ),
        }
    }
}

/// Table logical id → DynamoDB actions `function` is allowed on it.
fn dynamodb_grants(template: &Template, function: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut granted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for statement in statements(template, function) {
        assert_eq!(
            statement.get("Effect").and_then(Value::as_str),
            Some("Allow"),
            "{function}: only Allow statements expected"
        );
        let dynamodb: Vec<&str> = actions(function, statement)
            .into_iter()
            .filter(|a| a.starts_with("dynamodb:"))
            .collect();
        if dynamodb.is_empty() {
            continue;
        }
        let resources = statement
            .get("Resource")
            .unwrap_or_else(|| panic!("{function}: DynamoDB statement without Resource"));
        for resource in one_or_many(resources) {
            let table = get_att_arn(resource).unwrap_or_else(|| {
                panic!("{function}: DynamoDB resource is not !GetAtt <Table>.Arn: {resource:?}")
            });
            granted
                .entry(table.to_string())
                .or_default()
                .extend(dynamodb.iter().map(|a| a.to_string()));
        }
    }
    granted
}

fn grants(list: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
    list.iter()
        .map(|(table, actions)| {
            (
                table.to_string(),
                actions.iter().map(|a| a.to_string()).collect(),
            )
        })
        .collect()
}
