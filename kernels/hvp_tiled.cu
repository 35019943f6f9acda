// Single-vector H v over single-precision row Hessians in tiles of 32 rows.
//
// Storage ("tiled"): tile g holds, for each packed upper-triangle entry e of
// its rows (row-major: row s holds columns s..R-1), 32 consecutive floats,
// one per row; the designs are tiled the same way in doubles (column c of
// the tile's rows, 32 consecutive values). A warp reads entry e of its 32
// rows with one 128-byte load and a tile's bytes are contiguous, so the
// rows stream at the memory's rate with no shared-memory staging and no
// block barrier. Rows past n are zeros and add nothing.
//
// A lane owns one row of a tile: it forms q = x_m . v_m, b = x_g . v_g and
// t = H_i (q, b, dc) in registers and adds t's pullback to sums it keeps
// across the warp's tiles in a shared-memory slot of its own. The shape is
// compiled in (the host prepends TILED_R, TILED_PM and TILED_PG), so t and
// the unrolled triangle live in registers; TILED_WARPS (warps a block) and
// TILED_MIN_BLOCKS (blocks an SM the registers must allow) set the block.
// At the end the block adds its lanes' sums in a fixed order: one partial
// a block, bitwise repeatable. Every product and sum is taken in double.

typedef long long i64;

#define R TILED_R
#define PM TILED_PM
#define PG TILED_PG
#define PT (PM + PG + R - 2)
#define HS (R * (R + 1) / 2)
#define TILE 32
#define WARPS TILED_WARPS

// Block b takes tiles [b * tiles_per_block, ...), its warp w every WARPS-th
// of them from the w-th. Each lane keeps its sums over the warp's tiles in
// shared memory, in a slot of its own (acc[w][a][lane], a the coordinate:
// marginal columns, slope columns, then the copied coordinates s >= 2),
// which leaves the registers to t and to loads in flight. Dynamic shared
// memory: WARPS PT 32 accumulators, then v's design part and dc.
// partial[b * PT + col] is beta column col's sum: marginal columns first,
// then slope columns, then the copied coordinates at primary_to_beta[s].
extern "C" __global__ void __launch_bounds__(WARPS * 32, TILED_MIN_BLOCKS) hvp_tiled(
    i64 tiles, i64 tiles_per_block, const float* __restrict__ h, const double* __restrict__ xm_t,
    const double* __restrict__ xg_t, const int* __restrict__ primary_to_beta, const double* __restrict__ v,
    double* __restrict__ partial)
{
    extern __shared__ double sh_tiled[];
    double* acc = sh_tiled;
    double* vs = acc + WARPS * PT * TILE;
    double* dcs = vs + PM + PG;
    for (int a = threadIdx.x; a < WARPS * PT * TILE; a += blockDim.x) acc[a] = 0.0;
    for (int a = threadIdx.x; a < PM + PG; a += blockDim.x) vs[a] = v[a];
    for (int s = threadIdx.x; s < R; s += blockDim.x) dcs[s] = s >= 2 ? v[primary_to_beta[s]] : 0.0;
    __syncthreads();
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    double* mine = acc + w * PT * TILE + lane;
    const i64 first = (i64)blockIdx.x * tiles_per_block;
    const i64 last = min(first + tiles_per_block, tiles);
    for (i64 g = first + w; g < last; g += WARPS) {
        const double* xm = xm_t + g * (PM * TILE) + lane;
        const double* xg = xg_t + g * (PG * TILE) + lane;
        const float* hp = h + g * (i64)(HS * TILE) + lane;
        double q = 0.0, b = 0.0;
#pragma unroll
        for (int c = 0; c < PM; ++c) q += xm[c * TILE] * vs[c];
#pragma unroll
        for (int c = 0; c < PG; ++c) b += xg[c * TILE] * vs[PM + c];
        double t[R];
#pragma unroll
        for (int s = 0; s < R; ++s) t[s] = 0.0;
        // H is symmetric: entry (s, c), s <= c, adds to t_s and, off the
        // diagonal, to t_c.
#pragma unroll
        for (int s = 0; s < R; ++s) {
            const double us = s == 0 ? q : (s == 1 ? b : dcs[s]);
            const int row = s * R - s * (s - 1) / 2 - s;
#pragma unroll
            for (int c = s; c < R; ++c) {
                const double hv = (double)hp[(row + c) * TILE];
                const double uc = c == 0 ? q : (c == 1 ? b : dcs[c]);
                t[s] += hv * uc;
                if (c != s) t[c] += hv * us;
            }
        }
#pragma unroll
        for (int c = 0; c < PM; ++c) mine[c * TILE] += t[0] * xm[c * TILE];
#pragma unroll
        for (int c = 0; c < PG; ++c) mine[(PM + c) * TILE] += t[1] * xg[c * TILE];
#pragma unroll
        for (int s = 2; s < R; ++s) mine[(PM + PG + s - 2) * TILE] += t[s];
    }
    __syncthreads();
    for (int a = threadIdx.x; a < PT; a += blockDim.x) {
        double s = 0.0;
        for (int k = 0; k < WARPS; ++k)
            for (int l = 0; l < TILE; ++l) s += acc[(k * PT + a) * TILE + l];
        const int col = a < PM + PG ? a : primary_to_beta[a - (PM + PG) + 2];
        partial[(i64)blockIdx.x * PT + col] = s;
    }
}

// Tiled single-precision rows from double rows, full (packed = 0) or
// packed: out[(g HS + e) 32 + l] = entry e of row g 32 + l, rounded to
// nearest; zero past n.
extern "C" __global__ void tile_rows_f32(i64 n, int packed, const double* __restrict__ src, float* __restrict__ out)
{
    const i64 tiles = (n + TILE - 1) / TILE;
    const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= tiles * HS * TILE) return;
    const int l = (int)(idx % TILE);
    const int e = (int)((idx / TILE) % HS);
    const i64 row = (idx / ((i64)TILE * HS)) * TILE + l;
    if (row >= n) {
        out[idx] = 0.0f;
        return;
    }
    int s = 0, k = e;
    while (k >= R - s) {
        k -= R - s;
        ++s;
    }
    const i64 at = packed ? row * HS + e : row * R * R + (i64)s * R + s + k;
    out[idx] = __double2float_rn(src[at]);
}

// A design (n x width, row-major) in tiles: out[(g width + c) 32 + l] =
// x[g 32 + l, c]; zero past n.
extern "C" __global__ void tile_rows_f64(i64 n, int width, const double* __restrict__ x, double* __restrict__ out)
{
    const i64 tiles = (n + TILE - 1) / TILE;
    const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= tiles * width * TILE) return;
    const int l = (int)(idx % TILE);
    const int c = (int)((idx / TILE) % width);
    const i64 row = (idx / ((i64)TILE * width)) * TILE + l;
    out[idx] = row < n ? x[row * width + c] : 0.0;
}
