//! What an evaluation says of one smooth: its penalised edf, its penalty
//! term, and whether it has shrunk to nothing.

use crate::penalty::Penalty;

use super::LamlEvaluation;

/// Block k's penalised degrees of freedom, `g_k - lambda_k tr((H +
/// S)^{-1} S_k)` with `g_k = d log|S|_+ / d rho_k` (rank_k where the block
/// overlaps no other, `lambda_k tr(S^+ S_k)` where it does): its edf less
/// its penalty's null space (the block's edf where S_k is positive
/// definite), the side of the fixed point `dV/drho_k = 0` that the
/// log-determinant brings. An evaluation deserialised from before
/// `log_pseudo_det_gradient` existed was computed with the rank.
pub(super) fn penalised_edf(e: &LamlEvaluation, penalty: &Penalty, k: usize) -> f64 {
    let log_det = e
        .log_pseudo_det_gradient
        .get(k)
        .copied()
        .unwrap_or(penalty.ranks()[k] as f64);
    log_det - e.rho[k].exp() * e.penalty_traces[k]
}

/// A smooth whose effective degrees of freedom and penalty term
/// `lambda_k beta^T S_k beta` are both below this is treated as shrunk to
/// nothing when its lambda would still grow (see [`Outer::direction`]).
///
/// [`Outer::direction`]: super::bounds::Outer::direction
pub const VANISHED_EDF: f64 = 0.05;

/// Whether block k is shrunk to nothing (to its penalty's null space): its
/// penalised edf and its penalty term both below [`VANISHED_EDF`]. The edf alone does not say so where H is
/// indefinite (small data, a non-canonical link): `dim - lambda tr(A^{-1}
/// S)` can then fall below zero for a smooth in full use (on 5,000 rows a
/// link deviation with lambda 12 and a penalty term of 2), while a smooth
/// that is gone has its coefficients, and so its penalty term, near zero
/// as well.
pub(super) fn vanished(e: &LamlEvaluation, penalty: &Penalty, k: usize) -> bool {
    penalised_edf(e, penalty, k) < VANISHED_EDF && wiggliness(e, penalty, k) < VANISHED_EDF
}

/// Block k's penalty term `lambda_k beta^T S_k beta`.
pub(super) fn wiggliness(e: &LamlEvaluation, penalty: &Penalty, k: usize) -> f64 {
    e.rho[k].exp() * penalty.block_quadratic(k, &e.beta)
}
