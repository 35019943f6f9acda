//! A model's terms side by side, as mgcv's `gam.setup` binds them: the
//! model matrix is the terms' columns in order, and each smooth's
//! penalties sit at its columns' range.

use matfree_solvers::PenaltyBlock;
use rayon::prelude::*;

use super::{Column, Parametric, Smooth};
use crate::{Error, Result};

/// One term of a model.
#[derive(Clone, Debug, PartialEq)]
pub enum Term {
    /// An intercept, numeric covariate or factor: unpenalised.
    Parametric(Parametric),
    /// A smooth with its penalties.
    Smooth(Smooth),
}

impl Term {
    /// The number of columns (coefficients).
    pub fn dim(&self) -> usize {
        match self {
            Self::Parametric(t) => t.dim(),
            Self::Smooth(s) => s.dim(),
        }
    }

    /// The term's columns (n x dim) at n rows of `columns`, the data it
    /// was built on or new data.
    pub fn design(&self, columns: &[Column], n: usize) -> Result<Vec<f64>> {
        match self {
            Self::Parametric(t) => t.design(columns, n),
            Self::Smooth(s) => {
                let x = s.predict(columns)?;
                if x.len() != n * s.dim() {
                    return Err(Error::invalid(
                        s.label(),
                        format!("{} rows", columns[0].len()),
                        format!("the data have {n} rows"),
                    ));
                }
                Ok(x)
            }
        }
    }

    /// The number of its penalties (of smoothing parameters).
    pub fn penalty_count(&self) -> usize {
        match self {
            Self::Parametric(_) => 0,
            Self::Smooth(s) => s.penalties().len(),
        }
    }

    /// The term's penalties placed at coefficients `start..start + dim`.
    pub fn penalty_blocks(&self, start: usize) -> Vec<PenaltyBlock> {
        match self {
            Self::Parametric(_) => Vec::new(),
            Self::Smooth(s) => s
                .penalties()
                .iter()
                .map(|m| PenaltyBlock {
                    start,
                    dim: s.dim(),
                    s: m.clone(),
                })
                .collect(),
        }
    }
}

/// The model matrix (n x p, row-major, p the terms' dims summed) of terms,
/// each at its covariate columns, and the penalties at their ranges.
pub fn model_matrix(terms: &[(&Term, &[Column])], n: usize) -> Result<(Vec<f64>, Vec<PenaltyBlock>)> {
    let blocks = terms.iter().map(|(t, c)| t.design(c, n)).collect::<Result<Vec<_>>>()?;
    let terms: Vec<&Term> = terms.iter().map(|(t, _)| *t).collect();
    Ok(bind_terms(&terms, &blocks, n))
}

/// The model matrix of `terms` from their columns `blocks` (n x dim each),
/// side by side (in parallel over rows), and the penalties at their ranges.
pub(crate) fn bind_terms(terms: &[&Term], blocks: &[Vec<f64>], n: usize) -> (Vec<f64>, Vec<PenaltyBlock>) {
    let dims: Vec<usize> = terms.iter().map(|t| t.dim()).collect();
    let p: usize = dims.iter().sum();
    let mut x = vec![0.0; n * p];
    x.par_chunks_mut(p.max(1)).enumerate().for_each(|(i, row)| {
        let mut at = 0;
        for (b, d) in blocks.iter().zip(&dims) {
            row[at..at + d].copy_from_slice(&b[i * d..(i + 1) * d]);
            at += d;
        }
    });
    let mut start = 0;
    let mut penalties = Vec::new();
    for (t, d) in terms.iter().zip(&dims) {
        penalties.extend(t.penalty_blocks(start));
        start += d;
    }
    (x, penalties)
}
