//! The model's fixed parts: the score-warp and link-deviation bases and the
//! frailty scale. What is built from them per row (cells, moments, the
//! observed jets) lives in `cells`.

use crate::bms::model::cubic_basis::CubicBasis;
use crate::{Error, Result};

/// The model's fixed parts: the optional score-warp and link-deviation bases
/// and the frailty scale s_f.
#[derive(Clone, Debug)]
pub struct Bases {
    /// Bh, the score-warp basis (p_h = its dim, 0 when absent).
    pub score: Option<CubicBasis>,
    /// Bw, the link-deviation basis (p_w = its dim, 0 when absent).
    pub link: Option<CubicBasis>,
    /// The frailty scale s_f = 1 / sqrt(1 + sigma^2), in (0, 1].
    pub s_f: f64,
}

impl Bases {
    /// Check s_f and wrap the bases.
    pub fn new(score: Option<CubicBasis>, link: Option<CubicBasis>, s_f: f64) -> Result<Self> {
        if !(s_f.is_finite() && s_f > 0.0) {
            return Err(Error::invalid("s_f", s_f, "must be finite and > 0"));
        }
        Ok(Self { score, link, s_f })
    }
    /// Width of the score-warp block.
    pub fn p_h(&self) -> usize {
        self.score.as_ref().map_or(0, |b| b.dim())
    }
    /// Width of the link-deviation block.
    pub fn p_w(&self) -> usize {
        self.link.as_ref().map_or(0, |b| b.dim())
    }
    /// Row width r = 2 + p_h + p_w.
    pub fn r(&self) -> usize {
        2 + self.p_h() + self.p_w()
    }
    /// Check a theta vector's length and finiteness.
    pub fn check_theta(&self, theta: &[f64]) -> Result<()> {
        if theta.len() != self.r() {
            let rule = format!("must equal r = 2 + p_h + p_w = {}", self.r());
            return Err(Error::invalid("theta.len", theta.len(), rule));
        }
        if let Some(u) = theta.iter().position(|v| !v.is_finite()) {
            return Err(Error::invalid(format!("theta[{u}]"), theta[u], "must be finite"));
        }
        Ok(())
    }
}
