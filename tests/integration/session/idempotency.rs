//! An optional `Idempotency-Key` on `POST /session`: a retry after a lost response gets the same
//! secret, without an upstream call and without quota.

use std::sync::Arc;
use std::time::Duration;

use tollgate::idempotency::{Claim, IdempotencyKey, IdempotencyStore, Scope, StoredResponse};
use tollgate_tests::dynamo;
use tollgate_tests::fault_proxy::{Fault, FaultProxy};
use tollgate_tests::json_body;
use tollgate_tests::openai::Answer;
use tollgate_tests::session::SessionHarness;

/// A key of the kind the contract asks for (a UUID v4).
const KEY: &str = "3f2b8c1e-7d4a-4e9b-a1c6-5e8f0d2b7a91";

#[tokio::test]
async fn same_key_twice_one_upstream_call_same_secret_one_quota_unit() {
    let h = SessionHarness::new(&[]).await;
    let req = || {
        SessionHarness::post("192.0.2.20", Some(r#"{"voice":"cedar"}"#))
            .header("idempotency-key", "reconnect-0001-4c4e-9f0e")
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
                .header("idempotency-key", "reconnect-0001-4c4e-9f0e")
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
                .header("idempotency-key", "reconnect-0001-4c4e-9f0e")
                .request(),
        )
        .await;
    assert_eq!(reused.status(), 422);
    assert_eq!(json_body(&reused)["code"], "idempotency_key_reused");
}

#[tokio::test]
async fn the_record_never_outlives_the_secret() {
    let h = SessionHarness::new(&[]).await;
    let req = || {
        SessionHarness::post("192.0.2.22", None).header("idempotency-key", "7f3c1a52-record-expiry")
    };
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
    let req = || {
        SessionHarness::post("192.0.2.23", None).header("idempotency-key", "slow-0001-4b8a-9f0e")
    };
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
                .header("idempotency-key", "fails-0001-4b8a-9f0e")
                .request(),
        )
        .await;
    assert_eq!(failed.status(), 503);
    h.clock.advance(Duration::from_secs(6));
    let retried = h
        .send(
            SessionHarness::post("192.0.2.23", None)
                .header("idempotency-key", "fails-0001-4b8a-9f0e")
                .request(),
        )
        .await;
    assert_eq!(retried.status(), 200);
    assert!(retried.headers().get("idempotent-replayed").is_none());
}

/// The claim's `PutItem` commits but its reply is lost; it is sent again and finds the
/// request's own record. That is our claim, not a duplicate: 200 and one upstream call.
#[tokio::test]
async fn a_lost_claim_reply_is_our_own_claim_not_a_409() {
    let proxy = FaultProxy::start(&dynamo::endpoint()).await;
    let (ddb, counter) = dynamo::client_at(&proxy.endpoint());
    let h = SessionHarness::build_with(ddb, counter, &[], None).await;
    proxy.arm("PutItem", Fault::DropResponseAfterCommit);
    let req = || SessionHarness::post("192.0.2.24", None).header("idempotency-key", KEY);
    let resp = h.send(req().request()).await;
    assert_eq!(resp.status(), 200, "{}", tollgate_tests::text_body(&resp));
    assert_eq!(proxy.fired(), 1);
    assert!(proxy.seen("PutItem") >= 2, "the claim was sent again");
    assert_eq!(h.openai.calls().await, 1);

    // The record was completed under the key: the client's own retry is a replay.
    let again = h.send(req().request()).await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.body().as_ref(), resp.body().as_ref());
    assert_eq!(h.openai.calls().await, 1);
}

/// The claim commits, its reply is lost, and its resends meet 500s: the outcome is unknown
/// to the function, which answers 503. The claim it may have made is taken back by its owner
/// token, so the client's retry runs at once instead of meeting a 409 for the lease's length.
#[tokio::test]
async fn a_claim_whose_outcome_is_unknown_is_taken_back() {
    let proxy = FaultProxy::start(&dynamo::endpoint()).await;
    let (ddb, counter) = dynamo::client_at(&proxy.endpoint());
    let h = SessionHarness::build_with(ddb, counter, &[], None).await;
    proxy.arm("PutItem", Fault::DropResponseAfterCommit);
    proxy.arm("PutItem", Fault::ServerError);
    proxy.arm("PutItem", Fault::ServerError);
    let req = || SessionHarness::post("192.0.2.26", None).header("idempotency-key", KEY);
    let failed = h.send(req().request()).await;
    assert_eq!(
        failed.status(),
        503,
        "{}",
        tollgate_tests::text_body(&failed)
    );
    assert_eq!(proxy.fired(), 3);
    assert_eq!(h.openai.calls().await, 0);
    assert_eq!(h.records().await, 0, "the committed claim was released");
    assert_eq!(h.counter_sum("#").await, 0, "quota given back");

    let retry = h.send(req().request()).await;
    assert_eq!(retry.status(), 200, "{}", tollgate_tests::text_body(&retry));
    assert!(retry.headers().get("idempotent-replayed").is_none());
}

/// The claim commits and its answer is lost; its resends are throttled. The last answer
/// ("throttled") does not prove that nothing was written: an earlier send's outcome was unknown,
/// so the claim may be there, and it is taken back by its owner token before the 503. The
/// client's retry then runs at once instead of meeting a 409 for the lease's length.
#[tokio::test]
async fn a_committed_claim_whose_resends_are_throttled_is_taken_back() {
    use tollgate_tests::fault_proxy::DynamoError;
    let proxy = FaultProxy::start(&dynamo::endpoint()).await;
    let (ddb, counter) = dynamo::client_at(&proxy.endpoint());
    let h = SessionHarness::build_with(ddb, counter, &[], None).await;
    proxy.arm("PutItem", Fault::DropResponseAfterCommit);
    for _ in 0..2 {
        proxy.arm("PutItem", Fault::Error(DynamoError::Throttling));
    }
    let req = || SessionHarness::post("192.0.2.28", None).header("idempotency-key", KEY);
    let failed = h.send(req().request()).await;
    assert_eq!(
        failed.status(),
        503,
        "{}",
        tollgate_tests::text_body(&failed)
    );
    assert_eq!(proxy.fired(), 3);
    assert_eq!(proxy.seen("DeleteItem"), 1, "the claim was taken back");
    assert_eq!(h.openai.calls().await, 0);
    assert_eq!(h.records().await, 0, "the committed claim was released");
    assert_eq!(h.counter_sum("#").await, 0, "quota given back");

    let retry = h.send(req().request()).await;
    assert_eq!(retry.status(), 200, "{}", tollgate_tests::text_body(&retry));
    assert!(retry.headers().get("idempotent-replayed").is_none());
}

/// A completion and a release whose first send committed and whose answer was lost: their
/// resends find the work done (our response under the key; no item) and say so, not
/// `NotOwner`, and a completion whose answer never came back is still remembered.
#[tokio::test]
async fn a_completion_or_release_whose_answer_was_lost_is_done() {
    let proxy = FaultProxy::start(&dynamo::endpoint()).await;
    let (direct, _) = dynamo::client();
    let tables = dynamo::Tables::create(&direct).await;
    let (ddb, _) = dynamo::client_at(&proxy.endpoint());
    let (_, shared) = tollgate_tests::manual_clock();
    let store = IdempotencyStore::new(ddb, &tables.idempotency, shared, Duration::from_secs(600))
        .with_replay_cache(10);
    let ok = StoredResponse {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: b"{\"ok\":true}".to_vec(),
    };

    let key = IdempotencyKey::parse(Some(KEY.as_bytes())).unwrap();
    let scope = Scope::new("192.0.2.29", "POST /session", &key);
    let Claim::Acquired(lease) = store
        .claim(&scope, "fp", Duration::from_secs(30))
        .await
        .unwrap()
    else {
        panic!("a free key is acquired");
    };
    proxy.arm("UpdateItem", Fault::DropResponseAfterCommit);
    store
        .complete(&lease, &ok, None)
        .await
        .expect("our own completion, found by its resend");
    assert_eq!(proxy.fired(), 1);
    assert!(
        store.cached(&scope, "fp").is_some(),
        "remembered as completed"
    );

    let other = IdempotencyKey::parse(Some(b"0c9d8e7f-release-lost-answer")).unwrap();
    let scope = Scope::new("192.0.2.29", "POST /session", &other);
    let Claim::Acquired(lease) = store
        .claim(&scope, "fp", Duration::from_secs(30))
        .await
        .unwrap()
    else {
        panic!("a free key is acquired");
    };
    proxy.arm("DeleteItem", Fault::DropResponseAfterCommit);
    store
        .release(&lease)
        .await
        .expect("our own release, found by its resend");
    assert_eq!(proxy.fired(), 2);
    assert_eq!(store.read(&scope).await.unwrap(), None, "the key is free");
}

/// A throttled claim committed nothing: 503, quota given back, nothing to clean up, and the key
/// free for the retry.
#[tokio::test]
async fn a_throttled_claim_is_503_with_the_quota_back_and_the_key_free() {
    use tollgate_tests::fault_proxy::DynamoError;
    let proxy = FaultProxy::start(&dynamo::endpoint()).await;
    let (ddb, counter) = dynamo::client_at(&proxy.endpoint());
    let h = SessionHarness::build_with(ddb, counter, &[], None).await;
    proxy.arm_always(
        "PutItem",
        Fault::Error(DynamoError::ProvisionedThroughputExceeded),
    );
    let req = || SessionHarness::post("192.0.2.27", None).header("idempotency-key", KEY);
    let failed = h.send(req().request()).await;
    assert_eq!(failed.status(), 503);
    assert!(failed.headers().contains_key("retry-after"));
    assert_eq!(proxy.seen("DeleteItem"), 0, "a refusal needs no clean-up");
    assert_eq!(h.openai.calls().await, 0);
    assert_eq!(h.counter_sum("#").await, 0, "quota given back");
    proxy.disarm("PutItem");
    assert_eq!(h.send(req().request()).await.status(), 200);
}

/// The same, at the store: the resent claim acquires, and its lease completes the record.
#[tokio::test]
async fn the_store_recognises_its_own_claim_after_a_lost_reply() {
    let proxy = FaultProxy::start(&dynamo::endpoint()).await;
    let (direct, _) = dynamo::client();
    let tables = dynamo::Tables::create(&direct).await;
    let (ddb, _) = dynamo::client_at(&proxy.endpoint());
    let (clock, shared) = tollgate_tests::manual_clock();
    let store = IdempotencyStore::new(ddb, &tables.idempotency, shared, Duration::from_secs(600));
    let key = IdempotencyKey::parse(Some(KEY.as_bytes())).unwrap();
    let scope = Scope::new("192.0.2.25", "POST /session", &key);
    proxy.arm("PutItem", Fault::DropResponseAfterCommit);
    let Claim::Acquired(lease) = store
        .claim(&scope, "fp", Duration::from_secs(30))
        .await
        .unwrap()
    else {
        panic!("the resent claim finds our own record: acquired");
    };
    assert_eq!(proxy.fired(), 1);
    let ok = StoredResponse {
        status: 200,
        headers: vec![],
        body: b"{}".to_vec(),
    };
    store.complete(&lease, &ok, None).await.unwrap();
    // Another request's claim still sees the record as taken (now completed).
    clock.advance(Duration::from_secs(1));
    assert!(matches!(
        store
            .claim(&scope, "fp", Duration::from_secs(30))
            .await
            .unwrap(),
        Claim::Existing(_)
    ));
}

/// Session keys are scoped to the client address: behind one NAT, two people who send the
/// same guessable key would get each other's secret. At least 16 characters.
#[tokio::test]
async fn a_session_key_shorter_than_16_characters_is_400() {
    let h = SessionHarness::new(&[]).await;
    for key in ["k", "reconnect-1", "\"fifteen-chars-x\"", "fifteen-chars-x"] {
        let resp = h
            .send(
                SessionHarness::post("192.0.2.26", None)
                    .header("idempotency-key", key)
                    .request(),
            )
            .await;
        assert_eq!(resp.status(), 400, "{key}");
        let problem = json_body(&resp);
        assert_eq!(problem["code"], "invalid_request");
        assert!(
            problem["detail"].as_str().unwrap().contains("16"),
            "{problem}"
        );
    }
    assert_eq!(h.openai.calls().await, 0);
    assert_eq!(h.records().await, 0, "nothing stored");

    let sixteen = SessionHarness::post("192.0.2.26", None)
        .header("idempotency-key", "sixteen-chars-xx")
        .request();
    assert_eq!(h.send(sixteen).await.status(), 200);
}

/// Two `Idempotency-Key` fields, or one holding a list, name no single key: 400.
#[tokio::test]
async fn two_keys_or_a_list_of_keys_are_400_and_nothing_happens() {
    let h = SessionHarness::new(&[]).await;
    let other = "9a7b6c5d-4e3f-4a1b-8c2d-1e0f9a8b7c6d";
    let post = || SessionHarness::post("192.0.2.27", None);
    for req in [
        post()
            .header("idempotency-key", KEY)
            .append_header("idempotency-key", other),
        post().header("idempotency-key", &format!("{KEY},{other}")),
        post().header("idempotency-key", &format!("{KEY}, {other}")),
        post().header("idempotency-key", &format!("\"{KEY}\", \"{other}\"")),
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
    assert_eq!(h.openai.calls().await, 0);
    assert_eq!(h.records().await, 0, "nothing stored");

    // A comma inside a quoted key is part of the one key.
    let quoted = post()
        .header("idempotency-key", &format!("\"{KEY},{other}\""))
        .request();
    assert_eq!(h.send(quoted).await.status(), 200);
    assert_eq!(h.records().await, 1);
}

/// A duplicate this process completed is answered from the replay cache: no claim, no upstream
/// call, the same secret byte for byte; with the cache off the claim's `PutItem` answers it.
#[tokio::test]
async fn a_duplicate_seen_by_this_process_costs_no_idempotency_request() {
    for (cache, puts) in [("10000", 0), ("0", 1)] {
        let h = SessionHarness::new(&[("IDEMPOTENCY_CACHE_SIZE", cache)]).await;
        let req = || {
            SessionHarness::post("192.0.2.30", Some(r#"{"voice":"cedar"}"#))
                .header("idempotency-key", "cached-0001-4c4e-9f0e")
        };
        let first = h.send(req().request()).await;
        assert_eq!(first.status(), 200);
        h.counter.reset();
        let again = h.send(req().request()).await;
        assert_eq!(again.status(), 200, "cache {cache}");
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(again.body().as_ref(), first.body().as_ref());
        assert_eq!(
            h.counter.get("PutItem"),
            puts,
            "cache {cache}: {:?}",
            h.counter.snapshot()
        );
        assert_eq!(h.openai.calls().await, 1);
    }
}
