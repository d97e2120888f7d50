//! `tables create`: the template's tables, as the template defines them.

use aws_sdk_dynamodb::types::TimeToLiveStatus;
use tollgate::config::Env;
use tollgate_cli::Context;

use crate::harness::{prefixed_names, table_defs, template_path, unique_prefix, StackDir};

#[tokio::test]
async fn creates_every_table_as_the_template_defines_it_and_twice_is_fine() {
    let (ddb, _) = tollgate_tests::dynamo::client();
    let prefix = unique_prefix();
    let (names, env) = prefixed_names(&prefix);
    let dir = StackDir::new(&prefix);
    let ctx = Context::new(Env::from_pairs(env), &dir.0);
    let template = template_path();
    let args = [
        "tables",
        "create",
        "--template",
        template.to_str().unwrap(),
        "--json",
    ];

    let out = tollgate_cli::run(&ctx, args).await;
    assert_eq!(out.code, 0, "{out:?}");
    let first = crate::harness::single_object(&out.stdout);
    let defs = table_defs();
    assert_eq!(defs.len(), 7);
    let mut created: Vec<_> = first["created"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let mut expected: Vec<_> = names.values().cloned().collect();
    created.sort();
    expected.sort();
    assert_eq!(created, expected);
    assert_eq!(first["existing"], serde_json::json!([]));

    for def in &defs {
        let name = &names[def.logical_id.as_str()];
        let described = ddb.describe_table().table_name(name).send().await.unwrap();
        let table = described.table().unwrap();
        let mut keys: Vec<_> = table
            .key_schema()
            .iter()
            .map(|k| (k.attribute_name(), k.key_type().as_str()))
            .collect();
        let mut want: Vec<_> = def
            .key_schema
            .iter()
            .map(|k| (k.attribute_name.as_str(), k.key_type.as_str()))
            .collect();
        keys.sort();
        want.sort();
        assert_eq!(keys, want, "{name}");
        let mut attributes: Vec<_> = table
            .attribute_definitions()
            .iter()
            .map(|a| (a.attribute_name(), a.attribute_type().as_str()))
            .collect();
        let mut want: Vec<_> = def
            .attribute_definitions
            .iter()
            .map(|a| (a.attribute_name.as_str(), a.attribute_type.as_str()))
            .collect();
        attributes.sort();
        want.sort();
        assert_eq!(attributes, want, "{name}");
        assert_eq!(
            table
                .billing_mode_summary()
                .and_then(|b| b.billing_mode())
                .map(|b| b.as_str()),
            Some(def.billing_mode.as_str()),
            "{name}"
        );

        let ttl = ddb
            .describe_time_to_live()
            .table_name(name)
            .send()
            .await
            .unwrap();
        let ttl = ttl.time_to_live_description().unwrap();
        match &def.ttl_attribute {
            Some(attribute) => {
                assert_eq!(
                    ttl.time_to_live_status(),
                    Some(&TimeToLiveStatus::Enabled),
                    "{name}"
                );
                assert_eq!(ttl.attribute_name(), Some(attribute.as_str()), "{name}");
            }
            None => assert_eq!(
                ttl.time_to_live_status(),
                Some(&TimeToLiveStatus::Disabled),
                "{name}"
            ),
        }
    }
    // The template enables TTL on the counters and both idempotency tables.
    let with_ttl: Vec<_> = defs
        .iter()
        .filter(|d| d.ttl_attribute.is_some())
        .map(|d| d.logical_id.as_str())
        .collect();
    assert_eq!(
        with_ttl,
        [
            "RateLimitTable",
            "TransferIdempotencyTable",
            "SessionIdempotencyTable"
        ]
    );

    // Again: everything exists, nothing fails.
    let out = tollgate_cli::run(&ctx, args).await;
    assert_eq!(out.code, 0, "{out:?}");
    let second = crate::harness::single_object(&out.stdout);
    assert_eq!(second["created"], serde_json::json!([]));
    assert_eq!(second["existing"].as_array().unwrap().len(), 7);

    // The human form names each table once.
    let out = tollgate_cli::run(&ctx, &args[..4]).await;
    assert_eq!(out.code, 0, "{out:?}");
    for name in names.values() {
        assert_eq!(
            out.stdout.matches(&format!(" {name} ")).count(),
            1,
            "{}",
            out.stdout
        );
    }
}

#[tokio::test]
async fn an_existing_table_with_another_key_schema_is_reported() {
    let (ddb, _) = tollgate_tests::dynamo::client();
    let prefix = unique_prefix();
    let (names, env) = prefixed_names(&prefix);
    // A clients table keyed differently from the template.
    ddb.create_table()
        .table_name(&names["ClientsTable"])
        .billing_mode(aws_sdk_dynamodb::types::BillingMode::PayPerRequest)
        .attribute_definitions(
            aws_sdk_dynamodb::types::AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(aws_sdk_dynamodb::types::ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            aws_sdk_dynamodb::types::KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(aws_sdk_dynamodb::types::KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let dir = StackDir::new(&prefix);
    let ctx = Context::new(Env::from_pairs(env), &dir.0);
    let template = template_path();
    let out = tollgate_cli::run(
        &ctx,
        ["tables", "create", "--template", template.to_str().unwrap()],
    )
    .await;
    assert_eq!(out.code, 1, "{out:?}");
    let line = crate::harness::one_error_line(&out.stderr);
    assert!(
        line.contains(&names["ClientsTable"]) && line.contains("key schema"),
        "{line}"
    );
}

#[tokio::test]
async fn refuses_a_target_that_is_not_local() {
    // No stack file and no DYNAMODB_ENDPOINT: the functions' AWS environment.
    let dir = std::env::temp_dir().join(format!("tollgate-{}", unique_prefix()));
    std::fs::create_dir_all(&dir).unwrap();
    if tollgate_cli::connect::find_stack_file(&dir).is_some() {
        return; // a stack file above the temp directory; nothing to show here
    }
    let ctx = Context::new(Env::default(), &dir);
    let template = template_path();
    let out = tollgate_cli::run(
        &ctx,
        ["tables", "create", "--template", template.to_str().unwrap()],
    )
    .await;
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.code, 1, "{out:?}");
    let line = crate::harness::one_error_line(&out.stderr);
    assert!(line.contains("DynamoDB Local"), "{line}");
}
