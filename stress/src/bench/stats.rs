//! The few statistics every part reports, computed one way for all of them (and for both sides
//! of part 1, so Tollgate and Powertools are summarised by the same code).

use std::time::Duration;

use serde::Serialize;

/// Milliseconds, the unit of every latency in the report.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `q`-quantile of `values` by nearest rank (NaN for no values): a value that was measured,
/// not an interpolation between two.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Median and 90th percentile of a set of latencies.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Quantiles {
    pub median: f64,
    pub p90: f64,
}

impl Quantiles {
    pub fn of(values: &[f64]) -> Self {
        Self {
            median: quantile(values, 0.5),
            p90: quantile(values, 0.9),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let values: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        let q = Quantiles::of(&values);
        assert_eq!((q.median, q.p90), (5.0, 9.0));
        assert_eq!(quantile(&[7.0], 0.9), 7.0);
        assert!(quantile(&[], 0.5).is_nan());
    }
}
