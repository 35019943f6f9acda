//! End-to-end checks of the BMS CPU pipeline (Stage 1 + Stage 2) against
//! independent oracles: finite differences of from-scratch row and joint
//! neglogs, the rigid closed form, and the generator's calibration.

use matfree::bms::io::generator::{generate, GeneratorConfig};
use matfree::bms::numerics::probit::{log_ndtr, norm_cdf};
use matfree::bms::MarginalSlope;
use matfree::bms::{
    evaluate_rows, row_neglog, solve_intercept, Bases, BmsModel, CubicBasis, RowKernelInputs, RowStage1,
};
use matfree::solvers::{LinearOperator, Objective};
use matfree::Error;

fn bases(p_h: usize, p_w: usize, s_f: f64) -> Bases {
    let score = (p_h > 0).then(|| CubicBasis::uniform(-4.0, 4.0, p_h).unwrap());
    let link = (p_w > 0).then(|| CubicBasis::uniform(-5.0, 5.0, p_w).unwrap());
    Bases::new(score, link, s_f).unwrap()
}

/// A row with both blocks active and smooth, clearly non-zero coefficients.
fn theta(bs: &Bases, q: f64, b: f64) -> Vec<f64> {
    let mut t = vec![q, b];
    t.extend((0..bs.p_h()).map(|j| 0.3 * (0.8 * j as f64 + 0.3).sin()));
    t.extend((0..bs.p_w()).map(|l| 0.2 * (0.6 * l as f64 + 0.9).cos()));
    t
}

fn model_for(bs: &Bases) -> BmsModel {
    BmsModel::new(bs.clone(), 1, 1).unwrap()
}

/// Stage 1 + Stage 2 for one row: (neglog, gradient, Hessian).
fn row_eval(bs: &Bases, th: &[f64], z: f64, y: f64, w: f64) -> (f64, Vec<f64>, Vec<f64>) {
    let row = model_for(bs).stage1_row(th, z, y, w, 0).unwrap();
    let inputs = RowKernelInputs::pack(bs.p_h(), bs.p_w(), bs.s_f, &[row]).unwrap();
    let out = evaluate_rows(&inputs).unwrap();
    (out.neglog[0], out.grad, out.hess)
}

fn assert_close(what: &str, got: f64, want: f64, scale: f64, tol: f64) {
    assert!(
        (got - want).abs() <= tol * want.abs().max(scale),
        "{what}: analytic {got:e} vs finite difference {want:e}"
    );
}

fn check_row_derivatives(p_h: usize, p_w: usize) {
    let bs = bases(p_h, p_w, 0.85);
    let r = bs.r();
    for (y, z, q, b) in [(1.0, 0.7, 0.4, 0.9), (0.0, -1.3, -0.6, 1.4)] {
        let th = theta(&bs, q, b);
        let w = 1.3;
        let (neglog, grad, hess) = row_eval(&bs, &th, z, y, w);
        assert!((neglog - row_neglog(&bs, &th, z, y, w).unwrap()).abs() < 1e-13 * neglog.abs());
        let gscale = grad.iter().fold(0.0f64, |m, v| m.max(v.abs())) * 1e-3;
        let hscale = hess.iter().fold(0.0f64, |m, v| m.max(v.abs())) * 1e-3;
        for u in 0..r {
            let h = 1e-5 * th[u].abs().max(1.0);
            let (mut tp, mut tm) = (th.clone(), th.clone());
            tp[u] += h;
            tm[u] -= h;
            // Each side solves a again from scratch.
            let fp = row_neglog(&bs, &tp, z, y, w).unwrap();
            let fm = row_neglog(&bs, &tm, z, y, w).unwrap();
            assert_close(
                &format!("r={r} y={y} g[{u}]"),
                grad[u],
                (fp - fm) / (2.0 * h),
                gscale,
                1e-6,
            );
            let (gp, gm) = (row_eval(&bs, &tp, z, y, w).1, row_eval(&bs, &tm, z, y, w).1);
            for v in 0..r {
                let fd = (gp[v] - gm[v]) / (2.0 * h);
                assert_close(&format!("r={r} y={y} H[{v},{u}]"), hess[v * r + u], fd, hscale, 1e-6);
            }
        }
    }
}

#[test]
fn row_derivatives_match_finite_differences_r4() {
    check_row_derivatives(1, 1);
}

#[test]
fn row_derivatives_match_finite_differences_r20() {
    check_row_derivatives(10, 8);
}

#[test]
fn row_derivatives_match_finite_differences_r33() {
    check_row_derivatives(16, 15);
}

#[test]
fn rigid_rows_match_the_closed_form_and_direct_probit() {
    let bs = bases(5, 4, 0.8);
    let model = model_for(&bs);
    for (q, b, z, y) in [(0.3, 0.7, 1.1, 1.0), (-2.2, -0.4, -0.3, 0.0), (1.5, 0.0, 2.0, 0.0)] {
        let mut th = vec![0.0; bs.r()];
        (th[0], th[1]) = (q, b);
        let row = model.stage1_row(&th, z, y, 0.7, 0).unwrap();
        let a = q * (1.0 + (0.8 * b) * (0.8f64 * b)).sqrt() / 0.8;
        assert_eq!(row.calibrated.a, a);
        let (neglog, _, _) = row_eval(&bs, &th, z, y, 0.7);
        let direct = -0.7 * log_ndtr((2.0 * y - 1.0) * 0.8 * (a + b * z));
        assert!((neglog - direct).abs() < 1e-14 * direct.abs(), "{neglog} vs {direct}");
    }
}

#[test]
fn generator_is_calibrated_in_bins_of_q() {
    let g = generate(GeneratorConfig {
        n: 6000,
        p_m: 3,
        p_g: 2,
        p_h: 6,
        p_w: 5,
        s_f: 0.9,
        seed: 11,
    })
    .unwrap();
    let n = g.data.n();
    let mut rows: Vec<(f64, f64)> = (0..n)
        .map(|i| (g.model.theta(&g.data, &g.beta, i)[0], g.data.y[i]))
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut worst: f64 = 0.0;
    for bin in rows.chunks(n / 6) {
        let mean_y = bin.iter().map(|r| r.1).sum::<f64>() / bin.len() as f64;
        let p: Vec<f64> = bin.iter().map(|r| norm_cdf(r.0)).collect();
        let mean_p = p.iter().sum::<f64>() / p.len() as f64;
        let se = p.iter().map(|p| p * (1.0 - p)).sum::<f64>().sqrt() / p.len() as f64;
        worst = worst.max((mean_y - mean_p).abs() / se);
    }
    assert!(worst < 4.0, "a bin of q is off by {worst:.2} standard errors");
    // The warp and link deviation are really active.
    assert!(g.beta[5..].iter().all(|v| *v != 0.0));
}

/// The generator's intercepts are the calibration's (solve_intercept's a,
/// bit for bit, with F_a > 0 there), also with frailty and at a shape above
/// the warp width, and its labels are drawn from eta at them.
#[test]
fn generated_intercepts_are_the_calibrated_ones() {
    for cfg in [
        GeneratorConfig::fit_shape(3000, 5),
        GeneratorConfig {
            s_f: 0.7,
            ..GeneratorConfig::seed_shape(500)
        },
    ] {
        let g = generate(cfg).unwrap();
        for i in 0..g.data.n() {
            let theta = g.model.theta(&g.data, &g.beta, i);
            let c = solve_intercept(g.model.bases(), &theta, i).unwrap();
            assert_eq!(c.a.to_bits(), g.intercept[i].to_bits(), "row {i}");
            assert!(c.f_a > 0.0, "row {i}");
        }
    }
}

/// A valid two-row bundle to corrupt.
fn small_bundle() -> RowKernelInputs {
    let bs = bases(2, 3, 0.9);
    let model = model_for(&bs);
    let rows: Vec<RowStage1> = [(0.2, 0.8, 0.5, 1.0), (-0.7, 1.1, -1.0, 0.0)]
        .iter()
        .map(|&(q, b, z, y)| model.stage1_row(&theta(&bs, q, b), z, y, 1.0, 0).unwrap())
        .collect();
    RowKernelInputs::pack(2, 3, 0.9, &rows).unwrap()
}

/// Packing into a used bundle (more rows, then fewer, then another width)
/// gives bitwise the bundle a fresh pack gives.
#[test]
fn packing_into_a_used_bundle_equals_a_fresh_pack() {
    let stage1 = |p_h: usize, p_w: usize, rows: &[(f64, f64, f64, f64)]| {
        let bs = bases(p_h, p_w, 0.9);
        let model = model_for(&bs);
        let rows: Vec<RowStage1> = rows
            .iter()
            .map(|&(q, b, z, y)| model.stage1_row(&theta(&bs, q, b), z, y, 1.0, 0).unwrap())
            .collect();
        (p_h, p_w, rows)
    };
    let three = stage1(
        2,
        3,
        &[(0.2, 0.8, 0.5, 1.0), (-0.7, 1.1, -1.0, 0.0), (0.4, -0.6, 1.5, 1.0)],
    );
    let one = stage1(2, 3, &[(-0.3, 0.5, 0.2, 0.0)]);
    let wider = stage1(3, 4, &[(0.1, 0.9, -0.4, 1.0), (0.6, -1.2, 0.8, 0.0)]);
    let mut bundle = RowKernelInputs::default();
    for (p_h, p_w, rows) in [&three, &one, &wider, &three] {
        bundle.pack_into(*p_h, *p_w, 0.9, rows).unwrap();
        assert_eq!(bundle, RowKernelInputs::pack(*p_h, *p_w, 0.9, rows).unwrap());
    }
}

/// Every array of a bundle as bits (so -0.0 and 0.0 differ), with the offsets.
fn bundle_bits(b: &RowKernelInputs) -> Vec<Vec<u64>> {
    let k = b.kernel_arrays();
    let mut all: Vec<&[f64]> = vec![&b.q, &b.b, &b.z_obs];
    all.extend(k.rows.iter().chain(&k.cells).chain(&k.observed).copied());
    let mut bits: Vec<Vec<u64>> = all.iter().map(|a| a.iter().map(|v| v.to_bits()).collect()).collect();
    bits.push(b.cell_offsets.iter().map(|&o| u64::from(o)).collect());
    bits.push(vec![
        b.n_rows as u64,
        b.r as u64,
        b.p_h as u64,
        b.p_w as u64,
        b.s_f.to_bits(),
    ]);
    bits
}

/// `stage1_into` builds the bundle in two parallel passes (per-row values,
/// then each row's cells into its share); it must give bitwise the bundle
/// and intercepts that packing every row's `stage1_row` gives, also into a
/// bundle last filled by another model (more rows and cells, other widths)
/// and by a smaller one.
#[test]
fn two_pass_stage1_equals_packing_each_rows_stage1() {
    let problem = |n, p_h, p_w, seed| {
        generate(GeneratorConfig {
            n,
            p_m: 4,
            p_g: 3,
            p_h,
            p_w,
            s_f: 0.9,
            seed,
        })
        .unwrap()
    };
    let g = problem(120, 6, 5, 11);
    let (model, data) = (&g.model, &g.data);
    let bs = model.bases();
    let rows: Vec<RowStage1> = (0..data.n())
        .map(|i| {
            model
                .stage1_row(&model.theta(data, &g.beta, i), data.z[i], data.y[i], data.weights[i], i)
                .unwrap()
        })
        .collect();
    let want = RowKernelInputs::pack(bs.p_h(), bs.p_w(), bs.s_f, &rows).unwrap();
    let solved: Vec<u64> = rows.iter().map(|r| r.calibrated.a.to_bits()).collect();
    let (bigger, smaller) = (problem(200, 9, 7, 12), problem(30, 3, 2, 13));
    for before in [&bigger, &smaller] {
        let mut bundle = RowKernelInputs::default();
        before
            .model
            .stage1_into(&before.data, &before.beta, &mut bundle)
            .unwrap();
        let intercepts = model.stage1_into(data, &g.beta, &mut bundle).unwrap();
        assert!(
            bundle_bits(&bundle) == bundle_bits(&want),
            "the bundle differs from a fresh pack"
        );
        assert_eq!(intercepts.iter().map(|a| a.to_bits()).collect::<Vec<_>>(), solved);
    }
}

type Corruption = (&'static str, fn(&mut RowKernelInputs));

#[test]
fn every_malformed_bundle_is_rejected_naming_the_field() {
    let ok = small_bundle();
    evaluate_rows(&ok).unwrap();
    let cases: Vec<Corruption> = vec![
        ("n_rows", |b| b.n_rows = 0),
        ("r", |b| b.r = 6),
        ("s_f", |b| b.s_f = 0.0),
        ("s_f", |b| b.s_f = f64::NAN),
        ("cell_offsets.len", |b| {
            b.cell_offsets.pop();
        }),
        ("cell_offsets[0]", |b| b.cell_offsets[0] = 1),
        ("cell_offsets[2]", |b| b.cell_offsets[2] = b.cell_offsets[1] - 1),
        ("y[1]", |b| b.y[1] = 0.5),
        ("weights[0]", |b| b.weights[0] = 0.0),
        ("cell_moments[7]", |b| b.cell_moments[7] = f64::INFINITY),
        ("r_uv[3]", |b| b.r_uv[3] = f64::NAN),
    ];
    let mut all = cases;
    // Every array: one element short, and one NaN entry.
    macro_rules! each_field {
        ($($f:ident),+) => {$(
            all.push((concat!(stringify!($f), ".len"), |b| { b.$f.pop(); }));
            all.push((concat!(stringify!($f), "[0]"), |b| b.$f[0] = f64::NAN));
        )+};
    }
    each_field!(
        q,
        b,
        mu_1,
        mu_2,
        z_obs,
        y,
        weights,
        e_obs,
        cell_c0,
        cell_c1,
        cell_c2,
        cell_c3,
        cell_a,
        cell_aa,
        cell_r,
        cell_ar,
        cell_sbb,
        cell_sbh,
        cell_sbw,
        cell_moments,
        chi_obs,
        xi_obs,
        rho_u,
        tau_u,
        r_uv
    );
    for (field, corrupt) in all {
        let mut bad = ok.clone();
        corrupt(&mut bad);
        let msg = evaluate_rows(&bad).unwrap_err().to_string();
        assert!(msg.contains(field), "corrupting {field} gave: {msg}");
    }
}

#[test]
fn a_row_with_non_positive_f_a_is_rejected_with_its_index() {
    let mut bad = small_bundle();
    let cells = bad.cell_offsets[1] as usize..bad.cell_offsets[2] as usize;
    for c in cells {
        bad.cell_a[c * 4..(c + 1) * 4].iter_mut().for_each(|v| *v = -*v);
    }
    match evaluate_rows(&bad) {
        Err(Error::RowRejected { row, reason }) => {
            assert_eq!(row, 1);
            assert!(reason.contains("F_a"), "{reason}");
        }
        other => panic!("expected a rejected row, got {other:?}"),
    }
}

#[test]
fn joint_gradient_and_hessian_match_finite_differences() {
    let g = generate(GeneratorConfig {
        n: 50,
        p_m: 3,
        p_g: 2,
        p_h: 4,
        p_w: 3,
        s_f: 0.9,
        seed: 5,
    })
    .unwrap();
    let (model, data) = (&g.model, &g.data);
    // Move away from the truth so the gradient is not small.
    let beta: Vec<f64> = g
        .beta
        .iter()
        .enumerate()
        .map(|(j, b)| b + 0.05 * (j as f64).cos())
        .collect();
    let eval = model.evaluate(data, &beta).unwrap();
    let jg = model.joint_gradient(data, &eval).unwrap();
    let dense = model.row_hessian(data, &eval).unwrap().to_dense().unwrap();
    let p = beta.len();
    let gscale = jg.gradient.iter().fold(0.0f64, |m, v| m.max(v.abs())) * 1e-3;
    let hscale = dense.iter().fold(0.0f64, |m, v| m.max(v.abs())) * 1e-3;
    for j in 0..p {
        let h = 1e-5 * beta[j].abs().max(1.0);
        let (mut bp, mut bm) = (beta.clone(), beta.clone());
        bp[j] += h;
        bm[j] -= h;
        let (ep, em) = (model.evaluate(data, &bp).unwrap(), model.evaluate(data, &bm).unwrap());
        let (gp, gm) = (
            model.joint_gradient(data, &ep).unwrap(),
            model.joint_gradient(data, &em).unwrap(),
        );
        assert_close(
            &format!("grad[{j}]"),
            jg.gradient[j],
            (gp.neglog - gm.neglog) / (2.0 * h),
            gscale,
            1e-6,
        );
        for k in 0..p {
            let fd = (gp.gradient[k] - gm.gradient[k]) / (2.0 * h);
            assert_close(&format!("H[{k},{j}]"), dense[k * p + j], fd, hscale, 1e-6);
        }
    }
}

#[test]
fn a_row_range_of_the_data_is_a_data_set_with_the_same_rows() {
    let g = generate(GeneratorConfig {
        n: 40,
        p_m: 3,
        p_g: 2,
        p_h: 2,
        p_w: 2,
        s_f: 1.0,
        seed: 5,
    })
    .unwrap();
    let part = g.data.rows(10..25).unwrap();
    assert_eq!(part.n(), 15);
    assert_eq!(part.z, g.data.z[10..25]);
    assert_eq!(
        (part.y.as_slice(), part.weights.as_slice()),
        (&g.data.y[10..25], &g.data.weights[10..25])
    );
    assert_eq!(part.designs.x_m_row(0), g.data.designs.x_m_row(10));
    assert_eq!(part.designs.x_g_row(14), g.data.designs.x_g_row(24));
    // Evaluating the part equals the matching rows of the whole.
    let whole = g.model.evaluate(&g.data, &g.beta).unwrap();
    let sub = g.model.evaluate(&part, &g.beta).unwrap();
    assert_eq!(sub.neglog, whole.neglog[10..25]);
    for bad in [5..5, 30..41] {
        match g.data.rows(bad.clone()) {
            Err(Error::InvalidInput { field, .. }) => assert_eq!(field, "rows"),
            other => panic!("{bad:?}: expected a rows error, got {:?}", other.map(|d| d.n())),
        }
    }
}

/// The fused CPU evaluation (`evaluate`, Stage 1 and 2 per row without a
/// bundle) against the bundle path the device kernels are checked against,
/// at r = 4, 20, 33 and 64 and with each basis absent: the same numerics
/// summed in another order, so within 1e-12 of each row's largest entry
/// (1e-11 at r = 64, whose 65-cell sums cancel more).
#[test]
fn fused_evaluation_matches_the_bundle_path() {
    let shapes = [
        (40, 3, 2, 1, 1),
        (60, 14, 12, 10, 8),
        (30, 3, 2, 20, 11),
        (12, 3, 2, 40, 22),
        (40, 3, 2, 0, 5),
        (40, 3, 2, 6, 0),
    ];
    for (k, (n, p_m, p_g, p_h, p_w)) in shapes.into_iter().enumerate() {
        let cfg = GeneratorConfig {
            n,
            p_m,
            p_g,
            p_h,
            p_w,
            s_f: 0.9,
            seed: 11 + k as u64,
        };
        let g = generate(cfg).unwrap();
        let fused = g.model.evaluate(&g.data, &g.beta).unwrap();
        let bundled = g
            .model
            .evaluate_bundled(&g.data, &g.beta, &mut RowKernelInputs::default())
            .unwrap();
        let r = 2 + p_h + p_w;
        let tol = if r > 40 { 1e-11 } else { 1e-12 };
        for (name, got, want, width) in [
            ("intercept", &fused.intercept, &bundled.intercept, 1),
            ("neglog", &fused.neglog, &bundled.neglog, 1),
            ("grad", &fused.grad, &bundled.grad, r),
            ("hess", &fused.hess, &bundled.hess, r * r),
        ] {
            for (i, (a, b)) in got.chunks(width).zip(want.chunks(width)).enumerate() {
                let scale = b.iter().fold(f64::MIN_POSITIVE, |m, v| m.max(v.abs()));
                let err = a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
                assert!(
                    err <= tol * scale,
                    "r = {r}, row {i}: {name} off by {:e} of its largest",
                    err / scale
                );
            }
        }
    }
}

/// A link deviation of slope -2 outside its knots and b = 0 (F rises only
/// between the knots): rows with q = -2 have no sign change of F from the
/// rigid start and are rejected. Both evaluations report the lowest such
/// row, whichever block of rows it falls in.
#[test]
fn fused_and_bundled_evaluations_reject_the_same_row() {
    use matfree::bms::BmsData;
    use std::sync::Arc;
    let link = CubicBasis::uniform(-2.0, 2.0, 2).unwrap();
    let bw = [-2.0 / link.segment(0)[0][1], 0.0];
    let model = BmsModel::new(Bases::new(None, Some(link), 1.0).unwrap(), 1, 1).unwrap();
    let beta = [1.0, 0.0, bw[0], bw[1]];
    let mut qs: Vec<f64> = (0..400).map(|k| -1.0 + 0.002 * k as f64).collect();
    for (bad, want) in [(330, 330), (150, 150), (0, 0)] {
        qs[bad] = -2.0;
        let n = qs.len();
        let designs = matfree::bms::marginal_slope_designs(n, 1, 1, qs.clone(), vec![1.0; n]).unwrap();
        let data = BmsData::new(Arc::new(designs), vec![0.3; n], vec![1.0; n], vec![1.0; n]).unwrap();
        let fused = model.evaluate(&data, &beta);
        let bundled = model.evaluate_bundled(&data, &beta, &mut RowKernelInputs::default());
        for (path, got) in [("fused", fused), ("bundled", bundled)] {
            match got {
                Err(Error::RowRejected { row, reason }) => {
                    assert_eq!(row, want, "{path}");
                    assert!(reason.contains("sign change"), "{path}: {reason}");
                }
                other => panic!("{path}: expected row {want} rejected, got {:?}", other.err()),
            }
        }
    }
}

/// The CPU objective is the generic row objective over the model's fused
/// rows: the model's own evaluation (value, gradient, Hessian) to rounding
/// (the objective takes each row's theta from tile matrix products, the
/// model's evaluation from one dot product a row, so the last bits may
/// differ), and a beta where the model rejects a row is outside the domain
/// (no evaluation, no error).
#[test]
fn the_objective_is_the_models_rows_bitwise_and_a_rejected_row_is_outside() {
    let g = generate(GeneratorConfig {
        n: 777,
        p_m: 3,
        p_g: 2,
        p_h: 4,
        p_w: 3,
        s_f: 0.9,
        seed: 8,
    })
    .unwrap();
    let (model, data) = (&g.model, &g.data);
    let objective = model.objective(data).unwrap();
    let eval = model.evaluate(data, &g.beta).unwrap();
    let want = model.joint_gradient(data, &eval).unwrap();
    let got = objective.evaluate(&g.beta).unwrap().unwrap();
    let close = |what: &str, a: &[f64], b: &[f64]| {
        let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for (k, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= 1e-12 * scale, "{what}[{k}]: {x} vs {y}");
        }
        assert_eq!(a.len(), b.len(), "{what}");
    };
    close("value", &[got.value], &[want.neglog]);
    close("gradient", &got.gradient, &want.gradient);
    let dense = model.row_hessian(data, &eval).unwrap().to_dense().unwrap();
    close("hessian", &got.hessian.to_dense().unwrap(), &dense);
    let again = objective.evaluate(&g.beta).unwrap().unwrap();
    assert_eq!(
        again.value.to_bits(),
        got.value.to_bits(),
        "the same input, the same bits"
    );
    let far: Vec<f64> = g.beta.iter().map(|b| b * 1e6 + 1e6).collect();
    let rejected = matches!(model.evaluate(data, &far), Err(Error::RowRejected { .. }));
    assert!(rejected, "beta far out should be rejected by a row");
    assert!(objective.evaluate(&far).unwrap().is_none());
}
