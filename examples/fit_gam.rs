//! Fit a penalised GLM / GAM as mgcv's `gam(formula, family, method =
//! "REML")` does, and print `summary.gam`'s table:
//!
//!     cargo run --release --example fit_gam -- --data d.csv \
//!         --formula 'y ~ x1 + f + s(x2, bs = "cr", k = 10) + te(x3, x4) + offset(lt)' --family binomial \
//!         [--link probit] [--weights w] \
//!         [--json summary.json] [--backend auto|cpu|gpu] [--predict new.csv --out p.csv --type link|response]
//!
//! The data are a CSV file (a header row) or a Parquet file (`.parquet`);
//! columns of numbers are numeric, others factors (`docs/errors.md`).

use std::path::PathBuf;

use clap::Parser;
use matfree::device::{select_device, Device, GpuPolicy};
use matfree::gam::{Column, Family, Gam, GamFit, GamModel, GamOptions, Link, PredictionType, Response};
use matfree::table::{Column as TableColumn, Table};

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Parser, Debug)]
#[command(about = "Fit a GAM by REML (mgcv's gam) on the CPU or a GPU, and print its summary")]
struct Args {
    /// The data: a CSV file with a header row, or a .parquet file.
    #[arg(long)]
    data: PathBuf,
    /// The model formula, as mgcv writes it.
    #[arg(long)]
    formula: String,
    /// binomial, poisson, gaussian or Gamma.
    #[arg(long, default_value = "gaussian")]
    family: String,
    /// The link (default: the family's canonical one).
    #[arg(long)]
    link: Option<String>,
    /// The column of prior weights (mgcv's `weights = w`).
    #[arg(long)]
    weights: Option<String>,
    /// Write the summary as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
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
    #[arg(long, default_value = "auto")]
    backend: String,
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
    let distribution = args.family.parse()?;
    let link: Link = match &args.link {
        Some(l) => l.parse()?,
        None => Family::canonical(distribution).link(),
    };
    let mut gam = Gam::new(&args.formula, Family::new(distribution, link)?)?;
    if let Some(w) = &args.weights {
        gam = gam.with_weights(w);
    }
    let kind = match args.kind.as_str() {
        "link" => PredictionType::Link,
        "response" => PredictionType::Response,
        other => return Err(format!("--type {other}: must be link or response").into()),
    };
    let table = read(&args.data, &gam.columns())?;
    let levels = factor_levels(&table);
    let model = gam.setup(&columns(&table, &levels))?;
    let fit = fit_on(&args.backend, &model)?;
    let summary = model.summary(&fit, &args.formula)?;
    println!("{summary}");
    if let Some(path) = &args.json {
        matfree::files::write(path, serde_json::to_string_pretty(&summary)?.as_bytes())?;
    }
    if let (Some(new), Some(out)) = (&args.predict, &args.out) {
        // The terms' covariates and the offsets (a prediction adds them), not the weights.
        let covariates: Vec<String> = gam
            .formula()
            .columns()
            .into_iter()
            .skip(response_columns(&gam))
            .collect();
        let table = read(new, &covariates)?;
        let levels = factor_levels(&table);
        let p = fit.predict(&columns(&table, &levels), kind)?;
        let mut csv = String::from("fit,se.fit\n");
        for (f, s) in p.fit.iter().zip(&p.se) {
            csv += &format!("{f:?},{s:?}\n");
        }
        matfree::files::write(out, csv.as_bytes())?;
        eprintln!("predicted {} rows ({}) to {}", p.fit.len(), args.kind, out.display());
    }
    if !fit.converged {
        eprintln!("warning: the fit did not converge ({:?})", fit.report.termination);
    }
    Ok(fit.converged)
}

/// The columns `wanted` of a CSV or Parquet file.
fn read(path: &std::path::Path, wanted: &[String]) -> AnyResult<Table> {
    Ok(match path.extension().and_then(|e| e.to_str()) {
        Some("parquet") => Table::read_parquet(path, Some(wanted))?,
        _ => Table::read_csv(path, Some(wanted))?,
    })
}

/// How many of the formula's columns are its response (1, or 2 for cbind).
fn response_columns(gam: &Gam) -> usize {
    match gam.formula().response {
        Response::Column(_) => 1,
        Response::Binomial { .. } => 2,
    }
}

/// The table's columns as the terms read them (`levels` from [`factor_levels`]).
fn columns<'a>(table: &'a Table, levels: &'a [Option<Vec<String>>]) -> Vec<(&'a str, Column<'a>)> {
    table
        .columns()
        .zip(levels)
        .map(|((name, c), level)| match (c, level) {
            (TableColumn::Numeric(x), _) => (name, Column::Numeric(x)),
            (TableColumn::Factor { .. }, Some(l)) => (name, Column::Factor(l)),
            _ => unreachable!("every factor has its levels"),
        })
        .collect()
}

/// Each factor column's level name per row (what the terms read).
fn factor_levels(table: &Table) -> Vec<Option<Vec<String>>> {
    let names = |levels: &[String], codes: &[u32]| codes.iter().map(|&c| levels[c as usize].clone()).collect();
    table
        .columns()
        .map(|(_, c)| match c {
            TableColumn::Factor { levels, codes } => Some(names(levels, codes)),
            TableColumn::Numeric(_) => None,
        })
        .collect()
}

/// The REML fit on the CPU or, where asked for and found, a GPU (rows on
/// the host, their Hessians uploaded).
fn fit_on(backend: &str, model: &GamModel) -> AnyResult<GamFit> {
    let opts = GamOptions::default();
    let policy = match backend {
        "auto" => GpuPolicy::from_env()?,
        "cpu" => GpuPolicy::Off,
        "gpu" => GpuPolicy::Required,
        other => return Err(format!("--backend {other}: must be auto, cpu or gpu").into()),
    };
    match select_device(policy)? {
        #[cfg(feature = "cuda")]
        Device::Gpu(gpu) => {
            use matfree::cuda::{CudaBackend, DeviceRowObjective};
            let objective = DeviceRowObjective::from_host(gpu.clone(), model.objective()?)?;
            Ok(model.fit_on(&CudaBackend::new(gpu)?, &objective, &opts)?)
        }
        Device::Cpu { .. } => Ok(model.fit_on(&matfree::solvers::CpuBackend::new(), &model.objective()?, &opts)?),
    }
}
