//! The BMS negative log-likelihood as a Newton/REML objective: the model
//! gives its rows ([`BmsRows`], a [`RowEvaluator`]) and the generic
//! [`RowObjective`] does the rest on the CPU (the device's rows are
//! `bms::device`'s).

use matfree_solvers::newton::CostEstimate;

use crate::bms::{BmsData, BmsModel};
use crate::row_objective::{row_cost, RowEvaluator, RowObjective};
use crate::Result;

/// The BMS model's rows on a data set: Stage 1 and Stage 2 fused per row
/// (`fused`), a batch of rows sharing one set of buffers. A row the model
/// cannot calibrate at theta gets a NaN value (outside the domain).
pub struct BmsRows<'a> {
    model: &'a BmsModel,
    data: &'a BmsData,
}

impl RowEvaluator for BmsRows<'_> {
    fn row(&self, i: usize, theta: &[f64], grad: &mut [f64], hess: &mut [f64]) -> f64 {
        let mut neglog = [0.0];
        self.model.fused_rows(self.data, i, theta, &mut neglog, grad, hess);
        neglog[0]
    }

    fn rows(&self, first: usize, theta: &[f64], neglog: &mut [f64], grad: &mut [f64], hess: &mut [f64]) {
        self.model.fused_rows(self.data, first, theta, neglog, grad, hess);
    }
}

/// sum_i neglog_i(beta) of a model on a data set, evaluated on the CPU.
pub type BmsObjective<'a> = RowObjective<BmsRows<'a>>;

impl BmsModel {
    /// The model's rows on `data`.
    pub fn rows<'a>(&'a self, data: &'a BmsData) -> BmsRows<'a> {
        BmsRows { model: self, data }
    }

    /// The model's objective on `data` on the CPU.
    pub fn objective<'a>(&'a self, data: &'a BmsData) -> Result<BmsObjective<'a>> {
        RowObjective::new(self.layout().clone(), data.designs.clone(), self.rows(data))
    }
}

/// Flop estimates of one HVP and of the dense assembly
/// ([`row_cost`] of the model's layout).
pub fn bms_cost(model: &BmsModel, n: usize) -> CostEstimate {
    row_cost(model.layout(), n)
}

/// The model's smoothing penalty S_lambda = lambda_h S_h (+) lambda_w S_w on
/// the h and w blocks of beta (one block per active smooth, h first).
pub fn bms_penalty(model: &BmsModel) -> crate::Result<matfree_solvers::Penalty> {
    let b = model.blocks();
    let mut blocks = Vec::new();
    for (range, s) in [(&b.h, model.penalty_h()), (&b.w, model.penalty_w())] {
        if let (Some(range), Some(s)) = (range, s) {
            blocks.push(matfree_solvers::PenaltyBlock {
                start: range.start,
                dim: range.len(),
                s: s.to_vec(),
            });
        }
    }
    Ok(matfree_solvers::Penalty::new(b.p_total, blocks)?)
}
