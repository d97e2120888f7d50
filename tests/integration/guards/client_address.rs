//! Which address a request is counted by, and which headers are never believed.

use tollgate::gate::Gate;
use tollgate_tests::dynamo::{self, counters_matching, Tables};
use tollgate_tests::events::HttpEvent;
use tollgate_tests::pipeline::{guarded, settings};
use tollgate_tests::{json_body, manual_clock};

const ORIGIN_SECRET: &str = "origin-verify-7f3a";

async fn new_gate(
    limits: &str,
    extra: &[(&str, &str)],
) -> (Gate, Tables, aws_sdk_dynamodb::Client) {
    let (ddb, _) = dynamo::client();
    let tables = Tables::create(&ddb).await;
    let (_, clock) = manual_clock();
    let gate = Gate::new(settings(&tables, limits, extra), ddb.clone(), clock);
    (gate, tables, ddb)
}

#[tokio::test]
async fn two_ipv6_addresses_in_one_64_share_a_counter() {
    let (gate, tables, ddb) = new_gate("ip=3/1h", &[]).await;
    let hosts = [
        "2001:db8:aa:bb::1",
        "2001:db8:aa:bb:ffff::2",
        "2001:db8:aa:bb:1234:5678:9abc:def0",
    ];
    for host in hosts {
        let resp = guarded(&gate, &HttpEvent::post("/x").from_ip(host).request(), None).await;
        assert_eq!(resp.status(), 200);
    }
    let resp = guarded(
        &gate,
        &HttpEvent::post("/x")
            .from_ip("2001:db8:aa:bb::99")
            .request(),
        None,
    )
    .await;
    assert_eq!(
        resp.status(),
        429,
        "a fourth host in the same /64 is the same client"
    );
    let resp = guarded(
        &gate,
        &HttpEvent::post("/x").from_ip("2001:db8:aa:bc::1").request(),
        None,
    )
    .await;
    assert_eq!(resp.status(), 200, "the next /64 is another client");
    let counters = counters_matching(&ddb, &tables.rate_limits, "2001:db8:aa:bb::/64").await;
    assert_eq!(counters.len(), 1);
    assert_eq!(counters[0].1, 3);
}

#[tokio::test]
async fn an_ipv4_mapped_address_counts_as_its_ipv4() {
    let (gate, tables, ddb) = new_gate("ip=2/1h", &[]).await;
    let mapped = HttpEvent::post("/x").from_ip("::ffff:192.0.2.1").request();
    let plain = HttpEvent::post("/x").from_ip("192.0.2.1").request();
    assert_eq!(guarded(&gate, &mapped, None).await.status(), 200);
    assert_eq!(guarded(&gate, &plain, None).await.status(), 200);
    assert_eq!(guarded(&gate, &mapped, None).await.status(), 429);
    let counters = counters_matching(&ddb, &tables.rate_limits, "#ip#").await;
    assert_eq!(counters.len(), 1);
    assert!(counters[0].0.contains("#192.0.2.1#"), "{counters:?}");
}

#[tokio::test]
async fn peer_mode_ignores_x_forwarded_for() {
    let (gate, tables, ddb) = new_gate("ip=3/1h", &[]).await;
    let mut statuses = Vec::new();
    for i in 0..6 {
        let req = HttpEvent::post("/x")
            .from_ip("198.51.100.20")
            .header("x-forwarded-for", &format!("10.0.0.{i}, 198.51.100.20"))
            .request();
        statuses.push(guarded(&gate, &req, None).await.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);
    assert!(counters_matching(&ddb, &tables.rate_limits, "10.0.0.")
        .await
        .is_empty());
}

fn cloudfront(viewer: &str) -> HttpEvent {
    HttpEvent::post("/x")
        .from_ip("130.176.0.1") // a CloudFront edge; never the client
        .header("x-origin-verify", ORIGIN_SECRET)
        .header("cloudfront-viewer-address", viewer)
}

#[tokio::test]
async fn cloudfront_mode_counts_the_viewer_and_ignores_a_rotating_spoofed_forwarded_for() {
    let extra = [
        ("CLIENT_IP_SOURCE", "cloudfront"),
        ("ORIGIN_VERIFY_SECRET", ORIGIN_SECRET),
    ];
    let (gate, tables, ddb) = new_gate("ip=3/1h", &extra).await;
    let mut statuses = Vec::new();
    for i in 0..8 {
        let req = cloudfront("203.0.113.99:51234")
            .header("x-forwarded-for", &format!("192.0.2.{i}"))
            .request();
        statuses.push(guarded(&gate, &req, None).await.status().as_u16());
    }
    assert_eq!(statuses, [vec![200; 3], vec![429; 5]].concat());
    let counters = counters_matching(&ddb, &tables.rate_limits, "#ip#").await;
    assert_eq!(counters.len(), 1, "one counter, the viewer's: {counters:?}");
    assert!(counters[0].0.contains("#203.0.113.99#"));

    // IPv6 viewer addresses come unbracketed with a port, and count per /64.
    let v6 = cloudfront("2001:db8:5:6::1:443").request();
    assert_eq!(guarded(&gate, &v6, None).await.status(), 200);
    assert_eq!(
        counters_matching(&ddb, &tables.rate_limits, "2001:db8:5:6::/64")
            .await
            .len(),
        1
    );
}

#[tokio::test]
async fn cloudfront_mode_refuses_requests_that_skipped_the_distribution() {
    let extra = [
        ("CLIENT_IP_SOURCE", "cloudfront"),
        ("ORIGIN_VERIFY_SECRET", ORIGIN_SECRET),
    ];
    let (gate, tables, ddb) = new_gate("ip=3/1h", &extra).await;

    let missing = HttpEvent::post("/x")
        .header("cloudfront-viewer-address", "203.0.113.5:1000")
        .request();
    let wrong = HttpEvent::post("/x")
        .header("cloudfront-viewer-address", "203.0.113.5:1000")
        .header("x-origin-verify", "origin-verify-7f3b")
        .request();
    for req in [missing, wrong] {
        let resp = guarded(&gate, &req, None).await;
        assert_eq!(resp.status(), 403);
        let body = json_body(&resp);
        assert_eq!(body["code"], "forbidden");
        assert!(!body.to_string().contains(ORIGIN_SECRET));
    }

    for bad in ["203.0.113.5", "not-an-ip:443", "203.0.113.5:port", ""] {
        let resp = guarded(&gate, &cloudfront(bad).request(), None).await;
        assert_eq!(resp.status(), 400, "viewer address {bad:?}");
        assert_eq!(json_body(&resp)["code"], "invalid_request");
    }
    assert!(
        dynamo::scan_all(&ddb, &tables.rate_limits).await.is_empty(),
        "nothing counted"
    );
}
