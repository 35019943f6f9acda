# Rscript benches/gam/mgcv_fit.R gam_N.csv: times bam(discrete = TRUE, nthreads = 2) and gam(REML) on the issue-40 model
suppressMessages(library(mgcv))
args <- commandArgs(TRUE); d <- read.csv(args[1])
form <- y ~ x1 + x2 + x3 + x4 + x5 + s(z1, bs = "cr", k = 10) + s(z2, bs = "cr", k = 10) +
  s(z3, bs = "cr", k = 10) + s(z4, bs = "cr", k = 10) + s(z5, bs = "cr", k = 10)
t_bam <- system.time(b <- bam(form, family = binomial, data = d, discrete = TRUE, method = "fREML", nthreads = 2))[["elapsed"]]
t_gam <- system.time(g <- gam(form, family = binomial, data = d, method = "REML"))[["elapsed"]]
cat(sprintf("bam(discrete, fREML, 2 threads): %.2f s; gam(REML): %.2f s\n", t_bam, t_gam))
cat(sprintf("gam: REML %.6f, edf %.4f, sp %s\n", g$gcv.ubre, sum(g$edf), paste(sprintf("%.6g", g$sp), collapse = " ")))
cat(sprintf("bam: fREML %.6f, edf %.4f, max |coef diff vs gam| %.3g\n", b$gcv.ubre, sum(b$edf), max(abs(coef(b) - coef(g)))))
cat("gam coef[1:6]:", sprintf("%.8f", coef(g)[1:6]), "\n")
