//! The bench's pictures, drawn beside the report (`docs/`) from the figures its tables show:
//!
//! - [`LATENCY`]: part 1's latency distributions, Tollgate against Powertools, per phase (new,
//!   duplicate), cache mode and concurrency level: each side's percentiles 0 to 99 (the 100th,
//!   one request's worst, would squash the rest).
//! - [`REQUESTS`]: part 1's DynamoDB requests per call by operation, and the capacity units AWS
//!   would bill per call (read, write), at concurrency 1, for both sides in both modes.
//!
//! Only a run that writes its report draws them, so a picture never shows other numbers than
//! the tables beside it.

use std::path::{Path, PathBuf};

use super::blocks::PhaseFigures;
use super::idempotency::{Idempotency, Level, Mode};
use super::report::Figures;
use super::BenchError;
use crate::plot::{self, Bar, BarPanel, LinePanel};

/// Part 1's latency distributions.
pub const LATENCY: &str = "bench-latency.svg";
/// Part 1's requests and billed units per call.
pub const REQUESTS: &str = "bench-requests.svg";

/// Draws what the figures hold into `dir`; returns the files drawn.
pub fn draw(figures: &Figures, dir: &Path) -> Result<Vec<PathBuf>, BenchError> {
    let Some(i) = &figures.idempotency else {
        return Ok(Vec::new());
    };
    Ok(vec![
        plot::lines(
            dir.join(LATENCY),
            "Part 1: latency, Tollgate against Powertools for Python",
            &latency(i),
            4,
        )?,
        plot::bars(
            dir.join(REQUESTS),
            "Part 1: DynamoDB work per call (concurrency 1)",
            &requests(i),
            2,
        )?,
    ])
}

fn mode_name(m: &Mode) -> &'static str {
    if m.cache > 0 {
        "local cache"
    } else {
        "no cache"
    }
}

/// A side's percentiles 0 to 99, as (ms, percentile) points.
fn curve(f: &PhaseFigures) -> Vec<(f64, f64)> {
    let percentiles = f.latency.percentiles.iter().take(100).enumerate();
    percentiles.map(|(p, ms)| (*ms, p as f64)).collect()
}

fn latency(i: &Idempotency) -> Vec<LinePanel> {
    let mut panels = Vec::new();
    for mode in &i.modes {
        for l in &mode.levels {
            for (phase, t, p) in [
                ("new", &l.tollgate.new, &l.powertools.new),
                ("duplicate", &l.tollgate.duplicate, &l.powertools.duplicate),
            ] {
                panels.push(LinePanel {
                    title: format!(
                        "{phase}, {}, concurrency {}",
                        mode_name(mode),
                        l.concurrency
                    ),
                    x_label: "latency (ms)".into(),
                    y_label: "percentile".into(),
                    series: vec![
                        ("Tollgate".into(), curve(t)),
                        ("Powertools".into(), curve(p)),
                    ],
                    marks: Vec::new(),
                    steps: false,
                });
            }
        }
    }
    panels
}

/// Concurrency 1 of each mode: the requests a call makes do not depend on the level.
fn requests(i: &Idempotency) -> Vec<BarPanel> {
    let groups = |bar: &dyn Fn(&str, &PhaseFigures) -> Bar| {
        i.modes
            .iter()
            .filter_map(|m| m.levels.iter().find(|l| l.concurrency == 1).map(|l| (m, l)))
            .flat_map(|(m, l): (&Mode, &Level)| {
                [
                    ("new", &l.tollgate.new, &l.powertools.new),
                    ("duplicate", &l.tollgate.duplicate, &l.powertools.duplicate),
                ]
                .map(|(phase, t, p)| {
                    (
                        format!("{phase}, {}", mode_name(m)),
                        vec![bar("T", t), bar("P", p)],
                    )
                })
            })
            .collect::<Vec<_>>()
    };
    let by_operation = |side: &str, f: &PhaseFigures| Bar {
        label: side.into(),
        parts: f
            .operations
            .iter()
            .map(|(op, n)| (op.clone(), *n as f64 / f.calls.max(1) as f64))
            .collect(),
    };
    let billed = |side: &str, f: &PhaseFigures| Bar {
        label: side.into(),
        parts: vec![
            ("read units".into(), f.capacity.billed.read),
            ("write units".into(), f.capacity.billed.write),
        ],
    };
    vec![
        BarPanel {
            title: "DynamoDB requests per call, by operation (T: Tollgate, P: Powertools)".into(),
            y_label: "requests per call".into(),
            groups: groups(&by_operation),
        },
        BarPanel {
            title: "capacity units AWS would bill per call (T: Tollgate, P: Powertools)".into(),
            y_label: "units per call".into(),
            groups: groups(&billed),
        },
    ]
}
