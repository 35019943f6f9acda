//! Rare events (issue 38, item 5): with 1 or 3 positive labels in 400 rows
//! the fit runs toward separation, to rows with extreme intercepts (q of -8
//! to -19, slopes b of 5 to 37, a of -40 to -300). There each row's
//! quadrature ran to its panel cap (1.7 million panels for one intercept)
//! or its calibration crawled (about 60 Newton steps), and an evaluation of
//! 400 rows took seconds (12-14 s in the issue). The work is measured in
//! quadrature panels (`quadrature::panels_evaluated`, 21 integrand values
//! each), not time.

use std::sync::Arc;

use matfree::bms::fit::progress::Display;
use matfree::bms::fit::{fit_on_device, FitOptions};
use matfree::bms::model::calibration::residual;
use matfree::bms::numerics::probit::norm_cdf;
use matfree::bms::numerics::quadrature::panels_evaluated;
use matfree::bms::{solve_intercept, Bases, BmsData, BmsModel, CubicBasis};
use matfree::device::Device;
use matfree::rng::Rng;

/// `fit_bms`' default bases: score warp 8, link deviation 6, no frailty.
fn bases() -> Bases {
    let score = CubicBasis::uniform(-4.0, 4.0, 8).unwrap();
    let link = CubicBasis::uniform(-6.0, 6.0, 6).unwrap();
    Bases::new(Some(score), Some(link), 1.0).unwrap()
}

/// Rows that the 1-event fit of `fit_bms --marginal x1,x2 --slope x1`
/// reached, theta = (q, b, beta_h, beta_w), with the panels their intercept
/// took before (cap 100,000 a call, cubics in z, Newton on F in the tails).
#[rustfmt::skip]
const EXTREME_ROWS: [(u64, [f64; 16]); 4] = [
    // The link's knots map to z in [7.6, 7.9], where the cubics' terms
    // (1e7) cancel to eta of -35: each such cell ran to the cap.
    (1_688_418, [
        -8.638017460964289, 37.26617489547857, 0.7664951596971801, 1.6600505371419778,
        2.4151158482385577, 2.714234784202914, 2.4525684740262292, 1.5727737810751297,
        1.542903815396169, 0.3805364881350829, 2.1375903647305488, 4.952735412103222,
        5.42228910908049, 3.734349885025506, 1.9482165006296377, 0.7711420858497557,
    ]),
    // The same at z = 15.5-16.1, where the row's mass lies.
    (484_557, [
        -15.62618530888235, 18.64506105658345, 1.5312255221379827e-07, 1.298686526354221e-06,
        3.6423186594288213e-06, 7.005063648586309e-06, 1.0678509966777649e-05, 1.301029388924439e-05,
        1.1926676290437816e-05, 6.374012528593486e-06, 8.140688427094371, 3.4300993054641014,
        -3.598376508251706, -7.282160320237758, -8.3810794864656, -10.574687120640696,
    ]),
    // Phi(q) = 1.5e-79: Newton on F crept down from its first overshoot.
    (6_574, [
        -18.84904388026144, -2.0233698455192126, -4.532447555115857e-09, 1.4944229729532843e-07,
        4.660355031364481e-07, 9.12644831815719e-07, 1.4468890712170576e-06, 1.875112947934327e-06,
        1.967507836720245e-06, 9.523981658987219e-07, 6.878729892487771, 3.4483662710492107,
        -2.974337532669058, -6.9733358091075806, -7.823313276266294, -4.42189934643593,
    ]),
    // Phi(q) = 6.6e-40: the same crawl.
    (6_734, [
        -13.168992353939817, 5.309475984788893, 0.7978306450271252, 1.9344922661682475,
        3.576717107222951, 5.058379247252686, 5.9095939426367945, 0.8328847657265324,
        5.042822296906911, 3.1619431728427783, 0.005617598224653099, 0.005273337583699359,
        0.005289461131985844, 0.0041698267853380235, 0.002733530467128275, 0.0011983365000353735,
    ]),
];

/// Panels an ordinary row takes at the fit shape, about 60 (8 at most in
/// any one call); the rows above take 300-900 now.
const ROW_PANELS: u64 = 1_500;

#[test]
fn extreme_rows_solve_with_bounded_quadrature_work() {
    let bs = bases();
    for (before, theta) in EXTREME_ROWS {
        let start = panels_evaluated();
        let cal = solve_intercept(&bs, &theta, 0).unwrap();
        let panels = panels_evaluated() - start;
        assert!(
            panels <= ROW_PANELS,
            "q = {}: {panels} panels (before: {before})",
            theta[0]
        );
        // The root satisfies the calibration: F is small against the tail
        // mass Phi(-|q|) it balances (about 1e-8 of it where the cubics
        // cancel, eta's own accuracy there).
        let f = residual(theta[0], &bs.jets(&theta, cal.a));
        let mass = norm_cdf(-theta[0].abs());
        assert!(f.abs() <= 1e-6 * mass, "q = {}: F = {f:e} against {mass:e}", theta[0]);
        assert!(
            cal.a.is_finite() && cal.f_a > 0.0 && cal.cells.iter().all(|c| c.moments.iter().all(|m| m.is_finite()))
        );
    }
}

/// 400 rows, z, x1 ~ N(0, 1), x2 in {0, 1, 2}, and `events` rows with y = 1.
fn rare_data(events: usize, seed: u64) -> BmsData {
    let n = 400;
    let mut rng = Rng::new(seed);
    let (mut z, mut x_m, mut x_g) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let (zi, x1, x2) = (rng.normal(), rng.normal(), (3.0 * rng.uniform()).floor().min(2.0));
        z.push(zi);
        x_m.extend([1.0, x1, x2]);
        x_g.extend([1.0, x1]);
    }
    let mut y = vec![0.0; n];
    (0..events).for_each(|k| y[(k * 137 + 11) % n] = 1.0);
    let designs = Arc::new(matfree::bms::marginal_slope_designs(n, 3, 2, x_m, x_g).unwrap());
    BmsData::new(designs, z, y, vec![1.0; n]).unwrap()
}

/// The panels of all threads of `pool`, each counting its own.
fn pool_panels(pool: &rayon::ThreadPool) -> u64 {
    pool.broadcast(|_| panels_evaluated()).iter().sum()
}

/// At fixed lambda = 0.01 (the REML fits take 500-600 evaluations, 10-30 s
/// here): the 1-event fit's Newton runs toward separation through rows like
/// those above and ends stalled (before: in 60-70 s, 14,000 panels a row;
/// now 2-5 s, about 400).
#[test]
fn rare_event_fits_end_with_finite_output_and_bounded_work() {
    let model = BmsModel::new(bases(), 3, 2).unwrap();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let cpu = Device::Cpu { reason: "test".into() };
    let opts = FitOptions {
        lambda: Some(vec![0.01, 0.01]),
        ..FitOptions::default()
    };
    for (events, seed) in [(1, 38), (3, 5)] {
        let data = rare_data(events, seed);
        let start = pool_panels(&pool);
        let fit = pool.install(|| fit_on_device(&cpu, 1, &model, &data, &opts, Display::Quiet));
        let fit = fit.unwrap().fit;
        let panels = (pool_panels(&pool) - start) as f64;
        // Converged or not (these data are nearly separated), it ends, with
        // finite estimates and a reason.
        assert!(
            fit.beta.iter().all(|b| b.is_finite()),
            "{events} events: {:?}",
            fit.beta
        );
        assert!(fit.penalised_neglog.is_finite() && !fit.termination.is_empty());
        // Every evaluation evaluates every row; before, late evaluations
        // took 10^4-10^6 panels a row.
        let per_row = panels / (fit.evaluations * data.n()) as f64;
        assert!(per_row <= ROW_PANELS as f64, "{events} events: {per_row} panels a row");
        eprintln!(
            "{events} events: {} evaluations, {per_row:.0} panels a row, {}",
            fit.evaluations, fit.termination
        );
    }
}
