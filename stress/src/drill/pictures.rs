//! The drill's pictures, drawn beside its report (`docs/`) from the figures its tables show:
//!
//! - [`BOUNDARY`]: the bursts across a window boundary, admissions so far against the time of
//!   each answer: a fixed window admits its limit again just after the boundary, a sliding one
//!   does not.
//! - [`REJECTIONS`]: DynamoDB requests per rejected request, per drill, with the block cache,
//!   without it, and with sliding windows and a sharded cap.

use std::path::{Path, PathBuf};

use super::drills::Figures;
use crate::plot::{self, Bar, BarPanel, LinePanel, PlotError};

/// Admissions over time across a window boundary.
pub const BOUNDARY: &str = "drill-boundary.svg";
/// Requests per rejection by drill and phase.
pub const REJECTIONS: &str = "drill-rejections.svg";

/// Draws what the figures hold into `dir`; returns the files drawn.
pub fn draw(f: &Figures, dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    let mut drawn = Vec::new();
    if !f.bursts.is_empty() {
        let limit = f.bursts.iter().map(|b| b.bound).min().unwrap_or(0) as f64;
        let panel = LinePanel {
            title: "the limit's worth just before a window boundary, and again just after".into(),
            x_label: "answer received (ms from the window boundary)".into(),
            y_label: "requests admitted so far".into(),
            series: f
                .bursts
                .iter()
                .map(|b| {
                    let points = b.timeline.iter().map(|(t, n)| (*t, *n as f64)).collect();
                    (format!("{} ({})", b.limit, b.phase), points)
                })
                .collect(),
            marks: vec![
                (format!("limit {limit}"), limit),
                ("2 x limit".to_string(), 2.0 * limit),
            ],
            steps: true,
        };
        drawn.push(plot::lines(
            dir.join(BOUNDARY),
            "Drill: a burst across a window boundary",
            &[panel],
            1,
        )?);
    }
    if !f.costs.is_empty() {
        // Drills in the order they first appear, each with its phases' bars.
        let mut groups: Vec<(String, Vec<Bar>)> = Vec::new();
        for c in &f.costs {
            let per = c.total as f64 / c.rejected.max(1) as f64;
            let bar = Bar {
                label: String::new(),
                parts: vec![(c.phase.to_string(), per)],
            };
            match groups.iter_mut().find(|(d, _)| *d == c.drill) {
                Some((_, bars)) => bars.push(bar),
                None => groups.push((c.drill.clone(), vec![bar])),
            }
        }
        let panel = BarPanel {
            title: "DynamoDB requests per rejected request (against a key already full)".into(),
            y_label: "requests per rejection".into(),
            groups,
        };
        drawn.push(plot::bars(
            dir.join(REJECTIONS),
            "Drill: what a rejection costs, by drill and block cache",
            &[panel],
            1,
        )?);
    }
    Ok(drawn)
}
