//! Fit a penalised GLM / GAM as mgcv's `gam(formula, family, method =
//! "REML")` does, and print `summary.gam`'s table:
//!
//!     cargo run --release --example fit_gam -- --data d.csv \
//!         --formula 'y ~ x1 + f + s(x2, bs = "cr", k = 10) + te(x3, x4) + offset(lt)' --family binomial \
//!         [--link probit] [--weights w] \
//!         [--json summary.json] [--backend auto|cpu|gpu] [--save model.json] [--plot smooths.svg] \
//!         [--predict new.csv --out p.csv --type link|response]
//!
//! or predict from (and summarise, plot) a saved fit without refitting:
//!
//!     cargo run --release --example fit_gam -- --model model.json --predict new.csv --out p.csv [--type link]
//!
//! The data are a CSV file (a header row) or a Parquet file (`.parquet`);
//! columns of numbers are numeric, others factors (`docs/errors.md`).
//! `--plot` draws each one-dimensional smooth as `plot.gam` does (100
//! points over the covariate's range, +-2 SE); tensor products and random
//! effects are not drawn, with a note on stderr.

use std::path::{Path, PathBuf};

use clap::Parser;
use matfree::device::choose_device;
use matfree::gam::{Family, Gam, GamFit, GamModel, GamOptions, Link, PredictionType, SavedGam, TableColumns};
use matfree::table::Table;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Parser, Debug)]
#[command(about = "Fit a GAM by REML (mgcv's gam) on the CPU or a GPU, and print its summary")]
struct Args {
    /// The data: a CSV file with a header row, or a .parquet file.
    #[arg(long, required_unless_present = "model", requires = "formula")]
    data: Option<PathBuf>,
    /// The model formula, as mgcv writes it.
    #[arg(long, required_unless_present = "model", requires = "data")]
    formula: Option<String>,
    /// The column of prior weights (mgcv's `weights = w`).
    #[arg(long, conflicts_with = "model")]
    weights: Option<String>,
    /// A fit written by --save: summarised, predicted from or plotted
    /// without refitting (no --data, --formula, --family, --link then).
    #[arg(long, conflicts_with_all = ["data", "formula", "family", "link", "save", "backend"])]
    model: Option<PathBuf>,
    /// binomial, poisson, gaussian or Gamma (default gaussian).
    #[arg(long)]
    family: Option<String>,
    /// The link (default: the family's canonical one).
    #[arg(long)]
    link: Option<String>,
    /// Write the summary as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Save the fit here (JSON, format "matfree-gam"; read back by --model).
    #[arg(long)]
    save: Option<PathBuf>,
    /// Draw each one-dimensional smooth with a +-2 SE band (SVG) here.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Predict at the rows of this CSV or Parquet file after the fit
    /// (mgcv's `predict.gam`), written to `--out` with standard errors.
    #[arg(long, requires = "out")]
    predict: Option<PathBuf>,
    /// The predictions' file (CSV: fit, se.fit).
    #[arg(long, requires = "predict")]
    out: Option<PathBuf>,
    /// The predictions' scale: link or response.
    #[arg(long = "type", default_value = "response")]
    kind: String,
    /// Where to fit: auto (the GPU if found), cpu or gpu.
    #[arg(long)]
    backend: Option<String>,
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(3), // fitted, not converged
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> AnyResult<bool> {
    let kind = match args.kind.as_str() {
        "link" => PredictionType::Link,
        "response" => PredictionType::Response,
        other => return Err(format!("--type {other}: must be link or response").into()),
    };
    let saved = match &args.model {
        Some(path) => SavedGam::load(path)?,
        None => fit(&args)?,
    };
    let summary = saved.summary()?;
    println!("{summary}");
    if let Some(path) = &args.json {
        matfree::files::write(path, serde_json::to_string_pretty(&summary)?.as_bytes())?;
    }
    if let Some(path) = &args.save {
        saved.save(path)?;
        eprintln!("saved the fit to {}", path.display());
    }
    if let Some(path) = &args.plot {
        plot(&saved.fit, path)?;
    }
    if let (Some(new), Some(out)) = (&args.predict, &args.out) {
        predict(&saved.fit, new, out, kind, &args.kind)?;
    }
    let fit = &saved.fit;
    if !fit.converged {
        eprintln!("warning: the fit did not converge ({:?})", fit.report.termination);
    }
    Ok(fit.converged)
}

/// The fit of --formula on --data, with what saving it needs.
fn fit(args: &Args) -> AnyResult<SavedGam> {
    let (Some(data), Some(formula)) = (&args.data, &args.formula) else {
        return Err("give --data and --formula, or --model".into());
    };
    let distribution = args.family.as_deref().unwrap_or("gaussian").parse()?;
    let link: Link = match &args.link {
        Some(l) => l.parse()?,
        None => Family::canonical(distribution).link(),
    };
    let mut gam = Gam::new(formula, Family::new(distribution, link)?)?;
    if let Some(w) = &args.weights {
        gam = gam.with_weights(w);
    }
    let clock = std::time::Instant::now();
    let table = read(data, &gam.columns())?;
    let model = gam.setup(&TableColumns::new(&table).columns())?;
    let setup = clock.elapsed().as_secs_f64();
    let fit = fit_on(args.backend.as_deref().unwrap_or("auto"), &model)?;
    for note in &fit.notes {
        eprintln!("note: {note}");
    }
    let fitted = clock.elapsed().as_secs_f64();
    let (iterations, evaluations) = (fit.report.iterations.len(), fit.report.evaluations);
    let saved = SavedGam::new(&model, fit, formula)?;
    eprintln!(
        "read and set up in {setup:.2} s; fitted in {:.2} s ({iterations} REML iterations, {evaluations} \
         evaluations); summary in {:.2} s",
        fitted - setup,
        clock.elapsed().as_secs_f64() - fitted
    );
    Ok(saved)
}

/// `predict.gam` at the rows of `new`, written to `out` as CSV.
fn predict(fit: &GamFit, new: &Path, out: &Path, kind: PredictionType, name: &str) -> AnyResult<()> {
    let table = read(new, &fit.covariates())?;
    let p = fit.predict(&TableColumns::new(&table).columns(), kind)?;
    let mut csv = String::from("fit,se.fit\n");
    for (f, s) in p.fit.iter().zip(&p.se) {
        csv += &format!("{f:?},{s:?}\n");
    }
    matfree::files::write(out, csv.as_bytes())?;
    eprintln!("predicted {} rows ({name}) to {}", p.fit.len(), out.display());
    Ok(())
}

/// `plot.gam`'s panels as one SVG; the smooths not drawn are noted.
fn plot(fit: &GamFit, path: &Path) -> AnyResult<()> {
    let panels = fit.smooth_panels()?;
    for note in &panels.skipped {
        eprintln!("note: {note}");
    }
    if panels.panels.is_empty() {
        return Err(format!(
            "--plot {}: the model has no one-dimensional smooth to draw",
            path.display()
        )
        .into());
    }
    matfree::files::write(path, matfree::plot::smooths_svg(&panels.panels)?.as_bytes())?;
    eprintln!("plotted {} smooth(s) to {}", panels.panels.len(), path.display());
    Ok(())
}

/// The columns `wanted` of a CSV or Parquet file.
fn read(path: &Path, wanted: &[String]) -> AnyResult<Table> {
    Ok(match path.extension().and_then(|e| e.to_str()) {
        Some("parquet") => Table::read_parquet(path, Some(wanted))?,
        _ => Table::read_csv(path, Some(wanted))?,
    })
}

/// The REML fit on the CPU or, where asked for and found, a GPU
/// ([`GamModel::fit_on_device`], which the Python package calls too).
fn fit_on(backend: &str, model: &GamModel) -> AnyResult<GamFit> {
    let device = choose_device("--backend", backend)?;
    Ok(model.fit_on_device(&device, &(), &GamOptions::default())?)
}
