//! The day: clients and accounts, the traffic with faults armed and processes killed as it
//! goes, the wait for the functions to go quiet, and the reconciliation; then the report's
//! figures.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use serde::Serialize;
use tollgate_tests::dynamo::{self, Tables};

use super::check;
use super::plan::{fork, Generator, Population};
use super::run::{self, Traffic, FAULT_KINDS, OPERATIONS};
use super::sequences;
use super::Options;
use crate::stack::{HarnessStack, Seeded};

/// What the report shows (`templates/replay.md`).
#[derive(Serialize)]
pub struct Figures {
    pub violations: usize,
    seed: u64,
    sent: usize,
    requests: usize,
    logical: usize,
    accounts: usize,
    clients: usize,
    concurrency: usize,
    instances: u32,
    traffic_s: String,
    rate: String,
    setup_s: String,
    quiet_s: String,
    check_s: String,
    sabotaged: bool,
    kinds: Vec<(String, usize)>,
    retries: usize,
    long_waits: usize,
    statuses: Vec<(String, usize)>,
    faults_armed: usize,
    faults_fired: usize,
    proxy_fired: usize,
    seen: String,
    operations: Vec<&'static str>,
    faults: Vec<(&'static str, Vec<String>)>,
    kills: Vec<run::Kill>,
    kill_failures: usize,
    /// The reconciliation's checks and totals.
    #[serde(flatten)]
    findings: check::Findings,
    limits: String,
    sequences: sequences::Counts,
    sequence_rounds: usize,
    sequence_requests: usize,
    sequence_s: String,
}

/// Runs the day on `stack`.
pub async fn day(o: &Options, stack: &HarnessStack) -> Figures {
    // Clients and accounts, written directly (not through the proxy) with the function's own
    // stores; account `i` is the `i / clients`-th of client `i % clients` (`Population`).
    let setup_started = Instant::now();
    let ddb = &stack.ddb;
    let mut rng = fork(o.seed, 0);
    let pop = Population::new(&mut rng, o.clients, o.accounts);
    let seeded: Vec<Seeded> = futures::stream::iter(0..o.clients)
        .map(|c| {
            let owned = pop.accounts.iter().filter(|(_, owner)| *owner == c);
            let balances: Vec<u64> = owned.map(|(balance, _)| *balance).collect();
            async move { stack.seed(&format!("replay-{c}"), &balances).await }
        })
        .buffered(4)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .expect("seed the day's clients and accounts");
    let mut accounts: Vec<(String, u64)> = (pop.accounts.iter().enumerate())
        .map(|(i, (balance, owner))| (seeded[*owner].accounts[i / o.clients].clone(), *balance))
        .collect();
    let ids: Vec<String> = accounts.iter().map(|(a, _)| a.clone()).collect();
    let mut clients: Vec<(String, String)> =
        seeded.into_iter().map(|s| (s.client_id, s.token)).collect();
    // The sequences' clients, after the day's (whose generator knows only its own).
    let mut next = async |name: &str| {
        let opening = [sequences::OPENING; sequences::ACCOUNTS];
        let s = stack.seed(&format!("replay-seq-{name}"), &opening).await;
        let s = s.expect("seed a sequence's client");
        accounts.extend(s.accounts.iter().map(|a| (a.clone(), sequences::OPENING)));
        clients.push((s.client_id.clone(), s.token));
        ((clients.len() - 1, s.accounts), s.client_id)
    };
    let (lost_after_full, _) = next("lost-after-full").await;
    let (in_flight, _) = next("in-flight").await;
    let (burst, burst_id) = next("burst").await;
    let seq_clients = Arc::new(sequences::Clients {
        lost_after_full,
        in_flight,
        burst,
        burst_id,
    });
    let setup_time = setup_started.elapsed();

    // The day.
    let proxy = stack
        .proxy
        .as_ref()
        .expect("the replay's stack has the fault proxy");
    let traffic = Arc::new(Traffic::new(
        stack.transfer.clone(),
        clients.iter().map(|(_, t)| t.clone()).collect(),
        o.concurrency,
        o.requests,
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let faults = tokio::spawn(run::arm_faults(
        proxy.clone(),
        traffic.clone(),
        o.seed,
        o.fault_rate,
        stop.clone(),
    ));
    let kills = tokio::spawn(run::kill_processes(
        traffic.clone(),
        stack.transfer.clone(),
        o.kills,
        o.requests,
        o.seed,
    ));
    let seq = tokio::spawn(sequences::run(
        traffic.clone(),
        proxy.clone(),
        seq_clients,
        o.seed,
        o.requests,
        o.instances as usize,
    ));
    let started = Instant::now();
    let mut generator = Generator::new(o.seed, &pop);
    let active = Arc::new(tokio::sync::Semaphore::new(o.concurrency * 8));
    let mut tasks = Vec::new();
    let mut last_progress = 0;
    while traffic.sent() < o.requests {
        let permit = active.clone().acquire_owned().await.expect("open");
        let logical = generator.next(&ids);
        let (client, seed) = (traffic.clone(), o.seed);
        tasks.push(tokio::spawn(async move {
            let log = client.drive(logical, seed).await;
            drop(permit);
            log
        }));
        if traffic.sent() >= last_progress + o.requests / 10 {
            last_progress = traffic.sent();
            // Progress with what is left at the pace so far: the full day runs for minutes.
            let secs = started.elapsed().as_secs_f64();
            let left = secs / last_progress.max(1) as f64
                * (o.requests - last_progress.min(o.requests)) as f64;
            eprintln!(
                "replay: {last_progress} of {} requests sent in {secs:.0}s, about {left:.0}s of traffic left",
                o.requests
            );
        }
    }
    let mut logs = Vec::with_capacity(tasks.len());
    for t in tasks {
        logs.push(t.await.expect("a client task panicked"));
    }
    let (seq_logs, seq_counts) = seq.await.expect("the sequences' task panicked");
    let sequence_requests = seq_logs.iter().map(|l| l.exchanges.len()).sum();
    logs.extend(seq_logs);
    let traffic_time = started.elapsed();
    let kills = kills.await.expect("kill task");
    stop.store(true, Ordering::SeqCst);
    let faults = faults.await.expect("fault task");
    let quiet = run::quiesce(proxy).await;
    let tables = &stack.tables;
    if o.sabotage {
        sabotage(ddb, tables).await;
    }

    // Reconcile, reading DynamoDB directly.
    let check_started = Instant::now();
    let transfers = dynamo::scan_all(ddb, &tables.transfers).await;
    let account_items = dynamo::scan_all(ddb, &tables.accounts).await;
    let idempotency = dynamo::scan_all(ddb, &tables.idempotency).await;
    let client_ids: Vec<String> = clients.iter().map(|(c, _)| c.clone()).collect();
    let findings = check::reconcile(check::Inputs {
        logs: &logs,
        client_ids: &client_ids,
        accounts: &accounts,
        transfers,
        account_items,
        idempotency,
        kills: kills.len(),
        client_limit: (sequences::CLIENT_LIMIT, sequences::CLIENT_WINDOW_MS),
    });
    let check_time = check_started.elapsed();

    // The figures.
    let kill_failures = kills.iter().filter(|k| k.error.is_some()).count();
    let violations: usize = findings
        .checks
        .iter()
        .map(|c| c.violations.len())
        .sum::<usize>()
        + kill_failures;
    let sent = traffic.sent();
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for log in &logs {
        *kinds.entry(log.logical.kind.label()).or_default() += 1;
    }
    let secs = |d: std::time::Duration| format!("{:.1}", d.as_secs_f64());
    Figures {
        violations,
        seed: o.seed,
        sent,
        requests: o.requests,
        logical: logs.len(),
        accounts: o.accounts,
        clients: o.clients,
        concurrency: o.concurrency,
        instances: o.instances,
        traffic_s: secs(traffic_time),
        rate: format!("{:.0}", sent as f64 / traffic_time.as_secs_f64()),
        setup_s: secs(setup_time),
        quiet_s: secs(quiet),
        check_s: secs(check_time),
        sabotaged: o.sabotage,
        kinds: kinds.iter().map(|(k, c)| (k.to_string(), *c)).collect(),
        retries: traffic.retries.load(Ordering::Relaxed),
        long_waits: traffic.long_waits.load(Ordering::Relaxed),
        statuses: check::status_counts(&logs).into_iter().collect(),
        faults_armed: faults.armed(),
        faults_fired: faults.fired(),
        proxy_fired: proxy.fired(),
        seen: OPERATIONS
            .iter()
            .map(|op| format!("{op} {}", proxy.seen(op)))
            .collect::<Vec<_>>()
            .join(", "),
        operations: OPERATIONS.to_vec(),
        faults: FAULT_KINDS
            .iter()
            .enumerate()
            .map(|(k, name)| {
                let cells = (0..OPERATIONS.len())
                    .map(|op| {
                        let (armed, fired) =
                            faults.counts.get(&(op, k)).copied().unwrap_or_default();
                        if armed == fired {
                            fired.to_string()
                        } else {
                            format!("{fired} (+{} armed, not fired)", armed - fired)
                        }
                    })
                    .collect();
                (*name, cells)
            })
            .collect(),
        kills,
        kill_failures,
        findings,
        limits: sequences::limits(),
        sequences: seq_counts,
        sequence_rounds: sequences::rounds(o.requests),
        sequence_s: secs(seq_counts.busy),
        sequence_requests,
    }
}

/// What `--sabotage` does to DynamoDB (directly) before the reconciliation.
async fn sabotage(ddb: &aws_sdk_dynamodb::Client, tables: &Tables) {
    use aws_sdk_dynamodb::types::AttributeValue;
    let records = dynamo::scan_all(ddb, &tables.transfers).await;
    assert!(records.len() >= 2, "too few transfers to sabotage");
    let mut copy = records[0].clone();
    copy.insert("pk".into(), AttributeValue::S("tr_sabotage_copy".into()));
    ddb.put_item()
        .table_name(&tables.transfers)
        .set_item(Some(copy))
        .send()
        .await
        .expect("sabotage: copy a transfer");
    ddb.delete_item()
        .table_name(&tables.transfers)
        .key("pk", records[1]["pk"].clone())
        .send()
        .await
        .expect("sabotage: delete a transfer");
    ddb.update_item()
        .table_name(&tables.accounts)
        .key("pk", records[0]["to"].clone())
        .update_expression("SET #b = #b + :one")
        .expression_attribute_names("#b", "balance")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .send()
        .await
        .expect("sabotage: raise a balance");
}
