//! `bench`: the figures in `docs/benchmarks.md` (engineer E moves it here).

use std::path::PathBuf;

/// What to bench (the same options as `cargo xtask bench` had).
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Requests per phase.
    #[arg(long, default_value_t = 400)]
    pub n: usize,
    /// Only these parts (1 to 4; 1 and 2 run together).
    #[arg(long)]
    pub part: Vec<u8>,
    /// Where to write the report.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

pub async fn run(_o: Options) -> Result<(), crate::Error> {
    Err("bench: not implemented yet".into())
}
