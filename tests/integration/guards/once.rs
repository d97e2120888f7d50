//! `IdempotencyStore::once`: the two-phase mode as one call for an effect that is not an HTTP
//! request (a queue's record), against DynamoDB Local.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tollgate::idempotency::{fingerprint, IdempotencyKey, IdempotencyStore, KeyError, Once, Scope};
use tollgate_tests::dynamo::{self, Tables};
use tollgate_tests::manual_clock;

#[tokio::test]
async fn an_effect_runs_once_per_key_and_a_failure_frees_the_key() {
    let (ddb, _) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let (_clock, shared) = manual_clock();
    let store = IdempotencyStore::new(ddb, &tables.idempotency, shared, Duration::from_secs(600));
    let runs = AtomicUsize::new(0);
    let scope = Scope::new("queue", "ship", &IdempotencyKey::new("msg-0001").unwrap());
    let body = fingerprint(&serde_json::json!({"order": 1}));
    let lease = Duration::from_secs(30);

    // A failing effect: reported, and the key is free for the redelivery.
    let failed = store
        .once(&scope, &body, lease, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            Err::<Vec<u8>, _>("warehouse down")
        })
        .await
        .unwrap();
    assert_eq!(failed, Once::Failed("warehouse down"));
    let ran = store
        .once(&scope, &body, lease, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, &str>(b"shipped".to_vec())
        })
        .await
        .unwrap();
    assert_eq!(
        ran,
        Once::Ran {
            output: b"shipped".to_vec(),
            stored: true
        }
    );
    // The duplicate gets the output, and nothing runs.
    let again = store
        .once(&scope, &body, lease, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, &str>(b"shipped twice".to_vec())
        })
        .await
        .unwrap();
    assert_eq!(again, Once::Replayed(b"shipped".to_vec()));
    let other = fingerprint(&serde_json::json!({"order": 2}));
    let reused = store
        .once(&scope, &other, lease, || async {
            Ok::<_, &str>(Vec::new())
        })
        .await
        .unwrap();
    assert_eq!(reused, Once::KeyReused);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "the failure and the one success"
    );

    assert_eq!(IdempotencyKey::new(""), Err(KeyError::Empty));
    assert_eq!(IdempotencyKey::new("a b"), Err(KeyError::NotVisibleAscii));
    assert!(IdempotencyKey::new(&"k".repeat(256)).is_err());
}
