//! SVG smooth plots: well-formed, one band and one line per panel (plus a
//! dashed truth), everything inside the view box, nice ticks, bad input rejected.

use matfree::plot::{nice_ticks, smooths_svg, Band, Panel};
use matfree::Error;

fn band(n: usize, truth: bool) -> Band {
    let x: Vec<f64> = (0..n).map(|i| -3.0 + 6.0 * i as f64 / (n - 1) as f64).collect();
    let fit: Vec<f64> = x.iter().map(|x| x.sin()).collect();
    let half: Vec<f64> = x.iter().map(|x| 0.2 + 0.05 * x * x).collect();
    Band {
        lower: fit.iter().zip(&half).map(|(f, h)| f - h).collect(),
        upper: fit.iter().zip(&half).map(|(f, h)| f + h).collect(),
        truth: truth.then(|| x.iter().map(|x| 0.9 * x.sin()).collect()),
        x,
        fit,
    }
}

fn panel(title: &str, truth: bool) -> Panel {
    Panel {
        title: title.into(),
        x_label: "score z".into(),
        y_label: "h(z)".into(),
        band: band(41, truth),
    }
}

/// A minimal well-formedness check: starts with `<svg`, tags balance on a stack.
fn assert_balanced(svg: &str) {
    assert!(svg.starts_with("<svg"), "{}", &svg[..40.min(svg.len())]);
    let mut stack: Vec<&str> = vec![];
    let mut rest = svg;
    while let Some(open) = rest.find('<') {
        let close = open + rest[open..].find('>').expect("unterminated tag");
        let tag = &rest[open + 1..close];
        let name = tag
            .trim_start_matches('/')
            .split_whitespace()
            .next()
            .unwrap()
            .trim_end_matches('/');
        if let Some(stripped) = tag.strip_prefix('/') {
            assert_eq!(stack.pop(), Some(stripped.trim()), "mismatched </{stripped}>");
        } else if !tag.ends_with('/') {
            stack.push(name);
        }
        assert!(!rest[open + 1..close].contains('<'), "'<' inside a tag: {tag}");
        rest = &rest[close + 1..];
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
    assert!(rest.trim().is_empty());
}

/// Value of `attr="..."` in one tag.
fn attr<'a>(tag: &'a str, attr: &str) -> Option<&'a str> {
    let key = format!(" {attr}=\"");
    let start = tag.find(&key)? + key.len();
    Some(&tag[start..start + tag[start..].find('"')?])
}

/// Every opening tag with the given element name.
fn tags<'a>(svg: &'a str, name: &str) -> Vec<&'a str> {
    let open = format!("<{name} ");
    svg.match_indices(&open)
        .map(|(i, _)| &svg[i..i + svg[i..].find('>').unwrap()])
        .collect()
}

/// Text contents of `<text class="...">` elements.
fn texts<'a>(svg: &'a str, class: &str) -> Vec<&'a str> {
    let key = format!("<text class=\"{class}\"");
    svg.match_indices(&key)
        .map(|(i, _)| {
            let body = i + svg[i..].find('>').unwrap() + 1;
            &svg[body..body + svg[body..].find('<').unwrap()]
        })
        .collect()
}

fn view_box(svg: &str) -> (f64, f64) {
    let vb: Vec<f64> = attr(&svg[..svg.find('>').unwrap()], "viewBox")
        .unwrap()
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(&vb[..2], [0.0, 0.0]);
    (vb[2], vb[3])
}

#[test]
fn panels_are_drawn_side_by_side_and_well_formed() {
    let svg = smooths_svg(&[panel("warp", true), panel("link", false)]).unwrap();
    assert_balanced(&svg);
    assert!(svg.contains("xmlns=\"http://www.w3.org/2000/svg\""));
    assert_eq!(tags(&svg, "polygon").len(), 2);
    let lines = tags(&svg, "polyline");
    assert_eq!(lines.len(), 3);
    let dashed = lines.iter().filter(|t| t.contains("stroke-dasharray")).count();
    assert_eq!(dashed, 1);
    assert_eq!(texts(&svg, "title"), ["warp", "link"]);
    assert_eq!(texts(&svg, "xlabel"), ["score z"; 2]);
    // The legend shows truth because one panel has it.
    assert!(svg.contains(">truth</text>") && svg.contains(">fit</text>"));
    let (w, _) = view_box(&svg);
    assert_eq!(w, 720.0);
}

#[test]
fn without_truth_there_is_no_dashed_line() {
    let svg = smooths_svg(&[panel("only", false)]).unwrap();
    assert_balanced(&svg);
    assert_eq!(tags(&svg, "polygon").len(), 1);
    assert_eq!(tags(&svg, "polyline").len(), 1);
    assert!(!svg.contains("stroke-dasharray") && !svg.contains(">truth<"));
}

#[test]
fn every_coordinate_lies_inside_the_view_box() {
    let svg = smooths_svg(&[panel("a", true), panel("b", true), panel("c", false)]).unwrap();
    let (w, h) = view_box(&svg);
    let inside = |x: f64, y: f64| (0.0..=w).contains(&x) && (0.0..=h).contains(&y);
    let mut checked = 0;
    for tag in tags(&svg, "polygon").into_iter().chain(tags(&svg, "polyline")) {
        for pt in attr(tag, "points").unwrap().split_whitespace() {
            let (x, y) = pt.split_once(',').unwrap();
            assert!(inside(x.parse().unwrap(), y.parse().unwrap()), "{pt} outside {w} x {h}");
            checked += 1;
        }
    }
    assert_eq!(checked, 3 * 82 + 5 * 41);
    for tag in ["text", "line", "rect"].iter().flat_map(|n| tags(&svg, n)) {
        for (xa, ya) in [("x", "y"), ("x1", "y1"), ("x2", "y2")] {
            if let (Some(x), Some(y)) = (attr(tag, xa), attr(tag, ya)) {
                assert!(inside(x.parse().unwrap(), y.parse().unwrap()), "{tag}");
            }
        }
    }
}

#[test]
fn ticks_are_nice_numbers() {
    let close = |a: &[f64], b: &[f64]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12);
    assert!(close(&nice_ticks(-3.0, 3.0), &[-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0]));
    assert!(close(&nice_ticks(0.0, 1.0), &[0.0, 0.2, 0.4, 0.6, 0.8, 1.0]));
    assert!(close(&nice_ticks(-0.13, 0.87), &[-0.0, 0.2, 0.4, 0.6, 0.8]));
    assert!(close(
        &nice_ticks(0.0, 3000.0),
        &[0.0, 500.0, 1000.0, 1500.0, 2000.0, 2500.0, 3000.0]
    ));
    assert!(nice_ticks(1.0, 1.0).is_empty() && nice_ticks(0.0, f64::NAN).is_empty());
    // In the SVG: x on [-3, 3] is labelled -3..3 with no decimals.
    let svg = smooths_svg(&[panel("a", false)]).unwrap();
    assert_eq!(texts(&svg, "xtick"), ["-3", "-2", "-1", "0", "1", "2", "3"]);
    // A y range of [0, 1] (padded by 5%) gets 0, 0.2, ..., 1.0 with one decimal.
    let mut p = panel("unit", false);
    p.band = Band {
        x: vec![0.0, 1.0],
        fit: vec![0.2, 0.8],
        lower: vec![0.0, 0.5],
        upper: vec![0.5, 1.0],
        truth: None,
    };
    let svg = smooths_svg(&[p]).unwrap();
    assert_eq!(texts(&svg, "ytick"), ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
    assert_eq!(texts(&svg, "xtick"), ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
}

#[test]
fn user_text_is_escaped() {
    let mut p = panel("a < b & \"c\"", false);
    p.y_label = "f'(x) > 0".into();
    let svg = smooths_svg(&[p]).unwrap();
    assert_balanced(&svg);
    assert_eq!(texts(&svg, "title"), ["a &lt; b &amp; &quot;c&quot;"]);
}

#[test]
fn constant_series_still_plot() {
    let mut p = panel("flat", false);
    p.band = Band {
        x: vec![1.0, 1.0],
        fit: vec![0.0; 2],
        lower: vec![0.0; 2],
        upper: vec![0.0; 2],
        truth: None,
    };
    let svg = smooths_svg(&[p]).unwrap();
    assert_balanced(&svg);
    assert!(!svg.contains("NaN") && !svg.contains("inf"));
}

fn rejected(panels: &[Panel]) -> (String, String) {
    match smooths_svg(panels) {
        Err(Error::InvalidInput { field, rule, .. }) => (field, rule),
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

#[test]
fn bad_inputs_are_rejected_naming_panel_and_index() {
    assert!(rejected(&[]).1.contains("at least one panel"));
    let with = |edit: &dyn Fn(&mut Band)| {
        let mut p = panel("link", false);
        edit(&mut p.band);
        rejected(&[panel("warp", true), p])
    };
    let (field, rule) = with(&|b: &mut Band| {
        b.fit.pop();
    });
    assert_eq!(field, "panels[1] ('link').fit.len");
    assert!(rule.contains("x.len = 41"), "{rule}");
    let (field, _) = with(&|b: &mut Band| b.truth = Some(vec![0.0; 3]));
    assert_eq!(field, "panels[1] ('link').truth.len");
    let (field, rule) = with(&|b: &mut Band| b.upper[7] = f64::NAN);
    assert_eq!(
        (field.as_str(), rule.as_str()),
        ("panels[1] ('link').upper[7]", "must be finite")
    );
    let (field, _) = with(&|b: &mut Band| b.x[0] = f64::INFINITY);
    assert_eq!(field, "panels[1] ('link').x[0]");
    let (field, rule) = with(&|b: &mut Band| b.lower[12] = b.upper[12] + 1.0);
    assert_eq!(field, "panels[1] ('link').lower[12]");
    assert!(rule.contains("<= upper"), "{rule}");
    let (field, rule) = with(&|b: &mut Band| {
        *b = Band {
            x: vec![0.0],
            fit: vec![0.0],
            lower: vec![0.0],
            upper: vec![0.0],
            truth: None,
        }
    });
    assert_eq!(field, "panels[1] ('link').x.len");
    assert!(rule.contains("at least 2"), "{rule}");
}
