//! Where each block of coefficients sits, in the joint vector beta and in a
//! row's coordinates theta (the r coordinates a row Hessian is over).
//!
//! beta is a sequence of blocks. A *linear predictor* of width p_j owns p_j
//! coefficients and one row coordinate, eta_j = x_ij . beta_j, through its
//! own design (n x p_j). A *direct* block of width w owns w coefficients
//! copied into w row coordinates (a smooth's basis values that enter a row
//! unchanged, as the BMS model's warps do). theta holds the predictors
//! first, in the order they appear in beta, then the direct blocks, in
//! theta's order: r = (number of predictors) + (sum of direct widths).
//!
//! A one-predictor GLM is `Layout::new(&[Block::Predictor(p)])` (r = 1); a
//! location-scale model two predictors (r = 2); the BMS model two predictors
//! and two direct blocks.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// One block of beta.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Block {
    /// A linear predictor with this many design columns.
    Predictor(usize),
    /// This many coefficients copied into as many row coordinates.
    Direct(usize),
}

/// A checked sequence of blocks with their positions in beta and theta.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    blocks: Vec<Block>,
    /// Each predictor's range in beta (predictor j is theta coordinate j).
    predictors: Vec<Range<usize>>,
    /// Each direct block's range in beta and first theta coordinate.
    direct: Vec<(Range<usize>, usize)>,
    r: usize,
    p_total: usize,
}

/// How a beta coordinate reaches a row's coordinate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// Through column `col` of predictor `design`'s design.
    Design {
        /// The predictor (and design) index.
        design: usize,
        /// The column within that design.
        col: usize,
    },
    /// Copied unchanged.
    Direct,
}

impl Layout {
    /// Check the blocks (each at least one column wide, at least one block)
    /// and place them: beta in the order given; theta with the predictors
    /// first, then the direct blocks.
    pub fn new(blocks: &[Block]) -> Result<Self> {
        if blocks.is_empty() {
            return Err(Error::invalid("blocks", "[]", "a layout needs at least one block"));
        }
        let predictor_count = blocks.iter().filter(|b| matches!(b, Block::Predictor(_))).count();
        let (mut predictors, mut direct) = (Vec::new(), Vec::new());
        let (mut at, mut u) = (0, predictor_count);
        for (i, block) in blocks.iter().enumerate() {
            let width = match *block {
                Block::Predictor(w) | Block::Direct(w) => w,
            };
            if width == 0 {
                return Err(Error::invalid(
                    format!("blocks[{i}]"),
                    format!("{block:?}"),
                    "a block needs at least one column",
                ));
            }
            match block {
                Block::Predictor(_) => predictors.push(at..at + width),
                Block::Direct(_) => {
                    direct.push((at..at + width, u));
                    u += width;
                }
            }
            at += width;
        }
        Ok(Self {
            blocks: blocks.to_vec(),
            predictors,
            direct,
            r: u,
            p_total: at,
        })
    }

    /// One linear predictor of `p` columns: a GLM's layout (r = 1).
    pub fn glm(p: usize) -> Result<Self> {
        Self::new(&[Block::Predictor(p)])
    }

    /// The blocks, in beta's order.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }
    /// Row Hessian width r.
    pub fn r(&self) -> usize {
        self.r
    }
    /// Length of beta.
    pub fn p_total(&self) -> usize {
        self.p_total
    }
    /// Number of linear predictors (and designs).
    pub fn predictor_count(&self) -> usize {
        self.predictors.len()
    }
    /// Each predictor's range in beta; predictor j is row coordinate j.
    pub fn predictors(&self) -> &[Range<usize>] {
        &self.predictors
    }
    /// The design widths, one per predictor.
    pub fn design_widths(&self) -> Vec<usize> {
        self.predictors.iter().map(|r| r.len()).collect()
    }

    /// The direct (copied) coordinates: pairs of (range in beta, first
    /// row coordinate).
    pub fn direct_blocks(&self) -> Vec<(Range<usize>, usize)> {
        self.direct.clone()
    }
    /// [`Layout::direct_blocks`] without a copy.
    pub fn direct(&self) -> &[(Range<usize>, usize)] {
        &self.direct
    }

    /// For every beta index, the row coordinate it maps to and how.
    pub fn column_map(&self) -> Vec<(usize, Via)> {
        let mut map = vec![(0, Via::Direct); self.p_total];
        for (design, range) in self.predictors.iter().enumerate() {
            for (col, a) in range.clone().enumerate() {
                map[a] = (design, Via::Design { design, col });
            }
        }
        for (range, u0) in &self.direct {
            for (k, a) in range.clone().enumerate() {
                map[a] = (u0 + k, Via::Direct);
            }
        }
        map
    }

    /// Each row coordinate's beta index for the direct coordinates, `None`
    /// for the predictors'.
    pub fn coordinate_sources(&self) -> Vec<Option<usize>> {
        let mut to_beta = vec![None; self.r];
        for (range, u0) in &self.direct {
            for (k, a) in range.clone().enumerate() {
                to_beta[u0 + k] = Some(a);
            }
        }
        to_beta
    }
}
