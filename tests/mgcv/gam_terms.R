# The mgcv oracle for tests/gam_terms.rs: predict.gam(type = "terms",
# se.fit = TRUE) of two committed fit cases (tests/data/gam_fit_<case>.csv,
# written by gam_fit.R) at 9 evenly spaced rows and at a grid of 100 points
# over each one-dimensional smooth's covariate range (what plot.gam draws),
# written to tests/data/gam_terms_mgcv.json.
#
# Run from the repository root: Rscript tests/mgcv/gam_terms.R
suppressPackageStartupMessages(library(mgcv))
invisible(Sys.setlocale("LC_COLLATE", "C"))

num <- function(v) paste0("[", paste(sprintf("%.17g", v), collapse = ", "), "]")
str <- function(v) paste0("[", paste(sprintf('"%s"', v), collapse = ", "), "]")

ctrl <- gam.control(epsilon = 1e-12, maxit = 200,
                    newton = list(conv.tol = 1e-12, maxNstep = 5, maxHalf = 60))

terms_case <- function(name, formula, family, grid_var) {
  d <- read.csv(sprintf("tests/data/gam_fit_%s.csv", name), stringsAsFactors = TRUE)
  fit <- gam(as.formula(formula), family = family, data = d, method = "REML", control = ctrl)
  rows <- as.integer(round(seq(1, nrow(d), length.out = 9)))
  p <- predict(fit, newdata = d[rows, , drop = FALSE], type = "terms", se.fit = TRUE)
  labels <- vapply(fit$smooth, function(s) s$label, "")
  at_rows <- vapply(labels, function(l) sprintf('{"label": "%s", "fit": %s, "se": %s}',
    l, num(p$fit[, l]), num(p$se.fit[, l])), "")
  # The grid: 100 points over the covariate's range, the other covariates at row 1.
  x <- d[[grid_var]]
  g <- d[rep(1, 100), , drop = FALSE]
  g[[grid_var]] <- seq(min(x), max(x), length.out = 100)
  pg <- predict(fit, newdata = g, type = "terms", se.fit = TRUE)
  l <- labels[vapply(fit$smooth, function(s) identical(s$term, grid_var), TRUE)]
  sprintf('{"name": "%s", "formula": "%s", "rows": %s, "terms": [%s], "grid_var": "%s", "grid_label": "%s", "grid": %s, "grid_fit": %s, "grid_se": %s}',
    name, gsub('"', '\\\\"', formula), num(rows - 1L), paste(at_rows, collapse = ", "), grid_var, l,
    num(g[[grid_var]]), num(pg$fit[, l]), num(pg$se.fit[, l]))
}

cases <- c(
  terms_case("gaussian", 'y ~ fac + s(x0, bs = "cr") + s(x1, bs = "ps") + te(x2, x3)', gaussian(), "x1"),
  terms_case("mcycle", 'accel ~ s(times, bs = "cr", k = 20)', gaussian(), "times")
)
writeLines(sprintf('{"mgcv": "%s", "cases": [%s]}', packageVersion("mgcv"), paste(cases, collapse = ", ")),
           "tests/data/gam_terms_mgcv.json")
