# The mgcv oracle for tests/gam_offsets.rs: prior weights (gam's
# `weights = w`) and offsets in the formula (`offset(name)`, several adding
# up). Simulates each case (fixed seeds), writes its data to
# tests/data/gam_offsets_<case>.csv, fits it with gam(..., method = "REML")
# at tight tolerances and writes what the fit reports (as gam_fit.R does,
# predict.gam included: newdata carry the offset columns, which mgcv adds) to
# tests/data/gam_offsets_mgcv.json.
#
# Run from the repository root: Rscript tests/mgcv/gam_offsets.R
source("tests/mgcv/gam_common.R")

cases <- list()
add <- function(...) cases[[length(cases) + 1]] <<- report(...)

# Poisson counts over an exposure t: log E[y] = log t + f0(x0) + f1(x1).
set.seed(140)
n <- 600
x0 <- runif(n); x1 <- runif(n); t <- runif(n, 0.5, 10)
y <- rpois(n, t * exp(-1 + sin(2 * pi * x0) + 0.8 * x1^2))
d <- write_case("poisson", data.frame(y = y, x0 = x0, x1 = x1, log_t = log(t)), "gam_offsets")
add("poisson", 'y ~ s(x0, bs = "cr") + s(x1, bs = "ps") + offset(log_t)', poisson(), "poisson", "log", d)

# Binomial 0/1 with frequency-like prior weights (1..4) and a linear term.
set.seed(141)
n <- 600
x0 <- runif(n); x1 <- runif(n); w <- sample(1:4, n, replace = TRUE)
y <- rbinom(n, 1, plogis(-0.5 + 2 * sin(3 * x0) + x1))
d <- write_case("binomial", data.frame(y = y, x0 = x0, x1 = x1, w = w), "gam_offsets")
add("binomial", 'y ~ x1 + s(x0, bs = "cr")', binomial(), "binomial", "logit", d, weights = "w")

# Gaussian with prior weights (variance phi / w) and two offsets that add up,
# as R's model.offset sums them. mgcv 1.8-41's gam keeps only the first
# offset() of a formula (with a warning from interpret.gam), so mgcv fits
# offset(o12), o12 = o1 + o2 (the same doubles), and matfree the formula
# with offset(o1) + offset(o2).
set.seed(142)
n <- 500
x0 <- runif(n); x1 <- runif(n); w <- runif(n, 0.3, 3)
o1 <- rnorm(n); o2 <- runif(n, -1, 1)
y <- o1 + o2 + 2 * sin(2 * pi * x0) + exp(2 * x1) / 3 + rnorm(n, sd = 0.7 / sqrt(w))
d <- data.frame(y = y, x0 = x0, x1 = x1, w = w, o1 = o1, o2 = o2)
d <- write_case("gaussian", d, "gam_offsets")
d$o12 <- d$o1 + d$o2
add("gaussian", 'y ~ s(x0, bs = "cr") + s(x1, bs = "cr", k = 8) + offset(o12)',
    gaussian(), "gaussian", "identity", d, weights = "w")
cases[[length(cases)]]$formula <- 'y ~ s(x0, bs = "cr") + s(x1, bs = "cr", k = 8) + offset(o1) + offset(o2)'
cases[[length(cases)]]$mgcv_formula <- 'y ~ s(x0, bs = "cr") + s(x1, bs = "cr", k = 8) + offset(o12)'

# Gamma (log link) with prior weights (shape 3 w) and an offset.
set.seed(143)
n <- 500
x0 <- runif(n); w <- runif(n, 0.5, 2); lo <- runif(n, 0, 1.5)
mu <- exp(lo + 0.3 + cos(2 * pi * x0))
y <- rgamma(n, shape = 3 * w, scale = mu / (3 * w))
d <- write_case("gamma", data.frame(y = y, x0 = x0, w = w, lo = lo), "gam_offsets")
add("gamma", 'y ~ s(x0, bs = "cr") + offset(lo)', Gamma(link = "log"), "Gamma", "log", d, weights = "w")

out <- list(mgcv = as.character(packageVersion("mgcv")), cases = cases)
writeLines(json(out), "tests/data/gam_offsets_mgcv.json")
