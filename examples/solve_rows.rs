//! Part 1: a user's own matrix-free operator, the 5-point Laplacian on an
//! m x m grid (Dirichlet boundary, plus a shift so it is SPD), written with
//! `dim`, `apply` and `diagonal` alone, solved by PCG unpreconditioned
//! (`Identity`) and with Jacobi. Part 2: a generated, full-rank row-Hessian
//! system H x = b with Jacobi PCG, and the solver's info record (the fixture
//! is behind the `testing` feature, which examples get; part 1 needs only
//! `matfree::solvers` and `matfree::rng`).
//!
//!     cargo run --release --example solve_rows [N_ROWS] [GRID_M]

use matfree::fixture::{random_row_problem, Shape};
use matfree::rng::Rng;
use matfree::solvers::{cg, CpuBackend, Identity, Jacobi, LinearOperator, PcgOptions, Preconditioner, Result};

/// -Laplacian(u) + shift * u on an m x m grid, u = 0 outside it.
struct Laplacian {
    m: usize,
    shift: f64,
}

impl LinearOperator<CpuBackend> for Laplacian {
    fn dim(&self) -> usize {
        self.m * self.m
    }
    fn apply(&self, x: &Vec<f64>, y: &mut Vec<f64>) -> Result<()> {
        let (m, at) = (self.m, |ok: bool, j: usize| if ok { x[j] } else { 0.0 });
        for (i, yi) in y.iter_mut().enumerate() {
            let (r, c) = (i / m, i % m);
            let near = at(r > 0, i.wrapping_sub(m)) + at(r + 1 < m, i + m) + at(c > 0, i.wrapping_sub(1));
            *yi = (4.0 + self.shift) * x[i] - near - at(c + 1 < m, i + 1);
        }
        Ok(())
    }
    fn diagonal(&self, out: &mut Vec<f64>) -> Result<()> {
        out.fill(4.0 + self.shift);
        Ok(())
    }
}

fn arg(i: usize, default: usize) -> std::result::Result<usize, String> {
    match std::env::args().nth(i) {
        Some(s) => s.parse().map_err(|e| format!("argument {i} = {s:?}: {e}")),
        None => Ok(default),
    }
}

/// ||b - A x||, recomputed from the returned x.
fn true_residual(op: &dyn LinearOperator<CpuBackend>, x: &Vec<f64>, b: &[f64]) -> Result<f64> {
    let mut ax = vec![0.0; b.len()];
    op.apply(x, &mut ax)?;
    Ok(ax.iter().zip(b).map(|(u, v)| (v - u) * (v - u)).sum::<f64>().sqrt())
}

fn laplacian(m: usize) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let (be, op) = (CpuBackend::new(), Laplacian { m, shift: 1e-3 });
    let b = Rng::new(3).normals(op.dim());
    let mut diag = vec![0.0; op.dim()];
    op.diagonal(&mut diag)?;
    let jacobi = Jacobi::new(&be, &diag, None, 0.0)?;
    let preconditioners: [(&str, &dyn Preconditioner<CpuBackend>); 2] = [("identity", &Identity), ("jacobi", &jacobi)];
    // The diagonal is constant, so Jacobi only rescales: both take the same iterations.
    for (name, m_inv) in preconditioners {
        let sol = cg(&be, &op, m_inv, &b, None, &PcgOptions::default())?;
        let res = true_residual(&op, &sol.x, &b)?;
        println!(
            "laplacian {m}x{m}, {name}: {} iterations, converged {}, true residual {res:.3e} (threshold {:.3e})",
            sol.info.iterations, sol.info.converged, sol.info.threshold
        );
    }
    Ok(())
}

fn row_hessian(n: usize) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let shape = Shape { n, ..Shape::SEED };
    let op = random_row_problem(shape, 2.0, 1)?;
    println!("problem: {shape:?}, r = {}, p = {}", op.layout().r(), op.dim());
    let be = CpuBackend::new();
    let mut diag = vec![0.0; op.dim()];
    op.diagonal(&mut diag)?;
    let jacobi = Jacobi::new(&be, &diag, None, 0.0)?;
    let b = Rng::new(2).normals(op.dim());
    let t = std::time::Instant::now();
    let sol = cg(&be, &op, &jacobi, &b, None, &PcgOptions::default())?;
    let secs = t.elapsed().as_secs_f64();
    println!("backend: cpu ({} rayon threads)", rayon::current_num_threads());
    println!("{}", serde_json::to_string_pretty(&sol.info)?);
    let its = sol.info.iterations;
    println!("{its} iterations in {secs:.3} s ({:.0} it/s)", its as f64 / secs);
    Ok(())
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    laplacian(arg(2, 100)?)?;
    row_hessian(arg(1, 195_000)?)
}
