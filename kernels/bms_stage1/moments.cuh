// ---------------------------------------------------------------------------
// Moments about each cell's moment_center (cells::moments): the series
// on ordinary finite cells, the affine closed form where its running error
// bound allows, adaptive quadrature otherwise.

// Phi(v) - Phi(u) for u <= v without cancellation in either tail.
__device__ double normal_mass(double u, double v)
{
    return u >= 0.0 ? normcdf(-u) - normcdf(-v) : normcdf(v) - normcdf(u);
}

// exp(-(z^2 + eta^2) / 2) at a finite edge z, 0 at an infinite one.
__device__ double edge_weight(double z, double alpha, double beta)
{
    if (!isfinite(z)) return 0.0;
    const double e = alpha + beta * z;
    return exp_c(-0.5 * (z * z + e * e));
}

// (z - c)^n w, 0 where the weight w is.
__device__ double edge_term(double z, double w, int n, double c)
{
    if (w == 0.0) return 0.0;
    double xn = 1.0;
    for (int k = 0; k < n; ++k) xn *= z - c;
    return xn * w;
}

// The affine closed form about c (cells.rs: affine_moments): m_0 from the
// normal distribution function, then m_{n+1} = (n m_{n-1} - s m_n - B_n) / d
// with s = alpha beta + d c.
__device__ bool affine_moments(double alpha, double beta, double lo, double hi, double c, double* m)
{
    const double d = 1.0 + beta * beta, mu = -alpha * beta / d, sd = sqrt(d);
    const double scale = sqrt(TWO_PI / d) * exp_c(-0.5 * alpha * alpha / d);
    double err[MOMENTS];
    m[0] = scale * normal_mass(sd * (lo - mu), sd * (hi - mu));
    err[0] = 8.0 * DBL_EPS * fabs(m[0]);
    const double s = alpha * beta + d * c;
    const double w_lo = edge_weight(lo, alpha, beta), w_hi = edge_weight(hi, alpha, beta);
    for (int n = 0; n < MOMENTS - 1; ++n) {
        const double b_n = edge_term(hi, w_hi, n, c) - edge_term(lo, w_lo, n, c);
        const double prev = n > 0 ? m[n - 1] : 0.0, prev_err = n > 0 ? err[n - 1] : 0.0;
        const double terms = n * fabs(prev) + fabs(s * m[n]) + fabs(b_n);
        m[n + 1] = (n * prev - s * m[n] - b_n) / d;
        err[n + 1] = (n * prev_err + fabs(s) * err[n] + 4.0 * DBL_EPS * terms) / d;
    }
    for (int k = 0; k < MOMENTS; ++k) {
        if (!isfinite(m[k])) return false;
        if (!(err[k] <= RECURRENCE_TOL * fabs(m[k]) || err[k] == 0.0)) return false;
    }
    return true;
}

// ---------------------------------------------------------------------------
// The series (series.rs: series_moments): on a finite cell [c - rho, c +
// rho], E = exp(P(u)), z = c + rho u, P of degree 6; exp(P(u) - P(0)) =
// sum_j f_j u^j by (j + 1) f_{j+1} = sum_i i p_i f_{j+1-i}, and m_k =
// e^{P(0)} rho^{k+1} sum_j f_j w_{k+j}, w_n = integral_{-1}^{1} u^n du. The
// same recurrence on |p_i| bounds the terms (g_j >= |f_j|, sum G): six g_j
// below SERIES_TAIL G end it, and it is taken only where its rounding
// (4 J eps G) is within MOMENT_TOL of m_0; else the cell is integrated.

#define SERIES_TERMS 64
#define SERIES_TAIL 1e-17

// w_n for n < SERIES_TERMS + MOMENTS (series.rs: POWER_INTEGRALS, checked
// bitwise there), in constant memory: a warp's lanes read one entry at a
// time, which the constant cache broadcasts.
__device__ __constant__ double SERIES_W[SERIES_TERMS + MOMENTS] = {
    2.0, 0.0, 0.6666666666666666, 0.0, 0.4, 0.0,
    0.2857142857142857, 0.0, 0.2222222222222222, 0.0, 0.18181818181818182, 0.0,
    0.15384615384615385, 0.0, 0.13333333333333333, 0.0, 0.11764705882352941, 0.0,
    0.10526315789473684, 0.0, 0.09523809523809523, 0.0, 0.08695652173913043, 0.0,
    0.08, 0.0, 0.07407407407407407, 0.0, 0.06896551724137931, 0.0,
    0.06451612903225806, 0.0, 0.06060606060606061, 0.0, 0.05714285714285714, 0.0,
    0.05405405405405406, 0.0, 0.05128205128205128, 0.0, 0.04878048780487805, 0.0,
    0.046511627906976744, 0.0, 0.044444444444444446, 0.0, 0.0425531914893617, 0.0,
    0.04081632653061224, 0.0, 0.0392156862745098, 0.0, 0.03773584905660377, 0.0,
    0.03636363636363636, 0.0, 0.03508771929824561, 0.0, 0.03389830508474576, 0.0,
    0.03278688524590164, 0.0, 0.031746031746031744, 0.0, 0.03076923076923077, 0.0,
    0.029850746268656716, 0.0, 0.028985507246376812, 0.0, 0.028169014084507043, 0.0,
    0.0273972602739726, 0.0,
};

// 1 / n for n <= SERIES_TERMS (entry 0 unused; series.rs: INVERSES, checked
// bitwise there): a double division a term cost more FP64 instructions than
// the term's sums.
__device__ __constant__ double SERIES_INV[SERIES_TERMS + 1] = {
    0.0, 1.0, 0.5, 0.3333333333333333, 0.25, 0.2, 0.16666666666666666, 0.14285714285714285, 0.125,
    0.1111111111111111, 0.1, 0.09090909090909091, 0.08333333333333333, 0.07692307692307693,
    0.07142857142857142, 0.06666666666666667, 0.0625, 0.058823529411764705, 0.05555555555555555,
    0.05263157894736842, 0.05, 0.047619047619047616, 0.045454545454545456, 0.043478260869565216,
    0.041666666666666664, 0.04, 0.038461538461538464, 0.037037037037037035, 0.03571428571428571,
    0.034482758620689655, 0.03333333333333333, 0.03225806451612903, 0.03125, 0.030303030303030304,
    0.029411764705882353, 0.02857142857142857, 0.027777777777777776, 0.02702702702702703, 0.02631578947368421,
    0.02564102564102564, 0.025, 0.024390243902439025, 0.023809523809523808, 0.023255813953488372,
    0.022727272727272728, 0.022222222222222223, 0.021739130434782608, 0.02127659574468085,
    0.020833333333333332, 0.02040816326530612, 0.02, 0.0196078431372549, 0.019230769230769232,
    0.018867924528301886, 0.018518518518518517, 0.01818181818181818, 0.017857142857142856,
    0.017543859649122806, 0.017241379310344827, 0.01694915254237288, 0.016666666666666666,
    0.01639344262295082, 0.016129032258064516, 0.015873015873015872, 0.015625,
};

// The last six terms of a series, newest first, and the next:
// (sum_i c_i w_i) / (j + 1) in series.rs's order (inv = 1 / (j + 1)).
__device__ __forceinline__ double series_next(const double* c, const double* w, double inv)
{
    return (((((c[5] * w[5] + c[4] * w[4]) + c[3] * w[3]) + c[2] * w[2]) + c[1] * w[1]) + c[0] * w[0]) * inv;
}

__device__ __forceinline__ bool series_tail(const double* g, double big)
{
    bool tail = true;
    for (int i = 0; i < 6; ++i) tail = tail && g[i] <= SERIES_TAIL * big;
    return tail;
}

// f_{j+1} and g_{j+1} from the last six (inv = 1 / (j + 1)), shifted in.
__device__ __forceinline__ void series_step(const double* ip, const double* ipa, double* f, double* g, double* big,
                                            double inv)
{
    const double fj = series_next(ip, f, inv), gj = series_next(ipa, g, inv);
    for (int i = 5; i > 0; --i) { f[i] = f[i - 1]; g[i] = g[i - 1]; }
    f[0] = fj; g[0] = gj;
    *big += gj;
}

// eta: the cubic in z - c. Returns false where the series declines.
// Term j adds f_j w_{k+j} to the sums of k of j's parity (w_n is 0 for odd
// n). The loop takes the terms in pairs, an even j then j + 1, so that each
// half adds to five fixed sums (registers) and both read w at even indices
// j, j + 2, ..., j + 10, kept in a window that slides by one entry a pair:
// each sum receives the same products in the same order as one term at a
// time would give.
__device__ bool series_moments(const double* eta, double c, double rho, double* m)
{
    const double h[4] = {eta[0], eta[1] * rho, eta[2] * (rho * rho), eta[3] * (rho * rho * rho)};
    double p[7] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) p[i + j] += h[i] * h[j];
    p[0] += c * c;
    p[1] += 2.0 * c * rho;
    p[2] += rho * rho;
    for (int i = 0; i < 7; ++i) p[i] = -0.5 * p[i];
    double ip[6], ipa[6], f[6] = {1.0, 0.0, 0.0, 0.0, 0.0, 0.0}, g[6] = {1.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    for (int i = 0; i < 6; ++i) { ip[i] = (i + 1) * p[i + 1]; ipa[i] = fabs(ip[i]); }
    double big = 1.0, sums[MOMENTS], win[6];
    for (int k = 0; k < MOMENTS; ++k) sums[k] = 0.0;
    for (int i = 0; i < 6; ++i) win[i] = SERIES_W[2 * i];
    int terms = 0;
    for (int j = 0; j < SERIES_TERMS; j += 2) {
        for (int i = 0; i < 5; ++i) sums[2 * i] += f[0] * win[i];
        terms = j + 1;
        if (j >= 5 && series_tail(g, big)) break;
        series_step(ip, ipa, f, g, &big, SERIES_INV[j + 1]);
        for (int i = 0; i < 5; ++i) sums[2 * i + 1] += f[0] * win[i + 1];
        terms = j + 2;
        if (j + 1 >= 5 && series_tail(g, big)) break;
        series_step(ip, ipa, f, g, &big, SERIES_INV[j + 2]);
        for (int i = 0; i < 5; ++i) win[i] = win[i + 1];
        // Past the last pair the entry is never read; the index stays in
        // the table.
        win[5] = SERIES_W[min(j + 12, SERIES_TERMS + MOMENTS - 2)];
    }
    const bool converged = terms < SERIES_TERMS || series_tail(g, big);
    const double rounding = 4.0 * terms * DBL_EPS * big;
    if (!(converged && isfinite(big) && sums[0] > 0.0 && rounding <= MOMENT_TOL * sums[0])) return false;
    double scale = exp_c(p[0]) * rho;
    for (int k = 0; k < MOMENTS; ++k) { m[k] = scale * sums[k]; scale *= rho; }
    return true;
}

// Where a cell's moments are taken and on what scale (cells.rs:
// moment_frame): for a finite cell the midpoint c and half-width rho of its
// part within CENTER_REACH of its point nearest 0; (0, 0) for the tails
// (and for an empty slot's NaN edges). Returns whether that part is the
// whole cell.
__device__ __forceinline__ bool moment_frame(double lo, double hi, double* c, double* rho)
{
    if (!(isfinite(lo) && isfinite(hi))) { *c = 0.0; *rho = 0.0; return false; }
    const double near = lo > 0.0 ? lo : (hi < 0.0 ? hi : 0.0);
    const double l = fmax(lo, near - CENTER_REACH), r = fmin(hi, near + CENTER_REACH);
    *c = 0.5 * (l + r);
    *rho = 0.5 * (r - l);
    return l == lo && r == hi;
}

__device__ __forceinline__ double moment_center(double lo, double hi)
{
    double c, rho;
    moment_frame(lo, hi, &c, &rho);
    return c;
}

// The moments about c (cells.rs: moments), in two steps so that a warp
// never waits on one lane's quadrature: cell_moments_closed takes the
// series on a finite cell that is its whole frame, inside the clip, where
// it is accurate, else the affine closed form, and returns false where
// neither holds (about 6% of the fit shape's cells); then
// cell_moments_quadrature integrates, taking eta about c, or for a tail
// about its local_center, and scaling a finite cell's powers by 1 / rho
// (cells.rs: quadrature_moments).
__device__ bool cell_moments_closed(const double* eta, double lo, double hi, double* m)
{
    double c, rho;
    const bool whole = moment_frame(lo, hi, &c, &rho);
    if (whole && rho > 0.0 && fmax(fabs(lo), fabs(hi)) <= Z_CLIP) {
        double about[4] = {eta[0], eta[1], eta[2], eta[3]};
        shift_cubic(about, c);
        if (series_moments(about, c, rho, m)) return true;
    }
    return eta[2] == 0.0 && eta[3] == 0.0 && affine_moments(eta[0], eta[1], lo, hi, c, m);
}

__device__ void cell_moments_quadrature(const double* eta, double lo, double hi, double* m)
{
    double c, rho;
    moment_frame(lo, hi, &c, &rho);
    const double l = fmax(lo, -Z_CLIP), r = fmin(hi, Z_CLIP);
    const double at = rho > 0.0 ? c : local_center(eta, l, r);
    double local[4] = {eta[0], eta[1], eta[2], eta[3]};
    shift_cubic(local, at);
    adaptive<MOMENTS, 0>(l, r, local, at, c, rho, false, 0, m);
    if (rho > 0.0) {
        double rk = 1.0;
        for (int k = 0; k < MOMENTS; ++k) { m[k] *= rk; rk *= rho; }
    }
}
