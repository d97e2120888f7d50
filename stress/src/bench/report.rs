//! The report: `templates/bench.md` (the head, the machine, the goals) including one template
//! per part, rendered with minijinja from [`Figures`]. Rust computes the figures and the goals'
//! verdicts; every sentence is in the templates.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::SystemTime;

use serde::Serialize;

use super::idempotency::Idempotency;
use super::limiter::Limiter;
use super::schemathesis::Schemathesis;
use super::{BenchError, Options};

/// `(name, source)` of templates in `templates/`.
macro_rules! templates {
    ($($name:literal),*) => {
        &[$(($name, include_str!(concat!("../../templates/", $name)))),*]
    };
}

/// The report's own template first, then those it includes.
const TEMPLATES: &[(&str, &str)] = templates!(
    "bench.md",
    "bench-idempotency.md",
    "bench-floor.md",
    "bench-limiter.md",
    "bench-binaries.md",
    "bench-schemathesis.md",
    "bench-cost.md"
);

/// Everything the report shows; a part that did not run is `None`.
#[derive(Debug, Serialize)]
pub struct Figures {
    /// `YYYY-MM-DD HH:MM UTC`.
    pub date: String,
    pub command: String,
    /// (label, value) rows of the machine table, before the parts' own versions.
    pub machine: Vec<(String, String)>,
    pub driver_profile: String,
    pub dynamodb_local: String,
    pub java: String,
    /// Which parts ran (2 is part of 1).
    pub parts: BTreeSet<u8>,
    pub idempotency: Option<Idempotency>,
    /// With part 1: the guarded transfer against the bare transaction.
    pub floor: Option<super::floor::Floor>,
    pub limiter: Option<Limiter>,
    pub binaries: Option<super::binaries::Figures>,
    /// With parts 1 to 3: the cost per million requests of each kind.
    pub cost: Option<super::cost::Cost>,
    pub schemathesis: Option<Schemathesis>,
}

impl Figures {
    pub fn new(o: &Options, parts: &BTreeSet<u8>) -> Self {
        let mut machine = machine();
        machine.push(("rustc".into(), version(Command::new("rustc").arg("-V"))));
        Self {
            date: now_utc(),
            command: o.command(),
            machine,
            driver_profile: o.driver_profile().into(),
            dynamodb_local: o.dynamodb_local.clone(),
            java: o.java.clone(),
            parts: parts.clone(),
            idempotency: None,
            floor: None,
            limiter: None,
            binaries: None,
            cost: None,
            schemathesis: None,
        }
    }
}

pub fn render(figures: &Figures) -> Result<String, BenchError> {
    let (name, source) = TEMPLATES[0];
    Ok(crate::report::render(
        name,
        source,
        &TEMPLATES[1..],
        figures,
    )?)
}

/// The minute of the run, in UTC.
fn now_utc() -> String {
    let stamp = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    // 2026-12-01T02:18:07Z
    format!("{} {} UTC", &stamp[..10], &stamp[11..16])
}

/// The first line `cmd` prints on stdout, for a version string, or "unknown". `rustc -V`,
/// `python3 --version` and `schemathesis --version` all print there; the one tool that writes
/// its version to stderr, Java, is xtask's to ask (it passes `--java`).
pub fn version(cmd: &mut Command) -> String {
    cmd.output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.lines().next().map(|l| l.trim().to_string()))
        .filter(|line| !line.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// CPUs, model, memory, kernel, from `/proc`.
fn machine() -> Vec<(String, String)> {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or_else(|| "unknown".into(), |s| s.trim().to_string());
    let meminfo = read("/proc/meminfo");
    let mem = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or_else(
            || "unknown".into(),
            |kb| format!("{:.1} GiB", kb / 1024.0 / 1024.0),
        );
    let cores =
        std::thread::available_parallelism().map_or_else(|_| "unknown".into(), |n| n.to_string());
    let kernel = read("/proc/sys/kernel/osrelease").trim().to_string();
    vec![
        ("CPUs available (nproc)".into(), cores),
        ("CPU model".into(), cpu),
        ("memory".into(), mem),
        ("Linux kernel".into(), kernel),
    ]
}
