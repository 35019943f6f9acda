//! A GLM whose rows are convex in eta (binomial logit here) tells REML so
//! ([`Objective::convex`]), which then skips its check for a lower minimum
//! from the start. Without the claim REML skips it as well, having seen
//! H + S positive definite at every inner solve, and the fit is the same.

use matfree::gam::{Column, Distribution, Family, Gam, GamOptions, Link};
use matfree::rng::Rng;
use matfree::solvers::newton::{CostEstimate, Evaluation};
use matfree::solvers::reml::reml;
use matfree::solvers::{CpuBackend, Objective, Result};

/// An objective that forwards everything but the convexity claim.
struct Unclaimed<'a, O>(&'a O);

impl<O: Objective<CpuBackend>> Objective<CpuBackend> for Unclaimed<'_, O> {
    fn dim(&self) -> usize {
        self.0.dim()
    }
    fn evaluate(&self, beta: &[f64]) -> Result<Option<Evaluation<'_, CpuBackend>>> {
        self.0.evaluate(beta)
    }
    fn value(&self, beta: &[f64]) -> Result<Option<f64>> {
        self.0.value(beta)
    }
    fn cheap_value(&self) -> bool {
        self.0.cheap_value()
    }
    fn cost(&self) -> CostEstimate {
        self.0.cost()
    }
    fn coefficient_scales(&self) -> Option<Vec<f64>> {
        self.0.coefficient_scales()
    }
    fn exact_hessian_derivative(&self) -> bool {
        self.0.exact_hessian_derivative()
    }
    fn hessian_derivative(&self, beta: &[f64], h: &[f64], d: &[f64], step: f64) -> Result<Vec<f64>> {
        self.0.hessian_derivative(beta, h, d, step)
    }
    fn hessian_derivative_traces(
        &self,
        beta: &[f64],
        h: &[f64],
        inverse: &[f64],
        directions: &[&[f64]],
        steps: &[f64],
    ) -> Result<Vec<f64>> {
        self.0.hessian_derivative_traces(beta, h, inverse, directions, steps)
    }
}

#[test]
fn a_convex_glm_skips_the_mode_check_and_finds_the_same_fit() {
    let n = 3000;
    // Independent draws (a multiplicative hash of the row made the label's
    // uniform a function of x, and the data nearly separable).
    let mut rng = Rng::new(7);
    let x: Vec<f64> = (0..n).map(|_| rng.uniform() - 0.5).collect();
    let z: Vec<f64> = (0..n).map(|_| rng.uniform()).collect();
    let y: Vec<f64> = (0..n)
        .map(|i| {
            let eta = 0.4 * x[i] + (6.0 * z[i]).sin();
            f64::from(rng.uniform() < 1.0 / (1.0 + (-eta).exp()))
        })
        .collect();
    let family = Family::new(Distribution::Binomial, Link::Logit).unwrap();
    assert!(family.is_convex());
    let gam = Gam::new("y ~ x + s(z, bs = \"cr\", k = 12)", family).unwrap();
    let cols = [
        ("y", Column::Numeric(&y)),
        ("x", Column::Numeric(&x)),
        ("z", Column::Numeric(&z)),
    ];
    let model = gam.setup(&cols).unwrap();
    let objective = model.objective().unwrap();
    assert!(Objective::<CpuBackend>::convex(&objective));
    let opts = GamOptions::default().reml;
    let beta0 = vec![0.0; model.designs().widths()[0]];
    let claimed = reml(&CpuBackend::new(), &objective, model.penalty(), None, &beta0, &opts).unwrap();
    let checked = reml(
        &CpuBackend::new(),
        &Unclaimed(&objective),
        model.penalty(),
        None,
        &beta0,
        &opts,
    )
    .unwrap();
    // Without the claim, no check either: every inner solve met H + S
    // positive definite (a GLM's penalised likelihood is convex), which
    // REML watches for; the two fits are then the same solve.
    assert_eq!(claimed.report.mode_checks, 0);
    assert_eq!(
        checked.report.mode_checks, 0,
        "{:?}",
        checked.report.evaluations_by_purpose
    );
    assert_eq!(claimed.report.evaluations, checked.report.evaluations);
    let rel = |a: f64, b: f64| (a - b).abs() / b.abs().max(1e-300);
    assert!(rel(claimed.laml.value, checked.laml.value) <= 1e-12);
    for (a, b) in claimed.laml.beta.iter().zip(&checked.laml.beta) {
        assert!((a - b).abs() <= 1e-8 * b.abs().max(1.0), "{a} vs {b}");
    }
    // Probit and cloglog are log-concave too; an identity-link binomial is
    // not claimed.
    assert!(Family::new(Distribution::Binomial, Link::Probit).unwrap().is_convex());
    assert!(!Family::new(Distribution::Poisson, Link::Identity).unwrap().is_convex());
}
