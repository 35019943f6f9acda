//! A `summary.gam`-like print: family, formula, the parametric and smooth
//! tables with significance stars, R-sq.(adj), deviance explained, the
//! criterion, the scale and n. Numbers are printed to 4 significant digits
//! (p-values to 3, `<2e-16` below machine epsilon), not with R's
//! column-wise `printCoefmat` rules, so columns align but digits may
//! differ from R's in the last place.

use std::fmt;

use super::{GamSummary, Statistic};

impl fmt::Display for GamSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "\nFamily: {} \nLink function: {} \n", self.family, self.link)?;
        writeln!(f, "Formula:\n{}", self.formula)?;
        if !self.coefficients.is_empty() {
            let (stat, p) = match self.coefficient_statistic {
                Statistic::Z => ("z value", "Pr(>|z|)"),
                _ => ("t value", "Pr(>|t|)"),
            };
            writeln!(f, "\nParametric coefficients:")?;
            let rows = self.coefficients.iter().map(|r| {
                (
                    r.name.clone(),
                    vec![g(r.estimate, 4), g(r.std_error, 4), g(r.statistic, 4)],
                    r.p_value,
                )
            });
            table(f, &["Estimate", "Std. Error", stat, p], rows.collect())?;
        }
        writeln!(f)?;
        if !self.smooths.is_empty() {
            let stat = if self.term_statistic == Statistic::F {
                "F"
            } else {
                "Chi.sq"
            };
            writeln!(f, "Approximate significance of smooth terms:")?;
            let rows = self.smooths.iter().map(|r| {
                (
                    r.label.clone(),
                    vec![g(r.edf, 4), g(r.ref_df, 4), g(r.statistic, 4)],
                    r.p_value,
                )
            });
            table(f, &["edf", "Ref.df", stat, "p-value"], rows.collect())?;
        }
        writeln!(f)?;
        if let Some(r) = self.r_sq {
            write!(f, "R-sq.(adj) =  {:>5}   ", g(r, 3))?;
        }
        writeln!(f, "Deviance explained = {:>4}%", g(100.0 * self.dev_expl, 3))?;
        if let Some(c) = &self.criterion {
            let method = if c.method == "REML" || c.method == "ML" {
                format!("-{}", c.method)
            } else {
                c.method.clone()
            };
            write!(f, "{method} = {}", g(c.score, 5))?;
        }
        writeln!(f, "  Scale est. = {:<8}  n = {}", g(self.scale, 5), self.n)
    }
}

/// Rows of (name, formatted numbers, p-value) under `header`, right-aligned,
/// with significance stars and their legend.
fn table(f: &mut fmt::Formatter<'_>, header: &[&str], rows: Vec<(String, Vec<String>, f64)>) -> fmt::Result {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(_, nums, p)| nums.iter().cloned().chain([pval(*p)]).collect())
        .collect();
    let name_w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            cells
                .iter()
                .map(|r| r[c].len())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    write!(f, "{:name_w$}", "")?;
    for (h, w) in header.iter().zip(&widths) {
        write!(f, " {h:>w$}")?;
    }
    writeln!(f, "    ")?;
    for ((name, _, p), row) in rows.iter().zip(&cells) {
        write!(f, "{name:<name_w$}")?;
        for (c, w) in row.iter().zip(&widths) {
            write!(f, " {c:>w$}")?;
        }
        writeln!(f, " {}", stars(*p))?;
    }
    writeln!(f, "---\nSignif. codes:  0 '***' 0.001 '**' 0.01 '*' 0.05 '.' 0.1 ' ' 1")
}

/// R's significance stars.
fn stars(p: f64) -> &'static str {
    match p {
        p if p < 0.001 => "***",
        p if p < 0.01 => "**",
        p if p < 0.05 => "*",
        p if p < 0.1 => ".",
        _ => " ",
    }
}

/// A p-value as `format.pval` shows it: `<2e-16` below machine epsilon.
fn pval(p: f64) -> String {
    if p < f64::EPSILON {
        "<2e-16".to_string()
    } else {
        g(p, 3)
    }
}

/// C's `%.{digits}g`: `digits` significant digits, fixed or scientific by
/// the exponent, trailing zeros dropped.
pub(crate) fn g(x: f64, digits: usize) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let sci = format!("{:.*e}", digits - 1, x);
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e}'s exponent is an integer");
    if exp < -4 || exp >= digits as i32 {
        format!("{}e{}{:02}", trim(mantissa), if exp < 0 { '-' } else { '+' }, exp.abs())
    } else {
        let decimals = (digits as i32 - 1 - exp).max(0) as usize;
        trim(&format!("{x:.decimals$}")).to_string()
    }
}

/// Drops trailing zeros (and a trailing point) of a decimal.
fn trim(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::g;

    /// Against C's printf("%.Ng").
    #[test]
    fn g_matches_printf() {
        assert_eq!(g(7.26957, 4), "7.27");
        assert_eq!(g(0.000484, 3), "0.000484");
        assert_eq!(g(1.18e-5, 3), "1.18e-05");
        assert_eq!(g(442.6712, 5), "442.67");
        assert_eq!(g(123456.0, 3), "1.23e+05");
        assert_eq!(g(-0.02617, 4), "-0.02617");
    }
}
