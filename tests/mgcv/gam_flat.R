# The mgcv oracle for tests/gam_flat.rs: four data sets where a smooth's
# sp runs off toward infinity and REML is flat there (the fits that
# matfree's REML once ended with LineSearchFailed). The data are
# `validate_gam`'s (gamSim f0..f3 with f3 = 0, n = 2000):
#   cargo run --release --example validate_gam -- --n 2000 --seeds 1 \
#     --first-seed S --families F --write-data DIR
# for (binomial, 5), (binomial, 7), (gaussian, 4) and (Gamma, 29), copied
# to tests/data/gam_flat_<family>_<seed>.csv. This script fits each with
# gam(..., method = "REML") at the tight gam.control of gam_common.R and
# writes what the fit reports to tests/data/gam_flat_mgcv.json.
#
# Run from the repository root: Rscript tests/mgcv/gam_flat.R
source("tests/mgcv/gam_common.R")

cases <- list()
add <- function(...) cases[[length(cases) + 1]] <<- report(...)
formula <- 'y ~ z + s(x0, bs = "cr") + s(x1, bs = "cr") + s(x2, bs = "ps") + s(x3, bs = "cr")'
for (case in list(c("binomial_5", "binomial", "logit"), c("binomial_7", "binomial", "logit"),
                  c("gaussian_4", "gaussian", "identity"), c("gamma_29", "Gamma", "log"))) {
  d <- read.csv(sprintf("tests/data/gam_flat_%s.csv", case[1]))
  d <- write_case(case[1], d, "gam_flat")
  fam <- get(case[2])(link = case[3])
  add(case[1], formula, fam, case[2], case[3], d)
}

out <- list(mgcv = as.character(packageVersion("mgcv")), cases = cases)
writeLines(json(out), "tests/data/gam_flat_mgcv.json")
