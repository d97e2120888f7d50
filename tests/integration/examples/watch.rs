//! Each example run as its README runs it: the README's `cargo lambda watch -p example-…` with
//! the variables its README sets (its tables made from `template.yaml` in this test's DynamoDB
//! Local, under this test's names), sent the README's requests over HTTP, or, for the SQS
//! consumer, the README's `cargo lambda invoke --data-file`.
//!
//! The other tests of this module send the same requests to the service `main` builds, in
//! process and with an injected clock; these check what those cannot: that the binary starts
//! under cargo-lambda's emulator from the README's environment alone and answers as the README
//! says. Every request here comes from 127.0.0.1 (cargo-lambda's `sourceIp`), so what needs
//! other addresses or another clock stays with the in-process tests.
//!
//! The examples depend on the workspace-hack, so the `cargo build -p example-…` run first (the
//! build cargo-lambda itself runs) reuses the artifacts of `cargo test --workspace`.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tollgate_tests::dynamo;
use tollgate_tests::http::{self, Response};

use super::sqs_idempotent::shipped;
use super::{example_dir, ExampleTables};
use crate::deploy::tools;

/// How long cargo-lambda gets to start listening, and a function to answer its first request.
const START: Duration = Duration::from_secs(120);

/// The README's local run: the variables it sets and the package it watches.
struct LocalRun {
    vars: Vec<(String, String)>,
    package: String,
    /// The `cargo lambda invoke` line's event file, relative to the workspace root, if any.
    data_file: Option<String>,
}

/// The `sh` block of the README's "Run it locally" section, read as a shell would read its
/// leading assignments: `NAME=value` words up to `cargo lambda watch -p <package>`.
fn local_run(example: &str) -> LocalRun {
    let readme = std::fs::read_to_string(example_dir(example).join("README.md")).unwrap();
    let section = readme
        .split("## Run it locally")
        .nth(1)
        .unwrap_or_else(|| panic!("{example}'s README has no \"Run it locally\""));
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap_or_else(|| panic!("{example}'s README: no sh block to run it locally"));
    let words: Vec<&str> = block
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(str::split_whitespace)
        .filter(|w| *w != "\\")
        .collect();
    let watch = words
        .windows(4)
        .position(|w| w == ["cargo", "lambda", "watch", "-p"])
        .unwrap_or_else(|| panic!("{example}'s README does not run `cargo lambda watch -p`"));
    let vars = words[..watch]
        .iter()
        .map(|w| {
            let (k, v) = w
                .split_once('=')
                .unwrap_or_else(|| panic!("{example}'s README: {w:?} before the command"));
            (k.to_string(), v.to_string())
        })
        .collect();
    let data_file = words
        .windows(2)
        .find(|w| w[0] == "--data-file")
        .map(|w| w[1].to_string());
    LocalRun {
        vars,
        package: words[watch + 4].to_string(),
        data_file,
    }
}

/// `cargo lambda watch -p <package>` on a port of its own, stopped on drop: SIGTERM to its
/// process group (cargo-lambda then stops the function it started), SIGKILL after 10 s. A
/// function left behind by a SIGKILLed cargo-lambda ends by itself: its runtime API is gone.
struct Watch {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl Watch {
    fn start(example: &str, tables: &ExampleTables, extra: &[(&str, &str)]) -> (Self, LocalRun) {
        let run = local_run(example);
        assert_eq!(
            run.package,
            format!("example-{example}"),
            "{example}'s README"
        );
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        // The build cargo-lambda runs, first, so its time is not the first request's.
        let built = Command::new(&cargo)
            .args(["build", "--quiet", "-p", &run.package])
            .current_dir(tools::repo_root())
            .status()
            .expect("cargo runs");
        assert!(built.success(), "cargo build -p {}", run.package);

        // The README's variables: its tables are this test's, by the template's variable of
        // the same name; the endpoint is this test's DynamoDB Local; the rest as written.
        let template_env = tables.function_env(example, &[]);
        let mut vars = Vec::new();
        for (name, value) in &run.vars {
            let value = match name.as_str() {
                "DYNAMODB_ENDPOINT" => dynamo::endpoint(),
                n if n.ends_with("_TABLE") => template_env
                    .get(n)
                    .unwrap_or_else(|| panic!("{example}: the template does not set {n}"))
                    .to_string(),
                _ => value.clone(),
            };
            vars.push((name.clone(), value));
        }
        let port = free_port();
        static RUNS: AtomicU32 = AtomicU32::new(0);
        let log = std::env::temp_dir().join(format!(
            "tollgate-watch-{example}-{}-{}.log",
            std::process::id(),
            RUNS.fetch_add(1, Ordering::Relaxed)
        ));
        let out = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(tools::find("cargo-lambda"));
        cmd.args(["lambda", "watch", "-p", &run.package])
            .args(["--invoke-address", "127.0.0.1", "--invoke-port"])
            .arg(port.to_string())
            .current_dir(tools::repo_root())
            .env_remove("AWS_PROFILE")
            .envs(vars.iter().map(|(k, v)| (k, v)))
            .envs(extra.iter().copied())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().expect("cargo-lambda starts");
        let watch = Self { child, port, log };
        let started = Instant::now();
        while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
            assert!(
                started.elapsed() < START,
                "{}",
                watch.failure("never listened")
            );
            sleep(Duration::from_millis(100));
        }
        (watch, run)
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// cargo-lambda's log, for a failed assertion.
    fn failure(&self, what: &str) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "cargo lambda watch {what}; its log ({}):\n{}",
            self.log.display(),
            tail.join("\n")
        )
    }

    /// Sends `req` while the function answers `status_while`, for `within` at most (a kill
    /// switch applies within its cache time); the first other answer, or the last.
    fn until(
        &self,
        within: Duration,
        status_while: u16,
        req: impl Fn() -> http::Request,
    ) -> Response {
        let started = Instant::now();
        loop {
            let resp = req().send();
            if resp.status != status_while || started.elapsed() > within {
                return resp;
            }
            sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let group = Pid::from_raw(self.child.id() as i32);
        let _ = killpg(group, Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            sleep(Duration::from_millis(100));
        }
        let _ = killpg(group, Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn problem_code(resp: &Response) -> String {
    resp.json()["code"].as_str().unwrap_or_default().to_string()
}

async fn flip_kill_switch(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    function: &str,
    message: Option<&str>,
) {
    let mut put = ddb
        .put_item()
        .table_name(table)
        .item("pk", AttributeValue::S(format!("kill-switch#{function}")))
        .item("enabled", AttributeValue::Bool(true));
    if let Some(message) = message {
        put = put.item("message", AttributeValue::S(message.into()));
    }
    put.send().await.expect("the switch is written");
}

#[tokio::test(flavor = "multi_thread")]
async fn rate_limited_as_its_readme_runs_it() {
    const EXAMPLE: &str = "rate-limited";
    let (ddb, _) = dynamo::client();
    let tables = ExampleTables::create(&ddb, EXAMPLE).await;
    // The README's limits, with the address's window sliding: six requests in a row are then
    // six within one window whatever the clock says (a fixed window could reopen between two).
    let limits = [("RATE_LIMITS", "ip=5/1m:sliding,global=1000/1m")];
    let (watch, _) = Watch::start(EXAMPLE, &tables, &limits);
    let hello = || http::get(watch.url("/hello"));

    // 1. 200, the address, the request id and the limit's fields.
    let resp = hello().send();
    assert_eq!(resp.status, 200, "{}", watch.failure(&resp.text()));
    assert_eq!(resp.json(), json!({"hello": "127.0.0.1"}));
    assert!(resp.header("x-request-id").is_some());
    assert_eq!(resp.header("ratelimit-policy"), Some("\"ip\";q=5;w=60"));
    let ratelimit = resp.header("ratelimit").unwrap_or_default();
    assert!(ratelimit.starts_with("\"ip\";r=4;t="), "{ratelimit}");

    // 2. The sixth request within the window: 429, Retry-After, rate_limited.
    for _ in 0..4 {
        assert_eq!(hello().send().status, 200);
    }
    let resp = hello().send();
    assert_eq!(resp.status, 429);
    assert_eq!(problem_code(&resp), "rate_limited");
    assert!(resp.header("retry-after").is_some());

    // 4. 405 with Allow, and 404.
    let resp = http::post(watch.url("/hello")).send();
    assert_eq!(resp.status, 405);
    assert_eq!(resp.header("allow"), Some("GET"));
    assert_eq!(http::get(watch.url("/elsewhere")).send().status, 404);

    // 5. The kill switch, flipped in the table as the README does: 403 with the message,
    // within KILL_SWITCH_CACHE_SECONDS (5).
    flip_kill_switch(
        &ddb,
        tables.name("ControlTable"),
        EXAMPLE,
        Some("Back at noon."),
    )
    .await;
    let resp = watch.until(Duration::from_secs(8), 429, hello);
    assert_eq!(resp.status, 403, "{}", resp.text());
    assert_eq!(problem_code(&resp), "service_disabled");
    assert_eq!(resp.json()["detail"], "Back at noon.");
}

#[tokio::test(flavor = "multi_thread")]
async fn idempotent_transaction_as_its_readme_runs_it() {
    const EXAMPLE: &str = "idempotent-transaction";
    const K1: &str = "3f2b8c1e-0d7a-4e59-9a7e-6c1d2b3a4f50";
    const K2: &str = "9c4e7a12-5b3d-4f68-8e21-0a9b8c7d6e5f";
    let (ddb, _) = dynamo::client();
    let tables = ExampleTables::create(&ddb, EXAMPLE).await;
    let (watch, _) = Watch::start(EXAMPLE, &tables, &[]);
    // `curl -d` sends a body with no JSON content type; so do these.
    let book = |key: Option<&str>, body: &str| {
        let mut req = http::post(watch.url("/bookings")).body(body.as_bytes());
        if let Some(key) = key {
            req = req.header("idempotency-key", key);
        }
        req.send()
    };
    let ada = r#"{"seat":"12A","guest":"Ada"}"#;

    // 1. 201 and its Location.
    let first = book(Some(K1), ada);
    assert_eq!(first.status, 201, "{}", watch.failure(&first.text()));
    assert_eq!(first.header("location"), Some("/bookings/12A"));
    assert_eq!(first.json(), json!({"seat": "12A", "guest": "Ada"}));
    assert_eq!(first.header("idempotent-replayed"), None);

    // 2. The retry, and the same fields in another order: the same 201, replayed.
    for body in [ada, r#"{"guest":"Ada","seat":"12A"}"#] {
        let again = book(Some(K1), body);
        assert_eq!(again.status, 201);
        assert_eq!(again.header("idempotent-replayed"), Some("true"));
        assert_eq!(again.text(), first.text(), "byte for byte");
    }

    // 3. The key with another body: 422.
    let resp = book(Some(K1), r#"{"seat":"12A","guest":"Eve"}"#);
    assert_eq!(resp.status, 422);
    assert_eq!(problem_code(&resp), "idempotency_key_reused");

    // 4. Another key for the taken seat: 409 seat_taken, stored under the key.
    let bob = r#"{"seat":"12A","guest":"Bob"}"#;
    let resp = book(Some(K2), bob);
    assert_eq!(resp.status, 409);
    assert_eq!(problem_code(&resp), "seat_taken");
    let resp = book(Some(K2), bob);
    assert_eq!(resp.status, 409);
    assert_eq!(resp.header("idempotent-replayed"), Some("true"));

    // 5. No key, and a guessable one: 400.
    assert_eq!(book(None, ada).status, 400);
    assert_eq!(book(Some("short-key"), ada).status, 400);
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_switched_secret_as_its_readme_runs_it() {
    const EXAMPLE: &str = "kill-switched-secret";
    let (ddb, _) = dynamo::client();
    let tables = ExampleTables::create(&ddb, EXAMPLE).await;
    let (watch, run) = Watch::start(EXAMPLE, &tables, &[]);
    let key = || http::get(watch.url("/key-version"));

    // 1. The version of the README's key: the first 12 hex digits of its SHA-256.
    let upstream_key = run
        .vars
        .iter()
        .find(|(k, _)| k == "UPSTREAM_KEY")
        .map(|(_, v)| v.as_str());
    assert_eq!(upstream_key, Some("hello"), "the README's key");
    let resp = key().send();
    assert_eq!(resp.status, 200, "{}", watch.failure(&resp.text()));
    assert_eq!(resp.json(), json!({"key_version": "2cf24dba5fb0"}));

    // 3. The kill switch: 403 service_disabled within KILL_SWITCH_CACHE_SECONDS (5).
    flip_kill_switch(&ddb, tables.name("ControlTable"), "key-version", None).await;
    let resp = watch.until(Duration::from_secs(8), 200, key);
    assert_eq!(resp.status, 403, "{}", resp.text());
    assert_eq!(problem_code(&resp), "service_disabled");
}

#[tokio::test(flavor = "multi_thread")]
async fn sqs_idempotent_as_its_readme_invokes_it() {
    const EXAMPLE: &str = "sqs-idempotent";
    let (ddb, _) = dynamo::client();
    let tables = ExampleTables::create(&ddb, EXAMPLE).await;
    let (watch, run) = Watch::start(EXAMPLE, &tables, &[]);
    let data_file = run
        .data_file
        .expect("the README's invoke has a --data-file");
    assert!(tools::repo_root().join(&data_file).is_file(), "{data_file}");
    let invoke = || {
        let out = Command::new(tools::find("cargo-lambda"))
            .args(["lambda", "invoke", &run.package, "--data-file", &data_file])
            .args(["--invoke-address", "127.0.0.1", "--invoke-port"])
            .arg(watch.port.to_string())
            .args(["--output-format", "json"])
            .current_dir(tools::repo_root())
            .output()
            .expect("cargo lambda invoke runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "cargo lambda invoke: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            watch.failure("")
        );
        serde_json::from_str::<Value>(&stdout)
            .unwrap_or_else(|e| panic!("cargo lambda invoke printed no JSON ({e}): {stdout}"))
    };
    let expected = json!({"batchItemFailures": [
        {"itemIdentifier": "7b3c1f0e-5d2a-4c8b-9e6f-1a2b3c4d5e6f"}
    ]});
    // 1. Both orders shipped, the unreadable record reported.
    assert_eq!(invoke(), expected);
    assert_eq!(shipped(&ddb, &tables, "o-1001").await, 1);
    assert_eq!(shipped(&ddb, &tables, "o-1002").await, 1);
    // 2. The same batch again: the same answer, nothing shipped twice.
    assert_eq!(invoke(), expected);
    assert_eq!(shipped(&ddb, &tables, "o-1001").await, 1);
    assert_eq!(shipped(&ddb, &tables, "o-1002").await, 1);
}

/// The README's local-run block names every table variable its template gives the function,
/// and nothing a shell would not read as an assignment.
#[test]
fn every_readme_local_run_sets_the_templates_tables() {
    for example in super::EXAMPLES {
        let run = local_run(example);
        assert_eq!(run.package, format!("example-{example}"));
        let template = super::example_template(example);
        let tables = template.ids_of_type("AWS::DynamoDB::Table");
        for (name, value) in super::function_variables(example, &template) {
            let names_a_table = value
                .get("Ref")
                .and_then(serde_norway::Value::as_str)
                .is_some_and(|id| tables.contains(id));
            if names_a_table {
                assert!(
                    run.vars.iter().any(|(k, _)| *k == name),
                    "{example}'s README does not set {name}"
                );
            }
        }
    }
}
