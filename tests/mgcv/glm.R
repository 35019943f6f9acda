# The R oracle for the GLM families (src/gam/family.rs, tests/gam_family.rs):
# simulates one small data set per family and link (fixed seeds; prior
# weights, offsets, and binomial trials from 1 to 5), writes each to
# tests/data/glm_<family>_<link>.csv, fits it with glm() at tolerance 1e-14
# and writes the reference values to tests/data/glm_r.json: coefficients,
# deviance, Pearson statistic, dispersion (summary.glm's: Pearson / (n - p)
# for Gaussian and Gamma, 1 otherwise), mgcv's saturated log-likelihood
# (fix.family.ls) at that dispersion and R's logLik where it shares mgcv's
# convention on prior weights (not Gamma's, whose aic treats a weight as a
# multiplicity, mgcv's as a scale divisor).
#
# glm() stops on the relative change of the deviance, which for Fisher
# scoring (the non-canonical links) leaves up to 1e-8 of a coefficient:
# "glm_coefficients" are glm()'s, "coefficients" those after exact Newton
# steps from them until the last is below 1e-13 relative (the optimum to
# rounding; "glm_to_newton" is the first step's size).
#
# Run from the repository root: Rscript tests/mgcv/glm.R
suppressPackageStartupMessages(library(mgcv))

n <- 500
# (family, link, linear predictor's coefficients): identity and inverse
# links keep mu > 0 (and eta away from 0) for every row.
cases <- list(
  list("binomial", "logit", c(0.3, 0.9, -1.2)),
  list("binomial", "probit", c(0.2, 0.6, -0.8)),
  list("binomial", "cloglog", c(-0.4, 0.7, -0.6)),
  list("poisson", "log", c(0.5, 0.4, -0.6)),
  list("poisson", "identity", c(3.0, 0.8, 2.0)),
  list("gaussian", "identity", c(1.0, 0.5, -0.7)),
  list("gaussian", "log", c(0.5, 0.3, -0.5)),
  list("gaussian", "inverse", c(0.8, 0.3, 0.4)),
  list("Gamma", "log", c(0.5, 0.3, -0.5)),
  list("Gamma", "inverse", c(0.8, 0.3, 0.4)),
  list("Gamma", "identity", c(2.0, 0.5, 1.0))
)

simulate <- function(family, link, b, seed) {
  set.seed(seed)
  x1 <- runif(n, -1, 1)
  x2 <- runif(n)
  w <- runif(n, 0.5, 2)
  positive <- link %in% c("identity", "inverse")
  offset <- if (positive) runif(n, 0, 0.3) else runif(n, -0.3, 0.3)
  eta <- b[1] + b[2] * x1 + b[3] * x2 + offset
  mu <- make.link(link)$linkinv(eta)
  trials <- if (family == "binomial") sample(1:5, n, replace = TRUE) else rep(1, n)
  y <- switch(family,
    binomial = rbinom(n, trials, mu),
    poisson = rpois(n, mu),
    gaussian = mu + rnorm(n, sd = if (link == "identity") 0.7 else 0.1) / sqrt(w),
    Gamma = rgamma(n, shape = 3 * w, rate = 3 * w / mu)
  )
  data.frame(x1 = x1, x2 = x2, y = y, trials = trials, w = w, offset = offset)
}

# Exact Newton steps (the observed information X^T diag(w alpha mu'^2 / V) X,
# mgcv's full-Newton weights) from glm()'s answer until the last one is
# below 1e-13 of every coefficient: glm() stops on the deviance's relative
# change, which for Fisher scoring leaves up to 1e-8 of a coefficient.
polish <- function(fit, fam) {
  X <- model.matrix(fit)
  off <- fit$linear.predictors - drop(X %*% coef(fit))
  pw <- fit$prior.weights # w times the trials for binomial
  yy <- fit$y
  beta <- unname(coef(fit))
  steps <- numeric(0)
  for (it in 1:20) {
    eta <- drop(X %*% beta) + off
    mu <- fam$linkinv(eta)
    me <- fam$mu.eta(eta)
    v <- fam$variance(mu)
    score <- drop(crossprod(X, pw * (yy - mu) * me / v))
    # d mu.eta / d eta and dV / dmu by central differences (smooth in both).
    h <- 1e-5
    me2 <- (fam$mu.eta(eta + h) - fam$mu.eta(eta - h)) / (2 * h)
    dv <- (fam$variance(mu * (1 + h)) - fam$variance(mu * (1 - h))) / (2 * h * mu)
    weight <- pw * (me^2 / v - (yy - mu) * (me2 / v - me^2 * dv / v^2))
    step <- solve(crossprod(X, X * weight), score)
    beta <- beta + step
    steps <- c(steps, max(abs(step) / abs(beta)))
    if (steps[length(steps)] < 1e-13) break
  }
  stopifnot(steps[length(steps)] < 1e-13)
  mu <- fam$linkinv(drop(X %*% beta) + off)
  list(beta = beta, first_step = steps[1], steps = length(steps),
       deviance = sum(fam$dev.resids(yy, mu, pw)), pearson = sum(pw * (yy - mu)^2 / fam$variance(mu)))
}

num <- function(x) paste(sprintf("%.17g", x), collapse = ", ")
entries <- character(0)
for (k in seq_along(cases)) {
  family <- cases[[k]][[1]]
  link <- cases[[k]][[2]]
  name <- sprintf("glm_%s_%s", tolower(family), link)
  csv <- sprintf("tests/data/%s.csv", name)
  d0 <- simulate(family, link, cases[[k]][[3]], 100 + k)
  # 17 significant digits: the file holds the doubles exactly.
  rows <- sprintf("%.17g,%.17g,%.17g,%d,%.17g,%.17g", d0$x1, d0$x2, d0$y, d0$trials, d0$w, d0$offset)
  writeLines(c("x1,x2,y,trials,w,offset", rows), csv)
  d <- read.csv(csv) # both sides fit what the file holds
  fam <- get(family)(link = link)
  ctrl <- glm.control(epsilon = 1e-14, maxit = 100)
  fit <- if (family == "binomial") {
    glm(cbind(y, trials - y) ~ x1 + x2 + offset(offset), family = fam, data = d, weights = w, control = ctrl)
  } else {
    glm(y ~ x1 + x2 + offset(offset), family = fam, data = d, weights = w, control = ctrl)
  }
  stopifnot(fit$converged)
  polished <- polish(fit, fam)
  cat(name, polished$first_step, polished$steps, "\n")
  p <- length(coef(fit))
  # At the polished coefficients; summary.glm's dispersion from them.
  pearson <- polished$pearson
  dispersion <- if (family %in% c("gaussian", "Gamma")) pearson / fit$df.residual else 1
  stopifnot(abs(dispersion / summary(fit)$dispersion - 1) < 1e-7)
  deviance <- polished$deviance
  ls <- fix.family.ls(fam)$ls(fit$y, fit$prior.weights, d$trials, dispersion)
  loglik <- ls[1] - deviance / (2 * dispersion)
  # R's logLik: the Gaussian's at its own dispersion, deviance / n.
  r_loglik <- if (family == "Gamma") NA else as.numeric(logLik(fit))
  entries <- c(entries, paste0(
    sprintf('  "%s_%s": {', tolower(family), link),
    sprintf('"family": "%s", "link": "%s", "csv": "%s.csv", ', tolower(family), link, name),
    sprintf('"coefficients": [%s], "glm_coefficients": [%s], ', num(polished$beta), num(coef(fit))),
    sprintf('"deviance": %s, ', num(deviance)),
    sprintf('"pearson": %s, "dispersion": %s, "df_residual": %d, ', num(pearson), num(dispersion), fit$df.residual),
    sprintf('"ls": [%s], "loglik_mgcv": %s, ', num(ls), num(loglik)),
    sprintf('"loglik_r": %s, "glm_to_newton": %s, "iterations": %d}',
            if (is.na(r_loglik)) "null" else num(r_loglik), num(polished$first_step), fit$iter)
  ))
}
json <- c("{", sprintf('  "r_version": "%s", "mgcv_version": "%s", "n": %d,',
                       R.version.string, as.character(packageVersion("mgcv")), n),
          paste(entries, collapse = ",\n"), "}")
writeLines(json, "tests/data/glm_r.json")
