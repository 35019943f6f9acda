// The dense joint Hessian of a one-predictor layout with r = 1 (a GLM's
// X^T diag(h) X) on the FP64 tensor cores: where dense_staged_partial
// (row_hessian.cu) gives each upper-triangle entry a thread and reads every
// row's design values from shared memory once an entry, here a warp owns
// 8 x 8 blocks (bu <= bv) of the upper triangle and adds four rows at a time
// with one mma.m8n8k4: A = X[rows, 8 bu..] transposed, B = h X[rows, 8 bv..].
// Block (x, y) = (a group of GRAM_ACC blocks a warp, a chunk of rows); the
// chunk's rows are staged `stage` at a time (a multiple of 4; coalesced
// loads, columns past p and rows past the chunk's end zero) and every warp
// adds them in row order, so the sums do not depend on `stage`, and
// partial[chunk] is summed over chunks by reduce_partials in a fixed tree.
// `stride` (the staged row's length, at least 8 ceil(p / 8), 4 mod 16)
// keeps each half-warp's fragment loads on distinct banks. Entries of the
// diagonal blocks below the diagonal are written too; mirror_upper
// overwrites them after the reduction. Needs sm_80 (the host checks).

typedef long long i64;

#define GRAM_ACC 4

// The k-th 8 x 8 block (u, v), u <= v, of the upper triangle of a tiles x
// tiles grid of blocks, row by row.
__device__ __forceinline__ void gram_pair(int k, int tiles, int* u, int* v)
{
    int row = 0;
    while (k >= tiles - row) {
        k -= tiles - row;
        ++row;
    }
    *u = row;
    *v = row + k;
}

extern "C" __global__ void gram_r1_partial(i64 n, int p, int rows_per_chunk, int stride, int stage,
                                           const double* __restrict__ x, const double* __restrict__ h,
                                           double* __restrict__ partial)
{
#if __CUDA_ARCH__ >= 800
    extern __shared__ double sh[];
    double* sx = sh;
    double* sw = sh + (i64)stage * stride;
    const int tiles = (p + 7) >> 3, pairs = tiles * (tiles + 1) / 2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int q = lane & 3, i = lane >> 2;
    int bu[GRAM_ACC], bv[GRAM_ACC];
    double c0[GRAM_ACC], c1[GRAM_ACC];
#pragma unroll
    for (int j = 0; j < GRAM_ACC; ++j) {
        const int k = (blockIdx.x * GRAM_ACC + j) * warps + warp;
        c0[j] = c1[j] = 0.0;
        bu[j] = bv[j] = -1;
        if (k < pairs) gram_pair(k, tiles, &bu[j], &bv[j]);
    }
    const i64 first = (i64)blockIdx.y * rows_per_chunk;
    const i64 last = min(first + rows_per_chunk, n);
    for (i64 r0 = first; r0 < last; r0 += stage) {
        const int rows = (int)min((i64)stage, last - r0);
        const int padded = (rows + 3) & ~3;
        __syncthreads(); // the last stage's rows are read
        // Eight loads in flight a thread before their stores.
        for (int k0 = threadIdx.x; k0 < padded * stride; k0 += 8 * blockDim.x) {
            double v[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const int k = k0 + u * blockDim.x, t = k / stride, c = k - t * stride;
                v[u] = (k < padded * stride && t < rows && c < p) ? x[(r0 + t) * p + c] : 0.0;
            }
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const int k = k0 + u * blockDim.x;
                if (k < padded * stride) sx[k] = v[u];
            }
        }
        for (int t = threadIdx.x; t < padded; t += blockDim.x) sw[t] = t < rows ? h[r0 + t] : 0.0;
        __syncthreads();
        for (int t = 0; t < padded; t += 4) {
            const double* row = sx + (t + q) * stride;
            const double w = sw[t + q];
#pragma unroll
            for (int j = 0; j < GRAM_ACC; ++j) {
                if (bu[j] < 0) break; // the same for the whole warp
                const double a = row[8 * bu[j] + i];
                const double b = w * row[8 * bv[j] + i];
                asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};"
                             : "+d"(c0[j]), "+d"(c1[j])
                             : "d"(a), "d"(b));
            }
        }
    }
    double* out = partial + (i64)blockIdx.y * p * p;
#pragma unroll
    for (int j = 0; j < GRAM_ACC; ++j) {
        if (bu[j] < 0) break;
        const int r = 8 * bu[j] + i, c = 8 * bv[j] + 2 * q;
        if (r < p && c < p) out[(i64)r * p + c] = c0[j];
        if (r < p && c + 1 < p) out[(i64)r * p + c + 1] = c1[j];
    }
#endif
}
