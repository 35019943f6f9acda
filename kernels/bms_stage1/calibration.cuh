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
            integrand<N, KIND>(mid + half * G5_X[i], eta, 0.0, 0.0, 1.0, upper, v);
            for (int k = 0; k < N; ++k) out[k] += G5_W[i] * half * v[k];
        }
    }
}

// The cells whose nearest point to 0 lies within this go first in the
// adaptive rule's pass (calibration.rs: NEAR_FIRST).
#define NEAR_FIRST 2.0

// The smallest |z| over [lo, hi] (calibration.rs: nearest).
__device__ __forceinline__ double nearest(double lo, double hi)
{
    return (lo <= 0.0 && hi >= 0.0) ? 0.0 : fmin(fabs(lo), fabs(hi));
}

// F(a), and F_a, F_aa and the mass (slopes[0..3]) when slopes != NULL, over
// every cell of the row, by the adaptive rule or (QUICK, slopes required)
// the quick rule. The adaptive rule takes each cell's cubics about its
// local_center. With slopes, it takes the cells within NEAR_FIRST of 0
// first and then the rest (each in z order), each held to the row's sums
// so far (calibration.rs: adaptive_totals and adaptive_slopes); F alone
// (the bracket's) and the quick rule take the cells in z order, F alone
// each to its own size on the 21-point rule (calibration.rs: residual).
template <bool QUICK>
__device__ double residual(const Model& m, double q, double b, double a, double* slopes)
{
    const bool upper = q > 0.0, held = !QUICK && slopes;
    double mass = 0.0, fa = 0.0, faa = 0.0;
    for (int pass = 0; pass < (held ? 2 : 1); ++pass) {
        Edges it = {0, 0, false, 0.0};
        double left = -INF_D, e;
        for (;;) {
            const bool more = next_edge(m, a, b, it, &e);
            const double right = more ? e : INF_D;
            if (!held || (nearest(left, right) < NEAR_FIRST) == (pass == 0)) {
                Pieces p;
                cell_pieces(m, a, b, left, right, p);
                double jet[12];
                eta_and_a(p, a, b, m.s_f, jet, jet + 4);
                const double l = fmax(left, -Z_CLIP), r = fmin(right, Z_CLIP);
                const double center = QUICK ? 0.0 : local_center(jet, l, r);
                shift_cubic(jet, center);
                if (slopes) {
                    for (int k = 0; k < 4; ++k) jet[8 + k] = m.s_f * p.l2[k];
                    shift_cubic(jet + 4, center);
                    shift_cubic(jet + 8, center);
                    double v[3];
                    if (QUICK) {
                        gauss5_panels<3, 2>(fmax(left, -QUICK_CLIP), fmin(right, QUICK_CLIP), jet, upper, v);
                        mass += v[0];
                        fa += v[1] / TWO_PI;
                        faa += v[2] / TWO_PI;
                    } else {
                        const double floor[3] = {fabs(mass), fabs(fa), fabs(faa)};
                        adaptive<3, 2>(l, r, jet, center, 0.0, 0.0, upper, floor, v);
                        mass += v[0];
                        fa += v[1];
                        faa += v[2];
                    }
                } else {
                    double v[1];
                    adaptive<1, 1>(l, r, jet, center, 0.0, 0.0, upper, 0, v);
                    mass += v[0];
                }
            }
            if (!more) break;
            left = right;
        }
    }
    if (slopes) {
        // The adaptive rule's sums are raw integrals (F_a's and F_aa's over
        // 2 pi), the quick rule's already divided cell by cell.
        slopes[0] = QUICK ? fa : fa / TWO_PI;
        slopes[1] = QUICK ? faa : faa / TWO_PI;
        slopes[2] = mass;
    }
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
        double slopes[3];
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

// Newton's step on G = log(mass / target), with F's sign, where the mass is
// beyond a factor LOG_FAR of its target (calibration.rs: tail_step): far out
// in a tail F is nearly exponential in a, and steps on F crawl from above
// or overshoot from below. False elsewhere, or where the mass underflows.
__device__ __forceinline__ bool tail_step(double a, double f, double fa, double mass, double target,
                                          double* step)
{
    const double ratio = mass / target;
    const bool far_out = ratio > LOG_FAR || ratio < 1.0 / LOG_FAR;
    if (!(far_out && ratio > 0.0 && isfinite(ratio))) return false;
    const double g = f < 0.0 ? -fabs(log(ratio)) : fabs(log(ratio));
    *step = a - g * mass / fa;
    return true;
}

template <bool QUICK>
__device__ unsigned solve_newton(const Model& m, double q, double b, double a0, double* out);

// A seed for the adaptive iteration (calibration.rs: quick_seed): Halley
// from a0 on the quick rule's F, F_a, F_aa. (The CPU takes its first step
// on a 3-point rule; here every step takes the 5-point quick rule: the
// rough first step slowed this kernel, a warp waiting for its slowest row,
// benches/RESULTS.md session 39.) A step further from a0 than the
// bracket's first step hands over to solve_newton on the quick rule, which
// brackets from a0 as the adaptive iteration would; a0 itself where the
// quick iteration misbehaves otherwise (F_a <= 0, anything non-finite, a
// quick bracket that fails).
__device__ double quick_seed(const Model& m, double q, double b, double a0)
{
    const double cap = first_step(a0);
    double a = a0;
    for (int it = 0; it < QUICK_ITERS; ++it) {
        double d[3];
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
// quick rule (QUICK, a seed only) it stops at QUICK_STOP; on the adaptive
// one, steps far out in a tail are tail_step's (L infinite: they never end
// it).
template <bool QUICK>
__device__ unsigned solve_newton(const Model& m, double q, double b, double a0, double* out)
{
    const double stop = QUICK ? QUICK_STOP : STEP_STOP;
    const double target = q > 0.0 ? normcdf(-q) : normcdf(q);
    double a = a0, d[3];
    double f = residual<QUICK>(m, q, b, a, d);
    const double f0 = f, cap = first_step(a0);
    *out = a;
    if (!isfinite(f)) return CAL_NON_FINITE;
    if (f == 0.0) return CAL_OK;
    double lo = f < 0.0 ? a : -INF_D, hi = f < 0.0 ? INF_D : a;
    bool bracketed = false;
    for (int it = 0; it < NEWTON_ITERS; ++it) {
        double L = INF_D, step;
        const double fa = d[0];
        if (QUICK || !tail_step(a, f, fa, d[2], target, &step)) step = halley_step(a, f, fa, d[1], &L);
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

// At most 80 registers (6 blocks an SM): unbounded, the compiler took 178
// and only 2 blocks fit; the FP64 dependency chains of the quadrature need
// the extra warps more than the registers (seed calibration 19.2 -> 15.7 ms
// at 4 blocks; 5 blocks were slower until the integrand shared its exps,
// and since then 5.06-5.13 -> 4.86-4.92 ms, 6 blocks 4.84; at the fit's
// shape and 1M rows, H100, session 33: 4 blocks 13.39 ms, 5 12.88, 6 12.62;
// at the seed shape, session 42: 6 blocks 12.00-12.09, 7 11.87-11.97, 8
// 13.05, and with exp_c and erfcx's one division 6 blocks 10.16, 7 11.26,
// 8 12.84). CAL_BLOCKS (MATFREE_NVRTC_OPTIONS=-DCAL_BLOCKS=k) sets it.
// Thread t takes row order[t] (src/bms/device/order.rs: rows alike in a
// warp); every value lands at the row's own index.
#ifndef CAL_BLOCKS
#define CAL_BLOCKS 6
#endif
extern "C" __global__ void __launch_bounds__(128, CAL_BLOCKS) bms_calibrate(
    int n, const unsigned int* __restrict__ order, int p_m, int p_g, const double* __restrict__ x_m,
    const double* __restrict__ x_g, const double* __restrict__ beta_m, const double* __restrict__ beta_g, int rigid,
    MODEL_PARAMS, double* __restrict__ out_q, double* __restrict__ out_b, double* __restrict__ out_a,
    unsigned int* __restrict__ out_status, int slots, double* __restrict__ bounds)
{
    const i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const i64 row = order[t];
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
