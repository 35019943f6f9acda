# What the mgcv oracles for the GAM tests share (sourced by gam_fit.R and
# gam_offsets.R): a JSON writer, tight gam.control, a case's CSV written and
# read back, and what a fit reports.
suppressPackageStartupMessages({
  library(mgcv)
  library(MASS)
})
# Factor levels sort in the C collation (byte order), as the Rust side sorts them.
invisible(Sys.setlocale("LC_COLLATE", "C"))

# A small JSON writer (no jsonlite here): numbers with 17 significant
# digits (the doubles exactly), numeric and character vectors as arrays.
json <- function(v) {
  if (is.list(v)) {
    if (is.null(names(v))) return(paste0("[", paste(vapply(v, json, ""), collapse = ", "), "]"))
    return(paste0("{", paste(sprintf('"%s": %s', names(v), vapply(v, json, "")), collapse = ", "), "}"))
  }
  if (is.logical(v)) return(if (v) "true" else "false")
  if (is.character(v)) {
    items <- sprintf('"%s"', gsub('"', '\\\\"', v))
    return(if (length(v) == 1) items else paste0("[", paste(items, collapse = ", "), "]"))
  }
  paste0("[", paste(sprintf("%.17g", v), collapse = ", "), "]")
}

ctrl <- gam.control(epsilon = 1e-12, maxit = 200,
                    newton = list(conv.tol = 1e-12, maxNstep = 5, maxHalf = 60))

write_case <- function(name, d, prefix = "gam_fit") {
  csv <- sprintf("tests/data/%s_%s.csv", prefix, name)
  cols <- lapply(d, function(v) if (is.numeric(v)) sprintf("%.17g", v) else as.character(v))
  lines <- do.call(paste, c(cols, sep = ","))
  writeLines(c(paste(names(d), collapse = ","), lines), csv)
  # Both sides fit what the file holds (factors as read back).
  read.csv(csv, stringsAsFactors = TRUE)
}

# `weights`: the name of a prior-weights column of d (mgcv's `weights = w`), or NULL.
report <- function(name, formula, family, family_name, link, d, weights = NULL) {
  w <- if (is.null(weights)) NULL else d[[weights]]
  fit <- gam(as.formula(formula), family = family, data = d, weights = w, method = "REML", control = ctrl)
  sm <- summary(fit)
  new <- d[seq(1, nrow(d), length.out = 7), , drop = FALSE]
  pl <- predict(fit, newdata = new, type = "link", se.fit = TRUE)
  pr <- predict(fit, newdata = new, type = "response", se.fit = TRUE)
  smooths <- lapply(fit$smooth, function(s) list(label = s$label,
    first = s$first.para, last = s$last.para, edf = sum(fit$edf[s$first.para:s$last.para])))
  out <- list(
    name = name, formula = formula, family = family_name, link = link,
    n = nrow(d),
    names = as.list(names(coef(fit))),
    coefficients = unname(coef(fit)),
    se = unname(sqrt(diag(fit$Vp))),
    se_frequentist = unname(sqrt(diag(fit$Ve))),
    sp = unname(fit$sp),
    edf = unname(fit$edf),
    edf_smooth = vapply(smooths, function(s) s$edf, 0),
    smooth_labels = as.list(vapply(smooths, function(s) s$label, "")),
    edf_total = sum(fit$edf),
    scale = fit$scale,
    sig2 = fit$sig2,
    reml_scale = fit$reml.scale,
    reml_score = unname(fit$gcv.ubre),
    deviance = fit$deviance,
    null_deviance = fit$null.deviance,
    deviance_explained = (fit$null.deviance - fit$deviance) / fit$null.deviance,
    converged = fit$converged,
    # Unpenalised dimensions: mgcv's score holds -Mp log(2 pi) / 2.
    null_space_dim = ncol(fit$Vp) - sum(vapply(fit$smooth, function(s) s$last.para - s$first.para + 1 - s$null.space.dim, 0)),
    outer = as.character(fit$outer.info$conv),
    # summary.gam's tables, row by row, and R-sq.(adj).
    p_table = unname(as.vector(t(sm$p.table))),
    s_table = unname(as.vector(t(sm$s.table))),
    r_sq = sm$r.sq,
    # predict.gam at 7 of the rows (evenly spaced), link and response.
    predict_rows = as.integer(seq(1, nrow(d), length.out = 7)) - 1L,
    predict_link = unname(pl$fit), predict_link_se = unname(pl$se.fit),
    predict_response = unname(pr$fit), predict_response_se = unname(pr$se.fit)
  )
  if (!is.null(weights)) out$weights <- weights
  out
}
