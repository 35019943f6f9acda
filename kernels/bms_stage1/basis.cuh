// Stage 1 of the Bernoulli marginal-slope model on the device (the math of
// docs/bms-model.md, "Cells (Stage 1)"; the CPU twin is src/bms/model/cells.rs,
// calibration.rs and quadrature.rs, which these kernels follow step by step).
//
// Four kernels, launched in order on one stream:
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
//                  from the edges and the bases: cell_part below. A
//                  cell that needs the quadrature is queued instead,
//   bms_cell_quadrature  grid-strided over that queue: its moments.
//   bms_observed   one thread per row: the observed-point jets and mu_1, mu_2.
// Each thread works sequentially in a fixed order, bitwise repeatable; the
// only atomic is the queue's integer count, whose order decides which lane
// integrates a queued cell, never its value. Quadrature is adaptive, with
// an explicit stack per thread: the 21-point Gauss-Kronrod rule with its
// embedded 10-point Gauss rule, whose difference estimates the Kronrod
// value's error as QUADPACK does (kronrod_error), as on the CPU
// (quadrature::adaptive_with).

#define Z_CLIP 40.0
// F's tolerance in the calibration (calibration.rs: F_TOL).
#define QUAD_TOL 1e-10
// The moments' (cells.rs: MOMENT_TOL).
#define MOMENT_TOL 1e-12
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
// Most panels one adaptive call examines (quadrature.rs: MAX_PANELS): a
// bound on its work where the tolerance cannot be met.
#define MAX_PANELS 1000
// Cells whose eta has monomial terms beyond this at the far edge evaluate
// their cubics about the cell's midpoint (cells.rs: SHIFT_ABOVE).
#define SHIFT_ABOVE 1e5
// How far past a finite cell's point nearest 0 its moment_center looks
// (cells.rs: CENTER_REACH).
#define CENTER_REACH 2.0
// Calibration steps far out in a tail, the mass beyond this factor of its
// target, are Newton's on log(mass / target) (calibration.rs: LOG_FAR).
#define LOG_FAR 4.0
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

// A cubic's four coefficients from global memory in two 16-byte loads (its
// arrays hold cubics 32 bytes apart from an aligned start): a lane's
// separate 8-byte loads each cost the warp a request a lane.
__device__ __forceinline__ void load_cubic(const double* p, double* out)
{
    const double2 lo = reinterpret_cast<const double2*>(p)[0], hi = reinterpret_cast<const double2*>(p)[1];
    out[0] = lo.x; out[1] = lo.y; out[2] = hi.x; out[3] = hi.y;
}

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

// exp(x): CUDA's exp (its range reduction, degree-11 polynomial and
// scaling: the operations its SASS performs, within 1 ulp of a 113-bit exp
// on [-750, 710]) with the constants in constant memory, so that each DFMA
// reads one as an operand: inlined, CUDA's built each of its 13 constants
// from two uniform-register moves, 49 of a quick-rule node's 198
// instructions (two exps a node; SASS of NVRTC 12.9, sm_90). EXP_P: the polynomial's coefficients
// from degree 11 down to 2, then log2(e) and ln 2 in two parts.
__device__ __constant__ double EXP_P[13] = {
    2.502232253650299e-08, 2.763090348817311e-07, 2.755751454588244e-06, 2.4801491039099165e-05,
    0.00019841269589115497, 0.001388888894591638, 0.008333333333455043, 0.041666666666519754,
    0.16666666666666477, 0.5000000000000012, 1.4426950408889634, 0.6931471805599453, 2.3190468138462996e-17,
};

__device__ __forceinline__ double exp_c(double x)
{
    const double* c = EXP_P;
    // n = round(x / ln 2) by the 1.5 2^52 shifter (n in k's low word), r =
    // x - n ln 2, |r| <= ln 2 / 2.
    const double k = fma(x, c[10], 6755399441055744.0), n = k - 6755399441055744.0;
    const double r = fma(n, -c[12], fma(n, -c[11], x));
    double p = fma(r, c[0], c[1]);
#pragma unroll
    for (int i = 2; i < 10; ++i) p = fma(r, p, c[i]);
    const double e = fma(r, fma(r, p, 1.0), 1.0);
    const int ni = __double2loint(k), hx = __double2hiint(x) & 0x7fffffff;
    // 2^n e by n added to e's exponent, for |x| < 708.39 (hx < 0x4086232b).
    if (hx < 0x4086232b) return __hiloint2double(__double2hiint(e) + ni * 0x100000, __double2loint(e));
    // Past 745 (and NaN): 0, infinity or NaN; between, 2^n in two factors.
    if (hx >= 0x40874800) return !(x < 0.0) ? x + INF_D : 0.0;
    const int n1 = (ni + (int)((unsigned)ni >> 31)) >> 1;
    const double e1 = __hiloint2double(__double2hiint(e) + n1 * 0x100000, __double2loint(e));
    return e1 * __hiloint2double((ni - n1) * 0x100000 + 0x3ff00000, 0);
}

// phi(x) with x split on a 1/16 grid so the exponent carries no rounding of x^2.
__device__ double norm_pdf(double x)
{
    if (isinf(x)) return 0.0;
    const double xh = trunc(16.0 * x) / 16.0, del = (x - xh) * (x + xh);
    return exp_c(-0.5 * xh * xh) * exp_c(-0.5 * del) * exp_c(-LN_SQRT_2PI);
}

// exp(-x^2 / 2) to about an ulp with one exp: x^2 = h + l exactly (an FMA
// gives l), and exp(-(h + l) / 2) = exp(-h / 2) (1 - l / 2) to rounding,
// as |l| <= ulp(h) / 2. Zero past x^2 = 1500 (where exp underflows
// anyway, and l would be infinite); NaN stays NaN.
__device__ __forceinline__ double half_gauss(double x)
{
    const double h = x * x;
    if (h > 1500.0) return 0.0;
    const double l = fma(x, x, -h), e = exp_c(-0.5 * h);
    return fma(e, -0.5 * l, e);
}

// erfcx(x) = exp(x^2) erfc(x) for x >= 0: CUDA's erfcx (Shepherd and
// Laframboise's form, P(t) / (1 + 2 x) with t = (x - 4) / (x + 4), P of
// degree 22 by Horner's rule, the coefficients read from its SASS) with
// one division for both quotients: 1 / ((x + 4) (1 + 2 x)) gives t and
// 1 / (1 + 2 x), 2.33 ulps at worst on [0, 27.25] against erfcx in 113-bit
// arithmetic (CUDA's two divisions 2.86). Out of line: CUDA's, inlined at
// every integrand, made 53 copies and stalled the calibration on
// instruction fetch (ncu, H100, benches/RESULTS.md session 41). P by
// Estrin's scheme (6 dependent steps, not 22) took the calibration 0.6 ms
// longer at 1M rows (session 42): its warps wait on FP64 latency, but
// issue more than they wait. Past 27.25 the asymptotic series, as CUDA's,
// with a seventh term (CUDA's six leave 1.2e-15 at 27.28). The
// coefficients c_0..c_22 in constant memory, so that each DFMA reads one
// as an operand.
__device__ __constant__ double ERFCX_P[23] = {
    1.2329951186255526, -0.13962111684056291, 0.015379652102605428, 0.06809705425473514,
    -0.10103906603555676, 0.09373283499711554, -0.06633036582753243, 0.03716751555301873,
    -0.016197733895953217, 0.005031969879259957, -0.0007577742918278583, -0.00019925637684786154,
    0.00015062557169571788, -2.439955885720019e-05, -1.1231787437600085e-05, 5.708787184432565e-06,
    3.095640985330624e-07, -8.214741492911691e-07, 5.880669858534126e-08, 1.0404430921625484e-07,
    -8.935022485164912e-09, -9.723912259144727e-09, -3.56026948268174e-10,
};

__device__ __noinline__ double erfcx_pos(double x)
{
    if (x > 27.25) {
        const double r = 1.0 / x, r2 = r * r;
        double p = fma(r2, 162.421875, -29.53125);
        p = fma(r2, p, 6.5625);
        p = fma(r2, p, -1.875);
        p = fma(r2, p, 0.75);
        p = fma(r2, p, -0.5);
        p = fma(r2, p, 1.0);
        return p * (r * 0.5641895835477563);
    }
    const double* c = ERFCX_P;
    const double u = x + 4.0, v = fma(2.0, x, 1.0), rd = 1.0 / (u * v);
    const double t = (x - 4.0) * (v * rd);
    double P = c[22];
#pragma unroll
    for (int i = 21; i >= 0; --i) P = fma(P, t, c[i]);
    return P * (u * rd);
}

// Phi(s) from g = exp(-s^2 / 2) (half_gauss(s)): the tail Phi(-|s|) =
// erfcx(|s| / sqrt 2) g / 2, which erfcx gives without an exp of its own
// for a non-negative argument, and one minus it for s >= 0.
__device__ __forceinline__ double phi_cdf(double s, double g)
{
    const double tail = 0.5 * erfcx_pos(fabs(s) * 0.7071067811865476) * g;
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
