//! Issue #40's benchmark: a binomial logit GAM with 5 `cr` smooths (k = 10)
//! and 5 linear terms, simulated as `benches/gam/simulate.R` does (the same
//! covariates and truth; rows in parallel, chunk by chunk from seeded
//! streams, so the data depend on N and the seed alone), set up and fitted
//! by REML on the CPU and/or one GPU (the rows on the device). Prints the
//! simulation, setup, upload and fit times, the fit's REML iterations and
//! evaluations, its estimates, where the fit's time went (the objective's
//! calls, timed), and with `--phases R` each phase at the fitted beta (best
//! of R) with the bytes it reads and its floor at 4.8 TB/s. The figures are
//! in `benches/RESULTS.md`.
//!
//!     cargo run --release --example bench_gam -- --n 1000000 [--seed 40] \
//!         [--backend gpu|gpus|cpu|both] [--options tight|loose|both] [--phases 5]
//!
//! `--options tight` is `GamOptions::default()` (mgcv's fit to 1e-5: REML to
//! a projected gradient of 1e-9 edf, inner Newton to a decrement of 1e-20);
//! `loose` is `GamOptions { reml: RemlOptions::default(), .. }` (1e-4 edf,
//! decrement 1e-10).

use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use clap::Parser;
use matfree::gam::{Column, Distribution, Family, Gam, GamFit, GamModel, GamOptions};
use matfree::rng::Rng;
use matfree::solvers::newton::{CostEstimate, Evaluation, Objective};
use matfree::solvers::reml::RemlOptions;
use matfree::solvers::{Backend, CpuBackend, LinearOperator, PcgKernels, Result as SolverResult};
use rayon::prelude::*;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// The model of benches/gam/mgcv_fit.R.
const FORMULA: &str = "y ~ x1 + x2 + x3 + x4 + x5 + s(z1, bs = \"cr\", k = 10) + s(z2, bs = \"cr\", k = 10) + \
                       s(z3, bs = \"cr\", k = 10) + s(z4, bs = \"cr\", k = 10) + s(z5, bs = \"cr\", k = 10)";

/// Rows a random stream makes (one stream a chunk, seeded by the seed and
/// the chunk's index).
const CHUNK: usize = 1 << 16;

/// The device's memory bandwidth by its datasheet (H200), for the floors.
const BANDWIDTH: f64 = 4.8e12;

#[derive(Parser, Debug)]
#[command(about = "Simulate, set up and fit issue #40's binomial GAM, timed")]
struct Args {
    /// Rows.
    #[arg(long, default_value_t = 1_000_000)]
    n: usize,
    /// The simulation's seed.
    #[arg(long, default_value_t = 40)]
    seed: u64,
    /// gpu, gpus (the rows sharded over every visible GPU), cpu, both (gpu
    /// and cpu) or none (simulate and set up only).
    #[arg(long, default_value = "gpu")]
    backend: String,
    /// tight (GamOptions::default()), loose or both.
    #[arg(long, default_value = "tight")]
    options: String,
    /// Time each phase at the fitted beta, best of this many (0: not).
    #[arg(long, default_value_t = 0)]
    phases: usize,
}

fn main() -> AnyResult<()> {
    let args = Args::parse();
    let clock = Instant::now();
    let data = simulate(args.n, args.seed);
    let simulated = clock.elapsed().as_secs_f64();
    let columns: Vec<(&str, Column)> = data.iter().map(|(n, v)| (*n, Column::Numeric(v))).collect();
    let model = Gam::new(FORMULA, Family::canonical(Distribution::Binomial))?.setup(&columns)?;
    drop(columns);
    drop(data);
    let p = model.designs().widths()[0];
    println!(
        "n {}: simulated in {simulated:.2} s, set up in {:.2} s (p = {p}, {:.2} GB of design; {} threads)",
        args.n,
        clock.elapsed().as_secs_f64() - simulated,
        (args.n * p * 8) as f64 / 1e9,
        rayon::current_num_threads()
    );
    let options: Vec<(&str, GamOptions)> = match args.options.as_str() {
        "tight" => vec![("tight", GamOptions::default())],
        "loose" => vec![("loose", loose())],
        "both" => vec![("tight", GamOptions::default()), ("loose", loose())],
        other => return Err(format!("--options {other}: must be tight, loose or both").into()),
    };
    let (cpu, gpu) = match args.backend.as_str() {
        "cpu" => (true, false),
        "gpu" => (false, true),
        "both" => (true, true),
        "none" => (false, false),
        "gpus" => return on_gpus(&model, &options),
        other => return Err(format!("--backend {other}: must be gpu, gpus, cpu, both or none").into()),
    };
    if gpu {
        on_gpu(&model, &options, args.phases)?;
    }
    if cpu {
        let objective = model.objective()?;
        for (name, opts) in &options {
            let fit = timed_fit("cpu", name, &model, &CpuBackend::new(), &objective, opts)?;
            if args.phases > 0 {
                cpu_phases(&objective, &fit.coefficients, args.phases)?;
            }
        }
    }
    Ok(())
}

/// `GamOptions` with the REML solver's default tolerances.
fn loose() -> GamOptions {
    GamOptions {
        reml: RemlOptions::default(),
        ..GamOptions::default()
    }
}

/// benches/gam/simulate.R's data: z ~ U(0, 1)^5, x ~ N(0, 1)^5, f the sum
/// of its five functions of z, eta = -0.5 + f - mean(f) + x . (0.3, -0.2,
/// 0.1, 0, 0.25), y ~ Bernoulli(plogis(eta)). Each chunk of rows draws, row
/// by row, z, x and the uniform its y is decided by, from a stream of its
/// own; mean(f) is summed chunk by chunk in order.
fn simulate(n: usize, seed: u64) -> Vec<(&'static str, Vec<f64>)> {
    const NAMES: [&str; 11] = ["y", "z1", "z2", "z3", "z4", "z5", "x1", "x2", "x3", "x4", "x5"];
    // Each chunk's rows: [u, z1..z5, x1..x5], row-major, and its f sum.
    let chunks: Vec<(Vec<f64>, Vec<f64>, f64)> = (0..n.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            let rows = CHUNK.min(n - c * CHUNK);
            let mut rng = Rng::new(seed ^ (c as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let mut block = vec![0.0; rows * 11];
            let mut f = vec![0.0; rows];
            for (row, fi) in block.chunks_exact_mut(11).zip(&mut f) {
                for z in &mut row[1..6] {
                    *z = rng.uniform();
                }
                for x in &mut row[6..11] {
                    *x = rng.normal();
                }
                row[0] = rng.uniform();
                *fi = truth(&row[1..6]);
            }
            let sum = f.iter().sum();
            (block, f, sum)
        })
        .collect();
    let mean_f = chunks.iter().map(|c| c.2).sum::<f64>() / n as f64;
    let beta_x = [0.3, -0.2, 0.1, 0.0, 0.25];
    NAMES
        .iter()
        .enumerate()
        .map(|(j, name)| {
            let column = chunks
                .par_iter()
                .flat_map_iter(|(block, f, _)| {
                    block.chunks_exact(11).zip(f).map(move |(row, fi)| match j {
                        0 => {
                            let x: f64 = row[6..11].iter().zip(&beta_x).map(|(a, b)| a * b).sum();
                            let eta = -0.5 + fi - mean_f + x;
                            f64::from(u8::from(row[0] < 1.0 / (1.0 + (-eta).exp())))
                        }
                        _ => row[j],
                    })
                })
                .collect();
            (*name, column)
        })
        .collect()
}

/// f(z) of benches/gam/simulate.R.
fn truth(z: &[f64]) -> f64 {
    let tau = std::f64::consts::TAU;
    (tau * z[0]).sin()
        + (2.0 * z[1]).exp() / 4.0
        + z[2].powi(11) * 10.0 * (10.0 * (1.0 - z[2])).powi(6) / 1e3
        + (3.0 * z[3]).cos()
        + 0.5 * z[4]
}

/// Fit with `objective` on `backend`, timing it and the objective's calls;
/// print the fit.
fn timed_fit<B: PcgKernels + 'static, O: Objective<B>>(
    where_: &str,
    name: &str,
    model: &GamModel,
    backend: &B,
    objective: &O,
    opts: &GamOptions,
) -> AnyResult<GamFit> {
    let timed = Timed {
        inner: objective,
        phases: Rc::new(Phases::default()),
    };
    let clock = Instant::now();
    let fit = model.fit_on(backend, &timed, opts)?;
    let seconds = clock.elapsed().as_secs_f64();
    let r = &fit.report;
    println!(
        "{where_} fit ({name}): {seconds:.3} s, {} REML iterations, {} evaluations, {:?} (converged {}), \
         projected gradient {:?}",
        r.iterations.len(),
        r.evaluations,
        r.termination,
        fit.converged,
        r.projected_gradient
    );
    let ph = &timed.phases;
    let accounted: f64 = ph.all().iter().map(|(_, p)| p.seconds.get()).sum();
    let parts: Vec<String> = ph
        .all()
        .iter()
        .map(|(label, p)| format!("{label} {} x = {:.3} s", p.count.get(), p.seconds.get()))
        .collect();
    println!(
        "  where: {}; the rest (REML's host algebra, PCG) {:.3} s",
        parts.join(", "),
        seconds - accounted
    );
    let se = fit.standard_errors();
    let shown: Vec<String> = (0..6.min(fit.names.len()))
        .map(|j| format!("{} {:.6} ({:.6})", fit.names[j], fit.coefficients[j], se[j]))
        .collect();
    println!("  estimates (SE): {}", shown.join(", "));
    let sp: Vec<String> = fit.sp.iter().map(|s| format!("{s:.5e}")).collect();
    println!(
        "  -REML {:.6}, edf {:.4}, sp [{}]",
        fit.reml_score,
        fit.edf_total,
        sp.join(", ")
    );
    Ok(fit)
}

#[cfg(feature = "cuda")]
fn on_gpu(model: &GamModel, options: &[(&str, GamOptions)], phases: usize) -> AnyResult<()> {
    use matfree::cuda::{CudaBackend, Gpu};
    let gpu = Gpu::get()?;
    let clock = Instant::now();
    let objective = model.device_objective(gpu.clone())?;
    gpu.synchronize()?;
    println!(
        "{}: uploaded in {:.3} s (kernels compiled on first use)",
        gpu.describe(),
        clock.elapsed().as_secs_f64()
    );
    let backend = CudaBackend::new(gpu.clone())?;
    for (name, opts) in options {
        let fit = timed_fit("gpu", name, model, &backend, &objective, opts)?;
        if phases > 0 {
            gpu_phases(&gpu, &objective, &fit, phases)?;
        }
    }
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn on_gpu(_: &GamModel, _: &[(&str, GamOptions)], _: usize) -> AnyResult<()> {
    Err("--backend gpu needs the cuda feature".into())
}

/// The fits with the rows sharded over every visible GPU
/// (`GamModel::sharded_objective`).
#[cfg(feature = "cuda")]
fn on_gpus(model: &GamModel, options: &[(&str, GamOptions)]) -> AnyResult<()> {
    use matfree::cuda::{GpuGroup, MultiGpuBackend};
    let group = GpuGroup::open_all()?;
    let clock = Instant::now();
    let objective = model.sharded_objective(group.clone())?;
    let label = format!("{} gpus", group.len());
    println!("{label}: uploaded in {:.3} s", clock.elapsed().as_secs_f64());
    let backend = MultiGpuBackend::new(group)?;
    for (name, opts) in options {
        timed_fit(&label, name, model, &backend, &objective, opts)?;
    }
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn on_gpus(_: &GamModel, _: &[(&str, GamOptions)]) -> AnyResult<()> {
    Err("--backend gpus needs the cuda feature".into())
}

/// The best of `repeat` runs of `f`, in seconds.
fn best<T>(repeat: usize, mut f: impl FnMut() -> AnyResult<T>) -> AnyResult<f64> {
    let mut out = f64::INFINITY;
    for _ in 0..repeat {
        let clock = Instant::now();
        f()?;
        out = out.min(clock.elapsed().as_secs_f64());
    }
    Ok(out)
}

/// One phase's line: its time, the bytes it reads at least and that
/// floor at the datasheet's bandwidth.
fn phase_line(label: &str, seconds: f64, bytes: f64) {
    println!(
        "  {label:<34} {:>9.3} ms   reads >= {:>7.3} GB   floor {:>7.3} ms ({:.0}% of it)",
        seconds * 1e3,
        bytes / 1e9,
        bytes / BANDWIDTH * 1e3,
        100.0 * bytes / BANDWIDTH / seconds
    );
}

/// Random directions (REML's are the penalties' pull-backs; any serve for timing).
fn directions(p: usize, m: usize) -> Vec<Vec<f64>> {
    let mut rng = Rng::new(7);
    (0..m).map(|_| rng.normals(p)).collect()
}

#[cfg(feature = "cuda")]
fn gpu_phases(
    gpu: &std::sync::Arc<matfree::cuda::Gpu>,
    objective: &matfree::cuda::DeviceRowObjective<matfree::gam::DeviceGlmRows>,
    fit: &GamFit,
    repeat: usize,
) -> AnyResult<()> {
    use matfree::cuda::{CudaBackend, DeviceRowEvaluator};
    use matfree::gam::DeviceGlmRows;
    let beta = &fit.coefficients;
    let p = beta.len();
    let n = objective.evaluator().designs().n() as f64;
    let (x, row) = (n * p as f64 * 8.0, n * 8.0);
    let pass = objective.evaluator().bytes_per_pass() as f64;
    let m = fit.sp.len();
    let dirs = directions(p, m);
    let views: Vec<&[f64]> = dirs.iter().map(Vec::as_slice).collect();
    println!(
        "gpu phases at the fitted beta (best of {repeat}; X is {:.3} GB):",
        x / 1e9
    );
    let t = best(repeat, || {
        Ok(Objective::<CudaBackend>::evaluate(objective, beta)?.map(|e| e.value))
    })?;
    phase_line("evaluation (rows, gradient, value)", t, pass + 3.0 * row);
    let t = best(repeat, || Ok(Objective::<CudaBackend>::value(objective, beta)?))?;
    phase_line("value alone", t, pass);
    // The same passes at other stages (the sums are the same bits).
    let designs = objective.evaluator().designs().clone();
    for stage in [32, 64, 128, 256] {
        let Ok(rows) = DeviceGlmRows::with_designs(designs.clone(), objective.evaluator().rows())?.with_stage(stage)
        else {
            continue;
        };
        let t = best(repeat, || Ok(rows.launch(beta)?.finish()?.joint_gradient()?))?;
        phase_line(&format!("  evaluation, stage {stage}"), t, pass + 3.0 * row);
        let t = best(repeat, || Ok(rows.value(beta)?))?;
        phase_line(&format!("  value alone, stage {stage}"), t, pass);
    }
    let rows = objective.evaluate_rows(beta)?;
    let t = best(repeat, || Ok(rows.hessian.dense_host()?))?;
    phase_line(&format!("dense X^T W X ({})", rows.hessian.dense_path()), t, x + row);
    let v = vec![1.0; p];
    let t = best(repeat, || Ok(rows.hessian.hvp_host(&v)?))?;
    phase_line(&format!("HVP ({})", rows.hessian.hvp_path()), t, x + row);
    let t = best(repeat, || Ok(rows.hessian.diagonal_host()?))?;
    phase_line("diagonal of X^T W X", t, x + row);
    let staged = rows.hessian.with_tensor_dense(false);
    let t = best(repeat.min(2), || Ok(staged.dense_host()?))?;
    phase_line(&format!("dense X^T W X ({})", staged.dense_path()), t, x + row);
    let t = best(repeat, || {
        Ok(Objective::<CudaBackend>::hessian_derivative_traces(
            objective,
            beta,
            &[],
            &fit.vp,
            &views,
            &vec![1e-4; m],
        )?)
    })?;
    // A pass for the weights (X, y; n m written), then X K (X read, Z
    // written) and the leverages (Z and the weights read).
    let traces = pass + x + (2.0 * x) + 2.0 * row * m as f64;
    phase_line(&format!("REML traces ({m} directions)"), t, traces);
    let t = best(repeat, || {
        Ok(Objective::<CudaBackend>::hessian_derivative(
            objective,
            beta,
            &[],
            &dirs[0],
            1e-4,
        )?)
    })?;
    phase_line("exact dH along one direction", t, pass + x + 2.0 * row);
    gpu.synchronize()?;
    Ok(())
}

fn cpu_phases(
    objective: &matfree::RowObjective<matfree::gam::ScaledRows>,
    beta: &[f64],
    repeat: usize,
) -> AnyResult<()> {
    let p = beta.len();
    let n = objective.designs().n() as f64;
    let x = n * p as f64 * 8.0;
    println!("cpu phases at the fitted beta (best of {repeat}):");
    let t = best(repeat, || {
        Ok(Objective::<CpuBackend>::evaluate(objective, beta)?.map(|e| e.value))
    })?;
    phase_line("evaluation (rows, gradient, value)", t, x + 4.0 * n * 8.0);
    let t = best(repeat, || Ok(Objective::<CpuBackend>::value(objective, beta)?))?;
    phase_line("value alone", t, x + n * 8.0);
    let e = Objective::<CpuBackend>::evaluate(objective, beta)?.ok_or("the fitted beta is outside the domain")?;
    let t = best(repeat, || Ok(e.hessian.to_dense()?))?;
    phase_line("dense X^T W X", t, x + n * 8.0);
    let dirs = directions(p, 5);
    let views: Vec<&[f64]> = dirs.iter().map(Vec::as_slice).collect();
    let a = identity(p);
    let h = vec![0.0; p * p];
    let t = best(repeat, || {
        Ok(Objective::<CpuBackend>::hessian_derivative_traces(
            objective, beta, &h, &a, &views, &[1e-4; 5],
        )?)
    })?;
    phase_line("REML traces (5 directions)", t, 2.0 * x);
    Ok(())
}

fn identity(p: usize) -> Vec<f64> {
    (0..p * p).map(|t| f64::from(u8::from(t / p == t % p))).collect()
}

/// Calls and seconds of one kind of objective call.
#[derive(Default)]
struct Phase {
    count: Cell<usize>,
    seconds: Cell<f64>,
}

impl Phase {
    fn add(&self, since: Instant) {
        self.count.set(self.count.get() + 1);
        self.seconds.set(self.seconds.get() + since.elapsed().as_secs_f64());
    }
}

/// Where a fit's time went, by the objective's calls (each returns host
/// values, so each is timed to its end; the HVPs of PCG are queued, so only
/// counted).
#[derive(Default)]
struct Phases {
    evaluate: Phase,
    value: Phase,
    dense: Phase,
    traces: Phase,
    derivative: Phase,
    hvp: Phase,
    other: Phase,
}

impl Phases {
    fn all(&self) -> [(&'static str, &Phase); 7] {
        [
            ("evaluations", &self.evaluate),
            ("values", &self.value),
            ("dense H", &self.dense),
            ("traces", &self.traces),
            ("dH", &self.derivative),
            ("HVPs (queued)", &self.hvp),
            ("diagonals and multi-products", &self.other),
        ]
    }
}

/// An objective whose calls are timed.
struct Timed<'a, O> {
    inner: &'a O,
    phases: Rc<Phases>,
}

/// Its Hessian, whose dense matrix is timed and products counted.
struct TimedOp<'a, B: Backend> {
    inner: Rc<dyn LinearOperator<B> + 'a>,
    phases: Rc<Phases>,
}

impl<B: Backend> LinearOperator<B> for TimedOp<'_, B> {
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn apply(&self, x: &B::Vector, y: &mut B::Vector) -> SolverResult<()> {
        let clock = Instant::now();
        self.inner.apply(x, y)?;
        self.phases.hvp.add(clock);
        Ok(())
    }
    fn apply_multi(&self, x: &B::Vector, k: usize, y: &mut B::Vector) -> SolverResult<()> {
        let clock = Instant::now();
        self.inner.apply_multi(x, k, y)?;
        self.phases.other.add(clock);
        Ok(())
    }
    fn diagonal(&self, out: &mut B::Vector) -> SolverResult<()> {
        let clock = Instant::now();
        self.inner.diagonal(out)?;
        self.phases.other.add(clock);
        Ok(())
    }
    fn to_dense(&self) -> SolverResult<Vec<f64>> {
        let clock = Instant::now();
        let out = self.inner.to_dense()?;
        self.phases.dense.add(clock);
        Ok(out)
    }
}

impl<B: Backend + 'static, O: Objective<B>> Objective<B> for Timed<'_, O> {
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn evaluate(&self, beta: &[f64]) -> SolverResult<Option<Evaluation<'_, B>>> {
        let clock = Instant::now();
        let e = self.inner.evaluate(beta)?;
        self.phases.evaluate.add(clock);
        Ok(e.map(|e| Evaluation {
            value: e.value,
            gradient: e.gradient,
            hessian: Rc::new(TimedOp {
                inner: e.hessian,
                phases: self.phases.clone(),
            }) as Rc<dyn LinearOperator<B> + '_>,
        }))
    }
    fn value(&self, beta: &[f64]) -> SolverResult<Option<f64>> {
        let clock = Instant::now();
        let v = self.inner.value(beta)?;
        self.phases.value.add(clock);
        Ok(v)
    }
    fn cheap_value(&self) -> bool {
        self.inner.cheap_value()
    }
    fn cost(&self) -> CostEstimate {
        self.inner.cost()
    }
    fn coefficient_scales(&self) -> Option<Vec<f64>> {
        self.inner.coefficient_scales()
    }
    fn convex(&self) -> bool {
        self.inner.convex()
    }
    fn exact_hessian_derivative(&self) -> bool {
        self.inner.exact_hessian_derivative()
    }
    fn hessian_derivative(
        &self,
        beta: &[f64],
        hessian: &[f64],
        direction: &[f64],
        step: f64,
    ) -> SolverResult<Vec<f64>> {
        let clock = Instant::now();
        let out = self.inner.hessian_derivative(beta, hessian, direction, step)?;
        self.phases.derivative.add(clock);
        Ok(out)
    }
    fn hessian_derivative_traces(
        &self,
        beta: &[f64],
        hessian: &[f64],
        inverse: &[f64],
        directions: &[&[f64]],
        steps: &[f64],
    ) -> SolverResult<Vec<f64>> {
        let clock = Instant::now();
        let out = self
            .inner
            .hessian_derivative_traces(beta, hessian, inverse, directions, steps)?;
        self.phases.traces.add(clock);
        Ok(out)
    }
}
