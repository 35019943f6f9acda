// Stage 2 of the Bernoulli marginal-slope model: per-row neglog, gradient and
// r x r Hessian from per-cell cubic coefficients and moments (the math of
// docs/bms-model.md, "Stage 2"). One block per row. Each sum (F_a, F_aa,
// F_u, F_au, F_uv) is owned by one thread (the Q sums by one warp's tensor
// cores, 8 x 8 at a time) and runs over the row's cells in cell order: no
// atomics, bitwise repeatable. The running sums live in shared memory
// beside the tile (3 r doubles): sum_X holds F_u, then a_u. The Q sums G
// (the upper triangle, packed) do too where the host asks for it
// (g_shared), and otherwise sit in the row's Hessian output, which the pair
// pass then overwrites entry by entry (each pair's F_uv and a_uv live only
// in its thread). The row's Hessian is written packed: its upper triangle
// row by row, r (r + 1) / 2 values (the order of packed_index.cuh), which
// the operator reads as DeviceRowHessian's packed storage.

#define INV_TWO_PI 0.15915494309189535
#define SQRT_2_OVER_PI 0.7978845608028654
#define LN_SQRT_2PI 0.9189385332046728
#define LN_2 0.6931471805599453
#define FRAC_1_SQRT_2 0.7071067811865476

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

struct Cells {
    const double *c0, *c1, *c2, *c3, *a, *aa, *r, *ar, *sbb, *sbh, *sbw, *m;
};

__device__ __forceinline__ double dot4(const double* x, const double* y)
{
    return x[0] * y[0] + x[1] * y[1] + x[2] * y[2] + x[3] * y[3];
}

// D(R) = kappa sum_k R_k m_k.
__device__ __forceinline__ double d_of(const double* R, const double* m)
{
    return INV_TWO_PI * dot4(R, m);
}

// Part `part` of bundle cell c, as cell_part (bms_stage1.cu) builds it.
__device__ void bundle_part(const Cells& k, i64 c, int r, int p_h, int p_w, int part, CellPart& o)
{
    const double* x = k.r + (c * (r - 1) + part) * 4;
    const double* ar = k.ar + (c * (r - 1) + part) * 4;
    const double* s = part == 0 ? k.sbb + c * 4
                    : part <= p_h ? k.sbh + (c * p_h + part - 1) * 4
                                  : k.sbw + (c * p_w + part - 1 - p_h) * 4;
    for (int q = 0; q < 4; ++q) { o.x[q] = x[q]; o.ar[q] = ar[q]; o.s[q] = s[q]; }
    if (part == 0) {
        o.eta[0] = k.c0[c]; o.eta[1] = k.c1[c]; o.eta[2] = k.c2[c]; o.eta[3] = k.c3[c];
        for (int q = 0; q < 4; ++q) { o.A[q] = k.a[c * 4 + q]; o.AA[q] = k.aa[c * 4 + q]; }
    }
}

// Stage 2 reads each cell through its coordinate vectors X_u (u = 0: A, u >=
// 1: d eta / d theta_u) and the scalars D(X_u), D(AR_u) (u = 0: D(AA)) and
// D(S_1u) (explicit second derivatives, b row). Q(X_u, X_v) = sum_{p,q}
// X_u,p X_v,q T_{p+q} = W_u . X_v with W_u = X_u M, M the Hankel matrix of T,
// so the row's Q sums are G = sum_cells W X^T, a product of (r x 4 cells)
// matrices that tensor cores take 8 x 8 x 4 at a time (one cell a step).
// Stage 2 can take its cells' arrays from a bundle in global memory (CPU
// Stage 1, uploaded), or build them from the bases (device Stage 1, which
// then stores only each cell slot's edges and moments) with cell_part of
// bms_stage1.cu, with which this file is compiled; both stage the same
// values, and every sum runs over the row's cells in cell order whatever
// the tile, so both sources, at any tile size, give bitwise the same rows.
struct BasesSource {
    Model m;
    const double *row_a, *row_b, *bounds;
};

// A tile of cells in dynamic shared memory: X ([tile][r][4], a cell's
// vectors xs = 4 r + 1 doubles apart), the scalars ([tile][r], ss = r | 1
// apart), each cell's edges, segments and moments as read ([tile]
// [CELL_STRIDE]), its T_n ([tile][7]), then the row's running sums of
// D(S_1u), D(X_u) and D(AR_u) ([r] each) and, if g_shared, its Q sums G
// (the upper triangle, packed: r (r + 1) / 2). The
// (cell, part) pass has a warp's lanes on consecutive cells of one part,
// so each cell's stride is odd: a stride of 4 r or r doubles (even) put
// the lanes of a store on one bank (ncu at r = 16: 60% of Stage 2's
// shared wavefronts were excess, its L1 81% busy).
struct Tile {
    double *X, *dX, *dXA, *dS, *cell, *T, *sum_S, *sum_X, *sum_XA, *G;
    int xs, ss;
};

// Where (u, v), u <= v, lies in a packed upper triangle of width r: row u
// starts at u r - u (u - 1) / 2.
__device__ __forceinline__ int upper_index(int u, int v, int r)
{
    return u * r - u * (u - 1) / 2 + (v - u);
}

// A cell as read: lo, hi, the score and link segments (device Stage 1
// only), the 10 moments; CELL_STRIDE (odd) apart.
#define CELL_READ 14
#define CELL_STRIDE 15
#define CELL_MOMENTS 4

__device__ Tile tile_layout(double* sh, int tile, int r, int g_shared)
{
    Tile t;
    t.xs = 4 * r + 1; t.ss = r | 1;
    t.X = sh; t.dX = t.X + t.xs * tile;
    t.dXA = t.dX + t.ss * tile; t.dS = t.dXA + t.ss * tile; t.cell = t.dS + t.ss * tile;
    t.T = t.cell + CELL_STRIDE * tile;
    t.sum_S = t.T + 7 * tile;
    t.sum_X = t.sum_S + r; t.sum_XA = t.sum_X + r; t.G = g_shared ? t.sum_XA + r : 0;
    return t;
}

// Stage one part of tile cell j: its coordinate's X and scalars, and for
// part 0 also u = 0 (A) and T_n = kappa sum_e C_e m_{e+n}.
__device__ void stage_part(const CellPart& o, const double* moments, int j, int r, int part, const Tile& t,
                           double* T_j)
{
    double m[10];
    for (int q = 0; q < 10; ++q) m[q] = moments[q];
    const int u = 1 + part;
    const i64 ju = (i64)j * t.ss + u;
    double* X = t.X + (i64)j * t.xs;
    for (int q = 0; q < 4; ++q) X[u * 4 + q] = o.x[q];
    t.dX[ju] = d_of(o.x, m);
    t.dXA[ju] = d_of(o.ar, m);
    t.dS[ju] = d_of(o.s, m);
    if (part != 0) return;
    const i64 j0 = (i64)j * t.ss;
    for (int q = 0; q < 4; ++q) X[q] = o.A[q];
    t.dX[j0] = d_of(o.A, m);
    t.dXA[j0] = d_of(o.AA, m);
    t.dS[j0] = 0.0;
    for (int n = 0; n < 7; ++n) {
        double acc = 0.0;
        for (int e = 0; e < 4; ++e) acc = fma(o.eta[e], m[e + n], acc);
        T_j[n] = acc * INV_TWO_PI;
    }
}

// Item e of a tile's (cell, part) pass: part-major and grouped by the kind
// of part (the link parts, then the score parts, then part 0), so that a
// warp's lanes mostly take one path through cell_part; cell-major, every
// warp took all three paths in turn.
__device__ __forceinline__ void tile_item(int e, int nc, int p_h, int p_w, int* j, int* part)
{
    const int nw = nc * p_w, nh = nc * p_h;
    if (e < nw) {
        *part = 1 + p_h + e / nc;
        *j = e % nc;
    } else if (e < nw + nh) {
        *part = 1 + (e - nw) / nc;
        *j = (e - nw) % nc;
    } else {
        *part = 0;
        *j = e - nw - nh;
    }
}

// G block (bu, bv) of 8 x 8 += sum over the tile's nc cells of W X^T, W =
// X M, one cell (k = 4) a step. Lane l holds G[8 bu + l/4][8 bv + 2 (l%4)
// + {0, 1}] in c0, c1 (the fragment layout of mma.m8n8k4.f64); rows and
// columns past r read zeros. W is never stored: a first product takes the
// block's rows of X times M (padded to 4 x 8 with zeros), and shuffles move
// its result from the accumulator layout to the operand layout of the
// second, W X^T.
__device__ void g_block(const Tile& t, int nc, int r, int bu, int bv, int lane, double& c0, double& c1)
{
    const double* T = t.T;
    const int u = 8 * bu + (lane >> 2), q = lane & 3;
#if __CUDA_ARCH__ >= 800
    const int v = 8 * bv + (lane >> 2), n = lane >> 2;
    // W[l/4][q] sits in lane 4 (l/4) + q/2, component q%2.
    const int src = (lane & ~3) | (q >> 1);
    for (int j = 0; j < nc; ++j) {
        const double x = u < r ? t.X[(i64)j * t.xs + u * 4 + q] : 0.0;
        const double m = n < 4 ? T[j * 7 + q + n] : 0.0;
        double w0 = 0.0, w1 = 0.0;
        asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};"
                     : "+d"(w0), "+d"(w1) : "d"(x), "d"(m));
        const double s0 = __shfl_sync(0xffffffffu, w0, src), s1 = __shfl_sync(0xffffffffu, w1, src);
        const double a = (q & 1) ? s1 : s0;
        const double b = v < r ? t.X[(i64)j * t.xs + v * 4 + q] : 0.0;
        asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};"
                     : "+d"(c0), "+d"(c1) : "d"(a), "d"(b));
    }
#else
    const int v0 = 8 * bv + 2 * q;
    for (int j = 0; j < nc; ++j) {
        if (u >= r) break;
        const double* x = t.X + (i64)j * t.xs + u * 4;
        double w[4];
        for (int p = 0; p < 4; ++p)
            w[p] = x[0] * T[j * 7 + p] + x[1] * T[j * 7 + p + 1] + x[2] * T[j * 7 + p + 2] + x[3] * T[j * 7 + p + 3];
        if (v0 < r) c0 += dot4(w, t.X + (i64)j * t.xs + v0 * 4);
        if (v0 + 1 < r) c1 += dot4(w, t.X + (i64)j * t.xs + (v0 + 1) * 4);
    }
#endif
}

// The pair (u, v), u <= v, at index k of the upper triangle of an r x r
// matrix, row by row: row u starts at u r - u (u - 1) / 2. (A pass over the
// whole square, skipping v < u, left half its threads idle: Stage 2 at seed
// 0.12 ms slower.)
__device__ __forceinline__ void upper_pair(int k, int r, int* u, int* v)
{
    const int b = 2 * r + 1;
    int row = (int)(0.5f * ((float)b - sqrtf((float)(b * b - 8 * k))));
    row = max(0, min(row, r - 1));
    // The float root can be off near a row's start (by at most one for r up
    // to 3,000, checked exhaustively).
    while (row + 1 < r && (row + 1) * r - (row + 1) * row / 2 <= k) ++row;
    while (row > 0 && row * r - row * (row - 1) / 2 > k) --row;
    *u = row;
    *v = row + k - (row * r - row * (row - 1) / 2);
}

// The tile's edges, segments and moments, read together (coalesced) so
// that no (cell, part) item waits on global memory of its own.
template <int BASES>
__device__ __forceinline__ void read_tile(const Cells& k, const BasesSource& src, i64 t0, int nc, int tid, int nt,
                                          double* cell)
{
    for (int e = tid; e < nc * CELL_READ; e += nt) {
        const int j = e / CELL_READ, q = e - j * CELL_READ;
        double v = 0.0;
        if (q >= CELL_MOMENTS) v = k.m[(t0 + j) * 10 + q - CELL_MOMENTS];
        else if (BASES) v = src.bounds[4 * (t0 + j) + q];
        cell[j * CELL_STRIDE + q] = v;
    }
}

// The scalar sums of a tile added to the running ones: a thread per
// coordinate, from thread 0 up (u = 0's live in F_a_sh and F_aa_sh).
__device__ __forceinline__ void scalar_sums(const Tile& t, int nc, int r, bool first, int tid, int nt, double& F_a_sh,
                                            double& F_aa_sh, double* F_u, double* F_au)
{
    for (int u = tid; u < r; u += nt) {
        double sx = first ? 0.0 : (u == 0 ? F_a_sh : F_u[u]);
        double sxa = first ? 0.0 : (u == 0 ? F_aa_sh : F_au[u]);
        double ss = first ? 0.0 : t.sum_S[u];
        for (int j = 0; j < nc; ++j) {
            sx += t.dX[(i64)j * t.ss + u];
            sxa += t.dXA[(i64)j * t.ss + u];
            ss += t.dS[(i64)j * t.ss + u];
        }
        if (u == 0) { F_a_sh = sx; F_aa_sh = sxa; } else { F_u[u] = sx; F_au[u] = sxa; }
        t.sum_S[u] = ss;
    }
}

// One 8 x 8 block (bu, bv) of the Q sums, lane l's two entries, added to the
// running ones in F_uv (packed; a diagonal block's entries below the
// diagonal are computed and dropped).
__device__ __forceinline__ void g_lane(const Tile& t, int nc, int r, bool first, int bu, int bv, int l, double* F_uv)
{
    const int u = 8 * bu + (l >> 2), v = 8 * bv + 2 * (l & 3);
    const bool in0 = u < r && v < r && u <= v, in1 = u < r && v + 1 < r && u <= v + 1;
    // (u, v) and (u, v + 1) are neighbours in the packed row u where both
    // are in; where only (u, v + 1) is, it is u's diagonal.
    const int e = in1 ? upper_index(u, v + 1, r) - 1 : in0 ? upper_index(u, v, r) : 0;
    double c0 = 0.0, c1 = 0.0;
    if (!first && in0) c0 = F_uv[e];
    if (!first && in1) c1 = F_uv[e + 1];
    g_block(t, nc, r, bu, bv, l, c0, c1);
    if (in0) F_uv[e] = c0;
    if (in1) F_uv[e + 1] = c1;
}

// The G blocks bu <= bv of a tile: a warp per block, from the last warp
// down. (A block narrower than a warp, as a single-threaded replay runs it,
// takes the lanes in turn.)
__device__ __forceinline__ void g_sums(const Tile& t, int nc, int r, bool first, int tid, int nt, double* F_uv)
{
    const int lane = tid & 31, warps = (nt + 31) / 32, warp = tid / 32;
    const int nb = (r + 7) / 8, blocks = nb * (nb + 1) / 2;
    for (int g = warps - 1 - warp; g < blocks; g += warps) {
        int bu = 0, rest = g;
        while (rest >= nb - bu) { rest -= nb - bu; ++bu; }
        for (int l = lane; l < 32; l += min(nt, 32)) g_lane(t, nc, r, first, bu, bu + rest, l, F_uv);
    }
}

// A row's scalars for its Hessian entries: the observed point's chi and xi,
// the probit layer's A and B, 1 / F_a and F_aa.
struct RowJets {
    double chi, xi, A, B, inv_Fa, F_aa;
};

// Hessian entry (u, v) of a row from its F_uv (the q-row override applied),
// F_au, F_av, a_u, a_v and the observed jets: the implicit function
// theorem's a_uv, then the chain rule through the probit layer.
__device__ __forceinline__ double hess_entry(const RowJets& j, double f_uv, double F_au, double F_av, double au,
                                             double av, double rho_u, double rho_v, double tau_u, double tau_v,
                                             double r_uv)
{
    const double term = f_uv + F_av * au + F_au * av + j.F_aa * au * av;
    const double a_uv = -term * j.inv_Fa;
    const double eu = j.chi * au + rho_u, ev = j.chi * av + rho_v;
    const double euv = j.chi * a_uv + j.xi * au * av + tau_u * av + au * tau_v + r_uv;
    return j.B * eu * ev + j.A * euv;
}

template <int BASES>
__device__ void bms_row_body(
    int n_rows, int r, int p_h, int p_w, int tile, int g_shared,
    const double* __restrict__ row_mu1, const double* __restrict__ row_mu2,
    const double* __restrict__ row_y, const double* __restrict__ row_w,
    const unsigned int* __restrict__ cell_offsets, const Cells& k, const BasesSource& src,
    const double* __restrict__ row_chi, const double* __restrict__ row_xi,
    const double* __restrict__ row_rho, const double* __restrict__ row_tau,
    const double* __restrict__ row_ruv, const double* __restrict__ row_e_obs,
    double* __restrict__ out_neglog,
    double* __restrict__ out_grad, double* __restrict__ out_hess,
    unsigned int* __restrict__ out_status, double* dyn)
{
    const int row = blockIdx.x;
    if (row >= n_rows) return;
    const int tid = threadIdx.x, nt = blockDim.x;
    const i64 rr = (i64)r * r, rp = (i64)r * (r + 1) / 2;
    // Running sums, each owned by one thread across tiles: F_u (sum
    // D(X_u)) in sum_X and sum D(AR_u) in sum_XA (u = 0 in F_a_sh,
    // F_aa_sh), sum D(S_1u) in sum_S, the Q sums G (packed upper triangle)
    // in shared memory or in the row's Hessian. (All in the outputs in
    // global memory, each tile read and wrote them there: Stage 2 at seed
    // 0.1 ms slower.)
    __shared__ double F_a_sh, F_aa_sh;
    __shared__ unsigned int bad;
    const Tile t = tile_layout(dyn, tile, r, g_shared);
    double* F_u = t.sum_X;
    double* F_au = t.sum_XA;
    double* H = out_hess + (i64)row * rp;
    double* F_uv = g_shared ? t.G : H;
    double* grad = out_grad + (i64)row * r;
    const double a_row = BASES ? src.row_a[row] : 0.0, b_row = BASES ? src.row_b[row] : 0.0;

    const i64 lo = cell_offsets[row], hi = cell_offsets[row + 1];
    const int parts = r - 1;
    for (i64 t0 = lo; t0 < hi; t0 += tile) {
        const int nc = (int)min((i64)tile, hi - t0);
        const bool first = t0 == lo;
        read_tile<BASES>(k, src, t0, nc, tid, nt, t.cell);
        __syncthreads();
        // A thread per (cell, part).
        for (int e = tid; e < nc * parts; e += nt) {
            int j, part;
            tile_item(e, nc, p_h, p_w, &j, &part);
            const double* cell = t.cell + j * CELL_STRIDE;
            CellPart o;
            if (BASES) {
                // About the cell's centre, as device Stage 1 took its moments.
                cell_part(src.m, a_row, b_row, cell[0], (int)cell[2], (int)cell[3], p_h, part, o);
                shift_part(o, moment_center(cell[0], cell[1]), part);
            } else
                bundle_part(k, t0 + j, r, p_h, p_w, part, o);
            stage_part(o, cell + CELL_MOMENTS, j, r, part, t, t.T + j * 7);
        }
        __syncthreads();
        scalar_sums(t, nc, r, first, tid, nt, F_a_sh, F_aa_sh, F_u, F_au);
        g_sums(t, nc, r, first, tid, nt, F_uv);
        __syncthreads();
    }
    if (hi == lo) {
        for (i64 e = tid; e < rp; e += nt) F_uv[e] = 0.0;
        for (int u = tid; u < r; u += nt) { F_u[u] = 0.0; F_au[u] = 0.0; t.sum_S[u] = 0.0; }
        if (tid == 0) { F_a_sh = 0.0; F_aa_sh = 0.0; }
    }
    if (tid == 0) bad = 0u;
    __syncthreads();
    // The q-row override (F_u[0] = -mu_1, F_uu[0][0] = -mu_2, the rest of
    // coordinate 0 zero), then the implicit function theorem.
    const double F_a = F_a_sh;
    if (!(F_a > 0.0 && isfinite(F_a))) {
        for (i64 e = tid; e < rp; e += nt) H[e] = 0.0;
        for (int u = tid; u < r; u += nt) grad[u] = 0.0;
        if (tid == 0) { out_neglog[row] = 0.0; out_status[row] = ROW_BAD_FA; }
        return;
    }
    const double inv_Fa = 1.0 / F_a;
    // Per coordinate: F_aa = sum D(AA) - Q(A, A), F_au = sum D(AR_u) -
    // Q(A, X_u) (G's row 0, read here before the pair pass overwrites it),
    // and a_u = -F_u / F_a.
    double* a_u = F_u;
    for (int u = tid; u < r; u += nt) {
        if (u == 0) {
            F_aa_sh -= F_uv[0];
            F_au[0] = 0.0;
            F_u[0] = -row_mu1[row];
        } else {
            F_au[u] -= F_uv[u];
        }
        a_u[u] = -F_u[u] * inv_Fa;
    }
    __syncthreads();

    // Observed jets and the probit layer.
    const double chi = row_chi[row], xi = row_xi[row], F_aa = F_aa_sh;
    const double* rho = row_rho + (i64)row * r;
    const double* tau = row_tau + (i64)row * r;
    // r_uv: in full from a bundle, as its row 1 from the device Stage 1
    // (zero off row and column 1; see bms_observed).
    const double* ruv = row_ruv + (i64)row * (BASES ? r : rr);
    const double y = row_y[row], w = row_w[row], s = 2.0 * y - 1.0;
    double log_cdf, lambda, curv;
    log_ndtr_mills_curvature(s * row_e_obs[row], &log_cdf, &lambda, &curv);
    const double A = -w * s * lambda, B = w * curv;
    // A thread per pair u <= v (packed entry k), each reading only its own
    // G entry: F_uv = [u = 1] sum D(S_1v) - Q(X_u, X_v) (row 0: the
    // override), then a_uv, then the Hessian entry, written once (the
    // packed rows' stores are a warp's consecutive doubles; both triangles
    // in full took a scattered store per entry and twice the bytes).
    const double mu2 = row_mu2[row];
    for (int k = tid; k < rp; k += nt) {
        int u, v;
        upper_pair(k, r, &u, &v);
        const double f_uv = u == 0 ? (v == 0 ? -mu2 : 0.0) : (u == 1 ? t.sum_S[v] : 0.0) - F_uv[k];
        const double r_uv = BASES ? (u == 1 ? ruv[v] : 0.0) : ruv[(i64)u * r + v];
        const RowJets j = {chi, xi, A, B, inv_Fa, F_aa};
        const double h = hess_entry(j, f_uv, F_au[u], F_au[v], a_u[u], a_u[v], rho[u], rho[v], tau[u], tau[v], r_uv);
        H[k] = h;
        if (!isfinite(h)) atomicOr(&bad, 1u);
    }
    __syncthreads();
    for (int u = tid; u < r; u += nt) {
        const double g = A * (chi * a_u[u] + rho[u]);
        grad[u] = g;
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
        double *__restrict__ out_neglog, double *__restrict__ out_grad, \
        double *__restrict__ out_hess, unsigned int *__restrict__ out_status
#define ROW_TAIL_ARGS                                                                                   \
    row_chi, row_xi, row_rho, row_tau, row_ruv, row_e_obs, out_neglog, out_grad, out_hess, \
        out_status

// Stage 2 over a bundle of per-cell arrays in global memory, `tile` cells
// at a time (the dynamic shared memory holds their X vectors and scalars).
extern "C" __global__ void bms_row(
    ROW_COMMON_PARAMS, int tile, int g_shared,
    const double* __restrict__ cell_c0, const double* __restrict__ cell_c1,
    const double* __restrict__ cell_c2, const double* __restrict__ cell_c3,
    const double* __restrict__ cell_a, const double* __restrict__ cell_aa,
    const double* __restrict__ cell_r, const double* __restrict__ cell_ar,
    const double* __restrict__ cell_sbb, const double* __restrict__ cell_sbh,
    const double* __restrict__ cell_sbw, const double* __restrict__ cell_moments, ROW_TAIL_PARAMS)
{
    extern __shared__ double row_sh[];
    const Cells k = {cell_c0, cell_c1, cell_c2, cell_c3, cell_a, cell_aa, cell_r, cell_ar,
                     cell_sbb, cell_sbh, cell_sbw, cell_moments};
    const BasesSource none = {};
    bms_row_body<0>(n_rows, r, p_h, p_w, tile, g_shared, row_mu1, row_mu2, row_y, row_w, cell_offsets, k, none,
                    ROW_TAIL_ARGS, row_sh);
}

// Stage 2 over cell slots described by their edges and moments, building
// the arrays from the bases in shared memory, `tile` cells at a time.
// Registers capped so that STAGE2_BLOCKS blocks of ROW_THREADS = 64 fit an
// SM (rows.rs: STAGE2_BLOCKS, whose shared-memory budget keeps the blocks'
// tiles within the SM's). Unbounded it took 118 registers and 8 blocks:
// 0.1 ms slower at seed; at the fit's shape and 1M rows (H100, session 33)
// 8 blocks 15.96 ms, 10 13.95, 12 13.13.
#define STAGE2_BLOCKS 12
extern "C" __global__ void __launch_bounds__(64, STAGE2_BLOCKS) bms_row_bases(
    ROW_COMMON_PARAMS, MODEL_PARAMS, int tile, int g_shared, const double* __restrict__ row_a_in,
    const double* __restrict__ row_b_in, const double* __restrict__ bounds,
    const double* __restrict__ cell_moments, ROW_TAIL_PARAMS)
{
    extern __shared__ double row_sh[];
    const Cells k = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, cell_moments};
    BasesSource src;
    src.m = make_model(MODEL_ARGS);
    src.row_a = row_a_in; src.row_b = row_b_in; src.bounds = bounds;
    bms_row_body<1>(n_rows, r, p_h, p_w, tile, g_shared, row_mu1, row_mu2, row_y, row_w, cell_offsets, k, src,
                    ROW_TAIL_ARGS, row_sh);
}

// The verdict of n row statuses: the first rejected row i and its code, as
// (2^32 - 1 - i) 2^32 + code in *key (zero before; it stays zero if no row
// is rejected). Integer atomicMax keeps the least rejected row whatever the
// order (rejections are rare, so the atomics are too); the host reads 8
// bytes instead of the n statuses.
extern "C" __global__ void first_rejected(int n, const unsigned int* __restrict__ status,
                                          unsigned long long* __restrict__ key)
{
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || status[i] == 0u) return;
    atomicMax(key, ((0xffffffffull - (unsigned long long)i) << 32) | status[i]);
}
