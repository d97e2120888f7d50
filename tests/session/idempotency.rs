//! An optional `Idempotency-Key` on `POST /session`: a retry after a lost response gets the same
//! secret, without an upstream call and without quota.

use std::sync::Arc;
use std::time::Duration;

use tollgate_tests::json_body;
use tollgate_tests::openai::Answer;
use tollgate_tests::session::SessionHarness;

#[tokio::test]
async fn same_key_twice_one_upstream_call_same_secret_one_quota_unit() {
    let h = SessionHarness::new(&[]).await;
    let req = || {
        SessionHarness::post("192.0.2.20", Some(r#"{"voice":"cedar"}"#))
            .header("idempotency-key", "reconnect-1")
    };
    let first = h.send(req().request()).await;
    assert_eq!(first.status(), 200);
    let second = h.send(req().request()).await;
    assert_eq!(second.status(), 200);
    assert_eq!(second.headers()["idempotent-replayed"], "true");
    assert_eq!(second.headers()["cache-control"], "no-store");
    assert_eq!(second.body().as_ref(), first.body().as_ref());
    assert_eq!(h.openai.calls().await, 1);
    assert_eq!(h.counter_sum("#ip#").await, 1);
    assert_eq!(h.counter_sum("#global#").await, 1);

    // Another address with the same key is another client.
    let other = h
        .send(
            SessionHarness::post("192.0.2.21", Some(r#"{"voice":"cedar"}"#))
                .header("idempotency-key", "reconnect-1")
                .request(),
        )
        .await;
    assert!(other.headers().get("idempotent-replayed").is_none());
    assert_ne!(
        json_body(&other)["client_secret"],
        json_body(&first)["client_secret"]
    );

    // Same key, another voice: 422.
    let reused = h
        .send(
            SessionHarness::post("192.0.2.20", Some(r#"{"voice":"marin"}"#))
                .header("idempotency-key", "reconnect-1")
                .request(),
        )
        .await;
    assert_eq!(reused.status(), 422);
    assert_eq!(json_body(&reused)["code"], "idempotency_key_reused");
}

#[tokio::test]
async fn the_record_never_outlives_the_secret() {
    let h = SessionHarness::new(&[]).await;
    let req = || SessionHarness::post("192.0.2.22", None).header("idempotency-key", "k");
    assert_eq!(h.send(req().request()).await.status(), 200);
    // The stand-in's secrets expire 600 s after the tests' start.
    h.clock.advance(Duration::from_secs(598));
    assert_eq!(
        h.send(req().request()).await.headers()["idempotent-replayed"],
        "true"
    );
    h.clock.advance(Duration::from_secs(3));
    let fresh = h.send(req().request()).await;
    assert_eq!(fresh.status(), 200);
    assert!(
        fresh.headers().get("idempotent-replayed").is_none(),
        "an expired secret is not replayed"
    );
    assert_eq!(h.openai.calls().await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_during_the_upstream_call_gets_409_and_a_failure_frees_the_key() {
    let h = Arc::new(SessionHarness::new(&[("UPSTREAM_TIMEOUT_SECONDS", "5")]).await);
    h.openai.then([Answer::Slow(Duration::from_millis(1_500))]);
    let req = || SessionHarness::post("192.0.2.23", None).header("idempotency-key", "slow");
    let first = {
        let h = h.clone();
        let r = req().request();
        tokio::spawn(async move { h.send(r).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let duplicate = h.send(req().request()).await;
    assert_eq!(duplicate.status(), 409);
    assert_eq!(json_body(&duplicate)["code"], "request_in_progress");
    assert!(
        duplicate.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
    assert_eq!(first.await.unwrap().status(), 200);
    assert_eq!(h.openai.calls().await, 1);

    // A failed call releases its key: the retry runs anew.
    h.openai.then([Answer::Status(503)]);
    let failed = h
        .send(
            SessionHarness::post("192.0.2.23", None)
                .header("idempotency-key", "fails")
                .request(),
        )
        .await;
    assert_eq!(failed.status(), 503);
    h.clock.advance(Duration::from_secs(6));
    let retried = h
        .send(
            SessionHarness::post("192.0.2.23", None)
                .header("idempotency-key", "fails")
                .request(),
        )
        .await;
    assert_eq!(retried.status(), 200);
    assert!(retried.headers().get("idempotent-replayed").is_none());
}
