//! Model formulas as R and mgcv write them:
//!
//! ```text
//! y ~ x1 + f + s(x2, k = 10) + s(x3, bs = "cr", k = 8) + te(x4, x5, k = c(5, 4)) + s(g, bs = "re") + x1:x2
//! cbind(successes, failures) ~ x1 + s(x2, bs = "ps", m = 2) - 1
//! deaths ~ s(age, bs = "cr") + offset(log_exposure)
//! ```
//!
//! `offset(name)` adds the column to the linear predictor with no
//! coefficient; several add up (R's `model.offset`).
//!
//! [`Formula::parse`] turns the text into a response and terms; which
//! columns are numeric and which factors is the data's business, not the
//! formula's. Errors name the formula, the place (1-based character) and
//! what was expected there.

use crate::{Error, Result};

/// The response: one column, or `cbind(successes, failures)` for a
/// binomial with trials (trials = successes + failures, as in R's `glm`).
#[derive(Clone, Debug, PartialEq)]
pub enum Response {
    /// One column.
    Column(String),
    /// `cbind(successes, failures)`.
    Binomial {
        /// The successes column.
        successes: String,
        /// The failures column.
        failures: String,
    },
}

/// A smooth's basis (mgcv's `bs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// `"cr"`: cubic regression spline (knots at quantiles).
    CubicRegression,
    /// `"ps"`: P-spline (B-splines on evenly spaced knots, difference penalty).
    PSpline,
    /// `"re"`: random effect (one coefficient a level, ridge penalty).
    RandomEffect,
    /// `"tp"`: thin-plate regression spline, mgcv's default for `s()`.
    ThinPlate,
}

impl Basis {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "cr" => Self::CubicRegression,
            "ps" => Self::PSpline,
            "re" => Self::RandomEffect,
            "tp" => Self::ThinPlate,
            _ => return None,
        })
    }

    /// mgcv's name of the basis.
    pub fn name(self) -> &'static str {
        match self {
            Self::CubicRegression => "cr",
            Self::PSpline => "ps",
            Self::RandomEffect => "re",
            Self::ThinPlate => "tp",
        }
    }
}

/// `s(...)` or `te(...)` with its options as written (`None`: mgcv's
/// default, which the term's constructor applies).
#[derive(Clone, Debug, PartialEq)]
pub struct Smooth {
    /// `te` (a tensor product of one-dimensional margins) or `s`.
    pub tensor: bool,
    /// The covariates, in order.
    pub vars: Vec<String>,
    /// `bs`: one basis, or one a margin for `te`.
    pub bs: Option<Vec<Basis>>,
    /// `k`: the basis dimension, or one a margin for `te`.
    pub k: Option<Vec<usize>>,
    /// `m`: the penalty order (P-splines' difference order).
    pub m: Option<Vec<usize>>,
}

impl Smooth {
    /// The term's name as mgcv prints it: `s(x)`, `te(x1,x2)`.
    pub fn label(&self) -> String {
        format!("{}({})", if self.tensor { "te" } else { "s" }, self.vars.join(","))
    }
}

/// One term on the right-hand side.
#[derive(Clone, Debug, PartialEq)]
pub enum Term {
    /// A column: numeric (one coefficient) or a factor (treatment contrasts).
    Column(String),
    /// `a:b:...`: the product of numeric columns.
    Interaction(Vec<String>),
    /// A smooth.
    Smooth(Smooth),
}

impl Term {
    /// The term's name as R prints it.
    pub fn label(&self) -> String {
        match self {
            Term::Column(c) => c.clone(),
            Term::Interaction(v) => v.join(":"),
            Term::Smooth(s) => s.label(),
        }
    }
}

/// A parsed formula.
#[derive(Clone, Debug, PartialEq)]
pub struct Formula {
    /// The left-hand side.
    pub response: Response,
    /// Whether the model has an intercept (`- 1` or `+ 0` removes it).
    pub intercept: bool,
    /// The right-hand side's terms, in order, each once.
    pub terms: Vec<Term>,
    /// The columns of the `offset(name)` terms, in order, each once.
    pub offsets: Vec<String>,
}

impl Formula {
    /// Parse `text` (see the module docs).
    pub fn parse(text: &str) -> Result<Self> {
        let mut p = Parser::new(text)?;
        let response = p.response()?;
        p.expect('~')?;
        let (intercept, terms, offsets) = p.right_side()?;
        p.end()?;
        Ok(Self {
            response,
            intercept,
            terms,
            offsets,
        })
    }

    /// Every column the formula reads, response first, then the terms'
    /// covariates and the offsets, each once.
    pub fn columns(&self) -> Vec<String> {
        let mut out: Vec<String> = match &self.response {
            Response::Column(c) => vec![c.clone()],
            Response::Binomial { successes, failures } => vec![successes.clone(), failures.clone()],
        };
        for t in &self.terms {
            let vars = match t {
                Term::Column(c) => std::slice::from_ref(c),
                Term::Interaction(v) => v.as_slice(),
                Term::Smooth(s) => s.vars.as_slice(),
            };
            for v in vars {
                if !out.contains(v) {
                    out.push(v.clone());
                }
            }
        }
        for o in &self.offsets {
            if !out.contains(o) {
                out.push(o.clone());
            }
        }
        out
    }
}

/// A token's text and where it starts (0-based character index).
#[derive(Clone, Debug, PartialEq)]
enum Token {
    Name(String),
    Number(String),
    Text(String),
    Symbol(char),
}

struct Parser<'a> {
    text: &'a str,
    tokens: Vec<(Token, usize)>,
    at: usize,
}

/// An error at character `pos` (0-based) of the formula.
fn syntax(text: &str, pos: usize, rule: impl Into<String>) -> Error {
    Error::invalid("formula", format!("{text:?} at character {}", pos + 1), rule.into())
}

fn lex(text: &str) -> Result<Vec<(Token, usize)>> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        if c.is_whitespace() {
            i += 1;
        } else if c.is_alphabetic() || c == '.' || c == '_' {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '.' || chars[i] == '_') {
                i += 1;
            }
            out.push((Token::Name(chars[start..i].iter().collect()), start));
        } else if c == '`' {
            let end = chars[i + 1..].iter().position(|&d| d == '`');
            let end = end.ok_or_else(|| syntax(text, start, "a backquoted name must be closed with `"))?;
            out.push((Token::Name(chars[i + 1..i + 1 + end].iter().collect()), start));
            i += end + 2;
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            out.push((Token::Number(chars[start..i].iter().collect()), start));
        } else if c == '"' || c == '\'' {
            let end = chars[i + 1..].iter().position(|&d| d == c);
            let end = end.ok_or_else(|| syntax(text, start, format!("a string must be closed with {c}")))?;
            out.push((Token::Text(chars[i + 1..i + 1 + end].iter().collect()), start));
            i += end + 2;
        } else if "~+-:(),=".contains(c) {
            out.push((Token::Symbol(c), start));
            i += 1;
        } else {
            return Err(syntax(
                text,
                start,
                format!("{c:?} is not part of a formula (names, numbers, strings, ~ + - : ( ) , =)"),
            ));
        }
    }
    Ok(out)
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Result<Self> {
        Ok(Self {
            text,
            tokens: lex(text)?,
            at: 0,
        })
    }

    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at).map(|(t, _)| t)
    }

    fn pos(&self) -> usize {
        self.tokens.get(self.at).map_or(self.text.chars().count(), |(_, p)| *p)
    }

    fn error(&self, rule: impl Into<String>) -> Error {
        syntax(self.text, self.pos(), rule)
    }

    fn is(&self, c: char) -> bool {
        self.peek() == Some(&Token::Symbol(c))
    }

    fn expect(&mut self, c: char) -> Result<()> {
        if self.is(c) {
            self.at += 1;
            return Ok(());
        }
        Err(self.error(format!("expected {c:?}")))
    }

    fn name(&mut self, what: &str) -> Result<String> {
        match self.peek() {
            Some(Token::Name(n)) => {
                let n = n.clone();
                self.at += 1;
                Ok(n)
            }
            _ => Err(self.error(format!("expected {what}"))),
        }
    }

    fn end(&self) -> Result<()> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.error("expected + or - between terms, or the end of the formula")),
        }
    }

    fn response(&mut self) -> Result<Response> {
        let name = self.name("the response (a column name, or cbind(successes, failures)) before ~")?;
        if name != "cbind" || !self.is('(') {
            return Ok(Response::Column(name));
        }
        self.expect('(')?;
        let successes = self.name("the successes column")?;
        self.expect(',')?;
        let failures = self.name("the failures column")?;
        self.expect(')')?;
        Ok(Response::Binomial { successes, failures })
    }

    /// Terms joined by + (and - 1 / + 0 / + 1 for the intercept), the
    /// offsets apart.
    fn right_side(&mut self) -> Result<(bool, Vec<Term>, Vec<String>)> {
        let (mut intercept, mut terms, mut offsets) = (true, Vec::<Term>::new(), Vec::<String>::new());
        let mut sign = '+';
        loop {
            if let Some(Token::Number(n)) = self.peek() {
                let n = n.clone();
                if n != "0" && n != "1" {
                    return Err(self.error(format!("{n} is not a term (only 0 or 1, for the intercept)")));
                }
                intercept = (n == "1") == (sign == '+');
                self.at += 1;
            } else if sign == '-' {
                return Err(self.error("only the intercept can be removed (- 1)"));
            } else if let Some(name) = self.offset()? {
                if offsets.contains(&name) {
                    return Err(self.error(format!("offset({name}) appears twice")));
                }
                offsets.push(name);
            } else {
                let term = self.term()?;
                if terms.contains(&term) {
                    return Err(self.error(format!("the term {} appears twice", term.label())));
                }
                terms.push(term);
            }
            match self.peek() {
                Some(Token::Symbol(c)) if *c == '+' || *c == '-' => {
                    sign = *c;
                    self.at += 1;
                }
                _ => return Ok((intercept, terms, offsets)),
            }
        }
    }

    /// `offset(name)`, if that comes next: the column's name.
    fn offset(&mut self) -> Result<Option<String>> {
        let is_offset = self.peek() == Some(&Token::Name("offset".into()))
            && self.tokens.get(self.at + 1).map(|(t, _)| t) == Some(&Token::Symbol('('));
        if !is_offset {
            return Ok(None);
        }
        self.at += 2;
        let name = self.name("a column inside offset() (a name; expressions are not evaluated here)")?;
        self.expect(')')?;
        Ok(Some(name))
    }

    fn term(&mut self) -> Result<Term> {
        let name = self.name("a term: a column, a:b, s(...) or te(...)")?;
        if (name == "s" || name == "te") && self.is('(') {
            return self.smooth(name == "te");
        }
        let mut vars = vec![name];
        while self.is(':') {
            self.at += 1;
            vars.push(self.name("a column after :")?);
        }
        Ok(match vars.len() {
            1 => Term::Column(vars.remove(0)),
            _ => Term::Interaction(vars),
        })
    }

    /// s(x, ..., bs = ..., k = ..., m = ...) after its name.
    fn smooth(&mut self, tensor: bool) -> Result<Term> {
        self.expect('(')?;
        let mut s = Smooth {
            tensor,
            vars: Vec::new(),
            bs: None,
            k: None,
            m: None,
        };
        loop {
            let arg = self.name("a covariate or an option (bs, k, m)")?;
            if self.is('=') {
                self.at += 1;
                self.option(&mut s, &arg)?;
            } else if s.bs.is_some() || s.k.is_some() || s.m.is_some() {
                return Err(self.error("covariates come before the options"));
            } else if s.vars.contains(&arg) {
                return Err(self.error(format!("{arg} appears twice in the smooth")));
            } else {
                s.vars.push(arg);
            }
            if self.is(')') {
                self.at += 1;
                break;
            }
            self.expect(',')?;
        }
        self.check_smooth(&s)?;
        Ok(Term::Smooth(s))
    }

    fn option(&mut self, s: &mut Smooth, arg: &str) -> Result<()> {
        let values = self.values()?;
        let numbers = |p: &Self| -> Result<Vec<usize>> {
            values
                .iter()
                .map(|v| match v {
                    Token::Number(n) => n
                        .parse::<usize>()
                        .map_err(|_| p.error(format!("{arg} = {n}: must be a whole number"))),
                    _ => Err(p.error(format!("{arg} takes whole numbers"))),
                })
                .collect()
        };
        match arg {
            "k" => s.k = Some(numbers(self)?),
            "m" => s.m = Some(numbers(self)?),
            "bs" => {
                let names = values.iter().map(|v| match v {
                    Token::Text(t) => Basis::parse(t).ok_or_else(|| {
                        self.error(format!("bs = {t:?}: the bases are \"cr\", \"ps\", \"re\" and \"tp\""))
                    }),
                    _ => Err(self.error("bs takes quoted names, as bs = \"cr\"")),
                });
                s.bs = Some(names.collect::<Result<_>>()?);
            }
            other => return Err(self.error(format!("{other} is not an option of a smooth here (bs, k, m)"))),
        }
        Ok(())
    }

    /// One value, or c(v1, v2, ...).
    fn values(&mut self) -> Result<Vec<Token>> {
        let one = |p: &mut Self| -> Result<Token> {
            match p.peek() {
                Some(t @ (Token::Number(_) | Token::Text(_))) => {
                    let t = t.clone();
                    p.at += 1;
                    Ok(t)
                }
                _ => Err(p.error("expected a number or a quoted name")),
            }
        };
        if self.peek() != Some(&Token::Name("c".into())) {
            return Ok(vec![one(self)?]);
        }
        self.at += 1;
        self.expect('(')?;
        let mut out = vec![one(self)?];
        while self.is(',') {
            self.at += 1;
            out.push(one(self)?);
        }
        self.expect(')')?;
        Ok(out)
    }

    /// A smooth's options against its covariates: one value, or one a
    /// margin of a te().
    fn check_smooth(&self, s: &Smooth) -> Result<()> {
        let d = s.vars.len();
        if d == 0 {
            return Err(self.error(format!("{} needs at least one covariate", s.label())));
        }
        if !s.tensor && d > 1 {
            return Err(self.error(format!(
                "{}: s() of several covariates needs a thin-plate basis, not built here; use te()",
                s.label()
            )));
        }
        for (opt, len) in [
            ("bs", s.bs.as_ref().map(Vec::len)),
            ("k", s.k.as_ref().map(Vec::len)),
            ("m", s.m.as_ref().map(Vec::len)),
        ] {
            if let Some(len) = len {
                if len != 1 && len != d {
                    return Err(self.error(format!(
                        "{}: {opt} has {len} values; give one, or one a covariate ({d})",
                        s.label()
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(s: &str) -> Term {
        Term::Column(s.into())
    }

    #[test]
    fn the_issues_formula_parses() {
        let f = Formula::parse("y ~ x1 + x2 + s(z, bs = \"cr\", k = 8) + z:x1").unwrap();
        assert_eq!(f.response, Response::Column("y".into()));
        assert!(f.intercept);
        assert_eq!(f.terms[0], col("x1"));
        assert_eq!(f.terms[1], col("x2"));
        assert_eq!(
            f.terms[2],
            Term::Smooth(Smooth {
                tensor: false,
                vars: vec!["z".into()],
                bs: Some(vec![Basis::CubicRegression]),
                k: Some(vec![8]),
                m: None,
            })
        );
        assert_eq!(f.terms[3], Term::Interaction(vec!["z".into(), "x1".into()]));
        assert_eq!(f.columns(), ["y", "x1", "x2", "z"]);
    }

    #[test]
    fn tensor_products_random_effects_cbind_and_the_intercept() {
        let f =
            Formula::parse("cbind(s, f) ~ te(a, b, k = c(5, 4), bs = c('cr', 'ps')) + s(g, bs = 're') - 1").unwrap();
        assert_eq!(
            f.response,
            Response::Binomial {
                successes: "s".into(),
                failures: "f".into()
            }
        );
        assert!(!f.intercept);
        let Term::Smooth(te) = &f.terms[0] else { panic!() };
        assert!(te.tensor);
        assert_eq!(te.k, Some(vec![5, 4]));
        assert_eq!(te.bs, Some(vec![Basis::CubicRegression, Basis::PSpline]));
        assert_eq!(te.label(), "te(a,b)");
        assert_eq!(f.terms[1].label(), "s(g)");
        assert!(!Formula::parse("y ~ 0 + x").unwrap().intercept);
        assert!(Formula::parse("y ~ x - 1 + 1").unwrap().intercept);
        assert!(Formula::parse("y ~ `odd name` + x.2_b").unwrap().terms[0] == col("odd name"));
    }

    #[test]
    fn offsets_are_kept_apart_from_the_terms() {
        let f = Formula::parse("y ~ offset(lt) + s(x, bs = \"cr\") + offset(b) - 1").unwrap();
        assert_eq!(f.offsets, ["lt", "b"]);
        assert_eq!(f.terms.len(), 1);
        assert!(!f.intercept);
        assert_eq!(f.columns(), ["y", "x", "lt", "b"]);
        // A column called offset is an ordinary term.
        assert_eq!(Formula::parse("y ~ offset").unwrap().terms, [col("offset")]);
        assert!(Formula::parse("y ~ x").unwrap().offsets.is_empty());
    }

    #[test]
    fn errors_name_the_place_and_the_rule() {
        let cases = [
            ("y ~ x +", "character 8", "a term"),
            ("y x", "character 3", "expected '~'"),
            ("y ~ s(x, k = 10, z)", "character", "covariates come before"),
            ("y ~ s(x, bs = \"zz\")", "character", "the bases are"),
            ("y ~ s(x, q = 3)", "character", "not an option"),
            ("y ~ te(a, b, k = c(3, 4, 5))", "character", "k has 3 values"),
            ("y ~ s(a, b)", "character", "use te()"),
            ("y ~ x + x", "character", "appears twice"),
            ("y ~ x - z", "character", "only the intercept"),
            ("y ~ x * z", "character 7", "not part of a formula"),
            ("y ~ 2", "character 5", "only 0 or 1"),
            ("y ~ s(x, k = 2.5)", "character", "whole number"),
            ("y ~ s(x", "character 8", "expected ','"),
            ("y ~ offset(a) + offset(a)", "character", "offset(a) appears twice"),
            ("y ~ offset(log(t))", "character 15", "expected ')'"),
            ("y ~ offset(1)", "character 12", "a column inside offset()"),
        ];
        for (text, place, rule) in cases {
            let e = Formula::parse(text).expect_err(text).to_string();
            assert!(
                e.contains("formula") && e.contains(place) && e.contains(rule),
                "{text}: {e}"
            );
        }
    }
}
