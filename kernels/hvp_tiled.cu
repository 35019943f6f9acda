// Single-vector H v over single-precision row Hessians in tiles of 32 rows.
//
// Storage ("tiled"): tile g holds, for each packed upper-triangle entry e of
// its rows (row-major: row s holds columns s..R-1), 32 consecutive floats,
// one per row; the designs are tiled the same way, in floats too (column c
// of the tile's rows, 32 consecutive values; doubles would be a fifth of
// what a product reads at the seed shape). A warp reads entry e of its 32
// rows with one 128-byte load and a tile's bytes are contiguous, so the
// rows stream with no shared-memory staging. Rows past n are zeros and add
// nothing.
//
// A lane owns one row of a tile: it forms q = x_m . v_m, b = x_g . v_g and
// t = H_i (q, b, dc) in registers and adds t's pullback to sums kept in
// shared memory, a slot per lane and coordinate. The shape is compiled in
// (the host prepends TILED_R, TILED_PM and TILED_PG), so t and the
// unrolled triangle live in registers; TILED_WARPS (warps a block) and
// TILED_MIN_BLOCKS (blocks an SM the registers must allow) set the block.
// At the end a block adds its lanes' sums in a fixed order: one partial a
// block, bitwise repeatable (reduce_partials adds them). Every product and
// sum is in double.

typedef long long i64;

#define R TILED_R
#define PM TILED_PM
#define PG TILED_PG
#define PT (PM + PG + R - 2)
#define HS (R * (R + 1) / 2)
#define TILE 32
#define WARPS TILED_WARPS

// q = x_m . v_m and b = x_g . v_g for a lane's row of a tile.
__device__ __forceinline__ void tile_qb(const float* xm, const float* xg, const double* vs, double* q, double* b)
{
    double qq = 0.0, bb = 0.0;
#pragma unroll
    for (int c = 0; c < PM; ++c) qq += (double)xm[c * TILE] * vs[c];
#pragma unroll
    for (int c = 0; c < PG; ++c) bb += (double)xg[c * TILE] * vs[PM + c];
    *q = qq;
    *b = bb;
}

// t = H_i u with u = (q, b, dc). H is symmetric: entry (s, c), s <= c,
// adds to t_s and, off the diagonal, to t_c.
__device__ __forceinline__ void tile_t(const float* hp, double q, double b, const double* dcs, double* t)
{
#pragma unroll
    for (int s = 0; s < R; ++s) t[s] = 0.0;
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
}

// Coordinate s's pullback of t_s into a lane's sums (stride TILE):
// marginal columns for s = 0, slope columns for s = 1, the copied
// coordinate PM + PG + s - 2 otherwise.
__device__ __forceinline__ void tile_pullback(int s, double ts, const float* xm, const float* xg, double* sums)
{
    if (s == 0) {
#pragma unroll
        for (int c = 0; c < PM; ++c) sums[c * TILE] += ts * (double)xm[c * TILE];
    } else if (s == 1) {
#pragma unroll
        for (int c = 0; c < PG; ++c) sums[(PM + c) * TILE] += ts * (double)xg[c * TILE];
    } else {
        sums[(PM + PG + s - 2) * TILE] += ts;
    }
}

// Block b takes tiles [b * tiles_per_block, ...), its warp w every WARPS-th
// of them from the w-th; a lane's sums over its warp's tiles sit in a slot
// of its own (acc[w][a][lane], a the coordinate), which leaves the
// registers to t and to loads in flight. Dynamic shared memory: WARPS PT 32
// accumulators, then v's design part and dc.
// partial[b * PT + col] is then beta column col's sum over the block, in a
// fixed order: marginal columns first, then slope columns, then the copied
// coordinates at primary_to_beta[s].
extern "C" __global__ void __launch_bounds__(WARPS * 32, TILED_MIN_BLOCKS) hvp_tiled(
    i64 tiles, i64 tiles_per_block, const float* __restrict__ h, const float* __restrict__ xm_t,
    const float* __restrict__ xg_t, const int* __restrict__ primary_to_beta, const double* __restrict__ v,
    double* __restrict__ partial)
{
    extern __shared__ double sh_tiled[];
    double* acc = sh_tiled;
    double* vs = acc + WARPS * PT * TILE;
    double* dcs = vs + PM + PG;
    for (int a = threadIdx.x; a < WARPS * PT * TILE; a += blockDim.x) acc[a] = 0.0;
    after_previous(); // launched as a dependent of the kernel that wrote v
    for (int a = threadIdx.x; a < PM + PG; a += blockDim.x) vs[a] = v[a];
    for (int s = threadIdx.x; s < R; s += blockDim.x) dcs[s] = s >= 2 ? v[primary_to_beta[s]] : 0.0;
    __syncthreads();
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    double* mine = acc + w * PT * TILE + lane;
    const i64 first = (i64)blockIdx.x * tiles_per_block;
    const i64 last = min(first + tiles_per_block, tiles);
    for (i64 g = first + w; g < last; g += WARPS) {
        const float* xm = xm_t + g * (PM * TILE) + lane;
        const float* xg = xg_t + g * (PG * TILE) + lane;
        double q, b, t[R];
        tile_qb(xm, xg, vs, &q, &b);
        tile_t(h + g * (i64)(HS * TILE) + lane, q, b, dcs, t);
#pragma unroll
        for (int s = 0; s < R; ++s) tile_pullback(s, t[s], xm, xg, mine);
    }
    // Only now: the reduction's blocks would take registers that the
    // tiles' blocks of a full wave need.
    let_next_start();
    __syncthreads();
    for (int a = threadIdx.x; a < PT; a += blockDim.x) {
        double s = 0.0;
        for (int k = 0; k < WARPS; ++k)
            for (int l = 0; l < TILE; ++l) s += acc[(k * PT + a) * TILE + l];
        const int col = a < PM + PG ? a : primary_to_beta[a - (PM + PG) + 2];
        partial[(i64)blockIdx.x * PT + col] = s;
    }
}

// Where a tile holds row `row`'s value `e` of `width` (the layout above):
// idx = ((row / 32) width + e) 32 + row % 32. The inverse, for a thread
// that owns out[idx]: (row, e).
__device__ __forceinline__ void tile_slot(i64 idx, int width, i64* row, int* e)
{
    *e = (int)((idx / TILE) % width);
    *row = (idx / ((i64)TILE * width)) * TILE + (idx % TILE);
}

// x rounded to float, flagging (flag[0] = 1, a plain store: every writer
// stores the same value) an x whose float is infinite: beyond the float
// range (or already infinite) the kernel would read infinities. With `tiny`
// set a non-zero x below the smallest normal float is flagged too (a design
// column of such values would lose its relative precision).
__device__ __forceinline__ float to_float_checked(double x, int tiny, double* flag)
{
    const float f = __double2float_rn(x);
    if (isinf(f) || (tiny && x != 0.0 && fabsf(f) < 1.17549435e-38f)) flag[0] = 1.0;
    return f;
}

// This thread's entry of an n x width array in tiles: its index in the
// tiled array, its row and its column; false past the last tile.
__device__ __forceinline__ bool tiled_thread(i64 n, int width, i64* idx, i64* row, int* col)
{
    const i64 tiles = (n + TILE - 1) / TILE;
    *idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (*idx >= tiles * width * TILE) return false;
    tile_slot(*idx, width, row, col);
    return true;
}

// Tiled single-precision rows from double rows, full (packed = 0) or
// packed: entry e of row `row` (packed row-major upper triangle;
// full_index_of_packed from kernels/packed_index.cuh, prepended by the
// host); zero past n. flag[0] = 1 where some value overflows a float.
extern "C" __global__ void tile_rows_f32(
    i64 n, int packed, const double* __restrict__ src, float* __restrict__ out, double* __restrict__ flag)
{
    i64 idx, row;
    int e;
    if (!tiled_thread(n, HS, &idx, &row, &e)) return;
    if (row >= n) {
        out[idx] = 0.0f;
        return;
    }
    const i64 at = packed ? row * HS + e : full_index_of_packed(row * HS + e, R, HS);
    out[idx] = to_float_checked(src[at], 0, flag);
}

// A design (n x width, row-major) in float tiles: column c of row `row`;
// zero past n. flag[0] = 1 where a value overflows a float or is a
// non-zero below its normal range.
extern "C" __global__ void tile_design_f32(
    i64 n, int width, const double* __restrict__ x, float* __restrict__ out, double* __restrict__ flag)
{
    i64 idx, row;
    int c;
    if (!tiled_thread(n, width, &idx, &row, &c)) return;
    out[idx] = row < n ? to_float_checked(x[row * width + c], 1, flag) : 0.0f;
}
