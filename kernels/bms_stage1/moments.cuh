// ---------------------------------------------------------------------------
// Moments (cells::moments): the affine closed form where its running error
// bound allows, adaptive quadrature otherwise.

// Phi(v) - Phi(u) for u <= v without cancellation in either tail.
__device__ double normal_mass(double u, double v)
{
    return u >= 0.0 ? normcdf(-u) - normcdf(-v) : normcdf(v) - normcdf(u);
}

__device__ double edge_term(double z, int n, double alpha, double beta)
{
    if (!isfinite(z)) return 0.0;
    double zn = 1.0;
    for (int k = 0; k < n; ++k) zn *= z;
    const double e = alpha + beta * z;
    return zn * exp(-0.5 * (z * z + e * e));
}

__device__ bool affine_moments(double alpha, double beta, double lo, double hi, double* m)
{
    const double d = 1.0 + beta * beta, mu = -alpha * beta / d, sd = sqrt(d);
    const double scale = sqrt(TWO_PI / d) * exp(-0.5 * alpha * alpha / d);
    double err[MOMENTS];
    m[0] = scale * normal_mass(sd * (lo - mu), sd * (hi - mu));
    err[0] = 8.0 * DBL_EPS * fabs(m[0]);
    const double ab = alpha * beta;
    for (int n = 0; n < MOMENTS - 1; ++n) {
        const double b_n = edge_term(hi, n, alpha, beta) - edge_term(lo, n, alpha, beta);
        const double prev = n > 0 ? m[n - 1] : 0.0, prev_err = n > 0 ? err[n - 1] : 0.0;
        const double terms = n * fabs(prev) + fabs(ab * m[n]) + fabs(b_n);
        m[n + 1] = (n * prev - ab * m[n] - b_n) / d;
        err[n + 1] = (n * prev_err + fabs(ab) * err[n] + 4.0 * DBL_EPS * terms) / d;
    }
    for (int k = 0; k < MOMENTS; ++k) {
        if (!isfinite(m[k])) return false;
        if (!(err[k] <= RECURRENCE_TOL * fabs(m[k]) || err[k] == 0.0)) return false;
    }
    return true;
}

// The quadrature takes eta about the cell's local_center (cells.rs:
// quadrature_moments).
__device__ void cell_moments(const double* eta, double lo, double hi, double* m)
{
    if (eta[2] == 0.0 && eta[3] == 0.0 && affine_moments(eta[0], eta[1], lo, hi, m)) return;
    const double l = fmax(lo, -Z_CLIP), r = fmin(hi, Z_CLIP), center = local_center(eta, l, r);
    double local[4] = {eta[0], eta[1], eta[2], eta[3]};
    shift_cubic(local, center);
    adaptive<MOMENTS, 0>(l, r, local, center, false, m);
}
