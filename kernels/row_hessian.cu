// Row-Hessian products: H = sum_i P_i^T H_i P_i with H_i r x r row-major
// (symmetric), P_i pulling beta back to the row's primary coordinates.
//
// A row's coordinates are its L linear predictors (coordinate d = x_{i,d}
// . beta_d through design d) then the copied (direct) coordinates. The
// designs live in one buffer x: design d (n x pw[d], row-major) starts at
// element pb[d], its coefficients at beta index pbeta[d], and poff[d] is
// the sum of the widths before it (dw the sum of all). The pullback of beta
// column a is described by col_kind[a] (its design, or -1: copied),
// col_j[a] (its column in that design) and col_u[a], the coordinate it
// lands on; primary_to_beta[s] is the beta index copied to coordinate s >= L.
// Every reduction over rows is split into fixed chunks whose partials are
// summed by reduce_partials in a fixed tree: no atomics, bitwise repeatable.

typedef long long i64;

#define DESIGN_PARAMS                                                                                  \
    int L, const double *__restrict__ x, const int *__restrict__ pw, const i64 *__restrict__ pb,      \
        const int *__restrict__ pbeta, const int *__restrict__ poff
#define DESIGN_ARGS L, x, pw, pb, pbeta, poff

// Where column a's coefficient sits for row `row`: x[base + row * stride],
// or the constant 1 for a copied column (stride 0, base -1).
struct PullCol {
    i64 base;
    int stride;
};

__device__ __forceinline__ PullCol pull_col(int kind, int j, const int* __restrict__ pw,
                                            const i64* __restrict__ pb)
{
    PullCol c;
    c.base = kind >= 0 ? pb[kind] + j : -1;
    c.stride = kind >= 0 ? pw[kind] : 0;
    return c;
}

// P_i[u(a), a] for beta column a.
__device__ __forceinline__ double pull_coef(PullCol c, i64 row, const double* __restrict__ x)
{
    return c.base >= 0 ? x[c.base + row * c.stride] : 1.0;
}

// Warp-wide sum in a fixed butterfly order (every lane gets the total).
__device__ __forceinline__ double warp_sum(double v)
{
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Where H_i[s][u] sits in a row's storage: full (r x r, row-major) or
// packed (the upper triangle, row-major: row s holds columns s..r-1). A
// packed row is half the bytes; by symmetry H[s][u] = H[min][max].
template <int PACKED>
__device__ __forceinline__ i64 hidx_t(int s, int u, int r)
{
    if (!PACKED) return (i64)s * r + u;
    const int lo = min(s, u), hi = max(s, u);
    return (i64)lo * r - (i64)lo * (lo - 1) / 2 + (hi - lo);
}

__device__ __forceinline__ i64 hidx(int s, int u, int r, int packed)
{
    return packed ? hidx_t<1>(s, u, r) : hidx_t<0>(s, u, r);
}

// Values one row's storage holds.
__device__ __forceinline__ i64 hstride(int r, int packed)
{
    return packed ? (i64)r * (r + 1) / 2 : (i64)r * r;
}

// Phase 1 of H V for k right-hand sides: t[j, i, :] = H_i (P_i v_j).
// One warp per (row, rhs) pair; lanes stride over each design for the
// row's predictors (kept in the warp's L doubles of shared memory), then
// over the output coordinates u (reading column u of H_i, which by symmetry
// is row u, with coalesced loads). The storage is a template parameter so
// the inner loop's index has no run-time branch.
template <int P>
__device__ __forceinline__ void row_action_body(
    i64 n, int r, int p_total, int k, DESIGN_PARAMS, const double* __restrict__ hess,
    const int* __restrict__ primary_to_beta, const double* __restrict__ v, double* __restrict__ t)
{
    extern __shared__ double sh_eta[];
    double* eta = sh_eta + (threadIdx.x >> 5) * L;
    const int lane = threadIdx.x & 31;
    const i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 w = warp; w < n * k; w += warps) {
        const i64 row = w % n;
        const int j = (int)(w / n);
        const double* vj = v + (i64)j * p_total;
        for (int d = 0; d < L; ++d) {
            const double* xr = x + pb[d] + row * pw[d];
            const double* vd = vj + pbeta[d];
            double e = 0.0;
            for (int c = lane; c < pw[d]; c += 32) e += xr[c] * vd[c];
            e = warp_sum(e);
            if (lane == 0) eta[d] = e;
        }
        __syncwarp();
        const double* h = hess + row * hstride(r, P);
        for (int u = lane; u < r; u += 32) {
            double acc = L > 0 ? h[hidx_t<P>(0, u, r)] * eta[0] : 0.0;
            for (int s = 1; s < L; ++s) acc += h[hidx_t<P>(s, u, r)] * eta[s];
            for (int s = L; s < r; ++s) acc += h[hidx_t<P>(s, u, r)] * vj[primary_to_beta[s]];
            t[((i64)j * n + row) * r + u] = acc;
        }
        __syncwarp(); // eta is rewritten for the warp's next row
    }
}

// Dynamic shared memory: L doubles per warp.
extern "C" __global__ void row_action(
    i64 n, int r, int packed, int p_total, int k, DESIGN_PARAMS, const double* __restrict__ hess,
    const int* __restrict__ primary_to_beta, const double* __restrict__ v, double* __restrict__ t)
{
    if (packed)
        row_action_body<1>(n, r, p_total, k, DESIGN_ARGS, hess, primary_to_beta, v, t);
    else
        row_action_body<0>(n, r, p_total, k, DESIGN_ARGS, hess, primary_to_beta, v, t);
}

// Phase 2: partial[chunk, j, a] = sum over the chunk's rows of
// coef(a)^power * t[j, row * t_row + u(a) * t_col], summed in row order.
// With t = row_action's output (t_row = r, t_col = 1, power 1) this is the
// pullback of H V; with t = hess (t_row = r*r, t_col = r + 1, power 2) it is
// the diagonal; with t = per-row gradients it is the joint gradient.
extern "C" __global__ void pullback_partial(
    i64 n, int rows_per_chunk, int p_total, int k,
    const int* __restrict__ col_kind, const int* __restrict__ col_j,
    const int* __restrict__ col_u, const double* __restrict__ x, const int* __restrict__ pw,
    const i64* __restrict__ pb, const double* __restrict__ t,
    i64 t_rhs_stride, int t_row, int t_col, int power, int packed_r,
    double* __restrict__ partial)
{
    const i64 chunk = blockIdx.x;
    const int j = blockIdx.y;
    const i64 first = chunk * rows_per_chunk;
    const i64 last = min(first + rows_per_chunk, n);
    const double* tj = t + (i64)j * t_rhs_stride;
    for (int a = threadIdx.x; a < p_total; a += blockDim.x) {
        const PullCol col = pull_col(col_kind[a], col_j[a], pw, pb);
        // packed_r > 0: t is packed row Hessians and the term is H[u][u].
        const i64 off = packed_r > 0 ? hidx(col_u[a], col_u[a], packed_r, 1) : (i64)col_u[a] * t_col;
        double acc = 0.0;
        for (i64 row = first; row < last; ++row) {
            double c = pull_coef(col, row, x);
            if (power == 2) c *= c;
            acc += c * tj[row * t_row + off];
        }
        partial[(chunk * k + j) * p_total + a] = acc;
    }
}

// Dense joint Hessian partials: partial[chunk, a * p + b] for a <= b, the
// chunk's sum of coef(a) coef(b) H_i[u(a), u(b)]; the lower triangle is
// mirrored after the reduction. One thread per entry: no width ceiling.
extern "C" __global__ void dense_partial(
    i64 n, int rows_per_chunk, int r, int packed, int p_total,
    const int* __restrict__ col_kind, const int* __restrict__ col_j,
    const int* __restrict__ col_u, const double* __restrict__ hess,
    const double* __restrict__ x, const int* __restrict__ pw, const i64* __restrict__ pb,
    double* __restrict__ partial)
{
    const i64 entries = (i64)p_total * p_total;
    const i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= entries) return;
    const int a = (int)(e / p_total), b = (int)(e % p_total);
    const i64 chunk = blockIdx.y;
    double acc = 0.0;
    if (a <= b) {
        const i64 first = chunk * rows_per_chunk;
        const i64 last = min(first + rows_per_chunk, n);
        const PullCol pa = pull_col(col_kind[a], col_j[a], pw, pb), pc = pull_col(col_kind[b], col_j[b], pw, pb);
        const i64 hoff = hidx(col_u[a], col_u[b], r, packed), hs = hstride(r, packed);
        for (i64 row = first; row < last; ++row) {
            const double ca = pull_coef(pa, row, x);
            const double cb = pull_coef(pc, row, x);
            acc += ca * cb * hess[row * hs + hoff];
        }
    }
    partial[chunk * entries + e] = acc;
}

// The same partials staged through shared memory: block (x, y) = (tile of
// upper-triangle entries in row-major order, chunk of rows). The block loads
// `stage` rows at a time (their H_i, then their design rows) with coalesced
// loads, and each thread adds its entry's term for every staged row, in row
// order, so the sums equal dense_partial's bitwise. Each row Hessian is read
// from memory once per tile instead of once per entry. Lower-triangle
// partials are left as they are (zero); mirror_upper fills them after.
extern "C" __global__ void dense_staged_partial(
    i64 n, int rows_per_chunk, int stage, int r, int packed, int p_total,
    const int* __restrict__ col_kind, const int* __restrict__ col_j,
    const int* __restrict__ col_u, const double* __restrict__ hess, DESIGN_PARAMS,
    double* __restrict__ partial)
{
    extern __shared__ double sh[];
    const i64 rr = hstride(r, packed);
    double* sh_h = sh;
    double* sh_x = sh + stage * rr; // design d's rows at sh_x + stage * poff[d]
    const i64 upper = (i64)p_total * (p_total + 1) / 2;
    const i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    const bool active = t < upper;
    int a = 0, b = 0;
    PullCol pa = {-1, 0}, pc = {-1, 0};
    i64 hoff = 0;
    if (active) {
        i64 k = t;
        while (k >= p_total - a) { k -= p_total - a; ++a; }
        b = a + (int)k;
        // Staged coefficients: base within sh_x, stride the design's width.
        const int ka = col_kind[a], kb = col_kind[b];
        if (ka >= 0) { pa.base = (i64)stage * poff[ka] + col_j[a]; pa.stride = pw[ka]; }
        if (kb >= 0) { pc.base = (i64)stage * poff[kb] + col_j[b]; pc.stride = pw[kb]; }
        hoff = hidx(col_u[a], col_u[b], r, packed);
    }
    const i64 first = (i64)blockIdx.y * rows_per_chunk;
    const i64 last = min(first + rows_per_chunk, n);
    double acc = 0.0;
    for (i64 r0 = first; r0 < last; r0 += stage) {
        const int rows = (int)min((i64)stage, last - r0);
        __syncthreads();
        for (i64 k = threadIdx.x; k < rows * rr; k += blockDim.x) sh_h[k] = hess[r0 * rr + k];
        for (int d = 0; d < L; ++d) {
            double* dst = sh_x + stage * poff[d];
            const double* src = x + pb[d] + r0 * pw[d];
            for (int k = threadIdx.x; k < rows * pw[d]; k += blockDim.x) dst[k] = src[k];
        }
        __syncthreads();
        if (!active) continue;
        for (int i = 0; i < rows; ++i) {
            const double ca = pull_coef(pa, i, sh_x);
            const double cb = pull_coef(pc, i, sh_x);
            acc += ca * cb * sh_h[i * rr + hoff];
        }
    }
    if (active) partial[(i64)blockIdx.y * p_total * p_total + (i64)a * p_total + b] = acc;
}

// out[e] = sum over chunks of partial[c * len + e], one block per entry:
// each thread sums a fixed stride of chunks, then a fixed shared-memory tree.
// blockDim.x must be 256.
extern "C" __global__ void reduce_partials(
    i64 chunks, i64 len, const double* __restrict__ partial, double* __restrict__ out)
{
    __shared__ double buf[256];
    after_previous(); // launched as a dependent of the kernel that wrote the partials
    let_next_start();
    for (i64 e = blockIdx.x; e < len; e += gridDim.x) {
        double acc = 0.0;
        for (i64 c = threadIdx.x; c < chunks; c += 256) acc += partial[c * len + e];
        buf[threadIdx.x] = acc;
        __syncthreads();
        for (int half = 128; half > 0; half >>= 1) {
            if (threadIdx.x < half) buf[threadIdx.x] += buf[threadIdx.x + half];
            __syncthreads();
        }
        if (threadIdx.x == 0) out[e] = buf[0];
        __syncthreads();
    }
}

// Mirror the upper triangle of a p x p row-major matrix into the lower.
extern "C" __global__ void mirror_upper(int p, double* __restrict__ a)
{
    const i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (i64)p * p) return;
    const int i = (int)(e / p), j = (int)(e % p);
    if (i > j) a[e] = a[(i64)j * p + i];
}

// partial[chunk] = sum of x over the chunk's rows, in row order.
extern "C" __global__ void chunk_sum_partial(
    i64 n, int rows_per_chunk, const double* __restrict__ x, double* __restrict__ partial)
{
    const i64 chunk = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    const i64 first = chunk * rows_per_chunk;
    if (first >= n) return;
    const i64 last = min(first + rows_per_chunk, n);
    double acc = 0.0;
    for (i64 row = first; row < last; ++row) acc += x[row];
    partial[chunk] = acc;
}

// sum over s >= s0 of H[s, u] dc[s]: the part of (H_i P_i v)_u that does
// not depend on the row's designs (s0 = L, the number of predictors; dc[s] =
// v at coordinate s), so its loads can be issued before the predictors are
// known. HT is the storage's type (double, or float for single-precision
// rows): every product and sum is taken in double.
template <int PACKED, typename HT>
__device__ __forceinline__ double column_direct(const HT* __restrict__ h, int r, int s0, int u,
                                                const double* __restrict__ dc)
{
    double t = 0.0;
    if (!PACKED) {
#pragma unroll 8
        for (int s = s0; s < r; ++s) t += (double)h[(i64)s * r + u] * dc[s];
        return t;
    }
    // Packed: row s starts at off_s = s r - s (s - 1) / 2, so H[s][u] sits
    // at off_s + u - s for s <= u and at off_u + s - u for s > u. Stepping s
    // moves that index by r - s - 1 while s < u and by 1 after, so it is
    // carried in 32-bit arithmetic (the general index costs a 64-bit
    // multiply, a division and min/max per term, which bound the kernel).
    // H[s0][u]'s index; for s0 = 2 (two predictors, known at compile time
    // in the BMS kernels) in closed form, which the f32 staged HVP's time
    // shows (10% at seed against the general index's 64-bit arithmetic).
    int k = s0 == 2 ? (u >= 2 ? 2 * r + u - 3 : (u == 0 ? 2 : r + 1)) : (int)hidx_t<1>(s0, u, r);
    int step = r - s0 - 1;
#pragma unroll 4
    for (int s = s0; s < r; ++s) {
        t += (double)h[k] * dc[s];
        k += s < u ? step : 1;
        --step;
    }
    return t;
}

// H[0][u] and H[1][u] of a row, full or packed (H[1][0] = H[0][1] at 1).
template <int PACKED>
__device__ __forceinline__ int first_rows_index(int s, int u, int r)
{
    if (!PACKED) return s * r + u;
    if (s == 0) return u;
    return u >= 1 ? r + u - 1 : 1;
}

// Column u of a row's H times (eta, dc): the row's action at coordinate u,
// for a row whose L predictors are eta[0..L).
template <int PACKED, typename HT>
__device__ __forceinline__ double row_column(const HT* __restrict__ h, int r, int L, int u, const double* dc,
                                             const double* eta)
{
    double t = column_direct<PACKED>(h, r, L, u, dc);
    for (int d = 0; d < L; ++d) t += (double)h[hidx_t<PACKED>(d, u, r)] * eta[d];
    return t;
}

// row_column for the two-predictor rows of the fused kernel.
template <int PACKED, typename HT>
__device__ __forceinline__ double row_column2(const HT* __restrict__ h, int r, int u, const double* dc, double q,
                                              double b)
{
    return column_direct<PACKED>(h, r, 2, u, dc) + (double)h[first_rows_index<PACKED>(0, u, r)] * q +
           (double)h[first_rows_index<PACKED>(1, u, r)] * b;
}

// Scatter one row's action into a warp's accumulators: t_u for u >= 2 goes
// to its copied beta column, t_0 and t_1 through the design rows. Each lane
// always owns the same columns, so there are no cross-lane hazards.
__device__ __forceinline__ void scatter_row(double* mine, int lane, int r, int p_m, int p_g,
                                            const double* __restrict__ xm, const double* __restrict__ xg,
                                            const int* p2b, double t_first, double t0, double t1)
{
    if (lane >= 2 && lane < r) mine[p2b[lane]] += t_first;
    for (int c = lane; c < p_m; c += 32) mine[c] += t0 * xm[c];
    for (int c = lane; c < p_g; c += 32) mine[p_m + c] += t1 * xg[c];
}

// Single-vector H v fused in one pass, for layouts of two leading
// predictors (beta = (beta_0, beta_1, copied...), as the BMS model's): each block owns a contiguous range of
// rows; each warp takes rows in pairs (two rows' loads in flight at once),
// every W-th pair of the range, and accumulates P_i^T H_i P_i v into its own
// shared-memory p-vector; the block then adds its W vectors in warp order
// and writes one partial. Each row Hessian and design row is read once, lane
// u reading column u of H_i (coalesced). Shared memory: (W + 1) p + r
// doubles + r ints, so very wide p uses the two-phase path instead.
// MODE 0: full rows; 1: packed rows read in place; 2: packed rows first
// copied into the warp's shared buffer (2 r (r + 1) / 2 doubles more per
// warp) with contiguous loads, then read from there.
template <int MODE>
__device__ __forceinline__ void hvp_fused_body(
    double* sh, i64 n, int rows_per_block, int r, int p_m, int p_g, int p_total,
    const double* __restrict__ hess, const double* __restrict__ x_m,
    const double* __restrict__ x_g, const int* __restrict__ primary_to_beta,
    const double* __restrict__ v, double* __restrict__ partial)
{
    const int P = MODE == 0 ? 0 : 1;
    const int W = blockDim.x >> 5;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    double* vs = sh;
    double* acc = sh + p_total;
    double* dc = acc + W * p_total;
    int* p2b = (int*)(dc + r);
    const i64 hs = hstride(r, P);
    double* stg = dc + r + (r + 1) / 2 + (i64)w * 2 * hs;
    for (int a = threadIdx.x; a < p_total; a += blockDim.x) vs[a] = v[a];
    for (int a = threadIdx.x; a < W * p_total; a += blockDim.x) acc[a] = 0.0;
    for (int u = threadIdx.x; u < r; u += blockDim.x) {
        p2b[u] = primary_to_beta[u];
        dc[u] = u >= 2 ? v[primary_to_beta[u]] : 0.0;
    }
    __syncthreads();
    double* mine = acc + w * p_total;
    const i64 first = (i64)blockIdx.x * rows_per_block;
    const i64 last = min(first + rows_per_block, n);
    for (i64 ra = first + 2 * w; ra < last; ra += 2 * W) {
        const bool has_b = ra + 1 < last;
        const i64 rb = has_b ? ra + 1 : ra;
        const double *xma = x_m + ra * p_m, *xga = x_g + ra * p_g;
        const double *xmb = x_m + rb * p_m, *xgb = x_g + rb * p_g;
        const double *ha = hess + ra * hs, *hb = hess + rb * hs;
        if (MODE == 2) {
            // Both rows are adjacent in memory: one contiguous copy.
            const i64 len = (has_b ? 2 : 1) * hs;
            __syncwarp();
            for (i64 k = lane; k < len; k += 32) stg[k] = ha[k];
            __syncwarp();
            ha = stg;
            hb = has_b ? stg + hs : stg;
        }
        double qa = 0.0, ba = 0.0, qb = 0.0, bb = 0.0;
        for (int c = lane; c < p_m; c += 32) { qa += xma[c] * vs[c]; qb += xmb[c] * vs[c]; }
        for (int c = lane; c < p_g; c += 32) { ba += xga[c] * vs[p_m + c]; bb += xgb[c] * vs[p_m + c]; }
        const int u = lane < r ? lane : 0;
        double ta = column_direct<P>(ha, r, 2, u, dc), tb = column_direct<P>(hb, r, 2, u, dc);
        qa = warp_sum(qa); ba = warp_sum(ba); qb = warp_sum(qb); bb = warp_sum(bb);
        const int h0 = first_rows_index<P>(0, u, r), h1 = first_rows_index<P>(1, u, r);
        ta += ha[h0] * qa + ha[h1] * ba;
        tb += hb[h0] * qb + hb[h1] * bb;
        const double ta0 = __shfl_sync(0xffffffffu, ta, 0), ta1 = __shfl_sync(0xffffffffu, ta, 1);
        const double tb0 = __shfl_sync(0xffffffffu, tb, 0), tb1 = __shfl_sync(0xffffffffu, tb, 1);
        scatter_row(mine, lane, r, p_m, p_g, xma, xga, p2b, ta, ta0, ta1);
        // Columns past the first 32 (r > 32).
        for (int uu = lane + 32; uu < r; uu += 32) mine[p2b[uu]] += row_column2<P>(ha, r, uu, dc, qa, ba);
        if (has_b) {
            scatter_row(mine, lane, r, p_m, p_g, xmb, xgb, p2b, tb, tb0, tb1);
            for (int uu = lane + 32; uu < r; uu += 32) mine[p2b[uu]] += row_column2<P>(hb, r, uu, dc, qb, bb);
        }
    }
    __syncthreads();
    for (int a = threadIdx.x; a < p_total; a += blockDim.x) {
        double s = 0.0;
        for (int k = 0; k < W; ++k) s += acc[k * p_total + a];
        partial[(i64)blockIdx.x * p_total + a] = s;
    }
}

extern "C" __global__ void hvp_fused(
    i64 n, int rows_per_block, int r, int mode, int p_m, int p_g, int p_total,
    const double* __restrict__ hess, const double* __restrict__ x_m,
    const double* __restrict__ x_g, const int* __restrict__ primary_to_beta,
    const double* __restrict__ v, double* __restrict__ partial)
{
    extern __shared__ double sh[];
    if (mode == 0)
        hvp_fused_body<0>(sh, n, rows_per_block, r, p_m, p_g, p_total, hess, x_m, x_g, primary_to_beta, v, partial);
    else if (mode == 1)
        hvp_fused_body<1>(sh, n, rows_per_block, r, p_m, p_g, p_total, hess, x_m, x_g, primary_to_beta, v, partial);
    else
        hvp_fused_body<2>(sh, n, rows_per_block, r, p_m, p_g, p_total, hess, x_m, x_g, primary_to_beta, v, partial);
}

// full_index_of_packed: kernels/packed_index.cuh, prepended by the host.

// Packed copy of full row Hessians: out[row, k] = full[row, s, u] for the
// k-th upper-triangle entry (s <= u) in row-major order.
extern "C" __global__ void pack_upper_rows(i64 n, int r, const double* __restrict__ full, double* __restrict__ out)
{
    const i64 per = (i64)r * (r + 1) / 2;
    const i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n * per) return;
    out[e] = full[full_index_of_packed(e, r, per)];
}

// ---------------------------------------------------------------------------
// Staged HVP: rows stream through shared memory in a ring of RING buffers
// filled by asynchronous copies (cp.async on sm_80+), so each block keeps
// RING - 1 stages of rows in flight while its warps compute on the oldest.
// The fused kernel above loads H_i straight into registers and stalls on
// those loads (25% occupancy, L1TEX waits); here the loads bypass registers
// and the bytes in flight per SM no longer depend on occupancy. RING is a
// template parameter because cp.async.wait_group takes an immediate.

// A 4- or 8-byte asynchronous copy (T float or double; cp.async's .ca
// form, which takes those sizes).
template <typename T>
__device__ __forceinline__ void copy_async_small(void* dst, const void* src)
{
#if __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(d), "l"(src), "n"(sizeof(T)) : "memory");
#else
    *(T*)dst = *(const T*)src;
#endif
}

__device__ __forceinline__ void copy_async16(void* dst, const void* src)
{
#if __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
#else
    ((double*)dst)[0] = ((const double*)src)[0];
    ((double*)dst)[1] = ((const double*)src)[1];
#endif
}

__device__ __forceinline__ void copy_async_commit()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Wait until at most PENDING of this thread's copy groups are pending.
template <int PENDING>
__device__ __forceinline__ void copy_async_wait()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
#endif
}

// Block-wide asynchronous copy of `bytes` (a multiple of 4): 16-byte
// pieces when both ends are 16-byte aligned (the rest in 4-byte ones), else
// 8-byte pieces when both are 8-byte aligned and bytes allow, else 4-byte.
// A stage fits shared memory, so the sizes and offsets are 32-bit.
__device__ __forceinline__ void stage_region(void* dst_, const void* __restrict__ src_, int bytes)
{
    char* dst = (char*)dst_;
    const char* src = (const char*)src_;
    const unsigned long long ends = (unsigned long long)dst | (unsigned long long)src;
    if ((ends & 15) == 0) {
        const int whole = bytes & ~15;
        for (int k = 16 * threadIdx.x; k < whole; k += 16 * blockDim.x) copy_async16(dst + k, src + k);
        for (int k = whole + 4 * threadIdx.x; k < bytes; k += 4 * blockDim.x) copy_async_small<float>(dst + k, src + k);
    } else if ((ends & 7) == 0 && (bytes & 7) == 0) {
        for (int k = 8 * threadIdx.x; k < bytes; k += 8 * blockDim.x) copy_async_small<double>(dst + k, src + k);
    } else {
        for (int k = 4 * threadIdx.x; k < bytes; k += 4 * blockDim.x) copy_async_small<float>(dst + k, src + k);
    }
}

// Bulk copies (sm_90): one thread moves a whole contiguous region into
// shared memory with the copy engine (TMA) and an mbarrier counts the bytes
// in, so issuing a stage costs a few instructions instead of one per 16
// bytes per thread. Elsewhere the per-thread cp.async path above is used.
#if __CUDA_ARCH__ >= 900
#define HAVE_BULK 1
#else
#define HAVE_BULK 0
#endif

__device__ __forceinline__ void bar_init(unsigned long long* bar)
{
#if HAVE_BULK
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"((unsigned)__cvta_generic_to_shared(bar)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// Arrive on bar expecting `bytes` more to land from bulk copies.
__device__ __forceinline__ void bar_expect(unsigned long long* bar, unsigned bytes)
{
#if HAVE_BULK
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                     (unsigned)__cvta_generic_to_shared(bar)),
                 "r"(bytes)
                 : "memory");
#endif
}

__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, unsigned long long* bar)
{
#if HAVE_BULK
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     (unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(bytes), "r"((unsigned)__cvta_generic_to_shared(bar))
                 : "memory");
#endif
}

// Wait until bar completes the phase with this parity.
__device__ __forceinline__ void bar_wait(unsigned long long* bar, unsigned parity)
{
#if HAVE_BULK
    unsigned done = 0;
    while (!done) {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"((unsigned)__cvta_generic_to_shared(bar)), "r"(parity)
                     : "memory");
    }
#endif
}

// Thread 0 bulk-copies `len` bytes (a multiple of 4; 16-byte aligned
// ends): the 16-byte multiple through the copy engine, the rest by hand in
// 4-byte words (visible to the block after the barrier that follows the
// wait). Returns the bytes the barrier must expect.
__device__ __forceinline__ unsigned bulk_region(void* dst, const void* src, int len, unsigned long long* bar)
{
    const unsigned bytes = (unsigned)len & ~15u;
    if (bytes) bulk_copy(dst, src, bytes, bar);
    for (int k = (int)bytes; k < len; k += 4) *(float*)((char*)dst + k) = *(const float*)((const char*)src + k);
    return bytes;
}

// Doubles a stage's row Hessians take at the head of its buffer: `stage`
// rows of hs values of type HT (the host keeps stage * hs * sizeof(HT) a
// multiple of 16 bytes, so the design rows after them stay 16-byte aligned).
template <typename HT>
__device__ __forceinline__ int h_region(int stage, int hs)
{
    return (int)((i64)stage * hs * (int)sizeof(HT) / 8);
}

// Phase B's walk: f(i, u) for every (row, coordinate) of a stage's `rows`
// rows, this thread's first at (i0, u0), stepping by the block size without
// a division.
template <typename F>
__device__ __forceinline__ void each_row_coordinate(int rows, int r, int i0, int u0, F f)
{
    const int di = (int)blockDim.x / r, du = (int)blockDim.x - di * r;
    for (int i = i0, u = u0; i < rows;) {
        f(i, u);
        i += di;
        u += du;
        if (u >= r) {
            u -= r;
            ++i;
        }
    }
}

// Phase C: acc[a] += coef_i(a) t_i[u(a)] over a stage's rows in order, a
// thread per beta column a (it owns acc[a]).
__device__ __forceinline__ void accumulate_stage(const double* buf, int rows, int r, int p_total, const double* tb,
                                                 double* acc, const double* one, const int* coff, const int* cstride,
                                                 const int* cu)
{
    for (int a = threadIdx.x; a < p_total; a += blockDim.x) {
        const int cs = cstride[a];
        const double* c = cs ? buf + coff[a] : one;
        const double* t = tb + cu[a];
        double s = acc[a];
        for (int i = 0; i < rows; ++i, c += cs, t += r) s += *c * *t;
        acc[a] = s;
    }
}

// One stage of rows, already in shared memory, added to the block's
// accumulators in three block-wide phases (every phase spreads its work over
// all threads, whatever r is, so no lane idles on rows narrower than a warp):
//   A. eta_{i,d} = x_{i,d} . v_d, a thread per (row, design);
//   B. t_i = H_i (eta_i, dc), a thread per (row, coordinate), starting at
//      (i0, u0) and stepping by the block size without a division;
//   C. acc[a] += coef_i(a) t_i[u(a)] over the stage's rows in order, a
//      thread per beta column a (it owns acc[a]: no two threads write it);
//      coef_i(a) is read at buf + coff[a] + i cstride[a] (a design column)
//      or is the constant 1 (stride 0).
template <int P, typename HT>
__device__ __forceinline__ void staged_stage(const double* buf, int stage, int rows, int r, int L,
                                             const int* pw, const int* pbeta, const int* poff, int p_total,
                                             const double* vs, const double* dc, double* eb, double* tb,
                                             double* acc, const double* one, const int* coff, const int* cstride,
                                             const int* cu, int i0, int u0)
{
    const int hs = (int)hstride(r, P);
    const double* xs = buf + h_region<HT>(stage, hs);
    for (int e = threadIdx.x; e < L * rows; e += blockDim.x) {
        const int i = e / L, d = e - i * L, p = pw[d];
        const double* xr = xs + stage * poff[d] + i * p;
        const double* vd = vs + pbeta[d];
        double sum = 0.0;
        for (int c = 0; c < p; ++c) sum += xr[c] * vd[c];
        eb[e] = sum;
    }
    __syncthreads();
    each_row_coordinate(rows, r, i0, u0, [&](int i, int u) {
        tb[i * r + u] = row_column<P>((const HT*)buf + i * hs, r, L, u, dc, eb + i * L);
    });
    __syncthreads();
    accumulate_stage(buf, rows, r, p_total, tb, acc, one, coff, cstride, cu);
}

// staged_stage for two leading predictors (beta = (beta_0, beta_1, copied
// blocks), the BMS shape: pbeta = poff = {0, p_m}), with the widths in
// registers and the first two coordinates' indices in closed form: the
// generic phases' per-element loads of the design maps, division by L and
// loop over the predictors cost the BMS operator 3-11% of its HVP time
// (bench_report, H200).
template <int P, typename HT>
__device__ __forceinline__ void staged_stage_pair(const double* buf, int stage, int rows, int r, int p_m, int p_g,
                                                  int p_total, const double* vs, const double* dc, double* qb,
                                                  double* tb, double* acc, const double* one, const int* coff,
                                                  const int* cstride, const int* cu, int i0, int u0)
{
    const int hs = (int)hstride(r, P);
    const double* xm = buf + h_region<HT>(stage, hs);
    const double* xg = xm + stage * p_m;
    for (int e = threadIdx.x; e < 2 * rows; e += blockDim.x) {
        const int i = e >> 1;
        double d = 0.0;
        if (e & 1)
            for (int c = 0; c < p_g; ++c) d += xg[i * p_g + c] * vs[p_m + c];
        else
            for (int c = 0; c < p_m; ++c) d += xm[i * p_m + c] * vs[c];
        qb[e] = d;
    }
    __syncthreads();
    each_row_coordinate(rows, r, i0, u0, [&](int i, int u) {
        tb[i * r + u] = row_column2<P>((const HT*)buf + i * hs, r, u, dc, qb[2 * i], qb[2 * i + 1]);
    });
    __syncthreads();
    accumulate_stage(buf, rows, r, p_total, tb, acc, one, coff, cstride, cu);
}

// Shared memory: RING mbarriers (4 slots), RING buffers of `stage` rows
// (their H_i, then their rows of each design in turn; `stage` is even and
// every design starts 256-byte aligned in x, so every region stays 16-byte
// aligned), then v, the accumulators, dc, the predictors (L a row) and t
// for a stage's rows, the constant 1, and the column maps.
// Block b owns rows [b * rows_per_block, ...), a multiple of `stage`, taken
// in order: results are bitwise repeatable.
template <int P, int RING, typename HT, int PAIR>
__device__ __forceinline__ void hvp_staged_body(
    double* sh, i64 n, int rows_per_block, int stage, int r, int p_total, const HT* __restrict__ hess, int dw,
    DESIGN_PARAMS, const int* __restrict__ primary_to_beta, const int* __restrict__ col_kind,
    const int* __restrict__ col_j, const int* __restrict__ col_u, const double* __restrict__ v,
    double* __restrict__ partial)
{
    const i64 hs = hstride(r, P);
    const int hreg = h_region<HT>(stage, (int)hs);
    const i64 buf_len = hreg + (i64)stage * dw;
    // PAIR: two leading predictors, beta_0 then beta_1 at the head of beta
    // (the host launches the _pair kernels only for those). Their maps are
    // read once, into registers: the copies below are issued between
    // asm barriers that would make every stage reload them from memory.
    const int p_m = PAIR ? pw[0] : 0, p_g = PAIR ? pw[1] : 0;
    const double* x_m = PAIR ? x + pb[0] : x;
    const double* x_g = PAIR ? x + pb[1] : x;
    after_previous(); // launched as a dependent of the kernel that wrote v
    unsigned long long* bars = (unsigned long long*)sh;
    double* bufs = sh + 4;
    double* vs = bufs + RING * buf_len;
    double* acc = vs + p_total;
    double* dc = acc + p_total;
    double* eb = dc + r;
    double* tb = eb + L * stage;
    double* one = tb + stage * r;
    int* coff = (int*)(one + 1);
    int* cstride = coff + p_total;
    int* cu = cstride + p_total;
    const i64 first = (i64)blockIdx.x * rows_per_block;
    const i64 last = min(first + rows_per_block, n);
    const int stages = (int)((last - first + stage - 1) / stage);
    const bool bulk = HAVE_BULK && ((((unsigned long long)hess | (unsigned long long)x) & 15) == 0);
    if (bulk && threadIdx.x == 0)
        for (int k = 0; k < RING; ++k) bar_init(bars + k);
    __syncthreads();
    // Stage k's rows [first + k stage, ...) into buffer k % RING.
    auto issue = [&](int k) {
        const i64 r0 = first + (i64)k * stage;
        const int rows = (int)min((i64)stage, last - r0);
        double* buf = bufs + (k % RING) * buf_len;
        const int h_bytes = rows * (int)hs * (int)sizeof(HT);
        if (!bulk) {
            stage_region(buf, hess + r0 * hs, h_bytes);
            if (PAIR) {
                stage_region(buf + hreg, x_m + r0 * p_m, rows * p_m * 8);
                stage_region(buf + hreg + stage * p_m, x_g + r0 * p_g, rows * p_g * 8);
            } else {
                for (int d = 0; d < L; ++d)
                    stage_region(buf + hreg + stage * poff[d], x + pb[d] + r0 * pw[d], rows * pw[d] * 8);
            }
        } else if (threadIdx.x == 0) {
            unsigned long long* bar = bars + k % RING;
            unsigned bytes = bulk_region(buf, hess + r0 * hs, h_bytes, bar);
            if (PAIR) {
                bytes += bulk_region(buf + hreg, x_m + r0 * p_m, rows * p_m * 8, bar);
                bytes += bulk_region(buf + hreg + stage * p_m, x_g + r0 * p_g, rows * p_g * 8, bar);
            } else {
                for (int d = 0; d < L; ++d)
                    bytes += bulk_region(buf + hreg + stage * poff[d], x + pb[d] + r0 * pw[d], rows * pw[d] * 8, bar);
            }
            bar_expect(bar, bytes);
        }
    };
    for (int k = 0; k < RING - 1; ++k) {
        if (k < stages) issue(k);
        copy_async_commit();
    }
    for (int a = threadIdx.x; a < p_total; a += blockDim.x) {
        vs[a] = v[a];
        acc[a] = 0.0;
        const int kind = col_kind[a], j = col_j[a];
        coff[a] = kind >= 0 ? hreg + stage * poff[kind] + j : 0;
        cstride[a] = kind >= 0 ? pw[kind] : 0;
        cu[a] = col_u[a];
    }
    for (int u = threadIdx.x; u < r; u += blockDim.x) dc[u] = u >= L ? v[primary_to_beta[u]] : 0.0;
    if (threadIdx.x == 0) *one = 1.0;
    const int i0 = (int)threadIdx.x / r, u0 = (int)threadIdx.x - i0 * r;
    for (int k = 0; k < stages; ++k) {
        // Buffer (k + RING - 1) % RING was read in step k - 1, which the
        // barrier closing that step has finished. Bulk: each buffer's
        // barrier completes one phase per use. Per thread: one group is
        // committed per step, so with RING - 1 left pending this step's has
        // landed.
        if (k + RING - 1 < stages) issue(k + RING - 1);
        copy_async_commit();
        if (bulk)
            bar_wait(bars + k % RING, (unsigned)(k / RING) & 1u);
        else
            copy_async_wait<RING - 1>();
        __syncthreads();
        const int rows = (int)min((i64)stage, last - (first + (i64)k * stage));
        const double* buf = bufs + (k % RING) * buf_len;
        if (PAIR)
            staged_stage_pair<P, HT>(buf, stage, rows, r, p_m, p_g, p_total, vs, dc, eb, tb, acc, one, coff, cstride,
                                     cu, i0, u0);
        else
            staged_stage<P, HT>(buf, stage, rows, r, L, pw, pbeta, poff, p_total, vs, dc, eb, tb, acc, one, coff,
                                cstride, cu, i0, u0);
        __syncthreads();
    }
    let_next_start(); // only now: a full wave of stages needs its SMs
    for (int a = threadIdx.x; a < p_total; a += blockDim.x) partial[(i64)blockIdx.x * p_total + a] = acc[a];
}

#define HVP_STAGED_ARGS                                                                                   \
    sh_staged, n, rows_per_block, stage, r, p_total, hess, dw, DESIGN_ARGS, primary_to_beta, col_kind, col_j, \
        col_u, v, partial

#define HVP_STAGED_PARAMS                                                                                 \
    i64 n, int rows_per_block, int stage, int ring, int r, int packed, int p_total,                       \
        const double *__restrict__ hess, int dw, DESIGN_PARAMS, const int *__restrict__ primary_to_beta,  \
        const int *__restrict__ col_kind, const int *__restrict__ col_j, const int *__restrict__ col_u,   \
        const double *__restrict__ v, double *__restrict__ partial

#define HVP_STAGED_DISPATCH(PAIR)                                            \
    extern __shared__ __align__(16) double sh_staged[];                      \
    if (packed) {                                                            \
        if (ring == 2) hvp_staged_body<1, 2, double, PAIR>(HVP_STAGED_ARGS);      \
        else if (ring == 3) hvp_staged_body<1, 3, double, PAIR>(HVP_STAGED_ARGS); \
        else hvp_staged_body<1, 4, double, PAIR>(HVP_STAGED_ARGS);                \
    } else {                                                                 \
        if (ring == 2) hvp_staged_body<0, 2, double, PAIR>(HVP_STAGED_ARGS);      \
        else if (ring == 3) hvp_staged_body<0, 3, double, PAIR>(HVP_STAGED_ARGS); \
        else hvp_staged_body<0, 4, double, PAIR>(HVP_STAGED_ARGS);                \
    }

// ring: 2, 3 or 4 buffers (the host's plan picks one). The _pair kernels
// serve two leading predictors (the BMS shape) as entry points of their
// own, so that the generic path's registers do not weigh on them.
extern "C" __global__ void hvp_staged(HVP_STAGED_PARAMS) { HVP_STAGED_DISPATCH(0) }
extern "C" __global__ void hvp_staged_pair(HVP_STAGED_PARAMS) { HVP_STAGED_DISPATCH(1) }

#define HVP_STAGED_F32_PARAMS                                                                             \
    i64 n, int rows_per_block, int stage, int ring, int r, int p_total, const float *__restrict__ hess,   \
        int dw, DESIGN_PARAMS, const int *__restrict__ primary_to_beta, const int *__restrict__ col_kind, \
        const int *__restrict__ col_j, const int *__restrict__ col_u, const double *__restrict__ v,       \
        double *__restrict__ partial

#define HVP_STAGED_F32_DISPATCH(PAIR)                                      \
    extern __shared__ __align__(16) double sh_staged[];                    \
    if (ring == 2) hvp_staged_body<1, 2, float, PAIR>(HVP_STAGED_ARGS);      \
    else if (ring == 3) hvp_staged_body<1, 3, float, PAIR>(HVP_STAGED_ARGS); \
    else hvp_staged_body<1, 4, float, PAIR>(HVP_STAGED_ARGS);

// The staged HVP over single-precision packed rows (half the bytes of
// packed doubles): each stored value is widened to double where it is
// used, so the products and every sum are taken in double, as above. The
// host keeps `stage` a multiple of 4 so each stage's rows end on 16 bytes.
extern "C" __global__ void hvp_staged_f32(HVP_STAGED_F32_PARAMS) { HVP_STAGED_F32_DISPATCH(0) }
extern "C" __global__ void hvp_staged_f32_pair(HVP_STAGED_F32_PARAMS) { HVP_STAGED_F32_DISPATCH(1) }

// Single-precision packed rows from double rows, full (packed = 0) or
// packed: out[row, k] = the k-th upper-triangle entry, rounded to nearest.
extern "C" __global__ void pack_upper_rows_f32(i64 n, int r, int packed, const double* __restrict__ src,
                                               float* __restrict__ out, double* __restrict__ flag)
{
    const i64 per = (i64)r * (r + 1) / 2;
    const i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n * per) return;
    const float f = __double2float_rn(src[packed ? e : full_index_of_packed(e, r, per)]);
    // A value beyond the float range: flag it (a plain store, the same
    // value from every writer) so the host keeps the f64 rows.
    if (isinf(f)) flag[0] = 1.0;
    out[e] = f;
}
