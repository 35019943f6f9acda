// The GLM's passes over its rows (src/gam/device.rs), after
// glm_family.cuh's row formulas. Each block takes a fixed range of rows
// (rows_per_block, a multiple of 4 that depends on n alone) and stages them,
// `stage` at a time, through shared memory with coalesced loads: one read of
// the design a pass. A thread a staged row (strided) forms eta = x_i . beta
// + offset and the row's jet; then each of the block's `cols` sums (the
// gradient sum_i g_i x_i column by column, the value, the count of rejected
// rows) is split by row index mod G (G fixed by cols and the block's
// threads), each part owned by one thread that adds its staged rows in row
// order, and the parts are combined in order at the end: no atomics, and the
// same bits whatever the stage (so whatever the device's shared memory).
//
// Modes: ROWS writes each row's value, gradient and Hessian (divided by
// the scale) and sums [gradient (p), value, rejected]; VALUE sums
// [value, rejected] alone; THIRD writes u[i, k] = t_i (x_i . d_k) / phi for
// m directions d_k (t_i the third derivative) and sums [0, non-finite].
// A rejected row is one whose value, gradient, Hessian (ROWS, VALUE) or
// u (THIRD) is not finite; first_bad[block] is the block's first (-1: none).

#define MODE_ROWS 0
#define MODE_VALUE 1
#define MODE_THIRD 2

// Which optional columns are given (bits of `given`); absent ones are
// trials 1, weights 1, offset 0.
#define GIVEN_TRIALS 1
#define GIVEN_WEIGHTS 2
#define GIVEN_OFFSET 4

// x . v over p values, four running sums (x in shared memory, v anywhere).
__device__ __forceinline__ double glm_dot(const double* x, const double* v, int p)
{
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
    int c = 0;
    for (; c + 3 < p; c += 4) {
        a0 += x[c] * v[c];
        a1 += x[c + 1] * v[c + 1];
        a2 += x[c + 2] * v[c + 2];
        a3 += x[c + 3] * v[c + 3];
    }
    for (; c < p; ++c) a0 += x[c] * v[c];
    return (a0 + a1) + (a2 + a3);
}

// Rows r0.. of the design into shared memory (row i at sx + i stride):
// eight loads in flight a thread before their stores (a load-then-store
// loop waits on each load in turn: the pass then ran at 15% of the
// bandwidth).
__device__ __forceinline__ void glm_stage_rows(const double* __restrict__ src, int count, int p, int stride,
                                               double* sx, int tid, int nt)
{
    for (int k0 = tid; k0 < count; k0 += 8 * nt) {
        double v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int k = k0 + u * nt;
            v[u] = k < count ? src[k] : 0.0;
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int k = k0 + u * nt;
            if (k < count) {
                const int i = k / p;
                sx[i * stride + (k - i * p)] = v[u];
            }
        }
    }
}

// Dynamic shared memory, in doubles: x (stage x stride), beta (p), g, v,
// bad (stage each), the accumulators (cols G, at most max(nt, cols)) and
// each residue's first rejected row (G, at most nt).
extern "C" __global__ void glm_rows(
    i64 n, int p, int stride, int stage, i64 rows_per_block, int mode, int family, int link, double inv_phi,
    const double* __restrict__ x, const double* __restrict__ beta, const double* __restrict__ y,
    const double* __restrict__ trials, const double* __restrict__ weights, const double* __restrict__ offset,
    int given, const double* __restrict__ dirs, int m, double* __restrict__ neglog, double* __restrict__ grad,
    double* __restrict__ hess, double* __restrict__ third, double* __restrict__ partial,
    i64* __restrict__ first_bad)
{
    extern __shared__ double sh[];
    double* sx = sh;
    double* sbeta = sx + (i64)stage * stride;
    double* sg = sbeta + p;
    double* sv = sg + stage;
    double* sbad = sv + stage;
    double* sacc = sbad + stage;
    const int cols = (mode == MODE_ROWS ? p : 0) + 2;
    const int tid = threadIdx.x, nt = blockDim.x;
    // Column c's rows of residue g (row mod G) are summed in row order by
    // one thread into sacc[g cols + c]: G is the largest power of two with
    // cols G <= nt (1 where the columns outnumber the threads), so every
    // thread sums (a value pass: 128 residues of its one column).
    int G = 1;
    while (2 * G * cols <= nt) G *= 2;
    double* sfirst = sacc + cols * G;
    for (int c = tid; c < p; c += nt) sbeta[c] = beta[c];
    for (int k = tid; k < cols * G; k += nt) sacc[k] = 0.0;
    for (int k = tid; k < G; k += nt) sfirst[k] = -1.0;
    const i64 first = (i64)blockIdx.x * rows_per_block;
    const i64 last = min(first + rows_per_block, n);
    for (i64 r0 = first; r0 < last; r0 += stage) {
        const int rows = (int)min((i64)stage, last - r0);
        __syncthreads(); // the last stage's rows are read
        glm_stage_rows(x + r0 * p, rows * p, p, stride, sx, tid, nt);
        __syncthreads();
        for (int t = tid; t < rows; t += nt) {
            const i64 row = r0 + t;
            const double* xr = sx + t * stride;
            const double yy = y[row];
            const double mm = (given & GIVEN_TRIALS) ? trials[row] : 1.0;
            const double ww = (given & GIVEN_WEIGHTS) ? weights[row] : 1.0;
            const double eta = glm_dot(xr, sbeta, p) + ((given & GIVEN_OFFSET) ? offset[row] : 0.0);
            double v = 0.0, g = 0.0;
            bool ok = true;
            if (mode == MODE_VALUE) {
                v = inv_phi * glm_value(family, link, yy, mm, ww, eta);
                ok = isfinite(v);
            } else {
                double j[4];
                glm_jet(family, link, yy, mm, ww, eta, j);
                if (mode == MODE_ROWS) {
                    v = inv_phi * j[0];
                    g = inv_phi * j[1];
                    const double h = inv_phi * j[2];
                    neglog[row] = v;
                    grad[row] = g;
                    hess[row] = h;
                    ok = isfinite(v) && isfinite(g) && isfinite(h);
                } else {
                    for (int k = 0; k < m; ++k) {
                        const double u = j[3] * glm_dot(xr, dirs + (i64)k * p, p) * inv_phi;
                        third[row * m + k] = u;
                        ok = ok && isfinite(u);
                    }
                }
            }
            sg[t] = g;
            sv[t] = v;
            sbad[t] = ok ? 0.0 : 1.0;
        }
        __syncthreads();
        const int shift = (int)(r0 % G);
        for (int k = tid; k < cols * G; k += nt) {
            const int c = k % cols, g = k / cols;
            double a = sacc[k];
            for (int t = (g - shift + G) % G; t < rows; t += G) {
                if (c < cols - 2) {
                    a += sx[t * stride + c] * sg[t];
                } else if (c == cols - 2) {
                    a += sv[t];
                } else if (sbad[t] != 0.0) {
                    a += 1.0;
                    if (sfirst[g] < 0.0) sfirst[g] = (double)(r0 + t);
                }
            }
            sacc[k] = a;
        }
    }
    __syncthreads();
    for (int c = tid; c < cols; c += nt) {
        double sum = 0.0;
        for (int g = 0; g < G; ++g) sum += sacc[g * cols + c];
        partial[(i64)blockIdx.x * cols + c] = sum;
    }
    if (tid == 0) {
        double f = -1.0;
        for (int g = 0; g < G; ++g)
            if (sfirst[g] >= 0.0 && (f < 0.0 || sfirst[g] < f)) f = sfirst[g];
        first_bad[blockIdx.x] = (i64)f;
    }
}

// Rows a block of glm_leverage_partial squares and sums at a time.
#define LEVERAGE_STAGE 128

// partial[block, k] = sum over the block's rows i of l_i u[i, k], with the
// leverage l_i = ||z_i||^2 (z = X K, K the lower Cholesky factor of A, so
// l_i = x_i^T A x_i): a thread a row for l_i (its columns in order), then
// one thread a direction adding the rows in order into four accumulators
// by row mod 4, combined in order. rows_per_block is a multiple of 4; z and
// u start at the tile's first row (a multiple of rows_per_block).
extern "C" __global__ void glm_leverage_partial(
    i64 rows, int p, int m, i64 rows_per_block, const double* __restrict__ z, const double* __restrict__ u,
    double* __restrict__ partial)
{
    __shared__ double sl[LEVERAGE_STAGE];
    extern __shared__ double sacc[]; // 4 m
    const int tid = threadIdx.x, nt = blockDim.x;
    for (int c = tid; c < 4 * m; c += nt) sacc[c] = 0.0;
    const i64 first = (i64)blockIdx.x * rows_per_block;
    const i64 last = min(first + rows_per_block, rows);
    for (i64 r0 = first; r0 < last; r0 += LEVERAGE_STAGE) {
        const int count = (int)min((i64)LEVERAGE_STAGE, last - r0);
        __syncthreads();
        for (int t = tid; t < count; t += nt) {
            const double* zr = z + (r0 + t) * p;
            double s = 0.0;
            for (int c = 0; c < p; ++c) s += zr[c] * zr[c];
            sl[t] = s;
        }
        __syncthreads();
        for (int k = tid; k < m; k += nt) {
            double a[4] = {sacc[4 * k], sacc[4 * k + 1], sacc[4 * k + 2], sacc[4 * k + 3]};
            for (int t = 0; t < count; t += 4) {
#pragma unroll
                for (int s = 0; s < 4; ++s) {
                    if (t + s >= count) break;
                    a[s] += sl[t + s] * u[(r0 + t + s) * m + k];
                }
            }
            for (int s = 0; s < 4; ++s) sacc[4 * k + s] = a[s];
        }
    }
    __syncthreads();
    for (int k = tid; k < m; k += nt)
        partial[(i64)blockIdx.x * m + k] = (sacc[4 * k] + sacc[4 * k + 1]) + (sacc[4 * k + 2] + sacc[4 * k + 3]);
}
