// Stage 2 of the Bernoulli marginal-slope model: per-row neglog, gradient and
// r x r Hessian from per-cell cubic coefficients and moments (the math of
// docs/bms-model.md, "Stage 2"). One block per row. Work items (F_a, F_aa,
// F_u, F_au, F_uv) are owned by threads, and each thread sums its items over
// the row's cells in cell order: no atomics, bitwise repeatable. The output
// buffers double as width-general scratch: out_grad holds F_u, then a_u,
// then g; out_hess holds F_uv (upper), then a_uv, then H; f_au is [n, r].

#define INV_TWO_PI 0.15915494309189535
#define SQRT_2_OVER_PI 0.7978845608028654
#define LN_SQRT_2PI 0.9189385332046728
#define LN_2 0.6931471805599453
#define FRAC_1_SQRT_2 0.7071067811865476
#define CELL_TILE 32

typedef long long i64;

// Status codes written to out_status[row].
#define ROW_OK 0u
#define ROW_BAD_FA 1u
#define ROW_NON_FINITE 2u

// For t >= 4: lambda(-t) - t by its continued fraction, bottom-up.
__device__ double mills_gap(double t)
{
    double tail = t;
    for (int k = 160; k >= 2; --k) tail = t + (double)k / tail;
    return 1.0 / tail;
}

// (log Phi(x), lambda = phi/Phi, C = -d^2 log Phi / dx^2) without cancellation.
__device__ void log_ndtr_mills_curvature(double x, double* log_cdf, double* lambda, double* curv)
{
    if (x <= -4.0) {
        const double t = -x, q = mills_gap(t), l = t + q;
        *log_cdf = -0.5 * t * t - LN_SQRT_2PI - log(l);
        *lambda = l;
        *curv = l * q;
    } else if (x < 0.0) {
        const double ex = erfcx(-x * FRAC_1_SQRT_2);
        *log_cdf = -0.5 * x * x + log(ex) - LN_2;
        *lambda = SQRT_2_OVER_PI / ex;
        *curv = *lambda * (x + *lambda);
    } else {
        const double pdf = exp(-0.5 * x * x - LN_SQRT_2PI);
        // erfc(x / sqrt 2) / 2 through erfcx, so no large exponent cancels.
        const double upper = 0.5 * erfcx(x * FRAC_1_SQRT_2) * exp(-0.5 * x * x);
        *log_cdf = log1p(-upper);
        *lambda = pdf / (1.0 - upper);
        *curv = *lambda * (x + *lambda);
    }
}

// D(R) = kappa sum_k R_k m_k.
__device__ __forceinline__ double d_of(const double* R, const double* m)
{
    return INV_TWO_PI * (R[0] * m[0] + R[1] * m[1] + R[2] * m[2] + R[3] * m[3]);
}

// Q(R, S) = sum_{p,q} R_p S_q T_{p+q}.
__device__ __forceinline__ double q_of(const double* R, const double* S, const double* T)
{
    return (R[0] * S[0]) * T[0] + (R[0] * S[1] + R[1] * S[0]) * T[1] +
           (R[0] * S[2] + R[1] * S[1] + R[2] * S[0]) * T[2] +
           (R[0] * S[3] + R[1] * S[2] + R[2] * S[1] + R[3] * S[0]) * T[3] +
           (R[1] * S[3] + R[2] * S[2] + R[3] * S[1]) * T[4] + (R[2] * S[3] + R[3] * S[2]) * T[5] +
           (R[3] * S[3]) * T[6];
}

struct Cells {
    const double *c0, *c1, *c2, *c3, *a, *aa, *r, *ar, *sbb, *sbh, *sbw, *m;
};

// The explicit second derivative S_uv of cell c (u = 1 is b), as D(S_uv).
__device__ __forceinline__ double explicit_second(const Cells& k, i64 c, int u, int v, int r, int p_h, int p_w,
                                                  const double* m)
{
    if (u != 1) return 0.0;
    if (v == 1) return d_of(k.sbb + c * 4, m);
    if (v < 2 + p_h) return d_of(k.sbh + (c * p_h + (v - 2)) * 4, m);
    return d_of(k.sbw + (c * p_w + (v - 2 - p_h)) * 4, m);
}

// Stage 2 can take its cells' coefficient arrays from a bundle in global
// memory (CPU Stage 1, uploaded), or build them tile by tile in shared memory
// from the bases (device Stage 1, which then stores only each cell slot's
// edges and moments): write_cell_part and clear_cell_part of bms_stage1.cu, with which
// this file is compiled, fill the tile from the inputs a bundle's writer
// would have. Each tile's sums are added to the row's totals, so the tile
// size (fixed per model) sets the grouping of the sums; with 32 cells a tile
// both sources give bitwise the same rows from the same cells.
struct BasesSource {
    Model m;
    int p_h, p_w, tile;
    const double *row_a, *row_b, *bounds;
};

// Doubles of one tile cell's arrays in shared memory (bases source).
__device__ __forceinline__ int tile_cell_doubles(int r, int p_h, int p_w)
{
    return 4 + 4 + 4 + 8 * (r - 1) + 4 + 4 * p_h + 4 * p_w + 10;
}

// The tile's arrays, carved out of dynamic shared memory.
__device__ CellOut tile_arrays(double* sh, int tile, int r, int p_h, int p_w)
{
    CellOut o;
    o.c0 = sh; o.c1 = o.c0 + tile; o.c2 = o.c1 + tile; o.c3 = o.c2 + tile;
    o.a = o.c3 + tile; o.aa = o.a + 4 * tile; o.r = o.aa + 4 * tile; o.ar = o.r + 4 * (r - 1) * tile;
    o.sbb = o.ar + 4 * (r - 1) * tile; o.sbh = o.sbb + 4 * tile; o.sbw = o.sbh + 4 * p_h * tile;
    o.m = o.sbw + 4 * p_w * tile;
    return o;
}

template <int BASES>
__device__ void bms_row_body(
    int n_rows, int r, int p_h, int p_w,
    const double* __restrict__ row_mu1, const double* __restrict__ row_mu2,
    const double* __restrict__ row_y, const double* __restrict__ row_w,
    const unsigned int* __restrict__ cell_offsets, const Cells& k, const BasesSource& src,
    const double* __restrict__ row_chi, const double* __restrict__ row_xi,
    const double* __restrict__ row_rho, const double* __restrict__ row_tau,
    const double* __restrict__ row_ruv, const double* __restrict__ row_e_obs,
    double* __restrict__ f_au_buf, double* __restrict__ out_neglog,
    double* __restrict__ out_grad, double* __restrict__ out_hess,
    unsigned int* __restrict__ out_status, double* dyn)
{
    const int row = blockIdx.x;
    if (row >= n_rows) return;
    const int tid = threadIdx.x, nt = blockDim.x;
    const i64 rr = (i64)r * r;
    double* F_u = out_grad + (i64)row * r;
    double* F_au = f_au_buf + (i64)row * r;
    double* F_uv = out_hess + (i64)row * rr;
    __shared__ double T_sh[CELL_TILE][7];
    __shared__ double m_sh[CELL_TILE][10];
    __shared__ double F_a_sh, F_aa_sh;
    __shared__ unsigned int bad;
    const int tile = BASES ? src.tile : CELL_TILE;
    // The arrays the loops read: the bundle at cell t0 + j, or the tile at j.
    Cells kk = k;
    if (BASES) {
        const CellOut o = tile_arrays(dyn, tile, r, p_h, p_w);
        kk = {o.c0, o.c1, o.c2, o.c3, o.a, o.aa, o.r, o.ar, o.sbb, o.sbh, o.sbw, k.m};
    }

    for (i64 e = tid; e < rr; e += nt) F_uv[e] = 0.0;
    for (int u = tid; u < r; u += nt) { F_u[u] = 0.0; F_au[u] = 0.0; }
    if (tid == 0) { F_a_sh = 0.0; F_aa_sh = 0.0; bad = 0u; }
    __syncthreads();

    const i64 lo = cell_offsets[row], hi = cell_offsets[row + 1];
    for (i64 t0 = lo; t0 < hi; t0 += tile) {
        const int nc = (int)min((i64)tile, hi - t0);
        const i64 cb = BASES ? 0 : t0;
        if (BASES) {
            const CellOut o = tile_arrays(dyn, tile, r, p_h, p_w);
            const double a = src.row_a[row], b = src.row_b[row];
            // A thread per (cell, part): every thread has work, where a
            // thread per cell left most of the block waiting at the barrier.
            const int parts = 1 + p_h + p_w;
            for (int e = tid; e < nc * parts; e += nt) {
                const int j = e / parts, part = e - j * parts;
                const double z_lo = src.bounds[2 * (t0 + j)], z_hi = src.bounds[2 * (t0 + j) + 1];
                if (isnan(z_lo))
                    clear_cell_part(p_h, p_w, part, j, o);
                else
                    write_cell_part(src.m, a, b, p_h, p_w, z_lo, z_hi, part, j, o);
            }
            __syncthreads();
        }
        // Stage the tile's moments and T_n = kappa sum_e C_e m_{e+n}.
        for (int j = tid; j < nc; j += nt) {
            const i64 c = cb + j;
            const double C[4] = {kk.c0[c], kk.c1[c], kk.c2[c], kk.c3[c]};
            for (int q = 0; q < 10; ++q) m_sh[j][q] = k.m[(t0 + j) * 10 + q];
            for (int n = 0; n < 7; ++n) {
                double acc = 0.0;
                for (int e = 0; e < 4; ++e) acc = fma(C[e], m_sh[j][e + n], acc);
                T_sh[j][n] = acc * INV_TWO_PI;
            }
        }
        __syncthreads();
        // F_a and F_aa: thread 0.
        if (tid == 0) {
            double fa = 0.0, faa = 0.0;
            for (int j = 0; j < nc; ++j) {
                const double* A = kk.a + (cb + j) * 4;
                fa += d_of(A, m_sh[j]);
                faa += d_of(kk.aa + (cb + j) * 4, m_sh[j]) - q_of(A, A, T_sh[j]);
            }
            F_a_sh += fa;
            F_aa_sh += faa;
        }
        // F_u, F_au for u >= 1.
        for (int u = 1 + tid; u < r; u += nt) {
            double fu = 0.0, fau = 0.0;
            for (int j = 0; j < nc; ++j) {
                const i64 c = cb + j;
                const double* R = kk.r + (c * (r - 1) + (u - 1)) * 4;
                fu += d_of(R, m_sh[j]);
                fau += d_of(kk.ar + (c * (r - 1) + (u - 1)) * 4, m_sh[j]) - q_of(kk.a + c * 4, R, T_sh[j]);
            }
            F_u[u] += fu;
            F_au[u] += fau;
        }
        // F_uv for 1 <= u <= v < r (upper triangle).
        for (i64 e = tid; e < rr; e += nt) {
            const int u = (int)(e / r), v = (int)(e % r);
            if (u < 1 || v < u) continue;
            double f = 0.0;
            for (int j = 0; j < nc; ++j) {
                const i64 c = cb + j;
                const double* Ru = kk.r + (c * (r - 1) + (u - 1)) * 4;
                const double* Rv = kk.r + (c * (r - 1) + (v - 1)) * 4;
                f += explicit_second(kk, c, u, v, r, p_h, p_w, m_sh[j]) - q_of(Ru, Rv, T_sh[j]);
            }
            F_uv[e] += f;
        }
        __syncthreads();
    }

    // q-row override, then the implicit function theorem.
    const double F_a = F_a_sh, F_aa = F_aa_sh;
    if (!(F_a > 0.0 && isfinite(F_a))) {
        for (i64 e = tid; e < rr; e += nt) F_uv[e] = 0.0;
        for (int u = tid; u < r; u += nt) F_u[u] = 0.0;
        if (tid == 0) { out_neglog[row] = 0.0; out_status[row] = ROW_BAD_FA; }
        return;
    }
    const double inv_Fa = 1.0 / F_a;
    if (tid == 0) { F_u[0] = -row_mu1[row]; F_au[0] = 0.0; }
    for (int v = tid; v < r; v += nt) F_uv[v] = 0.0;  // row 0 of the upper triangle
    __syncthreads();
    if (tid == 0) F_uv[0] = -row_mu2[row];
    double* a_u = F_u;
    for (int u = tid; u < r; u += nt) a_u[u] = -F_u[u] * inv_Fa;
    __syncthreads();
    // a_uv in place over F_uv: each (u <= v) pair is owned by one thread.
    for (i64 e = tid; e < rr; e += nt) {
        const int u = (int)(e / r), v = (int)(e % r);
        if (v < u) continue;
        const double term = F_uv[e] + F_au[v] * a_u[u] + F_au[u] * a_u[v] + F_aa * a_u[u] * a_u[v];
        F_uv[e] = -term * inv_Fa;
    }
    __syncthreads();

    // Observed jets and the probit layer.
    const double chi = row_chi[row], xi = row_xi[row];
    const double* rho = row_rho + (i64)row * r;
    const double* tau = row_tau + (i64)row * r;
    const double* ruv = row_ruv + (i64)row * rr;
    const double y = row_y[row], w = row_w[row], s = 2.0 * y - 1.0;
    double log_cdf, lambda, curv;
    log_ndtr_mills_curvature(s * row_e_obs[row], &log_cdf, &lambda, &curv);
    const double A = -w * s * lambda, B = w * curv;
    for (i64 e = tid; e < rr; e += nt) {
        const int u = (int)(e / r), v = (int)(e % r);
        if (v < u) continue;
        const double eu = chi * a_u[u] + rho[u], ev = chi * a_u[v] + rho[v];
        const double euv = chi * F_uv[e] + xi * a_u[u] * a_u[v] + tau[u] * a_u[v] + a_u[u] * tau[v] + ruv[e];
        const double h = B * eu * ev + A * euv;
        F_uv[e] = h;
        F_uv[(i64)v * r + u] = h;
        if (!isfinite(h)) atomicOr(&bad, 1u);
    }
    __syncthreads();
    for (int u = tid; u < r; u += nt) {
        const double g = A * (chi * a_u[u] + rho[u]);
        a_u[u] = g;
        if (!isfinite(g)) atomicOr(&bad, 1u);
    }
    __syncthreads();
    if (tid == 0) {
        const double nl = -w * log_cdf;
        out_neglog[row] = nl;
        out_status[row] = (bad || !isfinite(nl)) ? ROW_NON_FINITE : ROW_OK;
    }
}

#define ROW_COMMON_PARAMS                                                                              \
    int n_rows, int r, int p_h, int p_w, const double *__restrict__ row_mu1,                           \
        const double *__restrict__ row_mu2, const double *__restrict__ row_y,                          \
        const double *__restrict__ row_w, const unsigned int *__restrict__ cell_offsets
#define ROW_TAIL_PARAMS                                                                                \
    const double *__restrict__ row_chi, const double *__restrict__ row_xi,                             \
        const double *__restrict__ row_rho, const double *__restrict__ row_tau,                        \
        const double *__restrict__ row_ruv, const double *__restrict__ row_e_obs,                      \
        double *__restrict__ f_au_buf, double *__restrict__ out_neglog, double *__restrict__ out_grad, \
        double *__restrict__ out_hess, unsigned int *__restrict__ out_status
#define ROW_TAIL_ARGS                                                                                   \
    row_chi, row_xi, row_rho, row_tau, row_ruv, row_e_obs, f_au_buf, out_neglog, out_grad, out_hess, \
        out_status

// Stage 2 over a bundle of per-cell arrays in global memory.
extern "C" __global__ void bms_row(
    ROW_COMMON_PARAMS,
    const double* __restrict__ cell_c0, const double* __restrict__ cell_c1,
    const double* __restrict__ cell_c2, const double* __restrict__ cell_c3,
    const double* __restrict__ cell_a, const double* __restrict__ cell_aa,
    const double* __restrict__ cell_r, const double* __restrict__ cell_ar,
    const double* __restrict__ cell_sbb, const double* __restrict__ cell_sbh,
    const double* __restrict__ cell_sbw, const double* __restrict__ cell_moments, ROW_TAIL_PARAMS)
{
    const Cells k = {cell_c0, cell_c1, cell_c2, cell_c3, cell_a, cell_aa, cell_r, cell_ar,
                     cell_sbb, cell_sbh, cell_sbw, cell_moments};
    const BasesSource none = {};
    bms_row_body<0>(n_rows, r, p_h, p_w, row_mu1, row_mu2, row_y, row_w, cell_offsets, k, none, ROW_TAIL_ARGS, 0);
}

// Stage 2 over cell slots described by their edges and moments, building
// the arrays from the bases in shared memory, `tile` cells at a time.
extern "C" __global__ void bms_row_bases(
    ROW_COMMON_PARAMS, MODEL_PARAMS, int tile, const double* __restrict__ row_a_in,
    const double* __restrict__ row_b_in, const double* __restrict__ bounds,
    const double* __restrict__ cell_moments, ROW_TAIL_PARAMS)
{
    extern __shared__ double tile_sh[];
    const Cells k = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, cell_moments};
    BasesSource src;
    src.m = make_model(MODEL_ARGS);
    src.p_h = p_h; src.p_w = p_w; src.tile = tile;
    src.row_a = row_a_in; src.row_b = row_b_in; src.bounds = bounds;
    bms_row_body<1>(n_rows, r, p_h, p_w, row_mu1, row_mu2, row_y, row_w, cell_offsets, k, src, ROW_TAIL_ARGS,
                    tile_sh);
}
