//! The two-phase mode of the idempotency engine, for effects outside DynamoDB.

use std::time::Duration;

use tollgate::idempotency::{
    Claim, Existing, IdempotencyError, IdempotencyKey, IdempotencyStore, Scope, StoredResponse,
};
use tollgate_tests::dynamo::{self, Tables};
use tollgate_tests::manual_clock;

async fn store() -> (IdempotencyStore, tollgate::clock::ManualClock) {
    let (ddb, _) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let (clock, shared) = manual_clock();
    (
        IdempotencyStore::new(ddb, &tables.idempotency, shared, Duration::from_secs(3600)),
        clock,
    )
}

fn scope(key: &str) -> Scope {
    Scope::new(
        "203.0.113.1",
        "POST /session",
        &IdempotencyKey::parse(Some(key.as_bytes())).unwrap(),
    )
}

fn ok(body: &str) -> StoredResponse {
    StoredResponse {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.as_bytes().to_vec(),
    }
}

#[tokio::test]
async fn an_abandoned_claim_blocks_duplicates_until_its_lease_ends_then_one_reexecution() {
    let (store, clock) = store().await;
    let s = scope("k1");
    let Claim::Acquired(stale) = store
        .claim(&s, "fp", Duration::from_secs(30))
        .await
        .unwrap()
    else {
        panic!("first claim acquires");
    };
    // The owner crashes. Duplicates during the lease get 409 with the lease's remainder.
    clock.advance(Duration::from_millis(10_500));
    assert_eq!(
        store
            .claim(&s, "fp", Duration::from_secs(30))
            .await
            .unwrap(),
        Claim::Existing(Existing::InProgress { retry_after: 20 })
    );
    assert_eq!(
        store
            .claim(&s, "other-body", Duration::from_secs(30))
            .await
            .unwrap(),
        Claim::Existing(Existing::KeyReused)
    );
    clock.advance(Duration::from_millis(19_500));
    let Claim::Acquired(fresh) = store
        .claim(&s, "fp", Duration::from_secs(30))
        .await
        .unwrap()
    else {
        panic!("the expired lease can be claimed again");
    };
    // Exactly one re-execution: a further duplicate waits for the new owner.
    assert!(matches!(
        store
            .claim(&s, "fp", Duration::from_secs(30))
            .await
            .unwrap(),
        Claim::Existing(Existing::InProgress { .. })
    ));
    // The stale owner can neither overwrite nor delete the new owner's record.
    assert!(matches!(
        store.complete(&stale, &ok("stale"), None).await,
        Err(IdempotencyError::NotOwner)
    ));
    assert!(matches!(
        store.release(&stale).await,
        Err(IdempotencyError::NotOwner)
    ));

    store.complete(&fresh, &ok("fresh"), None).await.unwrap();
    assert_eq!(
        store
            .claim(&s, "fp", Duration::from_secs(30))
            .await
            .unwrap(),
        Claim::Existing(Existing::Replay(ok("fresh")))
    );
    assert!(
        matches!(store.release(&fresh).await, Err(IdempotencyError::NotOwner)),
        "completed records stay"
    );
}

#[tokio::test]
async fn release_frees_the_key_and_a_record_may_expire_early() {
    let (store, clock) = store().await;
    let s = scope("k2");
    let Claim::Acquired(lease) = store
        .claim(&s, "fp", Duration::from_secs(30))
        .await
        .unwrap()
    else {
        panic!()
    };
    store.release(&lease).await.unwrap();
    let Claim::Acquired(lease) = store
        .claim(&s, "fp", Duration::from_secs(30))
        .await
        .unwrap()
    else {
        panic!("released keys are free")
    };
    // Complete with an expiry shorter than the TTL (a secret that expires in 60 s).
    let expires_at = (tollgate_tests::T0_MS + 60_000) / 1000;
    store
        .complete(&lease, &ok("secret"), Some(expires_at))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(58));
    assert!(store.read(&s).await.unwrap().is_some());
    clock.advance(Duration::from_secs(2));
    assert!(
        store.read(&s).await.unwrap().is_none(),
        "expired records are absent"
    );
    assert!(matches!(
        store
            .claim(&s, "fp", Duration::from_secs(30))
            .await
            .unwrap(),
        Claim::Acquired(_)
    ));
}
