//! `bench`: the figures in `docs/benchmarks.md`, every one from one run, each part on tables of
//! its own in one DynamoDB Local: 1. [`idempotency`] against Powertools for Python, and the
//! [`floor`] (both in alternating [`blocks`]); 2. the [`limiter`]; 3. the function
//! [`binaries`] under the runtime API emulator; 4. [`schemathesis`]; with 1 to 3, the [`cost`]
//! per million. `cargo xtask bench` builds the binaries and installs the pinned Python tools;
//! this crate measures, and [`report`] renders the figures through `templates/bench*.md`, where
//! all the prose is.

mod binaries;
mod blocks;
mod capacity;
mod cost;
mod floor;
mod idempotency;
mod limiter;
mod pictures;
mod report;
mod transfer_app;

use crate::workspace_root;
mod schemathesis;
mod stats;

use std::collections::BTreeSet;
use std::path::PathBuf;

/// Warm-up calls before every measured phase (connections, caches), not measured.
const WARMUP: usize = 20;

/// What to bench (the options `cargo xtask bench` always had), and where the tools are.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Requests per measured phase.
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u32).range(1..))]
    pub n: u32,
    /// Only these parts (1 to 4, repeatable; 1 and 2 run together); the report then goes to
    /// stdout unless --report says otherwise.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=4))]
    pub part: Vec<u8>,
    /// Where to write the report (default: docs/benchmarks.md when every part runs, without
    /// --debug).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Part 1: the Python of the venv with Powertools and boto3.
    #[arg(long)]
    pub powertools_python: Option<PathBuf>,
    /// Part 4: the `schemathesis` of its venv.
    #[arg(long)]
    pub schemathesis: Option<PathBuf>,
    /// The binaries are debug builds: a smoke run (`cargo xtask bench --debug` builds nothing
    /// in release), whose report says so.
    #[arg(long)]
    pub debug: bool,
    /// For the report: DynamoDB Local's version.
    #[arg(long, default_value = "unknown")]
    pub dynamodb_local: String,
    /// For the report: `java -version`'s first line.
    #[arg(long, default_value = "unknown")]
    pub java: String,
}

impl Options {
    /// The parts to run: every part without `--part`; 2 means 1 (measured together).
    fn parts(&self) -> BTreeSet<u8> {
        if self.part.is_empty() {
            return BTreeSet::from([1, 3, 4]);
        }
        self.part
            .iter()
            .map(|&p| if p == 2 { 1 } else { p })
            .collect()
    }

    /// The cargo profiles of the function binaries and of this driver, for the report.
    fn functions_profile(&self) -> &'static str {
        if self.debug {
            "dev"
        } else {
            "release"
        }
    }

    fn driver_profile(&self) -> &'static str {
        if self.debug {
            "dev"
        } else {
            "bench-fast"
        }
    }

    /// The command that repeats this run, for the report.
    fn command(&self) -> String {
        let mut command = "cargo xtask bench".to_string();
        if self.n != 400 {
            command.push_str(&format!(" --n {}", self.n));
        }
        for p in &self.part {
            command.push_str(&format!(" --part {p}"));
        }
        if self.debug {
            command.push_str(" --debug");
        }
        command
    }
}

/// Why a run failed. A wrong answer fails the bench: timing errors would measure the wrong
/// thing.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("setup: {0}")]
    Setup(String),
    #[error("a wrong answer: {0}")]
    WrongAnswer(String),
    #[error("Powertools for Python: {0}")]
    Powertools(String),
    #[error("Schemathesis ({caller}) {what}; the end of its output:\n{tail}")]
    Schemathesis {
        caller: &'static str,
        what: String,
        tail: String,
    },
    #[error(transparent)]
    Lambda(#[from] crate::lambda::Error),
    /// With the causes of the error: an error in an included template is otherwise only
    /// "could not render include".
    #[error("the report: {error}{}", causes(error))]
    Report {
        #[from]
        error: minijinja::Error,
    },
    #[error(transparent)]
    Plot(#[from] crate::plot::PlotError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// `: cause: its cause ...` for each error under `e`.
fn causes(e: &dyn std::error::Error) -> String {
    let mut out = String::new();
    let mut next = e.source();
    while let Some(cause) = next {
        out.push_str(&format!(": {cause}"));
        next = cause.source();
    }
    out
}

impl BenchError {
    fn io(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.to_string();
        move |source| Self::Io { what, source }
    }
}

pub async fn run(global: &crate::Global, o: Options) -> Result<(), crate::Error> {
    let parts = o.parts();
    let n = o.n as usize;
    // Only a full run on the real profiles replaces the committed report.
    let report_path = o.report.clone().or_else(|| {
        (o.part.is_empty() && !o.debug).then(|| workspace_root().join("docs").join("benchmarks.md"))
    });
    let mut figures = report::Figures::new(&o, &parts);
    // Each part's start with the time so far: a full run takes several minutes.
    let started = std::time::Instant::now();
    let part = |what: String| {
        let s = started.elapsed().as_secs();
        println!("[{:>2}m{:02}s] {what}", s / 60, s % 60);
    };

    if parts.contains(&1) {
        let python = o
            .powertools_python
            .clone()
            .ok_or_else(|| BenchError::Setup("part 1 needs --powertools-python".into()))?;
        let script = workspace_root()
            .join("bench")
            .join("powertools_transfer.py");
        part(format!("part 1: Tollgate and Powertools in alternating blocks, {n} new + {n} duplicates each per concurrency level"));
        figures.idempotency = Some(idempotency::run(n, &python, &script).await?);
        part(format!(
            "part 1: a guarded new transfer against a bare TransactWriteItems, {n} each"
        ));
        figures.floor = Some(floor::run(n).await?);
        part(format!(
            "part 2: limiter vs bare UpdateItem, {n} calls each"
        ));
        figures.limiter = Some(limiter::run(n).await?);
    }
    let bin_dir = global.bin_dir()?;
    let bins = binaries::Binaries {
        dir: bin_dir,
        profile: o.functions_profile().into(),
    };
    if parts.contains(&3) {
        part("part 3: the functions' binaries under the runtime API emulator".into());
        figures.binaries = Some(binaries::run(&bins, n).await?);
    }
    if let (Some(i), Some(l), Some(b)) = (&figures.idempotency, &figures.limiter, &figures.binaries)
    {
        let path = workspace_root().join("template.yaml");
        let template = std::fs::read_to_string(&path).map_err(BenchError::io(path.display()))?;
        figures.cost = Some(cost::assemble(i, l, b, cost::Deployed::read(&template)?)?);
    }
    if parts.contains(&4) {
        part("part 4: Schemathesis against openapi.yaml through the HTTP front".into());
        let cli = o
            .schemathesis
            .clone()
            .ok_or_else(|| BenchError::Setup("part 4 needs --schemathesis".into()))?;
        figures.schemathesis = Some(schemathesis::run(&bins, &cli).await?);
    }

    let text = report::render(&figures)?;
    match report_path {
        Some(path) => {
            let dir = path.parent().unwrap_or(std::path::Path::new("."));
            for drawn in pictures::draw(&figures, dir)? {
                println!("picture drawn: {}", drawn.display());
            }
            std::fs::write(&path, &text).map_err(BenchError::io(path.display()))?;
            println!("report written to {}", path.display());
        }
        None => println!("\n{text}"),
    }
    Ok(())
}
