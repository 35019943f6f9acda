# Rscript benches/gam/simulate.R N  -> gam_N.csv in the working directory
# A binomial logit GAM as issue #40 asks: 5 smooths (k = 10) and 5 linear terms.
set.seed(40)
args <- commandArgs(TRUE); n <- as.integer(args[1])
z <- matrix(runif(5 * n), n, 5); x <- matrix(rnorm(5 * n), n, 5)
f <- sin(2 * pi * z[, 1]) + exp(2 * z[, 2]) / 4 + z[, 3]^11 * 10 * (10 * (1 - z[, 3]))^6 / 1e3 + cos(3 * z[, 4]) + 0.5 * z[, 5]
eta <- -0.5 + f - mean(f) + x %*% c(0.3, -0.2, 0.1, 0, 0.25)
d <- data.frame(y = rbinom(n, 1, plogis(eta)), z, x)
names(d) <- c("y", paste0("z", 1:5), paste0("x", 1:5))
write.csv(d, sprintf("gam_%d.csv", n), row.names = FALSE)
