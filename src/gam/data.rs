//! A [`Table`] (CSV or Parquet columns) as a GAM's terms read it: numeric
//! columns as they are, a factor's codes spelled out as level names, one
//! per row ([`Column::Factor`]).

use super::Column;
use crate::table::{Column as TableColumn, Table};

/// A table with each factor's level name per row, lent out as [`Column`]s.
pub struct TableColumns<'t> {
    table: &'t Table,
    /// Per table column: the level names row by row (factors), or none.
    names: Vec<Option<Vec<String>>>,
}

impl<'t> TableColumns<'t> {
    /// The columns of `table`.
    pub fn new(table: &'t Table) -> Self {
        let spell = |levels: &[String], codes: &[u32]| codes.iter().map(|&c| levels[c as usize].clone()).collect();
        let names = table
            .columns()
            .map(|(_, c)| match c {
                TableColumn::Factor { levels, codes } => Some(spell(levels, codes)),
                TableColumn::Numeric(_) => None,
            })
            .collect();
        Self { table, names }
    }

    /// The named columns, as [`super::Gam::setup`] and [`super::GamFit::predict`] take them.
    pub fn columns(&self) -> Vec<(&str, Column<'_>)> {
        self.table
            .columns()
            .zip(&self.names)
            .map(|((name, c), names)| match (c, names) {
                (TableColumn::Numeric(x), _) => (name, Column::Numeric(x)),
                (TableColumn::Factor { .. }, Some(f)) => (name, Column::Factor(f)),
                (TableColumn::Factor { .. }, None) => unreachable!("new spells out every factor"),
            })
            .collect()
    }
}
