//! The Newton driver on the BMS model (CPU) against a dense Newton reference.

mod common;

use matfree::bms::generator::{generate, GeneratorConfig};
use matfree::bms::{bms_penalty, BmsObjective};
use matfree::solvers::newton::{newton, NewtonOptions, Solver};
use matfree::solvers::CpuBackend;

#[test]
fn newton_on_bms_matches_dense_reference_from_a_poor_start() {
    let g = generate(GeneratorConfig {
        n: 400,
        p_m: 3,
        p_g: 2,
        p_h: 4,
        p_w: 3,
        s_f: 1.0,
        seed: 5,
    })
    .unwrap();
    let penalty = bms_penalty(&g.model).unwrap();
    let lambda = [2.0, 0.5];
    let beta0 = vec![0.0; g.beta.len()];
    let t = std::time::Instant::now();
    let want = common::dense_newton(&g.model, &g.data, &penalty, &lambda, &beta0);
    println!("reference: {:.2?}", t.elapsed());
    let objective = BmsObjective::new(&g.model, &g.data);
    for solver in [Solver::Pcg, Solver::Dense] {
        let opts = NewtonOptions {
            solver,
            grad_tol: 1e-11,
            max_step: 2.0,
            ..Default::default()
        };
        let fit = newton(&CpuBackend::new(), &objective, &penalty, &lambda, &beta0, &opts).unwrap();
        let r = &fit.report;
        println!(
            "{solver:?}: {} iterations, {} evaluations, {:.2} s, {:?}",
            r.iterations.len(),
            r.evaluations,
            r.seconds,
            r.termination
        );
        assert!(fit.report.converged, "{solver:?}: {:?}", fit.report.termination);
        let d = common::rel_diff(&fit.beta, &want);
        assert!(d <= 1e-8, "{solver:?}: coefficients differ by {d:e} relative");
        let gn = fit.gradient.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(
            gn <= 1e-11 * (fit.objective.abs() + 1.0) * 10.0,
            "{solver:?}: gradient {gn:e}"
        );
        assert!(fit.report.iterations.len() >= 2, "a poor start needs several steps");
    }
}
