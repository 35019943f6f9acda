//! A factor: level names and each row's level, as R's `factor()` makes
//! them from a character vector.

use crate::{Error, Result};

/// The sorted distinct levels of a column and each row's index into them.
#[derive(Clone, Debug, PartialEq)]
pub struct Factor {
    levels: Vec<String>,
    codes: Vec<usize>,
}

impl Factor {
    /// The factor of `values`, its levels sorted as R sorts `factor()`'s
    /// in the C collation (byte order; R's default under a C or C.UTF-8
    /// locale; other locales may order mixed case differently).
    pub fn new(values: &[String]) -> Self {
        let mut levels = values.to_vec();
        levels.sort();
        levels.dedup();
        let codes = values
            .iter()
            .map(|v| levels.binary_search(v).expect("every value is a level"))
            .collect();
        Self { levels, codes }
    }

    /// `values` coded against known `levels` (term `label`'s, from the
    /// fit): a value not among them is an error naming it and its row.
    pub fn with_levels(label: &str, levels: &[String], values: &[String]) -> Result<Self> {
        let codes = values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                levels.iter().position(|l| l == v).ok_or_else(|| {
                    Error::invalid(
                        format!("{label}: row {i}"),
                        format!("{v:?}"),
                        format!("not a level seen in fitting (levels: {})", levels.join(", ")),
                    )
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            levels: levels.to_vec(),
            codes,
        })
    }

    /// An error unless term `label`'s known `levels` (from a saved fit)
    /// are distinct and at least `min` of them.
    pub(crate) fn check_levels(label: &str, levels: &[String], min: usize) -> Result<()> {
        let distinct = levels.iter().enumerate().all(|(i, l)| !levels[..i].contains(l));
        match distinct && levels.len() >= min {
            true => Ok(()),
            false => Err(Error::invalid(
                format!("{label}: levels"),
                format!("{levels:?}"),
                format!("must be {min} or more distinct levels"),
            )),
        }
    }

    /// The levels, sorted.
    pub fn levels(&self) -> &[String] {
        &self.levels
    }

    /// Each row's level index.
    pub fn codes(&self) -> &[usize] {
        &self.codes
    }

    /// The indicators of the levels from `first` on (column c is 1 where
    /// a row's level is `first + c`), n x (levels - first) row-major:
    /// model.matrix's dummy coding (`first = 1`: treatment contrasts).
    pub(crate) fn indicators(&self, first: usize) -> Vec<f64> {
        let p = self.levels.len().saturating_sub(first);
        let mut x = vec![0.0; self.codes.len() * p];
        for (i, &c) in self.codes.iter().enumerate() {
            if c >= first {
                x[i * p + c - first] = 1.0;
            }
        }
        x
    }
}
