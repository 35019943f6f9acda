//! Your own model on matfree: a penalised logistic regression y ~ x1 + s(x2)
//! (the model is `own_model/model.rs`), fitted with REML on the CPU.
//!
//! cargo run --release --example own_model [-- FILE.csv]   (default: tests/data/own_model.csv)

#[path = "own_model/model.rs"]
mod model;

fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "tests/data/own_model.csv".into());
    match model::fit(&path) {
        Ok(fit) => print(&fit),
        Err(e) => {
            eprintln!("own_model: {e}");
            std::process::exit(1);
        }
    }
}

fn print(own: &model::OwnFit) {
    let (fit, p) = (&own.fit, own.fit.laml.beta.len());
    let mut names = vec!["(Intercept)".to_string(), "x1".to_string()];
    names.extend((1..p - 1).map(|j| format!("s(x2).{j}")));
    println!("{:<12} {:>12} {:>10}", "", "estimate", "se");
    for (j, name) in names.iter().enumerate() {
        let se = own.stats.covariance[j * p + j].sqrt();
        println!("{name:<12} {:>12.6} {se:>10.6}", fit.laml.beta[j]);
    }
    let score = fit.laml.value - own.null_space_dim as f64 * (2.0 * std::f64::consts::PI).ln() / 2.0;
    println!(
        "lambda {:.6e}, edf {:.4} (s(x2) {:.4})",
        fit.lambda[0], own.stats.edf.total, own.stats.edf.blocks[0]
    );
    println!(
        "REML score {score:.6} (mgcv's scale; matfree's V = {:.6})",
        fit.laml.value
    );
    println!(
        "converged: {} ({:?}, {} outer iterations)",
        fit.report.converged,
        fit.report.termination,
        fit.report.iterations.len()
    );
}
