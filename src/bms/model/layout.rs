//! The BMS model's instance of the generic layout: beta = (beta_m, beta_g,
//! beta_h, beta_w), two linear predictors (q through the marginal design,
//! b through the slope design) and the two smooths' coefficients copied into
//! theta = (q, b, beta_h, beta_w).

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::layout::{Block, Layout};
use crate::{Designs, Result};

/// Block positions in the BMS coefficient vector.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockLayout {
    /// Columns of the marginal design (beta_m = beta[0..p_m]).
    pub p_m: usize,
    /// Columns of the slope design (beta_g = beta[p_m..p_m + p_g]).
    pub p_g: usize,
    /// beta_h's range in beta, if the score warp is active.
    pub h: Option<Range<usize>>,
    /// beta_w's range in beta, if the link deviation is active.
    pub w: Option<Range<usize>>,
    /// Length of beta.
    pub p_total: usize,
}

impl BlockLayout {
    /// beta = (beta_m, beta_g, beta_h, beta_w); a width of 0 leaves h or w out.
    pub fn standard(p_m: usize, p_g: usize, p_h: usize, p_w: usize) -> Self {
        let h0 = p_m + p_g;
        Self {
            p_m,
            p_g,
            h: (p_h > 0).then_some(h0..h0 + p_h),
            w: (p_w > 0).then_some(h0 + p_h..h0 + p_h + p_w),
            p_total: h0 + p_h + p_w,
        }
    }

    /// beta_m's range.
    pub fn m_range(&self) -> Range<usize> {
        0..self.p_m
    }

    /// beta_g's range.
    pub fn g_range(&self) -> Range<usize> {
        self.p_m..self.p_m + self.p_g
    }

    /// The generic layout: predictors m and g, then direct blocks h and w.
    pub fn layout(&self) -> Result<Layout> {
        let mut blocks = vec![Block::Predictor(self.p_m), Block::Predictor(self.p_g)];
        blocks.extend(self.h.iter().map(|r| Block::Direct(r.len())));
        blocks.extend(self.w.iter().map(|r| Block::Direct(r.len())));
        Layout::new(&blocks)
    }
}

/// The BMS layout for these block widths (`p_m, p_g >= 1`; `p_h`, `p_w`
/// may be 0).
pub fn standard_layout(p_m: usize, p_g: usize, p_h: usize, p_w: usize) -> Result<Layout> {
    BlockLayout::standard(p_m, p_g, p_h, p_w).layout()
}

/// The marginal (n x p_m) and slope (n x p_g) designs as the generic
/// [`Designs`] (designs 0 and 1).
pub fn marginal_slope_designs(n: usize, p_m: usize, p_g: usize, x_m: Vec<f64>, x_g: Vec<f64>) -> Result<Designs> {
    Designs::new(n, vec![(p_m, x_m), (p_g, x_g)])
}

/// The BMS names of designs 0 and 1.
pub trait MarginalSlope {
    /// Marginal design width.
    fn p_m(&self) -> usize;
    /// Slope design width.
    fn p_g(&self) -> usize;
    /// The marginal design, row-major.
    fn x_m(&self) -> &[f64];
    /// The slope design, row-major.
    fn x_g(&self) -> &[f64];
    /// Row i of the marginal design.
    fn x_m_row(&self, i: usize) -> &[f64];
    /// Row i of the slope design.
    fn x_g_row(&self, i: usize) -> &[f64];
}

impl MarginalSlope for Designs {
    fn p_m(&self) -> usize {
        self.widths()[0]
    }
    fn p_g(&self) -> usize {
        self.widths()[1]
    }
    fn x_m(&self) -> &[f64] {
        self.matrix(0)
    }
    fn x_g(&self) -> &[f64] {
        self.matrix(1)
    }
    fn x_m_row(&self, i: usize) -> &[f64] {
        self.row(0, i)
    }
    fn x_g_row(&self, i: usize) -> &[f64] {
        self.row(1, i)
    }
}
