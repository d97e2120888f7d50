//! Secrets from SSM (stood in for over HTTP): one fetch for many callers, stale values on
//! failure, a cooldown with no calls, and nothing of SSM in any response.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use secrecy::ExposeSecret;
use tollgate::config::SecretSource;
use tollgate::gate::Gate;
use tollgate::secrets::{SecretError, SecretStore};
use tollgate_tests::dynamo::{self, Tables};
use tollgate_tests::events::HttpEvent;
use tollgate_tests::manual_clock;
use tollgate_tests::pipeline::{guarded, settings};
use tollgate_tests::ssm::{Reply, SsmStandIn};

const PARAM: &str = "/tollgate/prod/internal-token";

fn param() -> SecretSource {
    SecretSource::Ssm { name: PARAM.into() }
}

fn store(ssm: &SsmStandIn) -> (tollgate::clock::ManualClock, SecretStore) {
    let (clock, shared) = manual_clock();
    let store = SecretStore::new(shared, Duration::from_secs(300), Duration::from_secs(5))
        .with_ssm(ssm.client());
    (clock, store)
}

#[tokio::test]
async fn concurrent_callers_share_one_fetch_and_the_value_is_cached() {
    let ssm = SsmStandIn::start(Reply::Value("v1".into())).await;
    let (clock, store) = store(&ssm);
    let store = Arc::new(store);
    let values = join_all((0..16).map(|_| {
        let store = store.clone();
        async move {
            store
                .get(&param())
                .await
                .unwrap()
                .expose_secret()
                .to_string()
        }
    }))
    .await;
    assert!(values.iter().all(|v| v == "v1"));
    assert_eq!(ssm.calls().await, 1);

    clock.advance(Duration::from_secs(299));
    store.get(&param()).await.unwrap();
    assert_eq!(ssm.calls().await, 1, "cached for the TTL");
    clock.advance(Duration::from_secs(1));
    ssm.set(Reply::Value("v2".into()));
    assert_eq!(store.get(&param()).await.unwrap().expose_secret(), "v2");
    assert_eq!(ssm.calls().await, 2);
}

#[tokio::test]
async fn a_failed_refresh_keeps_serving_the_cached_value() {
    let ssm = SsmStandIn::start(Reply::Value("v1".into())).await;
    let (clock, store) = store(&ssm);
    store.get(&param()).await.unwrap();
    ssm.set(Reply::Error(500, "InternalServerError".into()));
    clock.advance(Duration::from_secs(301));
    assert_eq!(store.get(&param()).await.unwrap().expose_secret(), "v1");
    let after_failure = ssm.calls().await;
    // And the failing store is left alone during the cooldown.
    store.get(&param()).await.unwrap();
    assert_eq!(ssm.calls().await, after_failure);
}

#[tokio::test]
async fn with_no_value_callers_get_retry_after_and_ssm_is_not_called_during_the_cooldown() {
    for (status, code) in [(500, "InternalServerError"), (400, "ThrottlingException")] {
        let ssm = SsmStandIn::start(Reply::Error(status, code.into())).await;
        let (clock, store) = store(&ssm);
        assert_eq!(
            store.get(&param()).await.unwrap_err(),
            SecretError::Unavailable { retry_after: 5 },
            "{code} is temporary"
        );
        let calls = ssm.calls().await;
        assert!(calls >= 1);
        for _ in 0..20 {
            clock.advance(Duration::from_millis(200));
            match store.get(&param()).await.unwrap_err() {
                SecretError::Unavailable { retry_after } => assert!(retry_after >= 1),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(ssm.calls().await, calls, "no SSM call during the cooldown");
        clock.advance(Duration::from_secs(1));
        ssm.set(Reply::Value("recovered".into()));
        assert_eq!(
            store.get(&param()).await.unwrap().expose_secret(),
            "recovered"
        );
        assert_eq!(ssm.calls().await, calls + 1, "one probe after the cooldown");
    }
}

#[tokio::test]
async fn missing_parameters_and_denied_access_are_terminal_and_cooled_down() {
    for code in [
        "ParameterNotFound",
        "AccessDeniedException",
        "ValidationException",
    ] {
        let ssm = SsmStandIn::start(Reply::Error(400, code.into())).await;
        let (_, store) = store(&ssm);
        assert_eq!(
            store.get(&param()).await.unwrap_err(),
            SecretError::Misconfigured,
            "{code}"
        );
        assert_eq!(ssm.calls().await, 1, "{code}: not retried");
        assert_eq!(
            store.get(&param()).await.unwrap_err(),
            SecretError::Misconfigured
        );
        assert_eq!(ssm.calls().await, 1, "{code}: cooled down");
    }
}

#[tokio::test]
async fn refetch_bypasses_the_cache_for_a_rotated_secret() {
    let ssm = SsmStandIn::start(Reply::Value("old".into())).await;
    let (_, store) = store(&ssm);
    store.get(&param()).await.unwrap();
    ssm.set(Reply::Value("rotated".into()));
    assert_eq!(store.get(&param()).await.unwrap().expose_secret(), "old");
    assert_eq!(
        store.refetch(&param()).await.unwrap().expose_secret(),
        "rotated"
    );
    assert_eq!(ssm.calls().await, 2);
}

/// Responses during SSM failures carry nothing of SSM: no parameter name, no host, no message.
#[tokio::test]
async fn no_parameter_name_or_host_reaches_a_response() {
    let ssm = SsmStandIn::start(Reply::Error(500, "InternalServerError".into())).await;
    let (ddb, _) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let (clock, shared) = manual_clock();
    let uri = ssm.server.uri();
    let extra = [
        ("CLIENT_IP_SOURCE", "cloudfront"),
        ("ORIGIN_VERIFY_SECRET_PARAM", PARAM),
    ];
    let gate = Gate::new(settings(&tables, "ip=10/1h", &extra), ddb, shared).with_ssm(ssm.client());
    let req = HttpEvent::post("/session")
        .header("x-origin-verify", "whatever")
        .header("cloudfront-viewer-address", "203.0.113.1:443")
        .request();

    let temporary = guarded(&gate, &req, None).await;
    assert_eq!(temporary.status(), 503);
    assert!(
        temporary.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );

    ssm.set(Reply::Error(400, "ParameterNotFound".into()));
    clock.advance(Duration::from_secs(6));
    let terminal = guarded(&gate, &req, None).await;
    assert_eq!(terminal.status(), 500);

    let host = uri.trim_start_matches("http://");
    for resp in [&temporary, &terminal] {
        let mut all = tollgate_tests::text_body(resp);
        for (name, value) in resp.headers() {
            all.push_str(&format!("{name}: {value:?}\n"));
        }
        for leak in [
            PARAM,
            "tollgate/prod",
            host,
            "127.0.0.1",
            "ssm.internal.example",
            "InternalServerError",
            "ParameterNotFound",
        ] {
            assert!(!all.contains(leak), "{leak:?} leaked: {all}");
        }
    }
}
