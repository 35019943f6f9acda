//! Solve a generated, full-rank row-Hessian system H x = b with Jacobi PCG
//! and print the solver's info record.
//!
//!     cargo run --release --example solve_rows [N_ROWS]

use matfree::fixture::{random_row_problem, Rng, Shape};
use matfree::solvers::{cg, CpuBackend, Jacobi, LinearOperator, PcgOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = match std::env::args().nth(1) {
        Some(s) => s.parse().map_err(|e| format!("N_ROWS = {s:?}: {e}"))?,
        None => 195_000,
    };
    let shape = Shape { n, ..Shape::SEED };
    let t0 = std::time::Instant::now();
    let op = random_row_problem(shape, 2.0, 1)?;
    println!(
        "problem: {shape:?}, r = {}, p = {} ({:.2?} to generate)",
        op.layout().r(),
        op.dim(),
        t0.elapsed()
    );

    let be = CpuBackend::new();
    let mut diag = vec![0.0; op.dim()];
    op.diagonal(&mut diag)?;
    let jacobi = Jacobi::new(&be, &diag, None, 0.0)?;
    let b = Rng::new(2).normals(op.dim());
    let t1 = std::time::Instant::now();
    let sol = cg(&be, &op, &jacobi, &b, None, &PcgOptions::default())?;
    let secs = t1.elapsed().as_secs_f64();
    println!("backend: cpu ({} rayon threads)", rayon::current_num_threads());
    println!("{}", serde_json::to_string_pretty(&sol.info)?);
    println!(
        "{} iterations in {:.3} s ({:.0} it/s)",
        sol.info.iterations,
        secs,
        sol.info.iterations as f64 / secs
    );
    Ok(())
}
