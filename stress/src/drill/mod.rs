//! `drill`: attack drills against the rate limits. (Work in progress.)

use std::path::PathBuf;

/// What to drill (the same options as `cargo xtask drill` had).
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Windows of 5 s instead of 10 s, and no report unless --report (what `cargo xtask test` runs).
    #[arg(long)]
    pub short: bool,
    /// Where to write the report (the full run writes docs/drill.md by default).
    #[arg(long)]
    pub report: Option<PathBuf>,
}

pub async fn run(_global: &crate::Global, _o: Options) -> Result<(), crate::Error> {
    Err("drill: not implemented yet".into())
}
