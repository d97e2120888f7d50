//! Bad input: 400 (or 413) with a precise detail, and nothing written.

use tollgate_tests::events::HttpEvent;
use tollgate_tests::json_body;
use tollgate_tests::transfer::TransferHarness;

#[tokio::test]
async fn every_bad_input_is_refused_and_writes_nothing() {
    let h = TransferHarness::with_env(&[("MAX_TRANSFER_AMOUNT", "100000")]).await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 1_000, "JPY").await;
    let b = h.account(&alice, 0, "JPY").await;
    let good = TransferHarness::body(&a, &b, 10);

    let bodies = [
        ("not json".to_string(), "JSON object"),
        ("[]".into(), "JSON object"),
        (
            format!(r#"{{"from":"{a}","to":"{b}","amount":1,"amount":2}}"#),
            "duplicate",
        ),
        (
            format!(r#"{{"from":"{a}","to":"{b}","amount":1,"currency":"JPY"}}"#),
            "Unknown field",
        ),
        (
            format!(r#"{{"from":"{a}","to":"{b}","amount":0}}"#),
            "greater than 0",
        ),
        (
            format!(r#"{{"from":"{a}","to":"{b}","amount":-1}}"#),
            "greater than 0",
        ),
        (
            format!(r#"{{"from":"{a}","to":"{b}","amount":1.5}}"#),
            "fraction",
        ),
        (
            format!(r#"{{"from":"{a}","to":"{b}","amount":"10"}}"#),
            "not a string",
        ),
        (
            format!(r#"{{"from":"{a}","to":"{b}","amount":100001}}"#),
            "at most 100000",
        ),
        (
            format!(r#"{{"from":"{a}","to":"{a}","amount":1}}"#),
            "different",
        ),
        (
            format!(
                r#"{{"from":"{a}","to":"{b}","amount":1,"memo":"{}"}}"#,
                "m".repeat(141)
            ),
            "140",
        ),
    ];
    for (i, (body, detail)) in bodies.iter().enumerate() {
        let resp = h.send(h.post(&alice, &format!("bad-{i}"), body)).await;
        assert_eq!(resp.status(), 400, "{body}");
        let problem = json_body(&resp);
        assert_eq!(problem["code"], "invalid_request");
        assert!(
            problem["detail"].as_str().unwrap().contains(detail),
            "{body}: {problem}"
        );
    }

    let keys = ["", "\"\"", &"k".repeat(256), "with space", "ключ"];
    for key in keys {
        let mut req = h.post(&alice, "placeholder", &good);
        req.headers_mut().insert(
            "idempotency-key",
            http::HeaderValue::from_bytes(key.as_bytes()).unwrap(),
        );
        let resp = h.send(req).await;
        assert_eq!(resp.status(), 400, "key {key:?}");
        assert!(json_body(&resp)["detail"]
            .as_str()
            .unwrap()
            .contains("Idempotency-Key"));
    }
    let mut req = h.post(&alice, "x", &good);
    req.headers_mut().remove("idempotency-key");
    let resp = h.send(req).await;
    assert_eq!(resp.status(), 400);
    assert_eq!(
        json_body(&resp)["detail"],
        "The Idempotency-Key header is required."
    );

    let huge = format!(
        r#"{{"from":"{a}","to":"{b}","amount":1,"memo":"{}"}}"#,
        " ".repeat(17 * 1024)
    );
    let resp = h.send(h.post(&alice, "too-big", &huge)).await;
    assert_eq!(resp.status(), 413);
    assert_eq!(json_body(&resp)["code"], "payload_too_large");

    assert_eq!(h.count(&h.tables.idempotency).await, 0, "no key stored");
    assert_eq!(h.count(&h.tables.transfers).await, 0);
    assert_eq!((h.balance(&a).await, h.balance(&b).await), (1_000, 0));
}

/// RFC 8785 numbers are IEEE doubles: above 2^53 two amounts can canonicalise to the same bytes,
/// and a changed amount would replay the first 201. So no configuration may allow them, and
/// every allowed amount has its own fingerprint.
#[tokio::test]
async fn amounts_are_fingerprinted_exactly_up_to_the_largest_allowed() {
    const EXACT: u64 = (1 << 53) - 1;
    for too_big in [1u64 << 53, (1 << 53) + 1, i64::MAX as u64] {
        let env = tollgate::config::Env::from_pairs([(
            "MAX_TRANSFER_AMOUNT".to_string(),
            too_big.to_string(),
        )]);
        let err = transfer::config::TransferSettings::from_env(&env).unwrap_err();
        assert_eq!(err.var, "MAX_TRANSFER_AMOUNT", "{too_big}");
    }

    let h = TransferHarness::with_env(&[("MAX_TRANSFER_AMOUNT", &EXACT.to_string())]).await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, EXACT, "JPY").await;
    let b = h.account(&alice, 0, "JPY").await;
    let first = h
        .send(h.post(&alice, "k-big", &TransferHarness::body(&a, &b, EXACT)))
        .await;
    assert_eq!(first.status(), 201);
    let changed = h
        .send(h.post(&alice, "k-big", &TransferHarness::body(&a, &b, EXACT - 1)))
        .await;
    assert_eq!(changed.status(), 422);
    assert_eq!(json_body(&changed)["code"], "idempotency_key_reused");
    let over = h
        .send(h.post(&alice, "k-over", &TransferHarness::body(&b, &a, EXACT + 1)))
        .await;
    assert_eq!(over.status(), 400);
}

/// Two `Idempotency-Key` fields, or one holding a list, name no single key: 400, nothing stored
/// and no money moved (today the first field would silently win).
#[tokio::test]
async fn two_keys_or_a_list_of_keys_are_400_and_nothing_is_written() {
    let h = TransferHarness::new().await;
    let alice = h.client("alice").await;
    let a = h.account(&alice, 1_000, "JPY").await;
    let b = h.account(&alice, 0, "JPY").await;
    let post = || {
        HttpEvent::post("/transfers")
            .header("authorization", &format!("Bearer {}", alice.token))
            .header("content-type", "application/json")
            .body(TransferHarness::body(&a, &b, 10))
    };
    for req in [
        post()
            .header("idempotency-key", "first")
            .append_header("idempotency-key", "second"),
        post().header("idempotency-key", "first,second"),
        post().header("idempotency-key", "\"first\", \"second\""),
    ] {
        let resp = h.send(req.request()).await;
        assert_eq!(resp.status(), 400, "{:?}", req.to_json()["headers"]);
        let problem = json_body(&resp);
        assert_eq!(problem["code"], "invalid_request");
        assert!(
            problem["detail"].as_str().unwrap().contains("exactly one"),
            "{problem}"
        );
    }
    assert_eq!(h.count(&h.tables.idempotency).await, 0, "no key stored");
    assert_eq!(h.count(&h.tables.transfers).await, 0);
    assert_eq!((h.balance(&a).await, h.balance(&b).await), (1_000, 0));

    // A comma inside a quoted key is part of the one key; transfer keys may be short.
    let quoted = post().header("idempotency-key", "\"first,second\"");
    assert_eq!(h.send(quoted.request()).await.status(), 201);
}
