//! `cargo xtask replay`: a day of hostile transfer traffic, replayed through the real functions
//! (over HTTP, `cargo lambda watch`) with faults between them and DynamoDB Local, then reconciled
//! against a ledger computed from the log. It exits non-zero (this test fails) on any violation.
//!
//! Not a test to run alone: `cargo xtask replay` (full size) and `cargo xtask test` (2,000
//! requests) start it first, wait for it to put its fault proxy up, start a stack whose functions
//! talk to DynamoDB through that proxy, and restart `cargo lambda watch` when it asks (after it
//! killed a `transfer` process). Hence `#[ignore]`. The handshake is files in `REPLAY_DIR`:
//! `proxy` (written here: the proxy's endpoint), the stack file (written by xtask),
//! `restart-N` (here: "I killed a process, restart the functions") and `restarted-N` (xtask:
//! `ok`, or why not).

mod check;
mod http;
mod plan;
mod run;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use secrecy::ExposeSecret;
use tollgate::clock::SystemClock;
use tollgate::config::Env;
use tollgate::serve::Function;
use tollgate_tests::dynamo;
use tollgate_tests::fault_proxy::FaultProxy;

use crate::plan::{Generator, Population, Rng};
use crate::run::{Traffic, FAULT_KINDS, OPERATIONS};

struct Settings {
    dir: PathBuf,
    upstream: String,
    stack_file: PathBuf,
    seed: u64,
    requests: usize,
    accounts: usize,
    clients: usize,
    concurrency: usize,
    kills: usize,
    fault_rate: f64,
    instances: String,
    report: Option<PathBuf>,
    /// Damage the ledger before reconciling, to show the checks fail.
    sabotage: bool,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn num<T: std::str::FromStr>(name: &str, default: T) -> T {
    var(name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number"))
    })
}

impl Settings {
    fn from_env() -> Self {
        let need = |name: &str| {
            var(name).unwrap_or_else(|| {
                panic!("{name} is not set: run this with `cargo xtask replay`, which sets it")
            })
        };
        Self {
            dir: need("REPLAY_DIR").into(),
            upstream: need("REPLAY_UPSTREAM"),
            stack_file: need("TOLLGATE_STACK_FILE").into(),
            seed: num("REPLAY_SEED", 1),
            requests: num("REPLAY_REQUESTS", 50_000),
            accounts: num("REPLAY_ACCOUNTS", 1_000),
            clients: num("REPLAY_CLIENTS", 50),
            concurrency: num("REPLAY_CONCURRENCY", 24),
            kills: num("REPLAY_KILLS", 2),
            fault_rate: num("REPLAY_FAULT_RATE", 0.03),
            instances: var("REPLAY_INSTANCES").unwrap_or_else(|| "?".into()),
            report: var("REPLAY_REPORT").map(PathBuf::from),
            sabotage: var("REPLAY_SABOTAGE").is_some_and(|v| v == "1"),
        }
    }
}

#[test]
#[ignore = "run by `cargo xtask replay` and `cargo xtask test`, which start the stack it needs"]
fn replay() {
    let settings = Settings::from_env();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (report, violations) = runtime.block_on(day(&settings));
    println!("{report}");
    if let Some(path) = &settings.report {
        std::fs::write(path, &report)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        println!("report written to {}", path.display());
    }
    assert_eq!(
        violations, 0,
        "the replay found {violations} violation(s); see the report above"
    );
}

async fn day(st: &Settings) -> (String, usize) {
    let proxy = Arc::new(FaultProxy::start(&st.upstream).await);
    let tmp = st.dir.join("proxy.tmp");
    std::fs::write(&tmp, proxy.endpoint()).expect("write the proxy file");
    std::fs::rename(&tmp, st.dir.join("proxy")).expect("publish the proxy file");
    eprintln!(
        "replay: fault proxy {} -> {}",
        proxy.endpoint(),
        st.upstream
    );

    // The stack, once xtask has started it with the functions behind the proxy.
    let waited = Instant::now();
    let stack: serde_json::Value = loop {
        if let Ok(text) = std::fs::read_to_string(&st.stack_file) {
            if let Ok(v) = serde_json::from_str(&text) {
                break v;
            }
        }
        assert!(
            waited.elapsed() < Duration::from_secs(900),
            "no stack file at {} after 900 s",
            st.stack_file.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let url = stack["transfer_url"]
        .as_str()
        .expect("transfer_url")
        .to_string();
    let direct = stack["dynamodb_endpoint"]
        .as_str()
        .expect("dynamodb_endpoint")
        .to_string();

    // Clients and accounts, written directly (not through the proxy) with the functions' own
    // stores and the stack's default table names.
    let setup_started = Instant::now();
    let (ddb, _) = dynamo::client_at(&direct);
    let app = transfer::App::from_env(
        &Env::from_pairs(Vec::<(String, String)>::new()),
        ddb.clone(),
        None,
        Arc::new(SystemClock),
    )
    .expect("default settings");
    let mut rng = Rng::fork(st.seed, 0);
    let pop = Population::new(&mut rng, st.clients, st.accounts);
    let mut clients = Vec::new();
    for i in 0..st.clients {
        let c = app
            .clients
            .create(&format!("replay-{i}"))
            .await
            .expect("create client");
        clients.push((c.client_id, c.token.expose_secret().to_string()));
    }
    let accounts: Vec<(String, u64)> = futures::stream::iter(pop.accounts.iter())
        .map(|(balance, owner)| {
            let (app, owner) = (&app, &clients[*owner].0);
            async move {
                let a = app
                    .ledger
                    .create_account(owner, *balance, "JPY")
                    .await
                    .expect("create account");
                (a.account_id, *balance)
            }
        })
        .buffered(16)
        .collect()
        .await;
    let ids: Vec<String> = accounts.iter().map(|(a, _)| a.clone()).collect();
    let setup_time = setup_started.elapsed();

    // The day.
    let traffic = Arc::new(Traffic::new(
        url,
        clients.iter().map(|(_, t)| t.clone()).collect(),
        st.concurrency,
        st.requests,
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let faults = tokio::spawn(run::arm_faults(
        proxy.clone(),
        traffic.clone(),
        st.seed,
        st.fault_rate,
        stop.clone(),
    ));
    let kills = tokio::spawn(run::kill_processes(
        traffic.clone(),
        proxy.endpoint(),
        st.dir.clone(),
        st.kills,
        st.requests,
        st.seed,
    ));
    let started = Instant::now();
    let mut generator = Generator::new(st.seed, &pop);
    let active = Arc::new(tokio::sync::Semaphore::new(st.concurrency * 8));
    let mut tasks = Vec::new();
    let mut last_progress = 0;
    while traffic.sent() < st.requests {
        let permit = active.clone().acquire_owned().await.expect("open");
        let logical = generator.next(&ids);
        let (client, seed) = (traffic.clone(), st.seed);
        tasks.push(tokio::spawn(async move {
            let log = client.drive(logical, seed).await;
            drop(permit);
            log
        }));
        if traffic.sent() >= last_progress + st.requests / 10 {
            last_progress = traffic.sent();
            eprintln!(
                "replay: {} requests sent in {:.0}s",
                last_progress,
                started.elapsed().as_secs_f64()
            );
        }
    }
    let mut logs = Vec::with_capacity(tasks.len());
    for t in tasks {
        logs.push(t.await.expect("a client task panicked"));
    }
    let traffic_time = started.elapsed();
    let kills = kills.await.expect("kill task");
    stop.store(true, Ordering::SeqCst);
    let faults = faults.await.expect("fault task");
    let quiet = run::quiesce(&proxy).await;
    let sabotaged = st.sabotage;
    if sabotaged {
        sabotage(&ddb, &app).await;
    }

    // Reconcile, reading DynamoDB directly.
    let check_started = Instant::now();
    let transfers = check::scan(&ddb, &app.settings.transfers_table).await;
    let account_items = check::scan(&ddb, &app.settings.accounts_table).await;
    let idempotency = check::scan(&ddb, &app.settings.idempotency_table).await;
    let client_ids: Vec<String> = clients.iter().map(|(c, _)| c.clone()).collect();
    let findings = check::reconcile(check::Inputs {
        logs: &logs,
        client_ids: &client_ids,
        accounts: &accounts,
        transfers,
        account_items,
        idempotency,
    });
    let check_time = check_started.elapsed();

    // Report.
    let violations: usize = findings.checks.iter().map(|c| c.violations.len()).sum();
    let (statuses, _) = check::status_counts(&logs);
    let sent = traffic.sent();
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for log in &logs {
        *kinds.entry(log.logical.kind.label()).or_default() += 1;
    }
    let mut r = String::new();
    let mut line = |s: String| {
        r.push_str(&s);
        r.push('\n');
    };
    line("# Transfer replay: a day of hostile traffic, reconciled".into());
    line(String::new());
    line(format!(
        "Verdict: **{}**",
        if violations == 0 {
            "PASS: no violation".to_string()
        } else {
            format!("FAIL: {violations} violation(s)")
        }
    ));
    line(String::new());
    line(format!(
        "Seed {} · {} requests sent ({} asked for) · {} logical requests · {} accounts · {} clients · {} in flight · {} `transfer` instances under `cargo lambda watch`",
        st.seed, sent, st.requests, logs.len(), st.accounts, st.clients, st.concurrency, st.instances
    ));
    line(format!(
        "Traffic {:.1}s ({:.0} requests/s) · setup {:.1}s · waiting for the functions to go quiet {:.1}s · reconciliation {:.1}s",
        traffic_time.as_secs_f64(),
        sent as f64 / traffic_time.as_secs_f64(),
        setup_time.as_secs_f64(),
        quiet.as_secs_f64(),
        check_time.as_secs_f64()
    ));
    if sabotaged {
        line(String::new());
        line("**Sabotaged run** (`--sabotage`): before reconciling, one transfer record was copied under a new id (a double transfer), another deleted (a lost acknowledged transfer), and one balance raised by 1. Every money check below must fail.".into());
    }
    line(String::new());
    line("## Logical requests, by what the log calls for".into());
    line(String::new());
    line("| kind | count |".into());
    line("|---|---:|".into());
    for (k, c) in &kinds {
        line(format!("| {k} | {c} |"));
    }
    line(String::new());
    line(format!(
        "Retries (same key, same body): {} · retries deferred \"much later\" (hundreds to thousands of other requests): {} · logical requests given up as unknown: {} (of which committed: {}, per DynamoDB)",
        traffic.retries.load(Ordering::Relaxed),
        traffic.long_waits.load(Ordering::Relaxed),
        findings.unknown,
        findings.unknown_committed
    ));
    line(String::new());
    line("## Requests, by answer".into());
    line(String::new());
    line("| answer | count |".into());
    line("|---|---:|".into());
    for (k, c) in &statuses {
        line(format!("| {} | {c} |", k.trim()));
    }
    line(String::new());
    line("## Faults injected between the functions and DynamoDB".into());
    line(String::new());
    line(format!(
        "Armed {} · fired {} (proxy's own count: {}) · DynamoDB requests seen by the proxy: {}",
        faults.armed(),
        faults.fired(),
        proxy.fired(),
        OPERATIONS
            .iter()
            .map(|op| format!("{op} {}", proxy.seen(op)))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    line(String::new());
    line(format!("| fault | {} |", OPERATIONS.join(" | ")));
    line(format!("|---|{}", "---:|".repeat(OPERATIONS.len())));
    for (k, name) in FAULT_KINDS.iter().enumerate() {
        let cells: Vec<String> = (0..OPERATIONS.len())
            .map(|op| {
                let (armed, fired) = faults.counts.get(&(op, k)).copied().unwrap_or_default();
                if armed == fired {
                    fired.to_string()
                } else {
                    format!("{fired} (+{} armed, not fired)", armed - fired)
                }
            })
            .collect();
        line(format!("| {name} | {} |", cells.join(" | ")));
    }
    line(String::new());
    line("## Process kills".into());
    line(String::new());
    if kills.is_empty() {
        line("None asked for.".into());
    }
    for (i, k) in kills.iter().enumerate() {
        line(format!(
            "{}. at request {}: SIGKILL to `transfer` pid {} (one of {} running); {}",
            i + 1,
            k.at_request,
            k.pid,
            k.instances,
            match &k.restart {
                Ok(d) => format!(
                    "`cargo lambda watch` restarted, functions answering again after {:.1}s",
                    d.as_secs_f64()
                ),
                Err(e) => format!("RESTART FAILED: {e}"),
            }
        ));
    }
    line(String::new());
    line("## Reconciliation (DynamoDB read directly, against the log)".into());
    line(String::new());
    line(format!(
        "{} transfer records · {} acknowledged logical requests · opening total {} · final total {}",
        findings.records, findings.acknowledged, findings.total_initial, findings.total_final
    ));
    line(String::new());
    line("| check | checked | violations |".into());
    line("|---|---:|---:|".into());
    let kill_failures = kills.iter().filter(|k| k.restart.is_err()).count();
    for c in &findings.checks {
        line(format!(
            "| {} | {} | {} |",
            c.name,
            c.checked,
            c.violations.len()
        ));
    }
    line(format!(
        "| process killed and restarted | {} | {} |",
        kills.len(),
        kill_failures
    ));
    for c in &findings.checks {
        for v in c.violations.iter().take(20) {
            line(format!("- {}: {v}", c.name));
        }
        if c.violations.len() > 20 {
            line(format!(
                "- {}: … and {} more",
                c.name,
                c.violations.len() - 20
            ));
        }
    }
    line(String::new());
    line(format!(
        "Reproduce: `cargo xtask replay --seed {} --requests {}` (the traffic and fault schedule follow from the seed; their interleaving follows from timing).",
        st.seed, st.requests
    ));
    (r, violations + kill_failures)
}

/// What `--sabotage` does to DynamoDB (directly) before the reconciliation.
async fn sabotage(ddb: &aws_sdk_dynamodb::Client, app: &transfer::App) {
    use aws_sdk_dynamodb::types::AttributeValue;
    let records = check::scan(ddb, &app.settings.transfers_table).await;
    assert!(records.len() >= 2, "too few transfers to sabotage");
    let mut copy = records[0].clone();
    copy.insert("pk".into(), AttributeValue::S("tr_sabotage_copy".into()));
    ddb.put_item()
        .table_name(&app.settings.transfers_table)
        .set_item(Some(copy))
        .send()
        .await
        .expect("sabotage: copy a transfer");
    ddb.delete_item()
        .table_name(&app.settings.transfers_table)
        .key("pk", records[1]["pk"].clone())
        .send()
        .await
        .expect("sabotage: delete a transfer");
    ddb.update_item()
        .table_name(&app.settings.accounts_table)
        .key("pk", records[0]["to"].clone())
        .update_expression("SET #b = #b + :one")
        .expression_attribute_names("#b", "balance")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .send()
        .await
        .expect("sabotage: raise a balance");
}
