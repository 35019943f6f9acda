//! Standalone SVG line plots of fitted smooths with confidence bands.
//!
//! People look at smooths rather than read them: [`smooths_svg`] draws one
//! panel per smooth, side by side, each with a shaded band between the lower
//! and upper limits, the fit as a solid line and an optional true curve as a
//! dashed line. No crates: the SVG is written by hand, with absolute
//! coordinates (no transforms except the rotated y label) so that every point
//! can be checked against the view box.

use std::fmt::Write;

use crate::{Error, Result};

/// One smooth evaluated on a grid: fit, pointwise band and optional truth.
#[derive(Clone, Debug, Default)]
pub struct Band {
    /// Grid points (at least 2, finite).
    pub x: Vec<f64>,
    /// Fitted values at `x`.
    pub fit: Vec<f64>,
    /// Lower band limit at `x` (`lower <= upper`).
    pub lower: Vec<f64>,
    /// Upper band limit at `x`.
    pub upper: Vec<f64>,
    /// The true curve at `x`, when known (simulations); drawn dashed.
    pub truth: Option<Vec<f64>>,
}

/// One panel: a band with its title and axis labels.
#[derive(Clone, Debug, Default)]
pub struct Panel {
    /// Title above the panel.
    pub title: String,
    /// Label under the x axis.
    pub x_label: String,
    /// Label left of the y axis.
    pub y_label: String,
    /// What is drawn.
    pub band: Band,
}

// Geometry of one panel, in SVG user units.
const PANEL_W: f64 = 360.0;
const PANEL_H: f64 = 300.0;
const LEFT: f64 = 62.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 34.0;
const BOTTOM: f64 = 52.0;
const LEGEND_H: f64 = 28.0;
/// Aim for about this many tick intervals per axis.
const TICK_TARGET: usize = 6;

/// Render the panels side by side as one standalone SVG document.
///
/// Errors name the panel and the index: at least one panel; in each, all
/// vectors of equal length, at least 2 points, every value finite, and
/// `lower[i] <= upper[i]`.
pub fn smooths_svg(panels: &[Panel]) -> Result<String> {
    if panels.is_empty() {
        return Err(Error::invalid("panels", 0, "at least one panel is required"));
    }
    for (k, p) in panels.iter().enumerate() {
        validate(k, p)?;
    }
    let width = PANEL_W * panels.len() as f64;
    let height = PANEL_H + LEGEND_H;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>"#
    );
    for (k, p) in panels.iter().enumerate() {
        draw_panel(&mut svg, PANEL_W * k as f64, p);
    }
    let any_truth = panels.iter().any(|p| p.band.truth.is_some());
    draw_legend(&mut svg, PANEL_H, any_truth);
    svg.push_str("</svg>\n");
    Ok(svg)
}

/// "Nice" tick values (multiples of 1, 2 or 5 times a power of ten) inside
/// `[lo, hi]`, about `TICK_TARGET` (6) intervals apart; e.g. `[-3, 3]` gives
/// -3, -2, ..., 3 and `[0, 1]` gives 0, 0.2, ..., 1. Empty for a non-finite
/// or empty range.
pub fn nice_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && hi > lo) {
        return vec![];
    }
    let step = nice_step((hi - lo) / TICK_TARGET as f64);
    // A little slack so that end points equal to a tick up to rounding count.
    let eps = 1e-9;
    let (first, last) = ((lo / step - eps).ceil() as i64, (hi / step + eps).floor() as i64);
    (first..=last).map(|k| k as f64 * step).collect()
}

/// The smallest of 1, 2, 5, 10 times a power of ten that is >= `raw`.
fn nice_step(raw: f64) -> f64 {
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let nice = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .find(|&m| norm <= m + 1e-9)
        .unwrap_or(10.0);
    nice * mag
}

/// Tick label with as many decimals as the step needs (no "-0").
fn tick_label(v: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    let s = format!("{v:.decimals$}");
    if s.trim_start_matches('-').chars().all(|c| c == '0' || c == '.') {
        s.trim_start_matches('-').to_string()
    } else {
        s
    }
}

fn validate(k: usize, p: &Panel) -> Result<()> {
    let b = &p.band;
    let name = |what: &str| format!("panels[{k}] ('{}').{what}", p.title);
    let n = b.x.len();
    if n < 2 {
        return Err(Error::invalid(name("x.len"), n, "at least 2 points are required"));
    }
    let mut series = vec![("x", &b.x), ("fit", &b.fit), ("lower", &b.lower), ("upper", &b.upper)];
    if let Some(t) = &b.truth {
        series.push(("truth", t));
    }
    for (what, v) in series {
        if v.len() != n {
            return Err(Error::invalid(
                name(&format!("{what}.len")),
                v.len(),
                format!("must equal x.len = {n}"),
            ));
        }
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            return Err(Error::invalid(name(&format!("{what}[{i}]")), v[i], "must be finite"));
        }
    }
    if let Some(i) = (0..n).find(|&i| b.lower[i] > b.upper[i]) {
        let rule = format!("lower must be <= upper = {}", b.upper[i]);
        return Err(Error::invalid(name(&format!("lower[{i}]")), b.lower[i], rule));
    }
    Ok(())
}

/// A data range widened so that a constant series still gets a visible axis.
fn span(values: impl Iterator<Item = f64>, pad_frac: f64) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    let width = hi - lo;
    if width > 0.0 {
        (lo - pad_frac * width, hi + pad_frac * width)
    } else {
        let pad = (lo.abs() * 0.1).max(0.5);
        (lo - pad, hi + pad)
    }
}

/// Maps data coordinates to SVG coordinates inside one panel's plot area.
struct Frame {
    x0: f64,
    y0: f64,
    w: f64,
    h: f64,
    xr: (f64, f64),
    yr: (f64, f64),
}

impl Frame {
    fn new(left: f64, b: &Band) -> Self {
        let mut ys: Vec<f64> = b.lower.iter().chain(&b.upper).chain(&b.fit).copied().collect();
        ys.extend(b.truth.iter().flatten());
        Self {
            x0: left + LEFT,
            y0: TOP,
            w: PANEL_W - LEFT - RIGHT,
            h: PANEL_H - TOP - BOTTOM,
            xr: span(b.x.iter().copied(), 0.0),
            yr: span(ys.into_iter(), 0.05),
        }
    }
    fn px(&self, x: f64) -> f64 {
        self.x0 + (x - self.xr.0) / (self.xr.1 - self.xr.0) * self.w
    }
    fn py(&self, y: f64) -> f64 {
        self.y0 + (1.0 - (y - self.yr.0) / (self.yr.1 - self.yr.0)) * self.h
    }
    fn points<'a>(&self, xs: impl Iterator<Item = &'a f64>, ys: impl Iterator<Item = &'a f64>) -> String {
        let pts: Vec<String> = xs
            .zip(ys)
            .map(|(&x, &y)| format!("{:.2},{:.2}", self.px(x), self.py(y)))
            .collect();
        pts.join(" ")
    }
}

fn draw_panel(svg: &mut String, left: f64, p: &Panel) {
    let b = &p.band;
    let f = Frame::new(left, b);
    let _ = writeln!(svg, "<g>");
    let _ = writeln!(
        svg,
        r##"<rect x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="none" stroke="#999"/>"##,
        f.x0, f.y0, f.w, f.h
    );
    draw_ticks(svg, &f);
    // The band outline: along the upper limit, then back along the lower one.
    let band = format!(
        "{} {}",
        f.points(b.x.iter(), b.upper.iter()),
        f.points(b.x.iter().rev(), b.lower.iter().rev())
    );
    let _ = writeln!(
        svg,
        r##"<polygon class="band" points="{band}" fill="#6baed6" fill-opacity="0.35" stroke="none"/>"##
    );
    if let Some(t) = &b.truth {
        let pts = f.points(b.x.iter(), t.iter());
        let _ = writeln!(
            svg,
            r##"<polyline class="truth" points="{pts}" fill="none" stroke="#d62728" stroke-width="1.5" stroke-dasharray="6 4"/>"##
        );
    }
    let pts = f.points(b.x.iter(), b.fit.iter());
    let _ = writeln!(
        svg,
        r##"<polyline class="fit" points="{pts}" fill="none" stroke="#08519c" stroke-width="2"/>"##
    );
    draw_labels(svg, left, &f, p);
    let _ = writeln!(svg, "</g>");
}

fn draw_ticks(svg: &mut String, f: &Frame) {
    let bottom = f.y0 + f.h;
    for v in nice_ticks(f.xr.0, f.xr.1) {
        let (x, label) = (f.px(v), tick_label(v, tick_step(f.xr)));
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.2}" y1="{bottom:.2}" x2="{x:.2}" y2="{:.2}" stroke="#333"/>"##,
            bottom + 5.0
        );
        let _ = writeln!(
            svg,
            r#"<text class="xtick" x="{x:.2}" y="{:.2}" text-anchor="middle">{label}</text>"#,
            bottom + 17.0
        );
    }
    for v in nice_ticks(f.yr.0, f.yr.1) {
        let (y, label) = (f.py(v), tick_label(v, tick_step(f.yr)));
        let _ = writeln!(
            svg,
            r##"<line x1="{:.2}" y1="{y:.2}" x2="{:.2}" y2="{y:.2}" stroke="#333"/>"##,
            f.x0 - 5.0,
            f.x0
        );
        let _ = writeln!(
            svg,
            r#"<text class="ytick" x="{:.2}" y="{:.2}" text-anchor="end">{label}</text>"#,
            f.x0 - 8.0,
            y + 4.0
        );
    }
}

/// The step [`nice_ticks`] uses for a range (for label precision).
fn tick_step(r: (f64, f64)) -> f64 {
    nice_step((r.1 - r.0) / TICK_TARGET as f64)
}

fn draw_labels(svg: &mut String, left: f64, f: &Frame, p: &Panel) {
    let cx = f.x0 + f.w / 2.0;
    let _ = writeln!(
        svg,
        r#"<text class="title" x="{cx:.2}" y="20" text-anchor="middle" font-size="13" font-weight="bold">{}</text>"#,
        escape(&p.title)
    );
    let _ = writeln!(
        svg,
        r#"<text class="xlabel" x="{cx:.2}" y="{:.2}" text-anchor="middle">{}</text>"#,
        f.y0 + f.h + 38.0,
        escape(&p.x_label)
    );
    let (lx, ly) = (left + 16.0, f.y0 + f.h / 2.0);
    let _ = writeln!(
        svg,
        r#"<text class="ylabel" x="{lx:.2}" y="{ly:.2}" text-anchor="middle" transform="rotate(-90 {lx:.2} {ly:.2})">{}</text>"#,
        escape(&p.y_label)
    );
}

/// One legend row under the panels: band, fit, and truth when any panel has one.
fn draw_legend(svg: &mut String, top: f64, truth: bool) {
    let y = top + LEGEND_H / 2.0;
    let _ = writeln!(svg, r#"<g class="legend">"#);
    let _ = writeln!(
        svg,
        r##"<rect x="{LEFT}" y="{:.2}" width="24" height="10" fill="#6baed6" fill-opacity="0.35"/>"##,
        y - 5.0
    );
    let _ = writeln!(svg, r#"<text x="{:.2}" y="{:.2}">band</text>"#, LEFT + 30.0, y + 4.0);
    let _ = writeln!(
        svg,
        r##"<line x1="{:.2}" y1="{y:.2}" x2="{:.2}" y2="{y:.2}" stroke="#08519c" stroke-width="2"/>"##,
        LEFT + 80.0,
        LEFT + 104.0
    );
    let _ = writeln!(svg, r#"<text x="{:.2}" y="{:.2}">fit</text>"#, LEFT + 110.0, y + 4.0);
    if truth {
        let _ = writeln!(
            svg,
            r##"<line x1="{:.2}" y1="{y:.2}" x2="{:.2}" y2="{y:.2}" stroke="#d62728" stroke-width="1.5" stroke-dasharray="6 4"/>"##,
            LEFT + 150.0,
            LEFT + 174.0
        );
        let _ = writeln!(svg, r#"<text x="{:.2}" y="{:.2}">truth</text>"#, LEFT + 180.0, y + 4.0);
    }
    let _ = writeln!(svg, "</g>");
}

/// Escape the five XML special characters in user text.
fn escape(s: &str) -> String {
    s.chars().fold(String::with_capacity(s.len()), |mut out, c| {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(c),
        }
        out
    })
}
