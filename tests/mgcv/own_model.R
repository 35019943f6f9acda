# The mgcv oracle for examples/own_model.rs: simulates tests/data/own_model.csv
# (a fixed seed), fits y ~ x1 + s(x2) as a penalised logistic regression with
# mgcv, and writes the reference values to tests/data/own_model_mgcv.json.
#
# The smooth is built exactly as the Rust side builds it: 10 cubic B-splines
# on 14 evenly spaced knots, three intervals beyond [min x2, max x2] on each
# side (mgcv's "ps" layout without its 0.1% range extension); the second-
# difference penalty S = D^T D; the sum-to-zero constraint absorbed as mgcv's
# smoothCon does (Z from a QR of the column sums). The constrained basis goes
# to gam() through paraPen, so both sides fit the same design and penalty.
#
# Run from the repository root: Rscript tests/mgcv/own_model.R
suppressPackageStartupMessages(library(mgcv))
library(splines)

n <- 2000
k <- 10
set.seed(39)
x1 <- rnorm(n)
x2 <- runif(n)
eta <- -0.4 + 0.7 * x1 + 1.2 * sin(2 * pi * x2)
y <- rbinom(n, 1, plogis(eta))
csv <- "tests/data/own_model.csv"
# 17 significant digits: the file holds the doubles exactly.
writeLines(c("x1,x2,y", sprintf("%.17g,%.17g,%d", x1, x2, y)), csv)
d <- read.csv(csv) # both sides fit what the file holds

lo <- min(d$x2)
hi <- max(d$x2)
dx <- (hi - lo) / (k - 3)
knots <- lo + ((0:(k + 3)) - 3) * dx
B <- splineDesign(knots, d$x2, ord = 4)
D <- diff(diag(k), differences = 2)
S <- crossprod(D)
C <- matrix(colSums(B), nrow = 1)
qrc <- qr(t(C))
Z <- qr.Q(qrc, complete = TRUE)[, -1]
X2 <- B %*% Z
S2 <- t(Z) %*% S %*% Z
S2 <- (S2 + t(S2)) / 2

ctrl <- gam.control(epsilon = 1e-12, maxit = 200, newton = list(conv.tol = 1e-12, maxNstep = 5))
fit <- gam(y ~ x1 + X2, family = binomial, data = d, paraPen = list(X2 = list(S2)),
           method = "REML", control = ctrl)

p <- length(coef(fit))
spline <- 3:p
beta <- unname(coef(fit))
vp <- fit$Vp
# The smooth's coefficients and covariance in the B-spline basis (Z b,
# Z V Z^T): the same whatever orthonormal basis of the constraint's null
# space either side's QR picked.
beta_spline <- drop(Z %*% beta[spline])
se_spline <- sqrt(diag(Z %*% vp[spline, spline] %*% t(Z)))

# mgcv's REML score from its parts, to name the constant between it and
# matfree's V = f + log|H + S|/2 - log|S|_+/2 (f the penalised negative
# log-likelihood): mgcv subtracts Mp log(2 pi) / 2, Mp the dimension of the
# penalty's null space (here the intercept, x1 and the smooth's linear part).
X <- model.matrix(fit)
mu <- fitted(fit)
lambda <- unname(fit$sp)
s_full <- matrix(0, p, p)
s_full[spline, spline] <- lambda * S2
f <- -sum(dbinom(d$y, 1, mu, log = TRUE)) + drop(t(beta) %*% s_full %*% beta) / 2
ld_hs <- determinant(crossprod(X * sqrt(mu * (1 - mu))) + s_full)$modulus
ev <- eigen(s_full, symmetric = TRUE, only.values = TRUE)$values
rank_s <- sum(ev > max(ev) * 1e-10)
ld_s <- sum(log(ev[seq_len(rank_s)]))
laml_v <- f + (ld_hs - ld_s) / 2
mp <- p - rank_s
constant <- fit$gcv.ubre - laml_v
stopifnot(abs(constant + mp * log(2 * pi) / 2) < 1e-8)

num <- function(x) paste(sprintf("%.17g", x), collapse = ", ")
json <- c(
  "{",
  sprintf('  "mgcv_version": "%s",', as.character(packageVersion("mgcv"))),
  sprintf('  "n": %d,', n),
  sprintf('  "coefficients": [%s],', num(beta)),
  sprintf('  "se": [%s],', num(sqrt(diag(vp)))),
  sprintf('  "spline_coefficients": [%s],', num(beta_spline)),
  sprintf('  "spline_se": [%s],', num(se_spline)),
  sprintf('  "lambda": [%s],', num(lambda)),
  sprintf('  "edf_total": %s,', num(sum(fit$edf))),
  sprintf('  "edf_smooth": [%s],', num(sum(fit$edf[spline]))),
  sprintf('  "reml_score": %s,', num(fit$gcv.ubre)),
  sprintf('  "null_space_dim": %d,', mp),
  sprintf('  "reml_constant": %s,', num(constant)),
  sprintf('  "laml_v": %s,', num(laml_v)),
  sprintf('  "outer_gradient": [%s],', num(fit$outer.info$grad)),
  sprintf('  "converged": %s', tolower(as.character(fit$converged))),
  "}"
)
writeLines(json, "tests/data/own_model_mgcv.json")
