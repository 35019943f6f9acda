//! Seeded random fixtures for tests, benches and examples: full-rank
//! row-Hessian problems (and the generator, re-exported). Behind the
//! `testing` feature, which the crate's own tests, benches and examples
//! turn on: not part of the library's API.

use std::sync::Arc;

pub use crate::rng::Rng;
use crate::row_hessian::RowHessian;
use crate::Result;

/// Shape of a generated row-Hessian problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shape {
    /// Rows.
    pub n: usize,
    /// Marginal design width.
    pub p_m: usize,
    /// Slope design width.
    pub p_g: usize,
    /// Score-warp block width.
    pub p_h: usize,
    /// Link-deviation block width.
    pub p_w: usize,
}

impl Shape {
    /// The seed shape of the benchmarks (n = 195,000, r = 20, p = 44).
    pub const SEED: Shape = Shape {
        n: 195_000,
        p_m: 14,
        p_g: 12,
        p_h: 10,
        p_w: 8,
    };
}

/// Random symmetric positive definite row Hessians,
/// H_i = diag(d) + u u^T + v v^T with d in [0.5, 1.5]: full rank, cheap to
/// make at any r.
pub fn random_row_hessians(rng: &mut Rng, n: usize, r: usize) -> Vec<f64> {
    let mut hess = vec![0.0; n * r * r];
    let (mut u, mut v) = (vec![0.0; r], vec![0.0; r]);
    for h in hess.chunks_mut(r * r) {
        u.iter_mut().chain(v.iter_mut()).for_each(|x| *x = rng.normal() * 0.5);
        for a in 0..r {
            for b in 0..r {
                h[a * r + b] = u[a] * u[b] + v[a] * v[b];
            }
            h[a * r + a] += 0.5 + rng.uniform();
        }
    }
    hess
}

/// A random full-rank row-Hessian problem. Column j of each design is scaled
/// by `10^(-decades * j / (p - 1))`, so `decades = 3` gives a joint Hessian
/// with condition number around 1e6 or more.
pub fn random_row_problem(shape: Shape, decades: f64, seed: u64) -> Result<RowHessian> {
    let mut rng = Rng::new(seed);
    let Shape { n, p_m, p_g, p_h, p_w } = shape;
    let layout = crate::bms::standard_layout(p_m, p_g, p_h, p_w)?;
    let scale = |j: usize, p: usize| 10f64.powf(-decades * j as f64 / (p.max(2) - 1) as f64);
    let design = |rng: &mut Rng, p: usize| -> Vec<f64> { (0..n * p).map(|k| rng.normal() * scale(k % p, p)).collect() };
    let x_m = design(&mut rng, p_m);
    let x_g = design(&mut rng, p_g);
    let designs = Arc::new(crate::bms::marginal_slope_designs(n, p_m, p_g, x_m, x_g)?);
    let hess = random_row_hessians(&mut rng, n, layout.r());
    RowHessian::new(layout, designs, hess)
}

/// A random full-rank row-Hessian problem for any layout: one standard
/// normal design per predictor, random row Hessians.
pub fn random_layout_problem(n: usize, blocks: &[crate::layout::Block], seed: u64) -> Result<RowHessian> {
    let mut rng = Rng::new(seed);
    let layout = crate::layout::Layout::new(blocks)?;
    let designs = layout
        .design_widths()
        .into_iter()
        .map(|p| (p, (0..n * p).map(|_| rng.normal()).collect()))
        .collect();
    let designs = Arc::new(crate::designs::Designs::new(n, designs)?);
    let hess = random_row_hessians(&mut rng, n, layout.r());
    RowHessian::new(layout, designs, hess)
}
