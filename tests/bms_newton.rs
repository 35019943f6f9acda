//! The Newton driver on the BMS model (CPU) against a dense Newton reference.

mod common;

use matfree::solvers::newton::{newton, StepSolver};
use matfree::solvers::CpuBackend;

#[test]
fn newton_on_bms_matches_dense_reference_from_a_poor_start() {
    let f = common::newton_fixture();
    let objective = f.g.model.objective(&f.g.data).unwrap();
    for solver in [StepSolver::Pcg, StepSolver::Dense] {
        let opts = f.options(solver);
        let fit = newton(&CpuBackend::new(), &objective, &f.penalty, &f.lambda, &f.beta0, &opts).unwrap();
        let r = &fit.report;
        println!(
            "{solver:?}: {} iterations, {} evaluations, {:.2} s",
            r.iterations.len(),
            r.evaluations,
            r.seconds
        );
        let label = format!("{solver:?}");
        common::check_newton_fit(&label, &fit.beta, &fit.gradient, fit.objective, r.converged, &f.want);
        assert!(r.iterations.len() >= 2, "a poor start needs several steps");
    }
}
