//! Checks of a data set before a fit: what would make the model
//! unidentifiable is a named error, what makes the fit doubtful is a
//! warning. Each names the column or the rows and the rule.

use rayon::prelude::*;

use crate::bms::MarginalSlope;
use crate::bms::{BmsData, BmsModel};
use crate::designs::first_where;
use crate::row_hessian::reduce_chunks;
use crate::{Error, Result};

/// Column names of the two designs (intercepts included), for messages.
pub struct ColumnNames<'a> {
    /// The marginal design's columns.
    pub marginal: &'a [String],
    /// The slope design's columns.
    pub slope: &'a [String],
}

/// A score whose sample mean is further than this from 0, or whose sample
/// standard deviation is further than this factor from 1, is not
/// standardised (a sample of n standard normals stays within both with
/// overwhelming probability for n >= 100).
pub const SCORE_MEAN_TOL: f64 = 0.25;
/// See [`SCORE_MEAN_TOL`].
pub const SCORE_SD_FACTOR: f64 = 1.5;

/// Check `data` for `model`: an error for labels of one class, fewer rows
/// than coefficients, a value beyond [`MAX_MAGNITUDE`], a non-zero column
/// below [`MIN_MAGNITUDE`], a mean weight outside [`WEIGHT_MEAN_RANGE`], a
/// constant or nearly constant covariate ([`MIN_RELATIVE_SPREAD`]),
/// covariates that are collinear (a rank-revealing eigen decomposition of
/// each design's correlation matrix, naming the columns involved), or a
/// covariate or the score that separates the labels; warnings for a score
/// that is not standardised, for a score with fewer distinct values than
/// the warp's basis can use, and for fewer than
/// [`MIN_EVENTS_PER_COEFFICIENT`] events per parametric coefficient.
pub fn check_data(model: &BmsModel, data: &BmsData, names: Option<ColumnNames<'_>>) -> Result<Vec<String>> {
    let n = data.n();
    let p = model.layout().p_total();
    let positives = data.y.iter().filter(|&&y| y == 1.0).count();
    if positives == 0 || positives == n {
        let class = if positives == 0 { 0 } else { 1 };
        return Err(Error::invalid(
            "y",
            format!("all {n} labels are {class}"),
            "a binary model needs both classes",
        ));
    }
    if n < p {
        return Err(Error::invalid(
            "rows",
            n,
            format!("the model has p = {p} coefficients: at least p rows are needed to estimate them"),
        ));
    }
    let generic = |prefix: &str, k: usize| -> Vec<String> { (0..k).map(|j| format!("{prefix} column {j}")).collect() };
    let (m_names, g_names) = match &names {
        Some(c) => (c.marginal.to_vec(), c.slope.to_vec()),
        None => (
            generic("marginal", data.designs.p_m()),
            generic("slope", data.designs.p_g()),
        ),
    };
    let d = &data.designs;
    check_magnitude("score", &data.z, 1, &["z".to_string()])?;
    check_magnitude("marginal", d.x_m(), d.p_m(), &m_names)?;
    check_magnitude("slope", d.x_g(), d.p_g(), &g_names)?;
    check_weights(&data.weights)?;
    // The checks below read the data only (bounded and finite by now), so
    // they run at once, each over its rows in fixed chunks across threads
    // (`chunk_sums`), and the first failure in this order is reported: on
    // 12M rows they took about a second of the fit one after another.
    let z_separates = || match separated_by("the score", &data.z, 1, 0, &data.y) {
        Some(rule) => Err(Error::invalid(
            "score",
            "separates the labels",
            format!(
                "{rule}: complete separation, the score's slope has no finite estimate (is the score the label, \
                 or computed from it?)"
            ),
        )),
        None => Ok(()),
    };
    let checks: [&(dyn Fn() -> Result<()> + Sync); 5] = [
        &|| check_design("marginal", d.x_m(), d.p_m(), &m_names),
        &|| check_design("slope", d.x_g(), d.p_g(), &g_names),
        &|| check_separation("marginal", d.x_m(), d.p_m(), &data.y, &m_names),
        &|| check_separation("slope", d.x_g(), d.p_g(), &data.y, &g_names),
        &z_separates,
    ];
    let (verdicts, mut warnings) = rayon::join(
        || checks.par_iter().map(|check| check()).collect::<Vec<_>>(),
        || score_warnings(model, &data.z),
    );
    verdicts.into_iter().collect::<Result<Vec<()>>>()?;
    warnings.extend(events_warning(model, positives, n));
    Ok(warnings)
}

/// Events per parametric coefficient below which a warning is given: the
/// common rule for logistic and probit models (Peduzzi et al. 1996), with
/// events the rows of the rarer label.
pub const MIN_EVENTS_PER_COEFFICIENT: usize = 10;

/// A warning when the rarer label has fewer than
/// [`MIN_EVENTS_PER_COEFFICIENT`] rows per parametric coefficient.
fn events_warning(model: &BmsModel, positives: usize, n: usize) -> Option<String> {
    let block = model.blocks();
    let coefficients = block.p_m + block.p_g;
    let (events, label) = if positives <= n - positives {
        (positives, 1)
    } else {
        (n - positives, 0)
    };
    (events < MIN_EVENTS_PER_COEFFICIENT * coefficients).then(|| {
        format!(
            "only {events} of {n} rows have y = {label}: fewer than {MIN_EVENTS_PER_COEFFICIENT} events per \
             parametric coefficient ({coefficients}), so estimates and standard errors may be unreliable and the \
             fit may not converge; use fewer covariates or more data"
        )
    })
}

/// The mean weight must lie in this range: weights count rows, so a mean
/// of 1e12 weighs every row as 1e12 rows (the penalties vanish beside the
/// likelihood) and 1e-12 as almost none (the likelihood vanishes beside
/// them); either leaves the penalised Hessian without the digits it needs.
pub const WEIGHT_MEAN_RANGE: (f64, f64) = (1e-6, 1e6);

/// Weights whose mean is outside [`WEIGHT_MEAN_RANGE`] are an error.
fn check_weights(w: &[f64]) -> Result<()> {
    let mean = w.iter().sum::<f64>() / w.len().max(1) as f64;
    let (lo, hi) = WEIGHT_MEAN_RANGE;
    if mean.is_finite() && (lo..=hi).contains(&mean) {
        return Ok(());
    }
    Err(Error::invalid(
        "weights",
        format!("mean {mean:.3e}"),
        format!(
            "the mean weight must lie within [{lo:e}, {hi:e}]: weights count rows, so every row would count as \
             {mean:.3e} rows; rescale them (divide by their mean) unless they are frequencies"
        ),
    ))
}

/// Values beyond this magnitude overflow the model's products (squares of
/// the linear predictor, cubic cell polynomials) before any fit.
pub const MAX_MAGNITUDE: f64 = 1e100;

/// A column whose largest |value| is below this (and not zero) underflows
/// the model's products: the Hessian and the column's scale hold squares of
/// its values (times row curvatures that can be far below 1), which leave
/// the normal doubles below about 1e-154. Fits are the same, scaled, for a
/// covariate multiplied by anything from 1e-90 to 1e90
/// (`tests/fit_bms_cli.rs`).
pub const MIN_MAGNITUDE: f64 = 1e-100;

/// A value too large for the model's arithmetic, named by column and row,
/// or a column too small for it, named.
fn check_magnitude(what: &str, x: &[f64], p: usize, names: &[String]) -> Result<()> {
    let p = p.max(1);
    let name = |j: usize| names.get(j).cloned().unwrap_or_default();
    if let Some(k) = first_where(x, |v| v.abs() > MAX_MAGNITUDE) {
        return Err(Error::invalid(
            format!("{what} '{}', row {}", name(k % p), k / p + 1),
            format!("{:e}", x[k]),
            format!("|value| must be at most {MAX_MAGNITUDE:e} (the model squares and cubes it); rescale the column"),
        ));
    }
    // Maxima are exact in any order.
    let largest = x
        .par_chunks(CHUNK_ROWS * p)
        .map(|rows| {
            let mut m = vec![0.0f64; p];
            for row in rows.chunks_exact(p) {
                m.iter_mut().zip(row).for_each(|(m, v)| *m = m.max(v.abs()));
            }
            m
        })
        .reduce(
            || vec![0.0; p],
            |a, b| a.iter().zip(&b).map(|(a, b)| a.max(*b)).collect(),
        );
    for (j, &largest) in largest.iter().enumerate() {
        if largest > 0.0 && largest < MIN_MAGNITUDE {
            return Err(Error::invalid(
                format!("{what} '{}'", name(j)),
                format!("largest |value| {largest:e}"),
                format!(
                    "must be at least {MIN_MAGNITUDE:e} (the model's Hessian holds its square, which would \
                     underflow); rescale the column"
                ),
            ));
        }
    }
    Ok(())
}

/// Complete separation by one covariate (a label copied into a covariate,
/// say): every estimate would run to infinity, so it is an error.
fn check_separation(design: &str, x: &[f64], p: usize, y: &[f64], names: &[String]) -> Result<()> {
    for j in 1..p {
        let name = names.get(j).cloned().unwrap_or_else(|| format!("column {j}"));
        if let Some(rule) = separated_by(&format!("{design} covariate '{name}'"), x, p, j, y) {
            return Err(Error::invalid(
                format!("{design} covariate '{name}'"),
                "separates the labels",
                format!("{rule}: complete separation, no finite maximum likelihood estimate"),
            ));
        }
    }
    Ok(())
}

/// Rows a parallel task of the checks takes: a fixed size, so that sums
/// combine in the same order whatever the thread count.
const CHUNK_ROWS: usize = 1 << 16;

/// Per chunk of [`CHUNK_ROWS`] rows of the n x p row-major `x`, `len`
/// accumulators from 0 updated by `add(row, acc)` row by row, added in
/// chunk order ([`reduce_chunks`]).
fn chunk_sums(x: &[f64], p: usize, len: usize, add: impl Fn(&[f64], &mut [f64]) + Sync) -> Vec<f64> {
    let p = p.max(1);
    reduce_chunks(x.len() / p, len, CHUNK_ROWS, |rows, acc| {
        x[rows.start * p..rows.end * p]
            .chunks_exact(p)
            .for_each(|row| add(row, acc))
    })
}

/// Whether a threshold on column j of the n x p row-major `x` splits the
/// labels exactly. Ranges are exact in any order, so the rows are split
/// across threads.
fn separated_by(what: &str, x: &[f64], p: usize, j: usize, y: &[f64]) -> Option<String> {
    type Ranges = [(f64, f64); 2];
    const EMPTY: Ranges = [(f64::INFINITY, f64::NEG_INFINITY); 2];
    let merge = |a: Ranges, b: Ranges| [0, 1].map(|k| (a[k].0.min(b[k].0), a[k].1.max(b[k].1)));
    let ranges = x
        .par_chunks(CHUNK_ROWS * p)
        .zip(y.par_chunks(CHUNK_ROWS))
        .map(|(rows, labels)| {
            let mut r = EMPTY;
            for (row, &label) in rows.chunks_exact(p).zip(labels) {
                let (v, k) = (row[j], usize::from(label == 1.0));
                r[k] = (r[k].0.min(v), r[k].1.max(v));
            }
            r
        })
        .reduce(|| EMPTY, merge);
    let [(lo0, hi0), (lo1, hi1)] = ranges;
    if hi0 < lo1 {
        Some(format!("{what} is below {lo1} exactly where y = 0"))
    } else if hi1 < lo0 {
        Some(format!("{what} is below {lo0} exactly where y = 1"))
    } else {
        None
    }
}

/// A covariate whose standard deviation is below this fraction of its
/// |mean| is nearly constant: the Hessian's condition number grows as
/// (mean / sd)^2, and beyond 1e12 its factorisation keeps too few digits.
pub const MIN_RELATIVE_SPREAD: f64 = 1e-6;

/// Constant and collinear columns of an n x p design whose column 0 is the
/// intercept.
fn check_design(design: &str, x: &[f64], p: usize, names: &[String]) -> Result<()> {
    let n = x.len() / p.max(1);
    let name = |j: usize| names.get(j).cloned().unwrap_or_else(|| format!("column {j}"));
    let mean = chunk_sums(x, p, p, |row, m| {
        m.iter_mut().zip(row).for_each(|(m, v)| *m += v / n as f64)
    });
    let mut sd = chunk_sums(x, p, p, |row, s| {
        s.iter_mut()
            .zip(row)
            .zip(&mean)
            .for_each(|((s, v), m)| *s += (v - m).powi(2))
    });
    sd.iter_mut().for_each(|s| *s = (*s / n as f64).sqrt());
    for j in 1..p {
        // A NaN spread (cannot happen for finite designs) counts as constant.
        if sd[j].is_nan() || sd[j] <= 1e-12 * mean[j].abs().max(1e-300) {
            return Err(Error::invalid(
                format!("{design} covariate '{}'", name(j)),
                format!("constant {}", x[j]),
                "a constant covariate duplicates the intercept; drop it",
            ));
        }
        if sd[j] < MIN_RELATIVE_SPREAD * mean[j].abs() {
            return Err(Error::invalid(
                format!("{design} covariate '{}'", name(j)),
                format!("mean {:.6e}, sd {:.3e}", mean[j], sd[j]),
                format!(
                    "it varies by less than {MIN_RELATIVE_SPREAD:e} of its mean, so the Hessian cannot tell it from \
                     the intercept in double precision; centre it (subtract about {:.3e})",
                    mean[j]
                ),
            ));
        }
    }
    if p <= 2 {
        return Ok(());
    }
    // The correlation matrix of the covariates (intercept excluded): an
    // eigenvalue near zero is a linear dependence; its eigenvector names
    // the columns in it.
    let k = p - 1;
    let inv_sd: Vec<f64> = sd.iter().map(|s| 1.0 / s).collect();
    let products = chunk_sums(x, p, k * k, |row, c| {
        let u = |a: usize| (row[a + 1] - mean[a + 1]) * inv_sd[a + 1];
        for a in 0..k {
            let ua = u(a);
            c[a * k..(a + 1) * k]
                .iter_mut()
                .enumerate()
                .for_each(|(b, c)| *c += ua * u(b));
        }
    });
    let c: Vec<f64> = products.iter().map(|v| v / n as f64).collect();
    let (values, vectors) = matfree_solvers::symmetric_eigen(k, &c)?;
    if values[0] < 1e-8 * values[k - 1] {
        let involved: Vec<String> = (0..k)
            .filter(|&a| vectors[a * k].abs() > 0.1)
            .map(|a| format!("'{}'", name(a + 1)))
            .collect();
        return Err(Error::invalid(
            format!("{design} covariates {}", involved.join(", ")),
            format!("smallest correlation eigenvalue {:.1e}", values[0]),
            "these covariates are collinear (one is a linear combination of the others); drop one",
        ));
    }
    Ok(())
}

/// The sample mean and standard deviation (divisor n) of the score.
pub fn score_moments(z: &[f64]) -> (f64, f64) {
    let n = z.len() as f64;
    let mean = z.iter().sum::<f64>() / n;
    let sd = (z.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    (mean, sd)
}

/// Whether a score of this mean and sd counts as standardised
/// ([`SCORE_MEAN_TOL`], [`SCORE_SD_FACTOR`]).
pub fn is_standardised(mean: f64, sd: f64) -> bool {
    mean.abs() <= SCORE_MEAN_TOL && sd > 1.0 / SCORE_SD_FACTOR && sd < SCORE_SD_FACTOR
}

/// Warnings about the score: not standardised, or too few distinct values.
fn score_warnings(model: &BmsModel, z: &[f64]) -> Vec<String> {
    let (mean, sd) = score_moments(z);
    let mut out = Vec::new();
    if !is_standardised(mean, sd) {
        out.push(format!(
            "the score is not standardised (mean {mean:.3}, sd {sd:.3}): the model assumes z ~ N(0, 1), so its \
             calibration and warp are fitted for a score that is not this one; standardise it"
        ));
    }
    let p_h = model.bases().p_h();
    let distinct = distinct_up_to(z, p_h + 1);
    if p_h > 0 && distinct <= p_h {
        out.push(format!(
            "the score takes {distinct} distinct values for a warp basis of {p_h}: the warp is identified only \
             through its penalty"
        ));
    }
    out
}

/// The number of distinct values in `v` (by `==`), counted up to `cap`:
/// one pass that stops once `cap` are seen, where sorting a copy of the
/// scores cost a quarter of the checks' time (0.12 -> 0.09 us a row).
fn distinct_up_to(v: &[f64], cap: usize) -> usize {
    let mut seen: Vec<f64> = Vec::with_capacity(cap);
    for &x in v {
        if seen.len() >= cap {
            break;
        }
        if !seen.contains(&x) {
            seen.push(x);
        }
    }
    seen.len()
}

/// Standardise the score in place when it is not standardised (the rule of
/// [`check_data`]), returning the note that says how and the (mean, sd) used.
pub fn standardise_score(z: &mut [f64], column: &str) -> Option<(String, (f64, f64))> {
    let (mean, sd) = score_moments(z);
    let standard = is_standardised(mean, sd);
    // A spread that is zero or overflows is left to check_data to name.
    if standard || !sd.is_finite() || sd <= 0.0 {
        return None;
    }
    z.iter_mut().for_each(|v| *v = (*v - mean) / sd);
    let note = format!(
        "score '{column}' standardised: the model assumes z ~ N(0, 1), and it had mean {mean:.4} and sd {sd:.4}; \
         the fit uses (z - {mean:.4}) / {sd:.4} (--keep-score fits it as given)"
    );
    Some((note, (mean, sd)))
}

#[cfg(test)]
mod tests {
    use super::distinct_up_to;
    use super::{check_design, check_magnitude, separated_by, CHUNK_ROWS, MAX_MAGNITUDE};

    /// The checks split rows into chunks across threads: what they find
    /// must not depend on where a chunk ends. The first offending row
    /// (several chunks in), a separation broken by one row of the last
    /// chunk, and a dependence among columns are found as a sequential
    /// pass finds them.
    #[test]
    fn chunked_checks_find_what_a_sequential_pass_finds() {
        let (n, p) = (3 * CHUNK_ROWS + 17, 3);
        let mut rng = crate::rng::Rng::new(11);
        let mut x: Vec<f64> = (0..n * p)
            .map(|k| if k % p == 0 { 1.0 } else { rng.normal() })
            .collect();
        let names: Vec<String> = ["(Intercept)", "a", "b"].map(String::from).to_vec();
        assert!(check_magnitude("marginal", &x, p, &names).is_ok());
        for row in [2 * CHUNK_ROWS + 5, CHUNK_ROWS + 3] {
            x[row * p + 2] = 2.0 * MAX_MAGNITUDE;
        }
        let err = check_magnitude("marginal", &x, p, &names).unwrap_err().to_string();
        assert!(err.contains(&format!("'b', row {}", CHUNK_ROWS + 4)), "{err}");
        x[(CHUNK_ROWS + 3) * p + 2] = 0.5;
        x[(2 * CHUNK_ROWS + 5) * p + 2] = -0.5;

        // y = 1 exactly where column a is above 0, but for one row near
        // the end: separated without it, not with it.
        let mut y: Vec<f64> = (0..n).map(|i| f64::from(x[i * p + 1] > 0.0)).collect();
        assert!(separated_by("a", &x, p, 1, &y).is_some());
        let last = n - 3;
        y[last] = 1.0 - y[last];
        assert_eq!(separated_by("a", &x, p, 1, &y), None);

        assert!(check_design("marginal", &x, p, &names).is_ok());
        // b = 2 a - 1 (up to rounding): collinear.
        for i in 0..n {
            x[i * p + 2] = 2.0 * x[i * p + 1] - 1.0;
        }
        let err = check_design("marginal", &x, p, &names).unwrap_err().to_string();
        assert!(
            err.contains("collinear") && err.contains("'a'") && err.contains("'b'"),
            "{err}"
        );
    }

    /// Counted up to the cap, the distinct values are those of a sorted,
    /// deduplicated copy: ties, both zeros (equal), values in any order.
    #[test]
    fn distinct_values_are_counted_up_to_the_cap() {
        let sorted_count = |v: &[f64]| {
            let mut d = v.to_vec();
            d.sort_by(f64::total_cmp);
            d.dedup();
            d.len()
        };
        let mut rng = crate::rng::Rng::new(7);
        for levels in [1, 2, 5, 9, 10, 40] {
            let v: Vec<f64> = (0..2000)
                .map(|_| (rng.uniform() * levels as f64).floor() - 3.0)
                .collect();
            let all = sorted_count(&v);
            for cap in [1, 4, 9, 10, 100] {
                assert_eq!(distinct_up_to(&v, cap), all.min(cap), "levels {levels}, cap {cap}");
            }
        }
        assert_eq!(distinct_up_to(&[0.0, -0.0, 0.0], 10), sorted_count(&[0.0, -0.0, 0.0]));
        assert_eq!(distinct_up_to(&[], 3), 0);
    }
}
