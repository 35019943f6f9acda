//! The order in which Stage 1's threads take the rows. A thread a row
//! (`bms_calibrate`) or a slot of 32 rows a warp (`bms_cell_moments`) runs
//! the row's quadrature and root-finding, whose paths (cells, panels,
//! iterations) follow the row's intercept and slope; rows drawn in data
//! order put unlike rows in a warp, whose lanes then wait for each other.
//! Taken in the order of (slope, intercept) instead, a warp's rows are
//! alike. Each row's arithmetic and the place of its results are the same
//! whatever the order, so the order changes no value, only the time: 1M
//! messy rows (`tools/messy_data.py`) cost 214 ns a row an evaluation in
//! data order and 70 in this order (H100, benches/RESULTS.md, session 28).

/// Bins of the slope b, each split into [`INTERCEPT_BINS`] bins of q.
const SLOPE_BINS: u32 = 64;
/// Bins of the marginal predictor q within a slope bin.
const INTERCEPT_BINS: u32 = 4096;

/// The rows `0..q.len()` in the order Stage 1's threads take them: by bin
/// of the slope `b`, then by bin of the marginal predictor `q` (the
/// intercept's closed-form start is `q sqrt(1 + b^2)`), equal-width bins
/// over each one's finite range (a non-finite value in the last bin), rows
/// of one bin pair in index order. A counting sort: linear in the rows (a
/// comparison sort took a second for 6M rows on one thread).
pub(super) fn work_order(q: &[f64], b: &[f64]) -> Vec<u32> {
    let (bin_b, bin_q) = (binner(b, SLOPE_BINS), binner(q, INTERCEPT_BINS));
    let keys: Vec<u32> = q
        .iter()
        .zip(b)
        .map(|(&q, &b)| bin_b(b) * INTERCEPT_BINS + bin_q(q))
        .collect();
    let mut start = vec![0u32; (SLOPE_BINS * INTERCEPT_BINS) as usize + 1];
    for &k in &keys {
        start[k as usize + 1] += 1;
    }
    for k in 1..start.len() {
        start[k] += start[k - 1];
    }
    let mut rows = vec![0u32; keys.len()];
    for (i, &k) in keys.iter().enumerate() {
        rows[start[k as usize] as usize] = i as u32;
        start[k as usize] += 1;
    }
    rows
}

/// The bin of a value among `count` equal-width bins over the finite range
/// of `x`; a non-finite value goes to the last.
fn binner(x: &[f64], count: u32) -> impl Fn(f64) -> u32 {
    let finite = x.iter().filter(|v| v.is_finite());
    let lo = finite.clone().fold(f64::INFINITY, |m, &v| m.min(v));
    let hi = finite.fold(f64::NEG_INFINITY, |m, &v| m.max(v));
    let width = (hi - lo) / count as f64;
    move |v: f64| {
        if !v.is_finite() {
            count - 1
        } else if width > 0.0 {
            (((v - lo) / width) as u32).min(count - 1)
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A permutation in which the (slope bin, intercept bin) never falls
    /// and rows of one bin pair keep their index order; non-finite values
    /// go last, a constant column to one bin.
    #[test]
    fn rows_are_ordered_by_slope_bin_then_intercept_bin() {
        let n: usize = 20_000;
        let mut s = 12345u64;
        let mut draw = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        let (mut q, mut b): (Vec<f64>, Vec<f64>) = (0..n).map(|_| (draw() * 7.0, draw())).unzip();
        (q[5], b[9]) = (f64::NAN, f64::INFINITY);
        let order = work_order(&q, &b);
        let mut seen = order.clone();
        seen.sort_unstable();
        assert_eq!(seen, (0..n as u32).collect::<Vec<_>>());
        let (bin_b, bin_q) = (binner(&b, SLOPE_BINS), binner(&q, INTERCEPT_BINS));
        let key = |i: u32| (bin_b(b[i as usize]), bin_q(q[i as usize]), i);
        assert!(order.windows(2).all(|w| key(w[0]) < key(w[1])));
        assert_eq!(bin_b(b[9]), SLOPE_BINS - 1);
        assert_eq!(bin_q(q[5]), INTERCEPT_BINS - 1);
        // Within a slope bin, q rises from one intercept bin to the next.
        let groups = order.chunk_by(|&i, &j| bin_b(b[i as usize]) == bin_b(b[j as usize]));
        for g in groups {
            let finite: Vec<f64> = g.iter().map(|&i| q[i as usize]).filter(|v| v.is_finite()).collect();
            let w = 7.0 / INTERCEPT_BINS as f64;
            assert!(finite.windows(2).all(|p| p[1] > p[0] - w), "q falls by more than a bin");
        }
        let same = vec![2.0; 10];
        assert_eq!(work_order(&same, &same), (0..10).collect::<Vec<u32>>());
    }
}
