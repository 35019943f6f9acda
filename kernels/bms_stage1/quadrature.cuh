// ---------------------------------------------------------------------------
// Adaptive Gauss-Kronrod: bisect until the Kronrod value's estimated error
// (kronrod_error) is within its tolerance (component_tol) times the largest
// panel |f| integral seen.
// As in the CPU rule, a wide interval away from z = 0 starts as panels that
// double in width away from its end nearest 0: every integrand here decays
// at least like exp(-z^2 / 2), so its mass sits near that end, and plain
// bisection of a tail such as [4, 40] would spend four levels reaching it.
// Integrands (KIND): 0 the moments x^k exp(-(z^2 + eta^2)/2), k < N, with
// x = (z - pc) / rho for a finite cell (rho > 0), z - pc for a tail;
// 1 Phi(+-eta) phi(z); 2 the calibration's three: Phi(+-eta) phi(z), then
// with E = exp(-(z^2 + eta^2)/2), A E and (AA - A^2 eta) E, whose integrals
// over 2 pi are F_a and F_aa (D(A) and D(AA) - Q(A, A) of the model). For
// KIND 2, eta points at the cubics eta, A = d eta/da, AA = d2 eta/da2.
// The cubics are in z - center (a finite cell's midpoint, or local_center
// below: 0, so z itself, but for cells whose monomial form cancels);
// phi(z) and E take z itself, the moments' powers z - pc (moment_center).

template <int N, int KIND>
__device__ __forceinline__ void integrand(double z, const double* eta, double center, double pc, double ps,
                                          bool upper, double* out)
{
    const double x = z - center;
    const double e = horner(eta, x);
    if (KIND == 1 || KIND == 2) {
        // Two exps and an erfcx a node (normcdf, a split phi(z) and E took
        // an erfc and three): phi(z) and E = exp(-(z^2 + eta^2) / 2) share
        // exp(-z^2 / 2), and Phi(+-eta) and E share exp(-eta^2 / 2).
        const double gz = half_gauss(z), ge = half_gauss(e);
        out[0] = phi_cdf(upper ? -e : e, ge) * (gz * INV_SQRT_2PI);
        if (KIND == 2) {
            const double ez = gz * ge, A = horner(eta + 4, x), AA = horner(eta + 8, x);
            out[1] = A * ez;
            out[2] = (AA - A * A * e) * ez;
        }
    } else {
        double xk = exp_c(-0.5 * (z * z + e * e));
        const double xp = (z - pc) * ps;
        for (int k = 0; k < N; ++k) { out[k] = xk; xk *= xp; }
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

// The 15-point Gauss-Kronrod rule (quadrature.rs: KRONROD_15, bitwise the
// same literals, checked there), laid out as GK21 (its 7-point Gauss rule on
// the odd nodes). The calibration's three integrals (KIND 2) take it: its
// cells are mostly short, where 21 nodes are far more than F needs.
__device__ __constant__ double GK15[45] = {
    // nodes
    -0.9914553711208126, -0.9491079123427585, -0.8648644233597691, -0.7415311855993945, -0.5860872354676911,
    -0.4058451513773972, -0.20778495500789848, -0.0, 0.20778495500789848, 0.4058451513773972,
    0.5860872354676911, 0.7415311855993945, 0.8648644233597691, 0.9491079123427585, 0.9914553711208126,
    // Kronrod weights
    0.022935322010529224, 0.06309209262997856, 0.10479001032225019, 0.14065325971552592, 0.1690047266392679,
    0.19035057806478542, 0.20443294007529889, 0.20948214108472782, 0.20443294007529889, 0.19035057806478542,
    0.1690047266392679, 0.14065325971552592, 0.10479001032225019, 0.06309209262997856, 0.022935322010529224,
    // Gauss weights
    0.0, 0.1294849661688697, 0.0, 0.27970539148927664, 0.0, 0.3818300505051189, 0.0, 0.4179591836734694,
    0.0, 0.3818300505051189, 0.0, 0.27970539148927664, 0.0, 0.1294849661688697, 0.0,
};

// Both rules on [lo, hi] from the K integrand values: s (Kronrod), abs_s
// (Kronrod of |f|) and g (the embedded Gauss rule), by GK21 or GK15: the
// nodes, Kronrod weights and Gauss weights (zero off the Gauss nodes).
template <int N, int KIND>
__device__ void apply_kronrod(double lo, double hi, const double* eta, double center, double pc, double ps,
                              bool upper, double* s, double* abs_s, double* g)
{
    // The calibration's three integrals (KIND 2) take the 15-point rule,
    // F alone and the moments the 21-point one.
    constexpr int K = KIND == 2 ? 15 : 21;
    const double* gk = K == 21 ? GK21 : GK15;
    const double mid = 0.5 * (lo + hi), half = 0.5 * (hi - lo);
    for (int k = 0; k < N; ++k) { s[k] = 0.0; abs_s[k] = 0.0; g[k] = 0.0; }
    for (int i = 0; i < K; ++i) {
        double v[N];
        integrand<N, KIND>(mid + half * gk[i], eta, center, pc, ps, upper, v);
        const double wk = gk[K + i] * half, wg = gk[2 * K + i] * half;
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
// (KIND 2, k > 0) need far less than F, and the moments (KIND 0) less.
template <int KIND>
__device__ __forceinline__ double component_tol(int k)
{
    return KIND == 0 ? MOMENT_TOL : ((KIND == 2 && k > 0) ? SLOPE_TOL : QUAD_TOL);
}

// sum_k |p_k| z^k: a bound on |p| over |z| <= z.
__device__ __forceinline__ double abs_poly(const double* p, double z)
{
    return ((fabs(p[3]) * z + fabs(p[2])) * z + fabs(p[1])) * z + fabs(p[0]);
}

// p(center + x) as a cubic in x, in place (cells.rs: shift_cubic, the same
// operations); nothing for a centre of 0.
__device__ __forceinline__ void shift_cubic(double* p, double center)
{
    if (center == 0.0) return;
    const double s = 3.0 * center * p[3];
    const double d0 = horner(p, center), d1 = (s + 2.0 * p[2]) * center + p[1];
    p[0] = d0; p[1] = d1; p[2] = s + p[2];
}

// The centre a cell clipped to [l, r] evaluates its cubics about (cells.rs:
// local_center): its midpoint where eta's monomial terms pass SHIFT_ABOVE at
// the far edge (they cancel, and the cubic evaluated at z is noise at 1e-8
// of itself at extreme intercepts, issue 38), 0 otherwise.
__device__ __forceinline__ double local_center(const double* eta, double l, double r)
{
    return abs_poly(eta, fmax(fabs(l), fabs(r))) > SHIFT_ABOVE ? 0.5 * (l + r) : 0.0;
}

// Whether a panel away from 0 cannot matter: every integrand is at most a
// polynomial times exp(-z^2 / 2) (Phi <= 1 and exp(-eta^2 / 2) <= 1), so
// width x exp(-z_near^2 / 2) x that polynomial's bound bounds each
// component's integral; the panel is skipped when every bound is below
// SKIP_FRACTION of what an accepted panel may be off by (tol x scale). It
// spares the far panels of the tails (past |z| of about 9), which the
// initial panels reach. The cubics, in z - center, are bounded over the
// panel's largest |z - center|. The CPU rule skips the same panels
// (quadrature::adaptive_bounded).
template <int N, int KIND>
__device__ bool negligible(double lo, double hi, const double* eta, double center, double pc, double ps,
                           const double* scale)
{
    if (lo < 0.0 && hi > 0.0) return false;
    const double z_near = fmin(fabs(lo), fabs(hi));
    const double z_poly = fmax(fabs(lo - center), fabs(hi - center));
    const double gauss = (hi - lo) * exp_c(-0.5 * z_near * z_near);
    double bound[N];
    if (KIND == 0) {
        const double x_far = fmax(fabs(lo - pc), fabs(hi - pc)) * ps;
        double xk = 1.0;
        for (int k = 0; k < N; ++k) { bound[k] = gauss * xk; xk *= x_far; }
    } else {
        bound[0] = gauss / SQRT_2PI;
        if (KIND == 2) {
            const double pa = abs_poly(eta + 4, z_poly);
            bound[1] = gauss * pa;
            bound[2] = gauss * (abs_poly(eta + 8, z_poly) + pa * pa * abs_poly(eta, z_poly));
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

// eta: the cubics in z - center; pc and rho the moments' centre and scale
// (see integrand; rho 0 where there is none). With rho > 0 every
// component's tolerance is relative to the largest |f| integral of any
// (cells.rs: quadrature_moments, adaptive_bounded_nodes' `shared`). Each
// component's tolerance is relative to at least floor[k] (NULL: 0), a lower
// bound of the |f| integral its error matters against (the calibration's
// row so far: quadrature.rs adaptive_bounded_nodes_from).
template <int N, int KIND>
__device__ void adaptive(double a, double b, const double* eta, double center, double pc, double rho, bool upper,
                         const double* floor, double* out)
{
    const bool shared = rho > 0.0;
    const double ps = shared ? 1.0 / rho : 1.0;
    for (int k = 0; k < N; ++k) out[k] = 0.0;
    if (b <= a) return;
    double st_lo[STACK_CAP], st_hi[STACK_CAP];
    int st_depth[STACK_CAP];
    int top = 0, panels = 0;
    top = initial_panels(a, b, st_lo, st_hi, st_depth);
    double scale[N];
    for (int k = 0; k < N; ++k) scale[k] = floor ? floor[k] : 0.0;
    while (top > 0) {
        --top;
        const double lo = st_lo[top], hi = st_hi[top];
        const int depth = st_depth[top];
        if (negligible<N, KIND>(lo, hi, eta, center, pc, ps, scale)) continue;
        ++panels;
        double value[N], abs_v[N], check[N];
        apply_kronrod<N, KIND>(lo, hi, eta, center, pc, ps, upper, value, abs_v, check);
        bool converged = true;
        for (int k = 0; k < N; ++k) scale[k] = fmax(scale[k], abs_v[k]);
        if (shared) {
            double largest = 0.0;
            for (int k = 0; k < N; ++k) largest = fmax(largest, scale[k]);
            for (int k = 0; k < N; ++k) scale[k] = largest;
        }
        for (int k = 0; k < N; ++k) {
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
