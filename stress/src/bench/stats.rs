//! The few statistics every part reports, computed one way for all of them (and for both sides
//! of part 1, so Tollgate and Powertools are summarised by the same code).

use std::time::Duration;

use serde::Serialize;

/// Milliseconds, the unit of every latency in the report.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Microseconds: the unit latencies are recorded in, so quantiles are exact to the microsecond
/// below 1 ms and to three significant digits above.
const PER_MS: f64 = 1000.0;
/// The longest latency recorded as itself (an hour, in microseconds); longer ones count as this.
const HIGHEST_US: u64 = 3_600_000_000;

/// `values` (ms) in an HDR histogram (`hdrhistogram`, three significant digits: a quantile is
/// within 0.1% of a value that was measured).
fn histogram(values: &[f64]) -> hdrhistogram::Histogram<u64> {
    let mut h = hdrhistogram::Histogram::new_with_bounds(1, HIGHEST_US, 3)
        .expect("1 us to an hour at 3 significant digits is a valid histogram");
    for v in values {
        // Rounded to the microsecond, into the histogram's range (no latency here nears an hour).
        h.saturating_record((v * PER_MS).round() as u64);
    }
    h
}

/// The `q`-quantile of `values` (NaN for no values), from their histogram.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    Quantiles::at(values, &[q])[0]
}

/// Median and 90th percentile of a set of latencies, and the percentiles 0 to 100 for the
/// pictures (not in the report's tables).
#[derive(Debug, Clone, Serialize)]
pub struct Quantiles {
    pub median: f64,
    pub p90: f64,
    #[serde(skip)]
    pub percentiles: Vec<f64>,
}

impl Quantiles {
    pub fn of(values: &[f64]) -> Self {
        let at = Self::at(values, &[0.5, 0.9]);
        let all: Vec<f64> = (0..=100).map(|p| f64::from(p) / 100.0).collect();
        Self {
            median: at[0],
            p90: at[1],
            percentiles: Self::at(values, &all)
                .into_iter()
                .filter(|p| !p.is_nan())
                .collect(),
        }
    }

    /// The `qs`-quantiles of `values` (NaN for no values): the bottom of each quantile's bucket,
    /// a measured value exactly when it is a bucket's first, within 0.1% below it otherwise (the
    /// same rounding on every side compared).
    fn at(values: &[f64], qs: &[f64]) -> Vec<f64> {
        let h = (!values.is_empty()).then(|| histogram(values));
        let at = |q| {
            h.as_ref().map_or(f64::NAN, |h| {
                h.lowest_equivalent(h.value_at_quantile(q)) as f64 / PER_MS
            })
        };
        qs.iter().map(|q| at(*q)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_measured_values_to_three_significant_digits() {
        let values: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        let q = Quantiles::of(&values);
        assert_eq!((q.median, q.p90), (5.0, 9.0));
        assert_eq!((q.percentiles[0], q.percentiles[100]), (1.0, 10.0));
        assert_eq!(quantile(&[7.0], 0.9), 7.0);
        // Below 1 ms to the microsecond; above, within 0.1%.
        assert_eq!(quantile(&[0.123], 0.5), 0.123);
        let big = quantile(&[123.456], 0.5);
        assert!((big - 123.456).abs() / 123.456 < 1e-3, "{big}");
        assert!(quantile(&[], 0.5).is_nan());
    }
}
