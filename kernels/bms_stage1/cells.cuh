// One part of a cell's coefficient arrays (cells.rs, Bases::cell), scaled
// by s_f: part 0 the cell-level arrays and coordinate u = 1 (b), part
// 1 + j score function j, part 1 + p_h + l link function l. Each part
// carries its coordinate's d eta / d theta_u (x), d2 eta / da d theta_u
// (ar) and explicit d2 eta / db d theta_u (s); part 0 also eta, A and AA.
struct CellPart {
    double x[4], ar[4], s[4];
    double eta[4], A[4], AA[4];
};

__device__ void scale4(double* dst, const double* src, double s)
{
    for (int k = 0; k < 4; ++k) dst[k] = s * src[k];
}

// z p(z) for deg p <= 2.
__device__ void times_z(const double* p, double* out)
{
    out[0] = 0.0; out[1] = p[0]; out[2] = p[1]; out[3] = p[2];
}

// The parts are independent, so Stage 2 builds a tile's cells a thread per
// (cell, part), each part from the pieces it needs on the cell's segments
// seg_h, seg_w (found once a cell, by bms_cell_moments). Every part sets
// x, ar and s, and part 0 also eta, A and AA, the fields Stage 2 reads;
// nothing else is written (zeroing all six arrays first cost 24 of a
// part's instructions). An empty slot (lo NaN) gets zeros, so Stage 2 adds
// exact zeros for it.
__device__ void cell_part(const Model& m, double a, double b, double lo, int seg_h, int seg_w, int p_h, int part,
                          CellPart& o)
{
    const double s_f = m.s_f;
    if (isnan(lo)) {
        for (int k = 0; k < 4; ++k) { o.x[k] = 0.0; o.ar[k] = 0.0; o.s[k] = 0.0; }
        if (part == 0)
            for (int k = 0; k < 4; ++k) { o.eta[k] = 0.0; o.A[k] = 0.0; o.AA[k] = 0.0; }
        return;
    }
    double t[4];
    if (part == 0) {
        Pieces p;
        cell_pieces_at(m, a, b, seg_h, seg_w, p);
        eta_and_a(p, a, b, s_f, o.eta, o.A);
        scale4(o.AA, p.l2, s_f);
        // u = 1 (b): s_f (z + H + z L'), s_f z L''; and d2 eta / db2 = s_f z^2 L''.
        double zl1[4];
        times_z(p.l1, zl1);
        const double zpoly[4] = {0.0, 1.0, 0.0, 0.0};
        for (int k = 0; k < 4; ++k) t[k] = (zpoly[k] + p.h[k]) + zl1[k];
        scale4(o.x, t, s_f);
        times_z(p.l2, t);
        scale4(o.ar, t, s_f);
        double t2[4];
        times_z(t, t2);
        scale4(o.s, t2, s_f);
        return;
    }
    if (part <= p_h) {
        const int j = part - 1;
        double bh[4];
        load_cubic(m.h.pieces + ((i64)seg_h * m.h.dim + j) * 4, bh);
        scale4(o.x, bh, s_f * b);
        scale4(o.s, bh, s_f);
        for (int k = 0; k < 4; ++k) o.ar[k] = 0.0;
        return;
    }
    const int l = part - 1 - p_h;
    double bw[4], bwz[4], bw1t[4], bw1[4];
    load_cubic(m.w.pieces + ((i64)seg_w * m.w.dim + l) * 4, bw);
    compose_affine(bw, a, b, bwz);
    deriv(bw, bw1t);
    compose_affine(bw1t, a, b, bw1);
    scale4(o.x, bwz, s_f);
    scale4(o.ar, bw1, s_f);
    times_z(bw1, t);
    scale4(o.s, t, s_f);
}

// A part's cubics about the cell's moment_center c, as its moments are
// taken (cells.rs: CellParts::shift, the same operations).
__device__ void shift_part(CellPart& o, double c, int part)
{
    shift_cubic(o.x, c);
    shift_cubic(o.ar, c);
    shift_cubic(o.s, c);
    if (part != 0) return;
    shift_cubic(o.eta, c);
    shift_cubic(o.A, c);
    shift_cubic(o.AA, c);
}

// A block of bms_cell_moments takes CELL_ROWS rows consecutive in `order`
// (a lane each) and CELL_SLOTS consecutive slots of them (a warp each), so
// a warp's lanes take one slot of rows alike (bms_calibrate), cells that
// are alike (the tails together, the interior together) and take similar
// paths; row-major threads mixed a row's tails with its interior cells in
// a warp (10.9 of 32 lanes active, measured). The lanes' rows lie apart in
// memory, so each lane storing its own moments wrote a sector a lane and
// double: the warps waited on those stores more than on anything else
// (Nsight Compute, session 33). They are staged in shared memory instead
// and stored a row's slots at a time, CELL_SLOTS x MOMENTS doubles that
// are contiguous; CELL_STAGE is odd, so the lanes' staging rows fall in
// different banks.
#define CELL_ROWS 32
#define CELL_SLOTS 4
#define CELL_STAGE (CELL_SLOTS * MOMENTS + 1)

// One cell slot: its segments (written to bounds beside its edges) and its
// moments where a closed form gives them (cell_moments_closed) into mom;
// zeros there for an empty slot (fewer cells, or a row whose intercept
// failed: its cells at a possibly non-finite a would only cost quadrature
// that cannot converge; Stage 2 adds exact zeros for it) and for a cell
// that needs the quadrature, which is queued instead (its index c within
// the part appended to `queue`, `queued` counting) for bms_cell_quadrature:
// taken here, one lane's quadrature held its warp's other lanes idle.
__device__ void cell_slot(const Model& m, i64 row, int slot, int slots, const double* __restrict__ row_b,
                          const double* __restrict__ row_a, const unsigned int* __restrict__ row_status,
                          double* __restrict__ bounds, double* mom, unsigned int* __restrict__ queue,
                          unsigned int* __restrict__ queued)
{
    const i64 c = row * slots + slot;
    // lo and hi in one load, with a, b and the status beside it: a chain
    // of dependent loads was the warps' other long wait.
    const double2 edge = *reinterpret_cast<const double2*>(bounds + 4 * c);
    const double a = row_a[row], b = row_b[row];
    const unsigned int status = row_status[row];
    double2* segments = reinterpret_cast<double2*>(bounds + 4 * c + 2);
    for (int k = 0; k < MOMENTS; ++k) mom[k] = 0.0;
    if (status != CAL_OK || isnan(edge.x)) {
        *segments = make_double2(0.0, 0.0);
        return;
    }
    Pieces p;
    cell_pieces(m, a, b, edge.x, edge.y, p);
    double eta[4], A[4];
    eta_and_a(p, a, b, m.s_f, eta, A);
    *segments = make_double2(p.seg_h, p.seg_w);
    if (cell_moments_closed(eta, edge.x, edge.y, mom)) return;
    for (int k = 0; k < MOMENTS; ++k) mom[k] = 0.0;
    queue[atomicAdd(queued, 1u)] = (unsigned int)c;
}

// At most 102 registers (5 blocks an SM; at the fit's shape and 1M rows,
// H100, session 33: 4 blocks 5.34 ms, 5 5.04, 6 8.62).
// Launched with CELL_ROWS x CELL_SLOTS threads a block (or one, as the
// host replay does: every loop below strides by the block's size) and
// ceil(n / CELL_ROWS) x ceil(slots / CELL_SLOTS) blocks, the row groups
// within each group of slots. The queue's order depends on the lanes'
// timing, not its contents: each queued cell's moments are computed from
// that cell alone.
// Blocks an SM of bms_cell_moments and bms_cell_quadrature (their register
// caps), which MATFREE_NVRTC_OPTIONS=-DCELL_MOMENT_BLOCKS=k (or
// CELL_QUAD_BLOCKS) sets. bms_cell_moments at the seed shape, 1M rows,
// H100 (session 42): 4 blocks (120 registers) 5.09 ms, 5 4.75, 6 8.68.
#ifndef CELL_MOMENT_BLOCKS
#define CELL_MOMENT_BLOCKS 5
#endif
#ifndef CELL_QUAD_BLOCKS
#define CELL_QUAD_BLOCKS 4
#endif
extern "C" __global__ void __launch_bounds__(128, CELL_MOMENT_BLOCKS) bms_cell_moments(
    int n, const unsigned int* __restrict__ order, int slots, MODEL_PARAMS, const double* __restrict__ row_b,
    const double* __restrict__ row_a, const unsigned int* __restrict__ row_status, double* __restrict__ bounds,
    double* __restrict__ cm, unsigned int* __restrict__ queue, unsigned int* __restrict__ queued)
{
    __shared__ double staged[CELL_ROWS * CELL_STAGE];
    const int groups = (n + CELL_ROWS - 1) / CELL_ROWS;
    const int group = (int)(blockIdx.x % groups), first_slot = (int)(blockIdx.x / groups) * CELL_SLOTS;
    const int first = group * CELL_ROWS, rows = min(CELL_ROWS, n - first);
    const int here = min(CELL_SLOTS, slots - first_slot);
    const Model m = make_model(MODEL_ARGS);
    for (int u = threadIdx.x; u < CELL_ROWS * CELL_SLOTS; u += blockDim.x) {
        const int lane = u % CELL_ROWS, w = u / CELL_ROWS;
        if (lane < rows && w < here)
            cell_slot(m, order[first + lane], first_slot + w, slots, row_b, row_a, row_status, bounds,
                      staged + lane * CELL_STAGE + w * MOMENTS, queue, queued);
    }
    __syncthreads();
    const int width = here * MOMENTS;
    for (int i = threadIdx.x; i < rows * width; i += blockDim.x) {
        const int r = i / width, j = i - r * width;
        const i64 row = order[first + r];
        cm[(row * slots + first_slot) * MOMENTS + j] = staged[r * CELL_STAGE + j];
    }
}

// The queued cells' moments by adaptive quadrature (cell_moments_quadrature),
// grid-strided over the queue: consecutive lanes take consecutive entries,
// cells of one slot and alike rows. eta is rebuilt from the segments
// bms_cell_moments stored, the same operations as there.
extern "C" __global__ void __launch_bounds__(128, CELL_QUAD_BLOCKS) bms_cell_quadrature(
    int slots, MODEL_PARAMS, const double* __restrict__ row_b, const double* __restrict__ row_a,
    const double* __restrict__ bounds, double* __restrict__ cm, const unsigned int* __restrict__ queue,
    const unsigned int* __restrict__ queued)
{
    const Model m = make_model(MODEL_ARGS);
    const i64 total = *queued, stride = (i64)gridDim.x * blockDim.x;
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        const i64 c = queue[t], row = c / slots;
        const double a = row_a[row], b = row_b[row];
        Pieces p;
        cell_pieces_at(m, a, b, (int)bounds[4 * c + 2], (int)bounds[4 * c + 3], p);
        double eta[4], A[4];
        eta_and_a(p, a, b, m.s_f, eta, A);
        double mom[MOMENTS];
        cell_moments_quadrature(eta, bounds[4 * c], bounds[4 * c + 1], mom);
        for (int k = 0; k < MOMENTS; ++k) cm[c * MOMENTS + k] = mom[k];
    }
}
