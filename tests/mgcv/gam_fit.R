# The mgcv oracle for tests/gam_fit.rs: simulates (fixed seeds) or loads each
# case's data, writes it to tests/data/gam_fit_<case>.csv (17 significant
# digits, so both sides fit the same doubles), fits it with
# gam(..., method = "REML") at tight tolerances and writes what the fit
# reports to tests/data/gam_fit_mgcv.json: coefficients with mgcv's names,
# their SEs (sqrt diag Vp), sp, edf per coefficient, per smooth and in total,
# the scale, the REML score, deviance, null deviance and n.
#
# Run from the repository root: Rscript tests/mgcv/gam_fit.R
source("tests/mgcv/gam_common.R")

cases <- list()

# Gaussian: gamSim's four functions, a factor, cr, ps and a te.
set.seed(40)
g <- gamSim(1, n = 500, dist = "normal", scale = 2, verbose = FALSE)
fac <- factor(sample(c("a", "b", "c"), 500, replace = TRUE))
# An interaction in (x2, x3), so that both te penalties stay finite.
inter <- 1.5 * sin(2 * pi * g$x2) * cos(2 * pi * g$x3)
d <- data.frame(y = g$y + inter + c(a = 0, b = 1, c = -0.5)[as.character(fac)], x0 = g$x0, x1 = g$x1,
                x2 = g$x2, x3 = g$x3, fac = fac)
d <- write_case("gaussian", d)
cases[[length(cases) + 1]] <- report("gaussian",
  'y ~ fac + s(x0, bs = "cr") + s(x1, bs = "ps") + te(x2, x3)',
  gaussian(), "gaussian", "identity", d)

# Binomial 0/1: gamSim(1, dist = "binary").
set.seed(41)
g <- gamSim(1, n = 800, dist = "binary", scale = 0.33, verbose = FALSE)
d <- write_case("binomial", data.frame(y = g$y, x0 = g$x0, x1 = g$x1, x2 = g$x2, x3 = g$x3))
cases[[length(cases) + 1]] <- report("binomial",
  'y ~ x1 + s(x0, bs = "cr") + s(x2, bs = "ps", k = 12)',
  binomial(), "binomial", "logit", d)

# Poisson: gamSim(1, dist = "poisson").
set.seed(42)
g <- gamSim(1, n = 600, dist = "poisson", scale = 0.2, verbose = FALSE)
d <- write_case("poisson", data.frame(y = g$y, x0 = g$x0, x1 = g$x1, x2 = g$x2, x3 = g$x3))
cases[[length(cases) + 1]] <- report("poisson",
  'y ~ s(x0, bs = "cr") + s(x1, bs = "ps") + s(x2, bs = "cr", k = 12) + x3',
  poisson(), "poisson", "log", d)

# Gamma (log link), simulated by hand, with a random effect s(g, bs = "re").
set.seed(43)
n <- 700
x0 <- runif(n); x1 <- runif(n)
grp <- factor(sprintf("g%02d", sample(1:12, n, replace = TRUE)))
b <- rnorm(12, sd = 0.4)
mu <- exp(0.5 + sin(2 * pi * x0) + 0.6 * x1^2 + b[as.integer(grp)])
d <- write_case("gamma", data.frame(y = rgamma(n, shape = 4, scale = mu / 4), x0 = x0, x1 = x1, grp = grp))
cases[[length(cases) + 1]] <- report("gamma",
  'y ~ s(x0, bs = "cr") + s(x1, bs = "ps", k = 8) + s(grp, bs = "re")',
  Gamma(link = "log"), "Gamma", "log", d)

# Binomial with trials, cbind(successes, failures), and a factor.
set.seed(44)
n <- 400
x0 <- runif(n)
fac <- factor(sample(c("lo", "mid", "hi"), n, replace = TRUE))
m <- sample(1:12, n, replace = TRUE)
p <- plogis(-0.3 + 1.5 * sin(3 * x0) + c(lo = -0.4, mid = 0, hi = 0.5)[as.character(fac)])
s <- rbinom(n, m, p)
d <- write_case("trials", data.frame(s = s, f = m - s, x0 = x0, fac = fac))
cases[[length(cases) + 1]] <- report("trials",
  'cbind(s, f) ~ fac + s(x0, bs = "cr", k = 8)', binomial(), "binomial", "logit", d)

# A real data set: MASS::mcycle, Gaussian.
d <- write_case("mcycle", MASS::mcycle)
cases[[length(cases) + 1]] <- report("mcycle", 'accel ~ s(times, bs = "cr", k = 20)',
  gaussian(), "gaussian", "identity", d)

out <- list(mgcv = as.character(packageVersion("mgcv")), cases = cases)
writeLines(json(out), "tests/data/gam_fit_mgcv.json")
