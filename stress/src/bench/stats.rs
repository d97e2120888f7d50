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

/// The one-sided p-value of an exact Mann-Whitney rank test that `a`'s values tend to be
/// greater than `b`'s: the chance, if both were drawn from the same distribution, of a rank sum
/// for `a` at least as large as the one measured. Small means "`a` is slower" is hard to put
/// down to chance. Exact (every ordering of the pooled values counted, by the usual recurrence),
/// so it holds for the few dozen samples a part measures; a tie counts half, rounded against
/// `a`. NaN when either side is empty.
pub fn greater_p(a: &[f64], b: &[f64]) -> f64 {
    let (m, n) = (a.len(), b.len());
    if m == 0 || n == 0 {
        return f64::NAN;
    }
    // U: the pairs (x in a, y in b) with x > y, a tie counting half (rounded down: against a).
    let twice: usize = a
        .iter()
        .flat_map(|x| b.iter().map(move |y| (x, y)))
        .map(|(x, y)| match x.total_cmp(y) {
            std::cmp::Ordering::Greater => 2,
            std::cmp::Ordering::Equal => 1,
            std::cmp::Ordering::Less => 0,
        })
        .sum();
    let u = twice / 2;
    // ways[j][v]: orderings of i values of a and j of b with U = v (i the outer loop). The
    // largest of i + j values is either a's (above all j of b's: v - j from i - 1, j) or b's
    // (nothing added: v from i, j - 1).
    let mut ways: Vec<Vec<f64>> = (0..=n).map(|_| vec![1.0]).collect();
    for i in 1..=m {
        let mut next: Vec<Vec<f64>> = Vec::with_capacity(n + 1);
        next.push(vec![1.0]);
        for j in 1..=n {
            let mut row = vec![0.0; i * j + 1];
            for (v, w) in ways[j].iter().enumerate() {
                row[v + j] += w;
            }
            for (v, w) in next[j - 1].iter().enumerate() {
                row[v] += w;
            }
            next.push(row);
        }
        ways = next;
    }
    let all = &ways[n];
    let total: f64 = all.iter().sum();
    all[u..].iter().sum::<f64>() / total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_test_p_values_match_the_exact_distribution() {
        // 3 against 3: 20 orderings, one with U = 9 (all of a above all of b), one with U = 8.
        let low = [1.0, 2.0, 3.0];
        let high = [4.0, 5.0, 6.0];
        assert!((greater_p(&high, &low) - 1.0 / 20.0).abs() < 1e-12);
        assert!((greater_p(&[3.5, 5.0, 6.0], &[1.0, 2.0, 4.0]) - 2.0 / 20.0).abs() < 1e-12);
        // The other way round nothing is surprising.
        assert!((greater_p(&low, &high) - 1.0).abs() < 1e-12);
        // 10 against 10, a entirely above: 1 / C(20, 10).
        let a: Vec<f64> = (10..20).map(f64::from).collect();
        let b: Vec<f64> = (0..10).map(f64::from).collect();
        assert!((greater_p(&a, &b) - 1.0 / 184_756.0).abs() < 1e-15);
        // The same values on both sides: about half.
        let p = greater_p(&b, &b);
        assert!(p > 0.4 && p < 0.6, "{p}");
        assert!(greater_p(&[], &b).is_nan());
    }

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
