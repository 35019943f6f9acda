# The mgcv oracle for tests/gam_bases.rs: mgcv's smooth terms as smoothCon
# builds them (absorb.cons = TRUE, scale.penalty = TRUE), their PredictMat
# at new points and model.matrix with treatment contrasts, on three small
# data sets (ties; an unevenly spread x; a Gaussian x), written to
# tests/data/bases_mgcv.json; and, on the first, the X and penalties of a
# whole model as gam(..., fit = FALSE) sets them up. Every matrix is
# written row-major with 17 significant digits, so the file holds the
# doubles exactly.
#
# Factor levels sort in the C collation (byte order), as the Rust side
# sorts them: set here so that the file does not depend on the locale.
#
# Run from the repository root: Rscript tests/mgcv/bases.R
suppressPackageStartupMessages(library(mgcv))
invisible(Sys.setlocale("LC_COLLATE", "C"))

num <- function(x) paste(sprintf("%.17g", as.numeric(x)), collapse = ", ")
str <- function(x) paste(sprintf('"%s"', as.character(x)), collapse = ", ")
mat <- function(m) {
  m <- as.matrix(m)
  sprintf('{"nrow": %d, "ncol": %d, "data": [%s]}', nrow(m), ncol(m), num(t(m)))
}
obj <- function(...) {
  kv <- list(...)
  paste0("{", paste(sprintf('"%s": %s', names(kv), unlist(kv)), collapse = ", "), "}")
}
arr <- function(items) paste0("[", paste(items, collapse = ", "), "]")

# One smoothCon term: its model matrix, penalties, null space, ranks,
# penalty scales and PredictMat at the new points.
term <- function(spec, d, nd) {
  sm <- smoothCon(spec, data = d, absorb.cons = TRUE, scale.penalty = TRUE)[[1]]
  obj(X = mat(sm$X), S = arr(sapply(sm$S, mat)),
      null_space_dim = sm$null.space.dim, rank = arr(sm$rank),
      S_scale = arr(sprintf("%.17g", sm$S.scale)),
      P = mat(PredictMat(sm, nd)))
}

dataset <- function(name, d, nd) {
  d$f <- factor(d$f)
  d$g <- factor(d$g)
  nd$f <- factor(nd$f, levels = levels(d$f))
  mm <- model.matrix(~ x + g, data = d)
  nmm <- model.matrix(~ x + g, data = transform(nd, g = factor(nd$g, levels = levels(d$g))))
  obj(
    name = sprintf('"%s"', name),
    x = arr(num(d$x)), x1 = arr(num(d$x1)), x2 = arr(num(d$x2)),
    f = arr(str(d$f)), g = arr(str(d$g)),
    new = obj(x = arr(num(nd$x)), x1 = arr(num(nd$x1)), x2 = arr(num(nd$x2)),
              f = arr(str(nd$f)), g = arr(str(nd$g))),
    f_levels = arr(str(levels(d$f))), g_levels = arr(str(levels(d$g))),
    cr = term(s(x, bs = "cr", k = 10), d, nd),
    cr_knots = arr(num(smooth.construct(s(x, bs = "cr", k = 10), d, NULL)$xp)),
    ps = term(s(x, bs = "ps", k = 10, m = c(2, 2)), d, nd),
    ps_knots = arr(num(smooth.construct(s(x, bs = "ps", k = 10), d, NULL)$knots)),
    te = term(te(x1, x2, k = c(5, 4)), d, nd),
    te_ps = term(te(x1, x2, k = c(6, 5), bs = "ps"), d, nd),
    re = term(s(f, bs = "re"), d, nd),
    model_matrix = mat(mm), new_model_matrix = mat(nmm)
  )
}

# New points: outside the range on both sides (mgcv extrapolates cr and ps
# linearly), the ends themselves and points inside.
new_points <- function(x) {
  r <- diff(range(x))
  c(min(x) - 0.1 * r, min(x), quantile(x, c(0.13, 0.5, 0.77), names = FALSE), max(x), max(x) + 0.2 * r)
}
new_data <- function(d, f_new, g_new) {
  data.frame(x = new_points(d$x), x1 = new_points(d$x1), x2 = rev(new_points(d$x2)),
             f = f_new, g = g_new, stringsAsFactors = FALSE)
}

set.seed(7)
n <- 120
ties <- data.frame(x = round(runif(n), 2), x1 = round(runif(n), 1), x2 = runif(n),
                   f = sample(c("b", "a", "c", "B", "d10", "d2"), n, replace = TRUE),
                   g = sample(c("lo", "mid", "hi"), n, replace = TRUE), stringsAsFactors = FALSE)
n <- 60
uneven <- data.frame(x = exp(rnorm(n, 0, 1.5)), x1 = rbeta(n, 0.5, 3), x2 = runif(n, -2, 5),
                     f = sample(c("z", "y", "x", "w"), n, replace = TRUE, prob = c(0.6, 0.2, 0.15, 0.05)),
                     g = sample(c("2", "10", "1"), n, replace = TRUE), stringsAsFactors = FALSE)
uneven$x[1:6] <- uneven$x[7:12] # ties in an uneven x
n <- 200
gauss <- data.frame(x = rnorm(n, 3, 2), x1 = rnorm(n), x2 = rnorm(n, 0, 10),
                    f = sample(sprintf("s%02d", 1:12), n, replace = TRUE),
                    g = sample(c("ctl", "trt"), n, replace = TRUE), stringsAsFactors = FALSE)

sets <- c(
  dataset("ties", ties, new_data(ties, c("c", "B", "a", "d2", "b", "d10", "a"), c("mid", "hi", "lo", "lo", "hi", "mid", "lo"))),
  dataset("uneven", uneven, new_data(uneven, c("w", "x", "y", "z", "z", "y", "w"), c("1", "10", "2", "2", "1", "10", "1"))),
  dataset("gauss", gauss, new_data(gauss, c("s12", "s01", "s05", "s05", "s07", "s03", "s11"), rep(c("ctl", "trt"), length.out = 7)))
)
# The whole model's columns and penalties as gam() sets them up (fit =
# FALSE): parametric terms first, then the smooths in formula order; off is
# each penalty's first column (1-based).
setup <- function(d) {
  d$f <- factor(d$f)
  d$g <- factor(d$g)
  set.seed(11)
  d$y <- rnorm(nrow(d))
  G <- gam(y ~ g + x + s(x, bs = "cr", k = 10) + te(x1, x2, k = c(5, 4)) + s(f, bs = "re"),
           data = d, fit = FALSE)
  obj(X = mat(G$X), S = arr(sapply(G$S, mat)), off = arr(G$off), term_names = arr(str(G$term.names)))
}
json <- obj(mgcv_version = sprintf('"%s"', packageVersion("mgcv")), datasets = arr(sets), gam_setup = setup(ties))
writeLines(json, "tests/data/bases_mgcv.json")
