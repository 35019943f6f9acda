//! Where each block of coefficients sits, in the joint vector beta and in a
//! row's primary coordinates theta = (q, b, beta_h, beta_w).
//!
//! beta = (beta_m, beta_g, beta_h, beta_w): the marginal block occupies
//! `0..p_m`, the slope block `p_m..p_m + p_g`, and the optional h and w
//! blocks the ranges given. In theta, coordinate 0 is q = x_m . beta_m,
//! coordinate 1 is b = x_g . beta_g, and the h and w blocks copy their beta
//! entries into the primary ranges given.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Block positions in the joint coefficient vector.
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

/// Block positions in a row's primary coordinates.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrimaryLayout {
    /// Number of primary coordinates (the row Hessian is r x r).
    pub r: usize,
    /// The h block's range in theta.
    pub h: Option<Range<usize>>,
    /// The w block's range in theta.
    pub w: Option<Range<usize>>,
}

/// A block layout and a primary layout checked against each other.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    block: BlockLayout,
    primary: PrimaryLayout,
}

fn range_len(r: &Option<Range<usize>>) -> usize {
    r.as_ref().map_or(0, |r| r.len())
}

fn non_empty(r: &Option<Range<usize>>) -> Option<Range<usize>> {
    r.clone().filter(|r| !r.is_empty())
}

/// Check that `ranges` tile `0..total` exactly, in any order.
fn check_tiling(what: &str, total: usize, ranges: &[(&str, Range<usize>)]) -> Result<()> {
    let mut sorted: Vec<_> = ranges.iter().filter(|(_, r)| !r.is_empty()).collect();
    sorted.sort_by_key(|(_, r)| r.start);
    let mut next = 0;
    for (name, r) in sorted {
        if r.start != next {
            let rule = format!("blocks of {what} must tile 0..{total} without gap or overlap; expected start {next}");
            return Err(Error::invalid(format!("{what}.{name}"), format!("{r:?}"), rule));
        }
        next = r.end;
    }
    if next != total {
        let rule = format!("blocks of {what} cover 0..{next}, which must equal 0..{total}");
        return Err(Error::invalid(format!("{what}.total"), total, rule));
    }
    Ok(())
}

impl BlockLayout {
    /// The standard layout beta = (beta_m, beta_g, beta_h, beta_w).
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
}

impl PrimaryLayout {
    /// The standard primary layout theta = (q, b, beta_h, beta_w).
    pub fn standard(p_h: usize, p_w: usize) -> Self {
        Self {
            r: 2 + p_h + p_w,
            h: (p_h > 0).then_some(2..2 + p_h),
            w: (p_w > 0).then_some(2 + p_h..2 + p_h + p_w),
        }
    }
}

impl Layout {
    /// Check both layouts and their agreement: beta's blocks tile
    /// `0..p_total`, theta's blocks tile `2..r`, and each of h and w is
    /// either absent in both or of the same length in both.
    pub fn new(block: BlockLayout, primary: PrimaryLayout) -> Result<Self> {
        if block.p_m == 0 {
            return Err(Error::invalid(
                "block.p_m",
                0,
                "the marginal design needs at least one column",
            ));
        }
        if block.p_g == 0 {
            return Err(Error::invalid(
                "block.p_g",
                0,
                "the slope design needs at least one column",
            ));
        }
        let mut beta = vec![("m", block.m_range()), ("g", block.g_range())];
        beta.extend(non_empty(&block.h).map(|r| ("h", r)));
        beta.extend(non_empty(&block.w).map(|r| ("w", r)));
        check_tiling("block", block.p_total, &beta)?;
        if primary.r < 2 {
            return Err(Error::invalid("primary.r", primary.r, "must be >= 2 (q and b)"));
        }
        let mut theta = vec![("q,b", 0..2)];
        theta.extend(non_empty(&primary.h).map(|r| ("h", r)));
        theta.extend(non_empty(&primary.w).map(|r| ("w", r)));
        check_tiling("primary", primary.r, &theta)?;
        for (name, b, p) in [("h", &block.h, &primary.h), ("w", &block.w, &primary.w)] {
            if range_len(b) != range_len(p) {
                let rule = format!("must equal the primary {name} block's length {}", range_len(p));
                return Err(Error::invalid(format!("block.{name}.len"), range_len(b), rule));
            }
        }
        let block = BlockLayout {
            h: non_empty(&block.h),
            w: non_empty(&block.w),
            ..block
        };
        let primary = PrimaryLayout {
            h: non_empty(&primary.h),
            w: non_empty(&primary.w),
            ..primary
        };
        Ok(Self { block, primary })
    }

    /// The standard layout for the given block widths.
    pub fn standard(p_m: usize, p_g: usize, p_h: usize, p_w: usize) -> Result<Self> {
        Self::new(
            BlockLayout::standard(p_m, p_g, p_h, p_w),
            PrimaryLayout::standard(p_h, p_w),
        )
    }

    /// The block layout.
    pub fn block(&self) -> &BlockLayout {
        &self.block
    }
    /// The primary layout.
    pub fn primary(&self) -> &PrimaryLayout {
        &self.primary
    }
    /// Row Hessian width r.
    pub fn r(&self) -> usize {
        self.primary.r
    }
    /// Length of beta.
    pub fn p_total(&self) -> usize {
        self.block.p_total
    }

    /// The direct (copied) coordinates: pairs of (range in beta, first
    /// primary index), for the h and w blocks that are present.
    pub fn direct_blocks(&self) -> Vec<(Range<usize>, usize)> {
        [(&self.block.h, &self.primary.h), (&self.block.w, &self.primary.w)]
            .into_iter()
            .filter_map(|(b, p)| Some((b.clone()?, p.as_ref()?.start)))
            .collect()
    }

    /// For every beta index, the primary coordinate it maps to and whether
    /// it goes through a design (`Via::Marginal(j)`, `Via::Slope(j)`) or is
    /// copied (`Via::Direct`).
    pub fn column_map(&self) -> Vec<(usize, Via)> {
        let mut map = vec![(0, Via::Direct); self.p_total()];
        for j in self.block.m_range() {
            map[j] = (0, Via::Marginal(j));
        }
        for (k, j) in self.block.g_range().enumerate() {
            map[j] = (1, Via::Slope(k));
        }
        for (range, u0) in self.direct_blocks() {
            for (k, j) in range.enumerate() {
                map[j] = (u0 + k, Via::Direct);
            }
        }
        map
    }
}

/// How a beta coordinate reaches a row's primary coordinate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// Through column j of the marginal design.
    Marginal(usize),
    /// Through column j of the slope design.
    Slope(usize),
    /// Copied unchanged.
    Direct,
}
