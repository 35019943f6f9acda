//! Parametric terms as R's `model.matrix` builds them: the intercept, a
//! numeric covariate as it is, and a factor with treatment contrasts (an
//! indicator per level but the first, which the intercept absorbs).

use super::{expect_columns, Column, Factor};
use crate::{Error, Result};

/// One parametric term and what it needs to rebuild its columns.
#[derive(Clone, Debug, PartialEq)]
pub enum Parametric {
    /// The column of ones, `(Intercept)`.
    Intercept,
    /// A numeric covariate, one column.
    Numeric {
        /// The covariate's name.
        label: String,
    },
    /// The product of numeric covariates, `a:b`, one column.
    Interaction {
        /// The covariates' names, in order.
        labels: Vec<String>,
    },
    /// A factor with treatment contrasts: levels 2.. get a column each.
    Factor {
        /// The covariate's name.
        label: String,
        /// The levels seen in fitting, sorted (the first is the baseline).
        levels: Vec<String>,
    },
}

impl Parametric {
    /// A factor term on the levels of `values` (at least 2, as R's
    /// contrasts need).
    pub fn factor(label: &str, values: &[String]) -> Result<Self> {
        let levels = Factor::new(values).levels().to_vec();
        if levels.len() < 2 {
            return Err(Error::invalid(
                label,
                format!("levels {levels:?}"),
                "treatment contrasts need a factor with 2 or more levels",
            ));
        }
        Ok(Self::Factor {
            label: label.into(),
            levels,
        })
    }

    /// The number of columns.
    pub fn dim(&self) -> usize {
        match self {
            Self::Intercept | Self::Numeric { .. } | Self::Interaction { .. } => 1,
            Self::Factor { levels, .. } => levels.len() - 1,
        }
    }

    /// The columns' names as `model.matrix` gives them (`(Intercept)`,
    /// `x`, `glevel`).
    pub fn column_names(&self) -> Vec<String> {
        match self {
            Self::Intercept => vec!["(Intercept)".into()],
            Self::Numeric { label } => vec![label.clone()],
            Self::Interaction { labels } => vec![labels.join(":")],
            Self::Factor { label, levels } => levels[1..].iter().map(|l| format!("{label}{l}")).collect(),
        }
    }

    /// The design (n x dim, row-major) at n rows of data: the intercept
    /// reads no column, an interaction one numeric column per covariate,
    /// the others one (numeric or factor); a factor's
    /// unseen level is an error naming the row and the value.
    pub fn design(&self, columns: &[Column], n: usize) -> Result<Vec<f64>> {
        match self {
            Self::Intercept => Ok(vec![1.0; n]),
            Self::Numeric { label } => Ok(self.one_column(label, columns, n)?.numeric(label)?.to_vec()),
            Self::Interaction { labels } => interaction(&labels.join(":"), columns, n),
            Self::Factor { label, levels } => {
                let values = self.one_column(label, columns, n)?.factor(label)?;
                Ok(Factor::with_levels(label, levels, values)?.indicators(1))
            }
        }
    }

    fn one_column<'a>(&self, label: &str, columns: &[Column<'a>], n: usize) -> Result<Column<'a>> {
        let c = expect_columns(label, columns, 1)?[0];
        expect_rows(label, c.len(), n)?;
        Ok(c)
    }
}

/// An error unless term `label`'s column has the data's n rows.
fn expect_rows(label: &str, rows: usize, n: usize) -> Result<()> {
    match rows == n {
        true => Ok(()),
        false => Err(Error::invalid(
            label,
            format!("{rows} rows"),
            format!("the data have {n} rows"),
        )),
    }
}

/// The row-wise product of term `label`'s numeric columns.
fn interaction(label: &str, columns: &[Column], n: usize) -> Result<Vec<f64>> {
    let columns = expect_columns(label, columns, columns.len().max(2))?;
    let mut out = vec![1.0; n];
    for c in columns {
        let x = c.numeric(label)?;
        expect_rows(label, x.len(), n)?;
        out.iter_mut().zip(x).for_each(|(o, v)| *o *= v);
    }
    Ok(out)
}
