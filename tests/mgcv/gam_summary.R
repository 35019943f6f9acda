# The mgcv oracle for tests/gam_summary.rs: six models fitted by mgcv's
# gam (REML), each written as the numbers summary.gam reads (coefficients,
# Vp, Ve, edf, edf1, the R factor of the weighted model matrix, the column
# ranges of the terms, each smooth's smoothing-parameter-weighted penalty,
# the scale, residual df, deviances, response and fitted values) and the
# tables summary.gam makes of them (p.table, pTerms.table, s.table, r.sq,
# dev.expl, scale, the REML score, n), to tests/data/gam_summary_mgcv.json.
#
# The models: Gaussian gamSim(1) with four cr smooths (also its
# model.matrix, which gives the same tests as R since the weights are 1);
# a binomial one (scale known: z and chi-square); a Gaussian one with a
# factor and s(g, bs = "re") (reTest with one random effect); a Poisson
# one with two random effects (reTest treating the other as random); a
# Gaussian te(x0, x1) + s(x2); a Gaussian one with an unpenalised
# s(x0, fx = TRUE) (an integer reference rank).
#
# Column indices are 0-based, ranges half-open. Every number is written
# with 17 significant digits, so the file holds the doubles exactly.
#
# Run from the repository root: Rscript tests/mgcv/gam_summary.R
suppressPackageStartupMessages(library(mgcv))
invisible(Sys.setlocale("LC_COLLATE", "C"))

num <- function(x) paste(sprintf("%.17g", as.numeric(x)), collapse = ", ")
vec <- function(x) paste0("[", num(x), "]")
str <- function(x) sprintf('"%s"', gsub('"', '\\\\"', as.character(x)))
strs <- function(x) paste0("[", paste(str(x), collapse = ", "), "]")
flat <- function(m) vec(t(as.matrix(m)))
obj <- function(...) {
  kv <- list(...)
  kv <- kv[!sapply(kv, is.null)]
  paste0("{", paste(sprintf('"%s": %s', names(kv), unlist(kv)), collapse = ", "), "}")
}
arr <- function(items) paste0("[", paste(items, collapse = ", "), "]")

# Each smooth's penalty sum_j sp_j S_j, walking full.sp as recov does.
penalties <- function(b) {
  sp <- if (is.null(b$full.sp)) b$sp else b$full.sp
  k <- 1
  lapply(b$smooth, function(sm) {
    p <- sm$last.para - sm$first.para + 1
    S <- matrix(0, p, p)
    for (Sj in sm$S) { S <- S + sp[k] * Sj; k <<- k + 1 }
    S
  })
}

smooth_terms <- function(b) {
  S <- penalties(b)
  arr(sapply(seq_along(b$smooth), function(i) {
    sm <- b$smooth[[i]]
    fx <- if (inherits(sm, "tensor.smooth") && !is.null(sm$fx)) all(sm$fx) else sm$fixed
    kind <- if (fx) "fixed" else if (sm$null.space.dim == 0) "random_effect" else "penalized"
    obj(label = str(sm$label), first = sm$first.para - 1, last = sm$last.para,
        kind = str(kind), penalty = flat(S[[i]]))
  }))
}

parametric_terms <- function(b) {
  labels <- attr(b$pterms, "term.labels")
  arr(sapply(seq_along(labels), function(i) {
    obj(label = str(labels[i]), columns = vec(which(b$assign == i) - 1))
  }))
}

table_json <- function(t) {
  if (is.null(t)) return("null")
  obj(rows = strs(rownames(t)), columns = strs(colnames(t)), data = flat(t))
}

input_json <- function(b, x = b$R) {
  obj(coefficients = vec(coef(b)), names = strs(names(coef(b))),
      vp = flat(b$Vp), ve = flat(b$Ve), edf = vec(b$edf), edf1 = vec(b$edf1),
      x = obj(nrow = nrow(x), ncol = ncol(x), data = flat(x)),
      parametric = vec(seq_len(b$nsdf) - 1), parametric_terms = parametric_terms(b),
      smooths = smooth_terms(b), n = length(b$y), scale = num(b$sig2),
      scale_estimated = tolower(as.character(b$scale.estimated)),
      df_residual = num(b$df.residual),
      response = obj(y = vec(b$y), fitted = vec(b$fitted.values), prior_weights = vec(b$prior.weights)),
      deviance = num(b$deviance), null_deviance = num(b$null.deviance),
      family = str(b$family$family), link = str(b$family$link),
      formula = str(paste(deparse(b$formula, width.cutoff = 500), collapse = " ")),
      criterion = obj(method = str(b$method), score = num(b$gcv.ubre)))
}

case <- function(name, b, extra_x = NULL) {
  s <- summary(b)
  expected <- obj(p_table = table_json(s$p.table), p_terms_table = table_json(s$pTerms.table),
                  s_table = table_json(s$s.table), r_sq = if (is.null(s$r.sq)) "null" else num(s$r.sq),
                  dev_expl = num(s$dev.expl), scale = num(s$scale), n = s$n,
                  residual_df = num(s$residual.df), sp_criterion = num(s$sp.criterion))
  alt <- if (is.null(extra_x)) NULL else input_json(b, extra_x)
  obj(name = str(name), input = input_json(b), input_model_matrix = alt, expected = expected,
      printed = str(gsub("\n", "\\\\n", paste(capture.output(print(s)), collapse = "\n"))))
}

set.seed(2)
d <- gamSim(1, n = 200, dist = "normal", scale = 2, verbose = FALSE)
b1 <- gam(y ~ s(x0, bs = "cr") + s(x1, bs = "cr") + s(x2, bs = "cr") + s(x3, bs = "cr"),
          data = d, method = "REML")

set.seed(3)
d2 <- gamSim(1, n = 300, dist = "normal", scale = 1, verbose = FALSE)
d2$yb <- rbinom(300, 1, binomial()$linkinv((d2$f - mean(d2$f)) / 3))
b2 <- gam(yb ~ s(x0, bs = "cr") + s(x1, bs = "cr") + s(x2, bs = "cr"), family = binomial,
          data = d2, method = "REML")

set.seed(4)
d3 <- gamSim(1, n = 240, dist = "normal", scale = 1, verbose = FALSE)
d3$fac <- factor(sample(c("a", "b", "c"), 240, replace = TRUE))
d3$g <- factor(sample(letters[1:8], 240, replace = TRUE))
re_g <- 0.3 * rnorm(8)
d3$y <- d3$y + c(0, 0.5, -0.3)[as.integer(d3$fac)] + re_g[as.integer(d3$g)]
b3 <- gam(y ~ fac + x3 + s(x0, bs = "cr") + s(x2, bs = "cr") + s(g, bs = "re"), data = d3, method = "REML")

set.seed(5)
d4 <- gamSim(1, n = 300, dist = "poisson", scale = 0.2, verbose = FALSE)
d4$g <- factor(sample(letters[1:6], 300, replace = TRUE))
d4$h <- factor(sample(LETTERS[1:5], 300, replace = TRUE))
d4$y <- rpois(300, exp(log(d4$f) / 3 + c(0.4, -0.2, 0.1, 0, -0.5, 0.3)[as.integer(d4$g)]))
b4 <- gam(y ~ s(x2, bs = "cr") + s(g, bs = "re") + s(h, bs = "re"), family = poisson,
          data = d4, method = "REML")

set.seed(6)
d5 <- gamSim(1, n = 250, dist = "normal", scale = 1, verbose = FALSE)
b5 <- gam(y ~ te(x0, x1, k = 4) + s(x2, bs = "cr"), data = d5, method = "REML")

set.seed(7)
d6 <- gamSim(1, n = 200, dist = "normal", scale = 2, verbose = FALSE)
b6 <- gam(y ~ s(x0, bs = "cr", k = 5, fx = TRUE) + s(x1, bs = "cr"), data = d6, method = "REML")

cases <- c(case("gaussian_cr", b1, extra_x = model.matrix(b1)), case("binomial_cr", b2),
           case("gaussian_factor_re", b3), case("poisson_two_re", b4), case("gaussian_te", b5),
           case("gaussian_fixed", b6))
json <- obj(mgcv_version = str(packageVersion("mgcv")), cases = arr(cases))
writeLines(json, "tests/data/gam_summary_mgcv.json")
