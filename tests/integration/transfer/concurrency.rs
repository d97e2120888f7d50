//! Concurrent duplicates and concurrent transfers.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::join_all;
use tollgate_tests::dynamo::scan_all;
use tollgate_tests::json_body;
use tollgate_tests::transfer::TransferHarness;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_identical_requests_debit_once() {
    let h = Arc::new(TransferHarness::new().await);
    let alice = h.client("alice").await;
    let a = h.account(&alice, 1_000, "JPY").await;
    let b = h.account(&alice, 0, "JPY").await;
    let body = TransferHarness::body(&a, &b, 100);
    let responses = join_all((0..20).map(|_| {
        let h = h.clone();
        let req = h.post(&alice, "same", &body);
        tokio::spawn(async move { h.send(req).await })
    }))
    .await;
    let responses: Vec<_> = responses.into_iter().map(Result::unwrap).collect();
    let first = responses
        .iter()
        .find(|r| r.status() == 201 && r.headers().get("idempotent-replayed").is_none())
        .expect("one request did the transfer");
    for r in &responses {
        match r.status().as_u16() {
            201 => assert_eq!(
                r.body().as_ref(),
                first.body().as_ref(),
                "a 201 is the transfer or its replay"
            ),
            409 => {
                assert_eq!(json_body(r)["code"], "request_in_progress");
                assert!(r.headers().contains_key("retry-after"));
            }
            other => panic!("unexpected {other}: {:?}", json_body(r)),
        }
    }
    let statuses: Vec<u16> = responses.iter().map(|r| r.status().as_u16()).collect();
    eprintln!("statuses of 20 identical requests: {statuses:?}");
    assert_eq!((h.balance(&a).await, h.balance(&b).await), (900, 100));
    assert_eq!(h.count(&h.tables.transfers).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_transfers_conserve_money() {
    let h = Arc::new(TransferHarness::new().await);
    let alice = h.client("alice").await;
    let mut accounts = Vec::new();
    for _ in 0..10 {
        accounts.push(h.account(&alice, 1_000, "JPY").await);
    }
    // A fixed pseudo-random sequence: reproducible, and some amounts exceed balances.
    let mut seed: u64 = 0x5eed;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut requests = Vec::new();
    for i in 0..200 {
        let from = (next() % 10) as usize;
        let to = (from + 1 + (next() % 9) as usize) % 10;
        let amount = 1 + next() % 400;
        requests.push(h.post(
            &alice,
            &format!("t-{i}"),
            &TransferHarness::body(&accounts[from], &accounts[to], amount),
        ));
    }
    let responses = join_all(requests.into_iter().map(|req| {
        let h = h.clone();
        tokio::spawn(async move { h.send(req).await })
    }))
    .await;
    let mut created = HashMap::new();
    for r in responses.into_iter().map(Result::unwrap) {
        match r.status().as_u16() {
            201 => {
                let id = json_body(&r)["transfer_id"].as_str().unwrap().to_string();
                *created.entry(id).or_insert(0) += 1;
            }
            402 => {}
            other => panic!("unexpected {other}: {:?}", json_body(&r)),
        }
    }
    let mut total = 0;
    for acc in &accounts {
        let balance = h.balance(acc).await; // u64: a negative balance cannot even be read
        total += balance;
    }
    assert_eq!(total, 10_000, "money is conserved");
    let records = scan_all(&h.ddb, &h.tables.transfers).await;
    assert_eq!(
        records.len(),
        created.len(),
        "every 201 has exactly one record"
    );
    for item in records {
        let id = item["pk"].as_s().unwrap();
        assert_eq!(created.get(id), Some(&1), "{id}");
    }
    eprintln!("200 concurrent transfers: {} created", created.len());
    assert!(
        created.len() > 50,
        "most transfers went through: {}",
        created.len()
    );
}
