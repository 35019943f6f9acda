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
        const double* bh = m.h.pieces + ((i64)seg_h * m.h.dim + j) * 4;
        scale4(o.x, bh, s_f * b);
        scale4(o.s, bh, s_f);
        for (int k = 0; k < 4; ++k) o.ar[k] = 0.0;
        return;
    }
    const int l = part - 1 - p_h;
    const double* bw = m.w.pieces + ((i64)seg_w * m.w.dim + l) * 4;
    double bwz[4], bw1t[4], bw1[4];
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

// Per cell slot (one thread each): the cell's edges, the score and link
// segments that hold on it (bounds: lo, hi, seg_h, seg_w a slot; Stage 2
// reads them instead of searching the knots again) and its moments. An
// empty slot (fewer cells, or a row whose intercept failed: its cells at a
// possibly non-finite a would only cost quadrature that cannot converge)
// gets NaN edges and zero moments; Stage 2 (bms_row_bases) builds the
// cell's coefficient arrays from the edges and adds exact zeros for it.
// Capped at 128 registers (it took 152: 3 blocks an SM; 2.47 -> 2.26 ms at
// seed, measured).
extern "C" __global__ void __launch_bounds__(128, 4) bms_cell_moments(
    int n, const unsigned int* __restrict__ order, int slots, MODEL_PARAMS, const double* __restrict__ row_b,
    const double* __restrict__ row_a, const unsigned int* __restrict__ row_status, double* __restrict__ bounds,
    double* __restrict__ cm)
{
    const i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (i64)n * slots) return;
    // Slot-major threads: a warp takes one slot of 32 rows consecutive in
    // `order` (rows alike: bms_calibrate), cells that are alike (the tails
    // together, the interior together), so its lanes take similar
    // quadrature paths; row-major threads mixed a row's tails with its
    // interior cells in a warp (10.9 of 32 lanes active, measured).
    const int slot = (int)(t / n);
    const i64 row = order[t - (i64)slot * n], c = row * slots + slot;
    const Model m = make_model(MODEL_ARGS);
    const double a = row_a[row], b = row_b[row];
    const double lo = bounds[4 * c], hi = bounds[4 * c + 1];
    if (row_status[row] != CAL_OK || isnan(lo)) {
        bounds[4 * c + 2] = 0.0;
        bounds[4 * c + 3] = 0.0;
        for (int k = 0; k < MOMENTS; ++k) cm[c * MOMENTS + k] = 0.0;
        return;
    }
    Pieces p;
    cell_pieces(m, a, b, lo, hi, p);
    double eta[4], A[4];
    eta_and_a(p, a, b, m.s_f, eta, A);
    double mom[MOMENTS];
    cell_moments(eta, lo, hi, mom);
    bounds[4 * c + 2] = p.seg_h;
    bounds[4 * c + 3] = p.seg_w;
    for (int k = 0; k < MOMENTS; ++k) cm[c * MOMENTS + k] = mom[k];
}
