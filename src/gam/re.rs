//! mgcv's simple random effect, `s(f, bs = "re")`: one indicator column
//! per level of a factor and an identity (ridge) penalty, no null space and
//! no identifiability constraint (`smooth.construct.re.smooth.spec`).

use super::Factor;
use crate::Result;

/// The basis: the factor's levels, in the columns' order.
#[derive(Clone, Debug, PartialEq)]
pub struct ReBasis {
    levels: Vec<String>,
}

impl ReBasis {
    /// The basis of the levels seen in `values`.
    pub fn new(values: &[String]) -> Self {
        Self {
            levels: Factor::new(values).levels().to_vec(),
        }
    }

    /// The basis of known `levels` (term `label`'s, at least one, distinct).
    pub fn with_levels(label: &str, levels: Vec<String>) -> Result<Self> {
        Factor::check_levels(label, &levels, 1)?;
        Ok(Self { levels })
    }

    /// Number of functions: the number of levels.
    pub fn dim(&self) -> usize {
        self.levels.len()
    }

    /// The levels, sorted.
    pub fn levels(&self) -> &[String] {
        &self.levels
    }

    /// The identity penalty (levels x levels).
    pub fn penalty(&self) -> Vec<f64> {
        super::identity(self.dim())
    }

    /// The indicator design (n x levels) of `values`; an unseen level is an
    /// error naming term `label`, the row and the value.
    pub fn design(&self, label: &str, values: &[String]) -> Result<Vec<f64>> {
        Ok(Factor::with_levels(label, &self.levels, values)?.indicators(0))
    }
}
