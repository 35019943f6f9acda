# Rscript bam_fread.R gam_N.csv: bam alone on the issue-40 model, data read by fread
suppressMessages({library(mgcv); library(data.table)})
args <- commandArgs(TRUE)
t_read <- system.time(d <- as.data.frame(fread(args[1])))[["elapsed"]]
form <- y ~ x1 + x2 + x3 + x4 + x5 + s(z1, bs = "cr", k = 10) + s(z2, bs = "cr", k = 10) +
  s(z3, bs = "cr", k = 10) + s(z4, bs = "cr", k = 10) + s(z5, bs = "cr", k = 10)
t_bam <- system.time(b <- bam(form, family = binomial, data = d, discrete = TRUE, method = "fREML", nthreads = 2))
cat(sprintf("fread %.2f s; bam(discrete, fREML, 2 threads): elapsed %.2f s, user %.1f, sys %.1f\n", t_read, t_bam[["elapsed"]], t_bam[["user.self"]], t_bam[["sys.self"]]))
cat(sprintf("bam: fREML %.6f, edf %.4f, sp %s\n", b$gcv.ubre, sum(b$edf), paste(sprintf("%.6g", b$sp), collapse = " ")))
cat("bam coef[1:6]:", sprintf("%.8f", coef(b)[1:6]), "\n")
