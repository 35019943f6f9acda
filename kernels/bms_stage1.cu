// Stage 1 of the Bernoulli marginal-slope model on the device (the math of
// docs/bms-model.md, "Cells (Stage 1)"; the CPU twin is src/bms/cells.rs,
// calibration.rs and quadrature.rs, which these kernels follow step by step).
//
// Three kernels, launched in order on one stream:
//   bms_calibrate  one thread per row: q, b from the design rows, then the
//                  intercept a (closed form for rigid rows, else Newton on
//                  F(a) safeguarded by a bracket, as on the CPU), and the
//                  edges of the row's cells at a.
//   bms_cell_moments  one thread per (row, cell slot): the cell's segments
//                  and moments. Every row owns `slots` = kh + kw + 1 slots; a
//                  row with fewer cells (b = 0, or coinciding edges) marks
//                  the rest empty, which adds exact zeros in Stage 2. The cells'
//                  coefficient arrays are built by Stage 2 itself
//                  (bms_row_bases in bms_row.cu, compiled with this file)
//                  from the edges and the bases: cell_part below.
//   bms_observed   one thread per row: the observed-point jets and mu_1, mu_2.
// Each thread works sequentially in a fixed order: no atomics, bitwise
// repeatable. Quadrature is adaptive, with an explicit stack per thread:
// the 21-point Gauss-Kronrod rule with its embedded 10-point Gauss rule,
// whose difference estimates the Kronrod value's error as QUADPACK does
// (kronrod_error), as on the CPU (quadrature::adaptive_with).

#define Z_CLIP 40.0
#define QUAD_TOL 1e-14
// The calibration's F_a and F_aa only steer its iteration (a relative error
// e in them moves the next iterate by about e times the step, and the
// iteration stops once a step is below STEP_STOP), so their integrals need
// far less than F's.
#define SLOPE_TOL 1e-9
#define RECURRENCE_TOL 1e-12
#define SKIP_FRACTION 1e-3
#define SQRT_2PI 2.5066282746310002
#define INV_SQRT_2PI 0.3989422804014327
#define MAX_DEPTH 48
#define MAX_PANELS 100000
// A depth-first bisection holds at most MAX_DEPTH + 1 panels beyond the
// initial panels (at most 8, see initial_panels).
#define STACK_CAP 60
#define MAX_INITIAL 8
#define NEWTON_ITERS 200
#define STEP_STOP 1e-7
#define STOP_CURVATURE 1e-5
#define HALLEY_LIMIT 1.0
#define BRACKET_STEPS 64
#define MOMENTS 10
#define TWO_PI 6.283185307179586
#define LN_SQRT_2PI 0.9189385332046728
#define DBL_EPS 2.220446049250313e-16
#define DBL_TINY 2.2250738585072014e-308
#define INF_D __longlong_as_double(0x7ff0000000000000LL)

// Status codes of bms_calibrate (Stage 2 uses 1 and 2).
#define CAL_OK 0u
#define CAL_NO_BRACKET 3u
#define CAL_NO_CONVERGENCE 4u
#define CAL_NON_FINITE 5u

typedef long long i64;

// A projected cubic basis: k knots (0: block absent), dim functions, pieces
// [(k + 1) segments][dim][4] and comb [(k + 1)][4] = sum_j beta_j piece_j.
struct Basis {
    int k, dim;
    const double *knots, *pieces, *comb;
};

struct Model {
    Basis h, w;
    double s_f;
};

__device__ __forceinline__ double horner(const double* p, double x)
{
    return ((p[3] * x + p[2]) * x + p[1]) * x + p[0];
}

__device__ __forceinline__ void deriv(const double* p, double* out)
{
    out[0] = p[1]; out[1] = 2.0 * p[2]; out[2] = 3.0 * p[3]; out[3] = 0.0;
}

// p(a + b z) as a cubic in z: Horner on polynomials, ((p3 T + p2) T + p1) T
// + p0 with T = a + b z, as basis::poly_compose_affine, written out so that
// no product of a coefficient known to be zero is formed (14 FP64
// operations instead of 36; Stage 2 takes two a link part).
__device__ void compose_affine(const double* p, double a, double b, double* out)
{
    const double s0 = a * p[3] + p[2], s1 = b * p[3];
    const double t0 = a * s0 + p[1], t1 = b * s0 + a * s1, t2 = b * s1;
    out[0] = a * t0 + p[0];
    out[1] = b * t0 + a * t1;
    out[2] = b * t1 + a * t2;
    out[3] = b * t2;
}

// The segment holding x: the number of knots <= x.
__device__ int segment_of(const Basis& B, double x)
{
    int lo = 0, hi = B.k;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (B.knots[mid] <= x) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// phi(x) with x split on a 1/16 grid so the exponent carries no rounding of x^2.
__device__ double norm_pdf(double x)
{
    if (isinf(x)) return 0.0;
    const double xh = trunc(16.0 * x) / 16.0, del = (x - xh) * (x + xh);
    return exp(-0.5 * xh * xh) * exp(-0.5 * del) * exp(-LN_SQRT_2PI);
}

// exp(-x^2 / 2) to about an ulp with one exp: x^2 = h + l exactly (an FMA
// gives l), and exp(-(h + l) / 2) = exp(-h / 2) (1 - l / 2) to rounding,
// as |l| <= ulp(h) / 2. Zero past x^2 = 1500 (where exp underflows
// anyway, and l would be infinite); NaN stays NaN.
__device__ __forceinline__ double half_gauss(double x)
{
    const double h = x * x;
    if (h > 1500.0) return 0.0;
    const double l = fma(x, x, -h), e = exp(-0.5 * h);
    return fma(e, -0.5 * l, e);
}

// Phi(s) from g = exp(-s^2 / 2) (half_gauss(s)): the tail Phi(-|s|) =
// erfcx(|s| / sqrt 2) g / 2, which erfcx gives without an exp of its own
// for a non-negative argument, and one minus it for s >= 0.
__device__ __forceinline__ double phi_cdf(double s, double g)
{
    const double tail = 0.5 * erfcx(fabs(s) * 0.7071067811865476) * g;
    return s < 0.0 ? tail : 1.0 - tail;
}

__device__ double representative(double lo, double hi)
{
    const bool fl = isfinite(lo), fh = isfinite(hi);
    if (fl && fh) return 0.5 * (lo + hi);
    if (fl) return lo + 1.0;
    if (fh) return hi - 1.0;
    return 0.0;
}

// ---------------------------------------------------------------------------
// Cell edges: the score knots merged with the link knots mapped through
// z = (t - a) / b (increasing in z whatever the sign of b; none when b = 0),
// without non-finite values or repeats.

struct Edges {
    int i, j;
    bool any;
    double last;
};

__device__ bool next_edge(const Model& m, double a, double b, Edges& it, double* out)
{
    const int kl = (b != 0.0) ? m.w.k : 0;
    for (;;) {
        const bool has_s = it.i < m.h.k, has_l = it.j < kl;
        if (!has_s && !has_l) return false;
        double e;
        if (has_l) {
            const int idx = b > 0.0 ? it.j : kl - 1 - it.j;
            const double zl = (m.w.knots[idx] - a) / b;
            if (!has_s || zl < m.h.knots[it.i]) { e = zl; ++it.j; }
            else { e = m.h.knots[it.i]; ++it.i; }
        } else {
            e = m.h.knots[it.i]; ++it.i;
        }
        if (!isfinite(e) || (it.any && e == it.last)) continue;
        it.any = true;
        it.last = e;
        *out = e;
        return true;
    }
}

// Every cell slot's edges lo, hi into bounds[4 c], bounds[4 c + 1] (NaN
// past the row's cells, and for every slot of a row whose intercept
// failed), written once a row by the calibration, so that the cells
// kernel's thread for slot c reads them instead of walking c edges.
__device__ void row_edges(const Model& m, double a, double b, bool ok, double* bounds, int slots)
{
    int c = 0;
    if (ok) {
        Edges it = {0, 0, false, 0.0};
        double left = -INF_D, e;
        for (bool more = true; more && c < slots; ++c) {
            more = next_edge(m, a, b, it, &e);
            const double right = more ? e : INF_D;
            bounds[4 * c] = left;
            bounds[4 * c + 1] = right;
            left = right;
        }
    }
    const double nan = __longlong_as_double(0x7ff8000000000000LL);
    for (; c < slots; ++c) { bounds[4 * c] = nan; bounds[4 * c + 1] = nan; }
}

// ---------------------------------------------------------------------------
// The polynomial pieces that hold on a cell (picked at a point inside it).

struct Pieces {
    double h[4];        // H(z)
    double l[4], l1[4], l2[4];  // L, L', L'' composed with t = a + b z
    int seg_h, seg_w;
};

// The segment of the score (which = 0) or link (1) basis that holds on the
// cell [lo, hi]; 0 for an absent basis.
__device__ int cell_segment(const Model& m, double a, double b, double lo, double hi, int which)
{
    const double zm = representative(lo, hi);
    if (which == 0) return m.h.k > 0 ? segment_of(m.h, zm) : 0;
    return m.w.k > 0 ? segment_of(m.w, a + b * zm) : 0;
}

// The pieces on the segments seg_h, seg_w.
__device__ void cell_pieces_at(const Model& m, double a, double b, int seg_h, int seg_w, Pieces& p)
{
    for (int k = 0; k < 4; ++k) { p.h[k] = 0.0; p.l[k] = 0.0; p.l1[k] = 0.0; p.l2[k] = 0.0; }
    p.seg_h = seg_h;
    p.seg_w = seg_w;
    if (m.h.k > 0)
        for (int k = 0; k < 4; ++k) p.h[k] = m.h.comb[seg_h * 4 + k];
    if (m.w.k > 0) {
        const double* lt = m.w.comb + seg_w * 4;
        double l1t[4], l2t[4];
        deriv(lt, l1t);
        deriv(l1t, l2t);
        compose_affine(lt, a, b, p.l);
        compose_affine(l1t, a, b, p.l1);
        compose_affine(l2t, a, b, p.l2);
    }
}

__device__ void cell_pieces(const Model& m, double a, double b, double lo, double hi, Pieces& p)
{
    cell_pieces_at(m, a, b, cell_segment(m, a, b, lo, hi, 0), cell_segment(m, a, b, lo, hi, 1), p);
}

// eta = s_f (a + b z + b H(z) + L(t)) and d eta / da = s_f (1 + L'(t)).
__device__ void eta_and_a(const Pieces& p, double a, double b, double s_f, double* eta, double* A)
{
    const double base[4] = {a, b, 0.0, 0.0};
    for (int k = 0; k < 4; ++k) {
        eta[k] = s_f * ((base[k] + p.h[k] * b) + p.l[k]);
        A[k] = s_f * ((k == 0 ? 1.0 : 0.0) + p.l1[k]);
    }
}

// ---------------------------------------------------------------------------
// Adaptive Gauss-Kronrod: bisect until the Kronrod value's estimated error
// (kronrod_error) is within QUAD_TOL times the largest panel |f| integral
// seen.
// As in the CPU rule, a wide interval away from z = 0 starts as panels that
// double in width away from its end nearest 0: every integrand here decays
// at least like exp(-z^2 / 2), so its mass sits near that end, and plain
// bisection of a tail such as [4, 40] would spend four levels reaching it.
// Integrands (KIND): 0 the moments z^k exp(-(z^2 + eta^2)/2), k < N;
// 1 Phi(+-eta) phi(z); 2 the calibration's three: Phi(+-eta) phi(z), then
// with E = exp(-(z^2 + eta^2)/2), A E and (AA - A^2 eta) E, whose integrals
// over 2 pi are F_a and F_aa (D(A) and D(AA) - Q(A, A) of the model). For
// KIND 2, eta points at the cubics eta, A = d eta/da, AA = d2 eta/da2.

template <int N, int KIND>
__device__ __forceinline__ void integrand(double z, const double* eta, bool upper, double* out)
{
    const double e = horner(eta, z);
    if (KIND == 1 || KIND == 2) {
        // Two exps and an erfcx a node (normcdf, a split phi(z) and E took
        // an erfc and three): phi(z) and E = exp(-(z^2 + eta^2) / 2) share
        // exp(-z^2 / 2), and Phi(+-eta) and E share exp(-eta^2 / 2).
        const double gz = half_gauss(z), ge = half_gauss(e);
        out[0] = phi_cdf(upper ? -e : e, ge) * (gz * INV_SQRT_2PI);
        if (KIND == 2) {
            const double ez = gz * ge, A = horner(eta + 4, z), AA = horner(eta + 8, z);
            out[1] = A * ez;
            out[2] = (AA - A * A * e) * ez;
        }
    } else {
        double zk = exp(-0.5 * (z * z + e * e));
        for (int k = 0; k < N; ++k) { out[k] = zk; zk *= z; }
    }
}

// The 21-point Gauss-Kronrod rule on [-1, 1] in constant memory, with the
// literals of quadrature.rs's KRONROD_21 (a test there checks that the two
// agree bitwise): nodes, Kronrod weights, Gauss weights (0 off the Gauss
// nodes). A warp reads one node at a time, which the constant cache
// broadcasts; read from global memory, every node waited on a load.
__device__ __constant__ double GK21[63] = {
    // nodes
    -0.9956571630258081, -0.9739065285171717, -0.9301574913557082, -0.8650633666889845, -0.7808177265864169,
    -0.6794095682990244, -0.5627571346686047, -0.4333953941292472, -0.2943928627014602, -0.14887433898163122,
    -0.0, 0.14887433898163122, 0.2943928627014602, 0.4333953941292472, 0.5627571346686047, 0.6794095682990244,
    0.7808177265864169, 0.8650633666889845, 0.9301574913557082, 0.9739065285171717, 0.9956571630258081,
    // Kronrod weights
    0.011694638867371874, 0.032558162307964725, 0.054755896574351995, 0.07503967481091996,
    0.0931254545836976, 0.10938715880229764, 0.12349197626206584, 0.13470921731147334, 0.14277593857706009,
    0.14773910490133849, 0.1494455540029169, 0.14773910490133849, 0.14277593857706009, 0.13470921731147334,
    0.12349197626206584, 0.10938715880229764, 0.0931254545836976, 0.07503967481091996, 0.054755896574351995,
    0.032558162307964725, 0.011694638867371874,
    // Gauss weights
    0.0, 0.06667134430868814, 0.0, 0.1494513491505806, 0.0, 0.21908636251598204, 0.0, 0.26926671930999635,
    0.0, 0.29552422471475287, 0.0, 0.29552422471475287, 0.0, 0.26926671930999635, 0.0, 0.21908636251598204,
    0.0, 0.1494513491505806, 0.0, 0.06667134430868814, 0.0,
};

// Both rules on [lo, hi] from the 21 integrand values: s (Kronrod), abs_s
// (Kronrod of |f|) and g (the embedded 10-point Gauss rule), by GK21: the
// nodes, Kronrod weights and Gauss weights (zero off the Gauss nodes).
template <int N, int KIND>
__device__ void apply_kronrod(double lo, double hi, const double* eta, bool upper, double* s,
                              double* abs_s, double* g)
{
    const double* gk = GK21;
    const double mid = 0.5 * (lo + hi), half = 0.5 * (hi - lo);
    for (int k = 0; k < N; ++k) { s[k] = 0.0; abs_s[k] = 0.0; g[k] = 0.0; }
    for (int i = 0; i < 21; ++i) {
        double v[N];
        integrand<N, KIND>(mid + half * gk[i], eta, upper, v);
        const double wk = gk[21 + i] * half, wg = gk[42 + i] * half;
        for (int k = 0; k < N; ++k) { s[k] += wk * v[k]; abs_s[k] += wk * fabs(v[k]); g[k] += wg * v[k]; }
    }
}

// The initial panels of [a, b], pushed so the one nearest 0 is popped first;
// returns how many.
__device__ int initial_panels(double a, double b, double* lo, double* hi, int* depth)
{
    if (!(b - a > 2.0) || (a < 0.0 && b > 0.0)) {
        lo[0] = a; hi[0] = b; depth[0] = 0;
        return 1;
    }
    // Edges from the near end outwards: near, near +- 1, +- 3, +- 7, ...
    const bool right = a >= 0.0;
    const double near_end = right ? a : b, far_end = right ? b : a;
    double edges[MAX_INITIAL + 1];
    int k = 0;
    edges[k++] = near_end;
    for (double w = 1.0; k < MAX_INITIAL && w < fabs(far_end - near_end); w = 2.0 * w + 1.0)
        edges[k++] = right ? near_end + w : near_end - w;
    edges[k++] = far_end;
    // Push from the far panel inwards.
    int top = 0;
    for (int j = k - 2; j >= 0; --j) {
        lo[top] = right ? edges[j] : edges[j + 1];
        hi[top] = right ? edges[j + 1] : edges[j];
        depth[top] = 0;
        ++top;
    }
    return top;
}

// The tolerance of component k of an integrand: the calibration's slopes
// (KIND 2, k > 0) need far less than F and the moments.
template <int KIND>
__device__ __forceinline__ double component_tol(int k)
{
    return (KIND == 2 && k > 0) ? SLOPE_TOL : QUAD_TOL;
}

// sum_k |p_k| z^k: a bound on |p| over |z| <= z.
__device__ __forceinline__ double abs_poly(const double* p, double z)
{
    return ((fabs(p[3]) * z + fabs(p[2])) * z + fabs(p[1])) * z + fabs(p[0]);
}

// Whether a panel away from 0 cannot matter: every integrand is at most a
// polynomial times exp(-z^2 / 2) (Phi <= 1 and exp(-eta^2 / 2) <= 1), so
// width x exp(-z_near^2 / 2) x that polynomial's bound bounds each
// component's integral; the panel is skipped when every bound is below
// SKIP_FRACTION of what an accepted panel may be off by (tol x scale). It
// spares the far panels of the tails (past |z| of about 9), which the
// initial panels reach. The CPU rule skips the same panels
// (quadrature::adaptive_bounded).
template <int N, int KIND>
__device__ bool negligible(double lo, double hi, const double* eta, const double* scale)
{
    if (lo < 0.0 && hi > 0.0) return false;
    const double z_near = fmin(fabs(lo), fabs(hi)), z_far = fmax(fabs(lo), fabs(hi));
    const double gauss = (hi - lo) * exp(-0.5 * z_near * z_near);
    double bound[N];
    if (KIND == 0) {
        double zk = 1.0;
        for (int k = 0; k < N; ++k) { bound[k] = gauss * zk; zk *= z_far; }
    } else {
        bound[0] = gauss / SQRT_2PI;
        if (KIND == 2) {
            const double pa = abs_poly(eta + 4, z_far);
            bound[1] = gauss * pa;
            bound[2] = gauss * (abs_poly(eta + 8, z_far) + pa * pa * abs_poly(eta, z_far));
        }
    }
    for (int k = 0; k < N; ++k) {
        const double tol = component_tol<KIND>(k);
        if (!(bound[k] <= SKIP_FRACTION * tol * scale[k])) return false;
    }
    return true;
}

// The error of a panel's Kronrod value, estimated from d = |K - G| as
// QUADPACK's qk21 does: I min(1, 200 d / I)^1.5, with I the panel's |f|
// integral (qk21 takes the integral of |f - mean|, and floors the estimate
// at 50 eps I, which would fail every test at QUAD_TOL). d itself measures
// the 10-point Gauss rule's error, far above the 21-point Kronrod rule's:
// accepting on d (the CPU rule's test, and this kernel's before) bisected
// panels whose Kronrod value was already exact to rounding.
// Against a reference at QUAD_TOL = 1e-16, the moments' and intercepts'
// errors were the same with either test (median, 99th and 99.9th
// percentiles, host replay of the seed, r = 4, 7, 33 and 64 problems),
// with 17% fewer moment panels and 4% fewer calibration panels at seed.
// NaN stays NaN (never accepted).
__device__ __forceinline__ double kronrod_error(double d, double abs_integral)
{
    if (!(d > 0.0) || !(abs_integral > 0.0)) return d;
    const double r = fmin(1.0, 200.0 * d / abs_integral);
    return abs_integral * r * sqrt(r);
}

template <int N, int KIND>
__device__ void adaptive(double a, double b, const double* eta, bool upper, double* out)
{
    for (int k = 0; k < N; ++k) out[k] = 0.0;
    if (b <= a) return;
    double st_lo[STACK_CAP], st_hi[STACK_CAP];
    int st_depth[STACK_CAP];
    int top = 0, panels = 0;
    top = initial_panels(a, b, st_lo, st_hi, st_depth);
    double scale[N];
    for (int k = 0; k < N; ++k) scale[k] = 0.0;
    while (top > 0) {
        --top;
        const double lo = st_lo[top], hi = st_hi[top];
        const int depth = st_depth[top];
        if (negligible<N, KIND>(lo, hi, eta, scale)) continue;
        ++panels;
        double value[N], abs_v[N], check[N];
        apply_kronrod<N, KIND>(lo, hi, eta, upper, value, abs_v, check);
        bool converged = true;
        for (int k = 0; k < N; ++k) {
            scale[k] = fmax(scale[k], abs_v[k]);
            const double tol = component_tol<KIND>(k);
            converged = converged && kronrod_error(fabs(value[k] - check[k]), abs_v[k]) <= tol * scale[k] + DBL_TINY;
        }
        const double mid = 0.5 * (lo + hi);
        if (converged || depth >= MAX_DEPTH || panels > MAX_PANELS || !(mid > lo && mid < hi)
            || top + 2 > STACK_CAP) {
            for (int k = 0; k < N; ++k) out[k] += value[k];
        } else {
            st_lo[top] = lo; st_hi[top] = mid; st_depth[top] = depth + 1; ++top;
            st_lo[top] = mid; st_hi[top] = hi; st_depth[top] = depth + 1; ++top;
        }
    }
}

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

__device__ void cell_moments(const double* eta, double lo, double hi, double* m)
{
    if (eta[2] == 0.0 && eta[3] == 0.0 && affine_moments(eta[0], eta[1], lo, hi, m)) return;
    adaptive<MOMENTS, 0>(fmax(lo, -Z_CLIP), fmin(hi, Z_CLIP), eta, false, m);
}

// ---------------------------------------------------------------------------
// Calibration (calibration.rs): F(a) = integral Phi(eta) phi(z) dz - Phi(q),
// in the complement form for q > 0, with F_a and F_aa.

// The quick rule (calibration.rs: gauss5_panels): the 5-point Gauss rule on
// each of the adaptive rule's first panels, nearest 0 first, no error test,
// over |z| <= QUICK_CLIP. It only seeds the adaptive iteration.
#define QUICK_CLIP 8.0
#define QUICK_STOP 3e-3  // calibration.rs: QUICK_STOP
#define QUICK_ITERS 8
__device__ __constant__ double G5_X[5] = {-0.9061798459386640, -0.5384693101056831, 0.0, 0.5384693101056831,
                                          0.9061798459386640};
__device__ __constant__ double G5_W[5] = {0.2369268850561891, 0.4786286704993665, 0.5688888888888889,
                                          0.4786286704993665, 0.2369268850561891};

template <int N, int KIND>
__device__ void gauss5_panels(double a, double b, const double* eta, bool upper, double* out)
{
    for (int k = 0; k < N; ++k) out[k] = 0.0;
    if (b <= a) return;
    double lo[MAX_INITIAL], hi[MAX_INITIAL];
    int depth[MAX_INITIAL];
    const int np = initial_panels(a, b, lo, hi, depth);
    for (int p = np - 1; p >= 0; --p) {
        const double mid = 0.5 * (lo[p] + hi[p]), half = 0.5 * (hi[p] - lo[p]);
        for (int i = 0; i < 5; ++i) {
            double v[N];
            integrand<N, KIND>(mid + half * G5_X[i], eta, upper, v);
            for (int k = 0; k < N; ++k) out[k] += G5_W[i] * half * v[k];
        }
    }
}

// F(a), and F_a, F_aa when slopes != NULL, over every cell of the row, by
// the adaptive rule or (QUICK, slopes required) the quick rule.
template <bool QUICK>
__device__ double residual(const Model& m, double q, double b, double a, double* slopes)
{
    const bool upper = q > 0.0;
    Edges it = {0, 0, false, 0.0};
    double left = -INF_D, e, mass = 0.0, fa = 0.0, faa = 0.0;
    for (;;) {
        const bool more = next_edge(m, a, b, it, &e);
        const double right = more ? e : INF_D;
        Pieces p;
        cell_pieces(m, a, b, left, right, p);
        double jet[12];
        eta_and_a(p, a, b, m.s_f, jet, jet + 4);
        if (slopes) {
            for (int k = 0; k < 4; ++k) jet[8 + k] = m.s_f * p.l2[k];
            double v[3];
            if (QUICK)
                gauss5_panels<3, 2>(fmax(left, -QUICK_CLIP), fmin(right, QUICK_CLIP), jet, upper, v);
            else
                adaptive<3, 2>(fmax(left, -Z_CLIP), fmin(right, Z_CLIP), jet, upper, v);
            mass += v[0];
            fa += v[1] / TWO_PI;
            faa += v[2] / TWO_PI;
        } else {
            double v[1];
            adaptive<1, 1>(fmax(left, -Z_CLIP), fmin(right, Z_CLIP), jet, upper, v);
            mass += v[0];
        }
        if (!more) break;
        left = right;
    }
    if (slopes) { slopes[0] = fa; slopes[1] = faa; }
    return upper ? normcdf(-q) - mass : mass - normcdf(q);
}

// The bracket's first step from a0, which is also how far the iterations
// may step from a0 before a bracket (calibration.rs: first_step).
__device__ __forceinline__ double first_step(double a0) { return 0.5 * (1.0 + fabs(a0)); }

// A bracket lo < hi with F(lo) <= 0 <= F(hi), grown from a0, with F by
// the adaptive rule or (QUICK) the quick one.
template <bool QUICK>
__device__ unsigned bracket(const Model& m, double q, double b, double a0, double f0, double* lo, double* hi)
{
    const double dir = f0 < 0.0 ? 1.0 : -1.0;
    double near_a = a0, step = first_step(a0);
    for (int s = 0; s < BRACKET_STEPS; ++s) {
        const double far_a = near_a + dir * step;
        double slopes[2];
        const double ff = QUICK ? residual<true>(m, q, b, far_a, slopes) : residual<false>(m, q, b, far_a, 0);
        if (!isfinite(ff)) return CAL_NON_FINITE;
        if (ff * dir >= 0.0) {
            if (dir > 0.0) { *lo = near_a; *hi = far_a; } else { *lo = far_a; *hi = near_a; }
            return CAL_OK;
        }
        near_a = far_a;
        step *= 2.0;
    }
    return CAL_NO_BRACKET;
}

// Halley's step from a, or Newton's where Halley's correction 1 / (1 - L/2),
// L = F F_aa / F_a^2, is far from one (F_aa is only a guide there).
__device__ __forceinline__ double halley_step(double a, double f, double fa, double faa, double* L_out)
{
    const double newton = f / fa, L = newton * faa / fa;
    *L_out = L;
    return fabs(L) < HALLEY_LIMIT ? a - newton / (1.0 - 0.5 * L) : a - newton;
}

template <bool QUICK>
__device__ unsigned solve_newton(const Model& m, double q, double b, double a0, double* out);

// A seed for the adaptive iteration (calibration.rs: quick_seed): Halley
// from a0 on the quick rule's F, F_a, F_aa. A step further from a0 than the
// bracket's first step hands over to solve_newton on the quick rule, which
// brackets from a0 as the adaptive iteration would; a0 itself where the
// quick iteration misbehaves otherwise (F_a <= 0, anything non-finite, a
// quick bracket that fails).
__device__ double quick_seed(const Model& m, double q, double b, double a0)
{
    const double cap = first_step(a0);
    double a = a0;
    for (int it = 0; it < QUICK_ITERS; ++it) {
        double d[2];
        const double f = residual<true>(m, q, b, a, d);
        if (!isfinite(f) || !(d[0] > 0.0)) return a0;
        double L;
        const double next = halley_step(a, f, d[0], d[1], &L);
        if (!isfinite(next)) return a0;
        if (fabs(next - a0) > cap) {
            double s;
            return solve_newton<true>(m, q, b, a0, &s) == CAL_OK ? s : a0;
        }
        const bool done = fabs(next - a) <= QUICK_STOP * (1.0 + fabs(a));
        a = next;
        if (done) break;
    }
    return a;
}

// Halley on a seeded by a0, the quick seed (calibration.rs: newton). The
// bracket is grown (from a0) only when a step is unusable: F_a <= 0, a step outside what the
// signs seen so far allow, or, before any bracket, a step longer than the
// bracket's first step (F need not be monotone far from a0). From then on a
// step that leaves the bracket is replaced by bisection. A usable step below
// STEP_STOP (relative) with L = F F_aa / F_a^2 at most STOP_CURVATURE ends
// it without another evaluation: the new iterate's error is then about one
// ulp at most where A keeps its sign (L^2 step / 4 <= 2.5e-18; F_a, F_aa
// accurate to SLOPE_TOL, relative to the integral of |A E|, move it by
// about SLOPE_TOL times the step: 1e-16; more where A changes sign, see
// calibration.rs). A Newton fallback
// step (|L| large) never ends it early (calibration.rs: newton). On the
// quick rule (QUICK, a seed only) it stops at QUICK_STOP.
template <bool QUICK>
__device__ unsigned solve_newton(const Model& m, double q, double b, double a0, double* out)
{
    const double stop = QUICK ? QUICK_STOP : STEP_STOP;
    double a = a0, d[2];
    double f = residual<QUICK>(m, q, b, a, d);
    const double f0 = f, cap = first_step(a0);
    *out = a;
    if (!isfinite(f)) return CAL_NON_FINITE;
    if (f == 0.0) return CAL_OK;
    double lo = f < 0.0 ? a : -INF_D, hi = f < 0.0 ? INF_D : a;
    bool bracketed = false;
    for (int it = 0; it < NEWTON_ITERS; ++it) {
        double L;
        const double fa = d[0], step = halley_step(a, f, fa, d[1], &L);
        bool usable = fa > 0.0 && step > lo && step < hi && (bracketed || fabs(step - a0) <= cap);
        if (!usable && !bracketed) {
            const unsigned st = bracket<QUICK>(m, q, b, a0, f0, &lo, &hi);
            if (st != CAL_OK) return st;
            bracketed = true;
            usable = fa > 0.0 && step > lo && step < hi;
        }
        const double next = usable ? step : 0.5 * (lo + hi);
        const double tol = 4.0 * DBL_EPS * (1.0 + fabs(a));
        const bool done = fabs(next - a) <= tol || hi - lo <= tol ||
                          (usable && fabs(next - a) <= stop * (1.0 + fabs(a)) &&
                           fabs(L) <= STOP_CURVATURE);
        a = next;
        *out = a;
        if (done) return CAL_OK;
        f = residual<QUICK>(m, q, b, a, d);
        if (!isfinite(f)) return CAL_NON_FINITE;
        if (f == 0.0) return CAL_OK;
        if (f < 0.0) lo = a; else hi = a;
    }
    return CAL_NO_CONVERGENCE;
}

__device__ Model make_model(int kh, int dh, const double* knots_h, const double* pieces_h, const double* comb_h,
                            int kw, int dw, const double* knots_w, const double* pieces_w, const double* comb_w,
                            double s_f)
{
    Model m;
    m.h.k = kh; m.h.dim = dh; m.h.knots = knots_h; m.h.pieces = pieces_h; m.h.comb = comb_h;
    m.w.k = kw; m.w.dim = dw; m.w.knots = knots_w; m.w.pieces = pieces_w; m.w.comb = comb_w;
    m.s_f = s_f;
    return m;
}

#define MODEL_PARAMS                                                                                   \
    int kh, int dh, const double* __restrict__ knots_h, const double* __restrict__ pieces_h,           \
        const double* __restrict__ comb_h, int kw, int dw, const double* __restrict__ knots_w,          \
        const double* __restrict__ pieces_w, const double* __restrict__ comb_w, double s_f
#define MODEL_ARGS kh, dh, knots_h, pieces_h, comb_h, kw, dw, knots_w, pieces_w, comb_w, s_f

// At most 102 registers (5 blocks an SM): unbounded, the compiler took 178
// and only 2 blocks fit; the FP64 dependency chains of the quadrature need
// the extra warps more than the registers (seed calibration 19.2 -> 15.7 ms
// at 4 blocks; 5 blocks were slower until the integrand shared its exps,
// and since then 5.06-5.13 -> 4.86-4.92 ms, 6 blocks 4.84).
extern "C" __global__ void __launch_bounds__(128, 5) bms_calibrate(
    int n, int p_m, int p_g, const double* __restrict__ x_m, const double* __restrict__ x_g,
    const double* __restrict__ beta_m, const double* __restrict__ beta_g, int rigid, MODEL_PARAMS,
    double* __restrict__ out_q, double* __restrict__ out_b, double* __restrict__ out_a,
    unsigned int* __restrict__ out_status, int slots, double* __restrict__ bounds)
{
    const i64 row = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    const Model m = make_model(MODEL_ARGS);
    double q = 0.0, b = 0.0;
    for (int k = 0; k < p_m; ++k) q += x_m[row * p_m + k] * beta_m[k];
    for (int k = 0; k < p_g; ++k) b += x_g[row * p_g + k] * beta_g[k];
    const double a0 = q * sqrt(1.0 + (s_f * b) * (s_f * b)) / s_f;
    double a = a0;
    unsigned st = CAL_OK;
    if (!rigid) st = solve_newton<false>(m, q, b, quick_seed(m, q, b, a0), &a);
    if (st == CAL_OK && !isfinite(a)) st = CAL_NON_FINITE;
    out_q[row] = q;
    out_b[row] = b;
    out_a[row] = a;
    out_status[row] = st;
    row_edges(m, a, b, st == CAL_OK, bounds + row * slots * 4, slots);
}

// One part of a cell's coefficient arrays (cells.rs, Bases::cell), scaled
// by s_f: part 0 the cell-level arrays and coordinate u = 1 (b), part
// 1 + j score function j, part 1 + p_h + l link function l. Each part
// carries its coordinate's d eta / d theta_u (x), d2 eta / da d theta_u
// (ar) and explicit d2 eta / db d theta_u (s); part 0 also eta, A and AA.
struct CellPart {
    double x[4], ar[4], s[4];
    double eta[4], A[4], AA[4];
};

__device__ void scale4(double* dst, const double* src, double s)
{
    for (int k = 0; k < 4; ++k) dst[k] = s * src[k];
}

// z p(z) for deg p <= 2.
__device__ void times_z(const double* p, double* out)
{
    out[0] = 0.0; out[1] = p[0]; out[2] = p[1]; out[3] = p[2];
}

// The parts are independent, so Stage 2 builds a tile's cells a thread per
// (cell, part), each part from the pieces it needs on the cell's segments
// seg_h, seg_w (found once a cell, by bms_cell_moments). Every part sets
// x, ar and s, and part 0 also eta, A and AA, the fields Stage 2 reads;
// nothing else is written (zeroing all six arrays first cost 24 of a
// part's instructions). An empty slot (lo NaN) gets zeros, so Stage 2 adds
// exact zeros for it.
__device__ void cell_part(const Model& m, double a, double b, double lo, int seg_h, int seg_w, int p_h, int part,
                          CellPart& o)
{
    const double s_f = m.s_f;
    if (isnan(lo)) {
        for (int k = 0; k < 4; ++k) { o.x[k] = 0.0; o.ar[k] = 0.0; o.s[k] = 0.0; }
        if (part == 0)
            for (int k = 0; k < 4; ++k) { o.eta[k] = 0.0; o.A[k] = 0.0; o.AA[k] = 0.0; }
        return;
    }
    double t[4];
    if (part == 0) {
        Pieces p;
        cell_pieces_at(m, a, b, seg_h, seg_w, p);
        eta_and_a(p, a, b, s_f, o.eta, o.A);
        scale4(o.AA, p.l2, s_f);
        // u = 1 (b): s_f (z + H + z L'), s_f z L''; and d2 eta / db2 = s_f z^2 L''.
        double zl1[4];
        times_z(p.l1, zl1);
        const double zpoly[4] = {0.0, 1.0, 0.0, 0.0};
        for (int k = 0; k < 4; ++k) t[k] = (zpoly[k] + p.h[k]) + zl1[k];
        scale4(o.x, t, s_f);
        times_z(p.l2, t);
        scale4(o.ar, t, s_f);
        double t2[4];
        times_z(t, t2);
        scale4(o.s, t2, s_f);
        return;
    }
    if (part <= p_h) {
        const int j = part - 1;
        const double* bh = m.h.pieces + ((i64)seg_h * m.h.dim + j) * 4;
        scale4(o.x, bh, s_f * b);
        scale4(o.s, bh, s_f);
        for (int k = 0; k < 4; ++k) o.ar[k] = 0.0;
        return;
    }
    const int l = part - 1 - p_h;
    const double* bw = m.w.pieces + ((i64)seg_w * m.w.dim + l) * 4;
    double bwz[4], bw1t[4], bw1[4];
    compose_affine(bw, a, b, bwz);
    deriv(bw, bw1t);
    compose_affine(bw1t, a, b, bw1);
    scale4(o.x, bwz, s_f);
    scale4(o.ar, bw1, s_f);
    times_z(bw1, t);
    scale4(o.s, t, s_f);
}

// Per cell slot (one thread each): the cell's edges, the score and link
// segments that hold on it (bounds: lo, hi, seg_h, seg_w a slot; Stage 2
// reads them instead of searching the knots again) and its moments. An
// empty slot (fewer cells, or a row whose intercept failed: its cells at a
// possibly non-finite a would only cost quadrature that cannot converge)
// gets NaN edges and zero moments; Stage 2 (bms_row_bases) builds the
// cell's coefficient arrays from the edges and adds exact zeros for it.
// Capped at 128 registers (it took 152: 3 blocks an SM; 2.47 -> 2.26 ms at
// seed, measured).
extern "C" __global__ void __launch_bounds__(128, 4) bms_cell_moments(
    int n, int slots, MODEL_PARAMS, const double* __restrict__ row_b, const double* __restrict__ row_a,
    const unsigned int* __restrict__ row_status, double* __restrict__ bounds, double* __restrict__ cm)
{
    const i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (i64)n * slots) return;
    // Slot-major threads: a warp takes one slot of 32 consecutive rows,
    // cells that are alike (the tails together, the interior together), so
    // its lanes take similar quadrature paths; row-major threads mixed a
    // row's tails with its interior cells in a warp (10.9 of 32 lanes
    // active, measured).
    const int slot = (int)(t / n);
    const i64 row = t - (i64)slot * n, c = row * slots + slot;
    const Model m = make_model(MODEL_ARGS);
    const double a = row_a[row], b = row_b[row];
    const double lo = bounds[4 * c], hi = bounds[4 * c + 1];
    if (row_status[row] != CAL_OK || isnan(lo)) {
        bounds[4 * c + 2] = 0.0;
        bounds[4 * c + 3] = 0.0;
        for (int k = 0; k < MOMENTS; ++k) cm[c * MOMENTS + k] = 0.0;
        return;
    }
    Pieces p;
    cell_pieces(m, a, b, lo, hi, p);
    double eta[4], A[4];
    eta_and_a(p, a, b, m.s_f, eta, A);
    double mom[MOMENTS];
    cell_moments(eta, lo, hi, mom);
    bounds[4 * c + 2] = p.seg_h;
    bounds[4 * c + 3] = p.seg_w;
    for (int k = 0; k < MOMENTS; ++k) cm[c * MOMENTS + k] = mom[k];
}

// Values and derivatives of basis function j at x on segment seg.
__device__ void basis_jet(const Basis& B, int seg, int j, double x, double* v, double* d1, double* d2)
{
    const double* p = B.pieces + ((i64)seg * B.dim + j) * 4;
    double dp[4], ddp[4];
    deriv(p, dp);
    deriv(dp, ddp);
    *v = horner(p, x);
    *d1 = horner(dp, x);
    *d2 = horner(ddp, x);
}

// The observed-point jets (cells.rs, Bases::observed). The explicit second
// derivatives r_uv are zero off row and column 1 (only b multiplies the
// bases), so the kernel writes r_1v, row 1 of r_uv: n x r instead of n x r^2.
// A block takes OBS_ROWS rows in two phases: a thread per row for the
// per-row values (and the sums h, L', L'' the coordinate-1 entries need),
// then a thread per (row, coordinate) for the n x r arrays, so that a
// warp's stores are consecutive; a thread per row wrote them r apart (one
// sector a lane and store).
#define OBS_ROWS 128
extern "C" __global__ void bms_observed(
    int n, int p_h, int p_w, MODEL_PARAMS, const double* __restrict__ beta_h, const double* __restrict__ beta_w,
    const double* __restrict__ row_q, const double* __restrict__ row_b, const double* __restrict__ row_a,
    const double* __restrict__ z_obs, double* __restrict__ e_obs, double* __restrict__ chi_obs,
    double* __restrict__ xi_obs, double* __restrict__ rho, double* __restrict__ tau,
    double* __restrict__ r1v, double* __restrict__ mu_1, double* __restrict__ mu_2)
{
    __shared__ double sh_z[OBS_ROWS], sh_t[OBS_ROWS], sh_b[OBS_ROWS], sh_h[OBS_ROWS], sh_l1[OBS_ROWS],
        sh_l2[OBS_ROWS];
    __shared__ int sh_seg_h[OBS_ROWS], sh_seg_w[OBS_ROWS];
    const Model m = make_model(MODEL_ARGS);
    const int r = 2 + p_h + p_w;
    const i64 row0 = (i64)blockIdx.x * OBS_ROWS;
    const int rows = (int)min((i64)OBS_ROWS, (i64)n - row0);
    for (int i = threadIdx.x; i < rows; i += blockDim.x) {
        const i64 row = row0 + i;
        const double q = row_q[row], b = row_b[row], a = row_a[row], z = z_obs[row], t = a + b * z;
        double h = 0.0, l = 0.0, l1 = 0.0, l2 = 0.0, v, d1, d2;
        const int seg_h = m.h.k > 0 ? segment_of(m.h, z) : 0, seg_w = m.w.k > 0 ? segment_of(m.w, t) : 0;
        if (m.h.k > 0)
            for (int j = 0; j < p_h; ++j) {
                basis_jet(m.h, seg_h, j, z, &v, &d1, &d2);
                h += beta_h[j] * v;
            }
        if (m.w.k > 0)
            for (int k = 0; k < p_w; ++k) {
                basis_jet(m.w, seg_w, k, t, &v, &d1, &d2);
                l += beta_w[k] * v;
                l1 += beta_w[k] * d1;
                l2 += beta_w[k] * d2;
            }
        sh_z[i] = z; sh_t[i] = t; sh_b[i] = b; sh_h[i] = h; sh_l1[i] = l1; sh_l2[i] = l2;
        sh_seg_h[i] = seg_h; sh_seg_w[i] = seg_w;
        e_obs[row] = s_f * (a + b * z + b * h + l);
        chi_obs[row] = s_f * (1.0 + l1);
        xi_obs[row] = s_f * l2;
        const double phi = norm_pdf(q);
        mu_1[row] = phi;
        mu_2[row] = -q * phi;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < rows * r; e += blockDim.x) {
        const int i = e / r, u = e - i * r;
        const double z = sh_z[i];
        double rh = 0.0, ta = 0.0, rv = 0.0, v, d1, d2;
        if (u == 1) {
            rh = s_f * (z + sh_h[i] + z * sh_l1[i]);
            ta = s_f * z * sh_l2[i];
            rv = s_f * z * z * sh_l2[i];
        } else if (u >= 2 && u < 2 + p_h) {
            if (m.h.k > 0) {
                basis_jet(m.h, sh_seg_h[i], u - 2, z, &v, &d1, &d2);
                rh = s_f * sh_b[i] * v;
                rv = s_f * v;
            }
        } else if (u >= 2 + p_h && m.w.k > 0) {
            basis_jet(m.w, sh_seg_w[i], u - 2 - p_h, sh_t[i], &v, &d1, &d2);
            rh = s_f * v;
            ta = s_f * d1;
            rv = s_f * z * d1;
        }
        const i64 at = (row0 + i) * r + u;
        rho[at] = rh;
        tau[at] = ta;
        r1v[at] = rv;
    }
}

// Stage 1's verdict wins over Stage 2's: a row whose intercept failed keeps
// its calibration code.
extern "C" __global__ void merge_status(int n, const unsigned int* __restrict__ first,
                                        unsigned int* __restrict__ second)
{
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && first[i] != 0u) second[i] = first[i];
}
