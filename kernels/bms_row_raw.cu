// Stage 2 of the Bernoulli marginal-slope model over the raw functions: a
// warp a row, from the cell slots' edges and moments that device Stage 1
// wrote (compiled after bms_stage1.cu and bms_row.cu, whose functions it
// uses). The CPU's fused evaluation (src/bms/model/fused.rs) is the model:
// every d eta / d theta_u is g_u raw_u + c1_u 1 + cz_u z over the row's
// r + 2 raw functions (d eta/da, d eta/db, 1, z, the raw score B-splines
// Bh_j(z) and link B-splines Bw_j(a + b z)), of which a cell carries at
// most 12 (four of each basis). So a cell adds a 12 x 12 block V^T M V (V
// its 12 cubics, M the Hankel matrix of its T_n) and 12 D sums to the
// row's raw sums, where over theta it added r x r and 3 r (bms_row_bases),
// and the row's sums over theta are formed once, at its end.
//
// A warp takes a row's cells a tile at a time: first a lane a cell builds
// its columns, T_n and its few other sums into shared memory (the build);
// then the warp adds the cells to the row's raw sums one after another, in
// cell order, by the tensor cores (8 x 8 x 4 at a time), in one of two
// ways. bms_row_dense<NT> (rows of at most 8 NT raw functions, NT = 3, 4)
// keeps the row's whole raw Q in the lanes' registers as NT (NT + 1) / 2
// tiles of 8 x 8 and adds each cell's U^T M U over all of them, U its 4 x
// nr cubics (zero where the cell lacks a function): no places to add at,
// nothing between cells but the side sums. bms_row_raw (wider rows) forms
// each cell's 12 x 12 block (W = V M, then W V^T) and each lane adds its
// entries of the block to the row's at the cell's places; a cell's places
// are distinct, the cells come in order and the warp synchronises between
// them. Either way no atomics, the same bits whatever the tile.

// The tensor-core path: on the device (sm_80 and later), and in the host
// replay's warp emulation (tests/replay/warp.h), a host thread a lane.
#if __CUDA_ARCH__ >= 800 || defined(WARP_EMULATION)
#define RAW_TENSOR 1
#else
#define RAW_TENSOR 0
#endif

// A cell's values in a tile, CELL_VALUES doubles apart (odd: the build's
// lanes, a cell each, store to different banks): V's stored columns (d
// eta/da, d eta/db, the four score and four link functions; the columns 1
// and z are formed where they are read, from the centre), T_n (7), kappa
// m_0..3, the centre, D(AA), D(AB), D(BB), D(Bw_j'(t)) and D(z Bw_j'(t))
// (4 each), the first score and link functions (an integer's bits each:
// first_of).
#define RAW_V 0
#define RAW_T 40
#define RAW_KM 47
#define RAW_CENTER 51
#define RAW_DENSE 52
#define RAW_W1 55
#define RAW_ZW1 59
#define RAW_FIRST 63
#define CELL_VALUES 65
// Raw functions a cell carries (columns of V).
#define RAW_COLS 12

// A basis's raw B-spline blocks: on segment s, B_{first[s] + k} for k <
// width ([segments][4][4], zero outside the knots) and each function's
// linear part [alpha_j, gamma_j] ([dim][2]).
struct RawBasis {
    const double *pieces, *first, *linear;
    int width;
};

// Where a warp's row keeps its sums (`raw_layout`): the tile, then the raw
// Q sums (nr rows of qs = (nr + 1) | 1: the upper triangle filled, column
// nr the raw D sums), D(AA), D(AB), D(BB), D(Bw_j') and D(z Bw_j') (p_w
// each), and the finish's per-coordinate values (8 r). The dense tiles
// (bms_row_dense<NT>) keep Q in registers until the row's last cell, so
// there the side sums come first and Q and the finish's values take the
// tile's place once its cells are spent, so that one tile can hold a row's
// every cell (one build, a lane a cell; rows.rs: dense_tile).
struct RawRow {
    double *tile, *Q, *dense, *w1, *zw1, *fin;
    int nr, qs;
};

__host__ __device__ __forceinline__ int raw_row_doubles(int r, int p_w, int tile, bool dense)
{
    const int nr = r + 2, cells = tile * CELL_VALUES, sums = nr * ((nr + 1) | 1) + 8 * r;
    return 3 + 2 * p_w + (dense ? (cells > sums ? cells : sums) : cells + sums);
}

__device__ RawRow raw_layout(double* sh, int r, int p_w, int tile, bool dense)
{
    RawRow w;
    w.nr = r + 2;
    w.qs = (w.nr + 1) | 1;
    w.dense = sh;
    w.w1 = w.dense + 3;
    w.zw1 = w.w1 + p_w;
    w.tile = w.zw1 + p_w;
    w.Q = dense ? w.tile : w.tile + tile * CELL_VALUES;
    w.fin = w.Q + w.nr * w.qs;
    return w;
}

// The raw D sum of function i.
__device__ __forceinline__ double raw_d(const RawRow& w, int i)
{
    return w.Q[i * w.qs + w.nr];
}

__device__ __forceinline__ double moment_dot(const double* p, const double* km)
{
    return p[0] * km[0] + p[1] * km[1] + p[2] * km[2] + p[3] * km[3];
}

// Where column k of V (k < 12, not 2 or 3) is stored in a cell's values.
__device__ __forceinline__ int stored_column(int k)
{
    return RAW_V + 4 * (k < 2 ? k : k - 2);
}

// A cell's first function of a basis, kept as an integer's bits (read by
// first_of: an integer move, where a double took a conversion in every
// cell of the summing loops); 0 where the basis is absent (and in an empty
// slot, all zeros).
__device__ __forceinline__ double first_bits(const RawBasis& b, int seg)
{
    return __longlong_as_double(b.width > 0 ? (long long)b.first[seg] : 0);
}

__device__ __forceinline__ int first_of(const double* C, int k)
{
    return (int)__double_as_longlong(C[RAW_FIRST + k]);
}

// A cell's dense values: eta's T_n, kappa m, the columns d eta/da and d
// eta/db, D(AA), D(AB), D(BB) and the score block, all about the cell's
// centre c.
__device__ void build_dense(const Model& m, const RawBasis& h, double a, double b, double c, int seg_h, int seg_w,
                            const double* mom, double* C)
{
    Pieces p;
    cell_pieces_at(m, a, b, seg_h, seg_w, p);
    double eta[4], A[4];
    eta_and_a(p, a, b, m.s_f, eta, A);
    shift_cubic(eta, c);
    for (int n = 0; n < 7; ++n) {
        double acc = 0.0;
        for (int e = 0; e < 4; ++e) acc = fma(eta[e], mom[e + n], acc);
        C[RAW_T + n] = acc * INV_TWO_PI;
    }
    double km[5];
    for (int k = 0; k < 5; ++k) km[k] = INV_TWO_PI * mom[k];
    for (int k = 0; k < 4; ++k) C[RAW_KM + k] = km[k];
    C[RAW_CENTER] = c;
    shift_cubic(A, c);
    double zl1[4], t[4];
    times_z(p.l1, zl1);
    const double zpoly[4] = {0.0, 1.0, 0.0, 0.0};
    for (int k = 0; k < 4; ++k) t[k] = m.s_f * ((zpoly[k] + p.h[k]) + zl1[k]);
    shift_cubic(t, c);
    for (int k = 0; k < 4; ++k) { C[stored_column(0) + k] = A[k]; C[stored_column(1) + k] = t[k]; }
    // AA = s_f L'', AB = s_f z L'', BB = s_f z^2 L''.
    double aa[4], ab[4], bb[4];
    scale4(aa, p.l2, m.s_f);
    times_z(aa, ab);
    times_z(ab, bb);
    shift_cubic(aa, c);
    shift_cubic(ab, c);
    shift_cubic(bb, c);
    C[RAW_DENSE] = moment_dot(aa, km);
    C[RAW_DENSE + 1] = moment_dot(ab, km);
    C[RAW_DENSE + 2] = moment_dot(bb, km);
    const double* q = h.pieces + (i64)seg_h * 16;
    for (int k = 0; k < 4; ++k) {
        double piece[4] = {0.0, 0.0, 0.0, 0.0};
        if (k < h.width) { load_cubic(q + 4 * k, piece); shift_cubic(piece, c); }
        for (int e = 0; e < 4; ++e) C[stored_column(4 + k) + e] = piece[e];
    }
    C[RAW_FIRST] = first_bits(h, seg_h);
}

// A cell's link values: Bw_j(t) and Bw_j'(t), t = a + b z, composed in the
// cell's frame (t = (a + b c) + b x), and D(Bw_j'(t)), D(z Bw_j'(t)).
__device__ void build_link(const RawBasis& w, double a, double b, double c, int seg_w, const double* mom, double* C)
{
    double km[6];
    for (int k = 0; k < 6; ++k) km[k] = INV_TWO_PI * mom[k];
    const double t0 = a + b * c;
    const double* q = w.pieces + (i64)seg_w * 16;
    for (int k = 0; k < 4; ++k) {
        double col[4] = {0.0, 0.0, 0.0, 0.0}, d1[4] = {0.0, 0.0, 0.0, 0.0};
        if (k < w.width) {
            double piece[4], dp[4];
            load_cubic(q + 4 * k, piece);
            compose_affine(piece, t0, b, col);
            deriv(piece, dp);
            compose_affine(dp, t0, b, d1);
        }
        for (int e = 0; e < 4; ++e) C[stored_column(8 + k) + e] = col[e];
        const double dw = moment_dot(d1, km);
        C[RAW_W1 + k] = dw;
        // z = c + x in the cell's frame.
        C[RAW_ZW1 + k] = c * dw + moment_dot(d1, km + 1);
    }
    C[RAW_FIRST + 1] = first_bits(w, seg_w);
}

// A cell's values into C (a lane a cell: every lane takes the same path).
// An empty slot (lo NaN) is all zeros, so it adds exact zeros.
__device__ void build_cell(const Model& m, const RawBasis& h, const RawBasis& w, double a, double b, const double* bd,
                           const double* mom, double* C)
{
    const double lo = bd[0], hi = bd[1];
    if (isnan(lo)) {
        for (int k = 0; k < CELL_VALUES; ++k) C[k] = 0.0;
        return;
    }
    const double c = moment_center(lo, hi);
    build_dense(m, h, a, b, c, (int)bd[2], (int)bd[3], mom, C);
    build_link(w, a, b, c, (int)bd[3], mom, C);
}

// Coefficient q of V's column k (k < 16; zero past 12) of a cell.
__device__ __forceinline__ double cell_column(const double* C, int k, int q)
{
    if (k == 2) return q == 0 ? 1.0 : 0.0;
    if (k == 3) return q == 0 ? C[RAW_CENTER] : q == 1 ? 1.0 : 0.0;
    return k < RAW_COLS ? C[stored_column(k) + q] : 0.0;
}

// Column k of a cell's V at the row's raw index k + sf (score, k = 4..7)
// or k + lfp (link, k = 8..11, lfp = lf + p_h - 4), dense columns at k;
// `placed` says whether the column is there at all (not past a block's
// width, nor past the 12 columns). For a lane's fixed k, only sf and lfp
// change from cell to cell.
__device__ __forceinline__ int place_of(int k, int sf, int lfp)
{
    return k + (k >= 4 && k < 8 ? sf : 0) + (k >= 8 ? lfp : 0);
}

__device__ __forceinline__ bool placed(int k, int wh, int ww)
{
    return k < 4 || (k < 8 ? k - 4 < wh : k < RAW_COLS && k - 8 < ww);
}

// One cell's contribution as a lane holds it: its six entries of the Q
// block, its two D values (lanes 4 k + 2), its side D sum (lanes 0..10)
// and the cell's first score and link functions.
struct CellFrags {
    double g[6], d0, d1, side;
    int sf, lf;
};

// What a lane reads and where it adds, the same for every cell of a row
// (formed once; the cell moves only the score and link places): the
// offsets of its operands in a cell's values (-1: the constant x0_c or
// zero), its rows' and columns' raw indices before the cell's offsets and
// whether they take sf (score), and which of its entries exist.
struct LaneMap {
    int x0_at, x1_at, bm_at;
    double x0_c;
    int row0, col0;
    bool row0_s, col0_s;
    bool ok[6], d0_ok, d1_ok, side_ok;
    int side_at;
};

__device__ LaneMap lane_map(int lane, int p_w, int wh, int ww)
{
    const int q = lane & 3, n = lane >> 2;
    LaneMap m;
    // x0 = V[n][q] (columns 2 and 3, 1 and z, formed from the centre).
    m.x0_at = n == 2 || (n == 3 && q != 0) ? -1 : n == 3 ? RAW_CENTER : stored_column(n) + q;
    m.x0_c = (n == 2 && q == 0) || (n == 3 && q == 1) ? 1.0 : 0.0;
    m.x1_at = n < 4 ? stored_column(8 + n) + q : -1;
    // B of W = V M: column n < 4 the Hankel T_{q+n}, column 4 kappa m_q.
    m.bm_at = n < 4 ? RAW_T + q + n : n == 4 ? RAW_KM + q : -1;
    m.row0 = n;
    m.row0_s = n >= 4;
    m.col0 = 2 * q;
    m.col0_s = q >= 2;
    const bool r0 = placed(n, wh, ww), r1 = placed(8 + n, wh, ww);
    const bool c[4] = {placed(2 * q, wh, ww), placed(2 * q + 1, wh, ww), placed(8 + 2 * q, wh, ww),
                       placed(9 + 2 * q, wh, ww)};
    for (int e = 0; e < 4; ++e) m.ok[e] = r0 && c[e];
    m.ok[4] = r1 && c[2];
    m.ok[5] = r1 && c[3];
    m.d0_ok = q == 2 && r0;
    m.d1_ok = q == 2 && r1;
    // The side sums: lanes 0..2 D(AA), D(AB), D(BB); 3..6 D(Bw_j'), 7..10
    // D(z Bw_j') of the link block's functions j (dense, w1 and zw1 lie one
    // after another in RawRow).
    const int j = lane < 3 ? 0 : lane < 7 ? lane - 3 : lane - 7;
    m.side_ok = lane < 3 || (lane < 11 && j < ww);
    m.side_at = lane < 3 ? lane : (lane < 7 ? 3 : 3 + p_w) + j;
    return m;
}

#if RAW_TENSOR
__device__ __forceinline__ void mma884(double& c0, double& c1, double a, double b)
{
#ifdef WARP_EMULATION
    emulated_mma884(c0, c1, a, b);
#else
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};"
                 : "+d"(c0), "+d"(c1) : "d"(a), "d"(b));
#endif
}

// The 16 x 8 x 4 product (sm_90: DMMA.16x8x4, twice the 8 x 8 x 4's work
// an instruction): two 8 x 8 x 4 products with one B, A's rows 0..7 from
// a0 into (c0, c1), rows 8..15 from a1 into (c2, c3), in the lanes'
// layout of mma884's. Before sm_90 (and in the replay), the two.
__device__ __forceinline__ void mma1684(double& c0, double& c1, double& c2, double& c3, double a0, double a1,
                                        double b)
{
#if defined(WARP_EMULATION) || __CUDA_ARCH__ < 900
    mma884(c0, c1, a0, b);
    mma884(c2, c3, a1, b);
#else
    asm volatile("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+d"(c0), "+d"(c1), "+d"(c2), "+d"(c3) : "d"(a0), "d"(a1), "d"(b));
#endif
}

// A cell's block V^T M V by the tensor cores: W = V M (with a fifth column
// kappa m, so that W's column 4 is D of each of V's columns), then W V^T,
// in the blocks (0, 0), (0, 1) and (1, 1) of 8 x 8. Lane l holds V[8 bu +
// l/4][l%4] as A of W = V M (row-major, k = 4) and, the same values, as B
// of W V^T (column-major).
__device__ __forceinline__ CellFrags cell_frags(const double* C, int lane, const LaneMap& m)
{
    const int q = lane & 3;
    CellFrags f;
    f.sf = first_of(C, 0);
    f.lf = first_of(C, 1);
    const double bm = m.bm_at >= 0 ? C[m.bm_at] : 0.0;
    const double x0 = m.x0_at >= 0 ? C[m.x0_at] : m.x0_c, x1 = m.x1_at >= 0 ? C[m.x1_at] : 0.0;
    double w00 = 0.0, w01 = 0.0, w10 = 0.0, w11 = 0.0;
    mma884(w00, w01, x0, bm);
    mma884(w10, w11, x1, bm);
    // W[l/4][q] as A: it sits in lane 4 (l/4) + q/2, component q%2.
    const int src = (lane & ~3) | (q >> 1);
    const double s00 = __shfl_sync(0xffffffffu, w00, src), s01 = __shfl_sync(0xffffffffu, w01, src);
    const double s10 = __shfl_sync(0xffffffffu, w10, src), s11 = __shfl_sync(0xffffffffu, w11, src);
    const double a0 = (q & 1) ? s01 : s00, a1 = (q & 1) ? s11 : s10;
    for (int e = 0; e < 6; ++e) f.g[e] = 0.0;
    mma884(f.g[0], f.g[1], a0, x0);
    mma884(f.g[2], f.g[3], a0, x1);
    mma884(f.g[4], f.g[5], a1, x1);
    // W's column 4 sits in lanes 4 k + 2, component 0.
    f.d0 = w00;
    f.d1 = w10;
    f.side = m.side_ok ? C[RAW_DENSE + lane] : 0.0;
    return f;
}

// A lane's part of a cell added to the row's sums at the cell's places:
// its entries (row l/4 or 8 + l/4, columns 2 (l%4) + {0, 1} or 8 + 2 (l%4)
// + {0, 1}; every entry a lane holds lies at a place of its own), D at
// its rows' column nr of Q, its side sum (at a fixed place, or at the
// cell's link functions).
__device__ __forceinline__ void add_frags(const RawRow& w, const CellFrags& f, const LaneMap& m, int lane, int p_h)
{
    const int lfp = f.lf + p_h - 4;
    const int row0 = (m.row0 + (m.row0_s ? f.sf : 0)) * w.qs, row1 = (8 + (lane >> 2) + lfp) * w.qs;
    const int col0 = m.col0 + (m.col0_s ? f.sf : 0), col1 = 8 + m.col0 + lfp;
    const int at[6] = {row0 + col0, row0 + col0 + 1, row0 + col1, row0 + col1 + 1, row1 + col1, row1 + col1 + 1};
    for (int e = 0; e < 6; ++e)
        if (m.ok[e]) w.Q[at[e]] += f.g[e];
    if (m.d0_ok) w.Q[row0 + w.nr] += f.d0;
    if (m.d1_ok) w.Q[row1 + w.nr] += f.d1;
    if (m.side_ok) w.dense[m.side_at + (lane < 3 ? 0 : f.lf)] += f.side;
}
#endif

// One cell of a tile (its values C) added to the row's raw sums by one
// thread (the host replay), in the same blocks as the tensor cores: rows
// 0..7 by columns 0..11, rows 8..11 by columns 8..11.
__device__ void add_cell_serial(const RawRow& w, const double* C, int p_h, int p_w, int wh, int ww)
{
    const int sf = first_of(C, 0), lf = first_of(C, 1), lfp = lf + p_h - 4;
    for (int i = 0; i < RAW_COLS; ++i) {
        if (!placed(i, wh, ww)) continue;
        const int gi = place_of(i, sf, lfp);
        double v[4], W[4];
        for (int p = 0; p < 4; ++p) v[p] = cell_column(C, i, p);
        for (int p = 0; p < 4; ++p)
            W[p] = v[0] * C[RAW_T + p] + v[1] * C[RAW_T + p + 1] + v[2] * C[RAW_T + p + 2] + v[3] * C[RAW_T + p + 3];
        w.Q[gi * w.qs + w.nr] += moment_dot(v, C + RAW_KM);
        for (int j = i < 8 ? 0 : 8; j < RAW_COLS; ++j) {
            if (!placed(j, wh, ww)) continue;
            double vj[4];
            for (int p = 0; p < 4; ++p) vj[p] = cell_column(C, j, p);
            w.Q[gi * w.qs + place_of(j, sf, lfp)] += dot4(W, vj);
        }
    }
    for (int k = 0; k < 3; ++k) w.dense[k] += C[RAW_DENSE + k];
    for (int j = 0; j < ww; ++j) {
        w.w1[lf + j] += C[RAW_W1 + j];
        w.zw1[lf + j] += C[RAW_ZW1 + j];
    }
}

// The finish's per-coordinate values (RawRow::fin, r each): the
// combination g, c1, cz (d eta/d theta_u = g raw_u + c1 1 + cz z), Q_raw
// (raw_u, 1) and (raw_u, z), then F_u (D(X_u)), D(AR_u) and D(S_1u).
#define FIN_G 0
#define FIN_C1 1
#define FIN_CZ 2
#define FIN_A1 3
#define FIN_AZ 4
#define FIN_D 5
#define FIN_E 6
#define FIN_S 7

__device__ __forceinline__ int raw_of(int u)
{
    return u < 2 ? u : u + 2;
}

__device__ __forceinline__ double raw_q(const RawRow& w, int i, int j)
{
    return i <= j ? w.Q[i * w.qs + j] : w.Q[j * w.qs + i];
}

// Coordinate u's finish values (fused.rs: Sums::combination and finish).
__device__ void finish_coordinate(const RawRow& w, const Model& m, const RawBasis& h, const RawBasis& lw, int r,
                                  int p_h, double a, double b, int u)
{
    const double s_f = m.s_f;
    double g = 1.0, c1 = 0.0, cz = 0.0, e = 0.0, s = 0.0;
    const int pu = raw_of(u);
    if (u == 0) {
        e = w.dense[0];
    } else if (u == 1) {
        e = w.dense[1];
        s = w.dense[2];
    } else if (u < 2 + p_h) {
        const double al = h.linear[2 * (u - 2)], ga = h.linear[2 * (u - 2) + 1];
        g = s_f * b;
        c1 = -g * al;
        cz = -g * ga;
        s = s_f * (raw_d(w, pu) - al * raw_d(w, 2) - ga * raw_d(w, 3));
    } else {
        const int j = u - 2 - p_h;
        const double al = lw.linear[2 * j], ga = lw.linear[2 * j + 1];
        g = s_f;
        c1 = -s_f * (al + ga * a);
        cz = -s_f * ga * b;
        e = s_f * (w.w1[j] - ga * raw_d(w, 2));
        s = s_f * (w.zw1[j] - ga * raw_d(w, 3));
    }
    double* f = w.fin;
    f[FIN_G * r + u] = g;
    f[FIN_C1 * r + u] = c1;
    f[FIN_CZ * r + u] = cz;
    f[FIN_A1 * r + u] = raw_q(w, pu, 2);
    f[FIN_AZ * r + u] = raw_q(w, pu, 3);
    f[FIN_D * r + u] = g * raw_d(w, pu) + c1 * raw_d(w, 2) + cz * raw_d(w, 3);
    f[FIN_E * r + u] = e;
    f[FIN_S * r + u] = s;
}

// The raw Q sums of the functions 1 and z: Q(1, 1), Q(1, z), Q(z, z).
struct OneZ {
    double r11, r1z, rzz;
};

__device__ __forceinline__ OneZ one_z(const RawRow& w)
{
    return {w.Q[2 * w.qs + 2], w.Q[2 * w.qs + 3], w.Q[3 * w.qs + 3]};
}

// Q(X_u, X_v) over theta, u <= v, from the raw sums.
__device__ __forceinline__ double theta_q(const RawRow& w, const OneZ& oz, int r, int u, int v)
{
    const double* f = w.fin;
    const double gu = f[FIN_G * r + u], gv = f[FIN_G * r + v];
    const double c1u = f[FIN_C1 * r + u], c1v = f[FIN_C1 * r + v];
    const double czu = f[FIN_CZ * r + u], czv = f[FIN_CZ * r + v];
    const double r11 = oz.r11, r1z = oz.r1z, rzz = oz.rzz;
    return gu * gv * w.Q[raw_of(u) * w.qs + raw_of(v)] +
           gu * (c1v * f[FIN_A1 * r + u] + czv * f[FIN_AZ * r + u]) +
           gv * (c1u * f[FIN_A1 * r + v] + czu * f[FIN_AZ * r + v]) +
           (c1u * c1v * r11 + (c1u * czv + czu * c1v) * r1z + czu * czv * rzz);
}

// The row's outputs from its finish values, as bms_row_body's tail does
// from its sums: the q-row override (F_u[0] = -mu_1, F_uu[0][0] = -mu_2,
// the rest of coordinate 0 zero), the implicit function theorem, the
// probit layer. A lane a coordinate, then a lane a packed Hessian entry.
__device__ void raw_row_tail(const RawRow& w, int r, i64 row, int lane, int ws, const double* __restrict__ row_mu1,
                             const double* __restrict__ row_mu2, const double* __restrict__ row_y,
                             const double* __restrict__ row_w, ROW_TAIL_PARAMS)
{
    const i64 rp = (i64)r * (r + 1) / 2;
    double* H = out_hess + row * rp;
    double* grad = out_grad + row * r;
    double* f = w.fin;
    const double F_a = f[FIN_D * r];
    if (!(F_a > 0.0 && isfinite(F_a))) {
        for (i64 e = lane; e < rp; e += ws) H[e] = 0.0;
        for (int u = lane; u < r; u += ws) grad[u] = 0.0;
        if (lane == 0) { out_neglog[row] = 0.0; out_status[row] = ROW_BAD_FA; }
        return;
    }
    const double inv_Fa = 1.0 / F_a;
    // Every lane has read F_a (FIN_D's first) before lane 0 overwrites it
    // (the replay's warp emulation found the race).
    __syncwarp();
    // F_au = D(AR_u) - Q(A, X_u) in FIN_E, a_u = -F_u / F_a in FIN_D
    // (theta_q reads neither).
    double* F_au = f + FIN_E * r;
    double* a_u = f + FIN_D * r;
    const double F_aa = w.dense[0] - w.Q[0];
    const OneZ oz = one_z(w);
    for (int u = lane; u < r; u += ws) {
        F_au[u] = u == 0 ? 0.0 : F_au[u] - theta_q(w, oz, r, 0, u);
        a_u[u] = -(u == 0 ? -row_mu1[row] : a_u[u]) * inv_Fa;
    }
    __syncwarp();
    const double* S = f + FIN_S * r;
    const double chi = row_chi[row], xi = row_xi[row];
    const double* rho = row_rho + row * r;
    const double* tau = row_tau + row * r;
    // r_uv: row 1 of it (zero off row and column 1; see bms_observed).
    const double* ruv = row_ruv + row * r;
    const double y = row_y[row], wt = row_w[row], s = 2.0 * y - 1.0;
    double log_cdf, lambda, curv;
    log_ndtr_mills_curvature(s * row_e_obs[row], &log_cdf, &lambda, &curv);
    const RowJets j = {chi, xi, -wt * s * lambda, wt * curv, inv_Fa, F_aa};
    const double mu2 = row_mu2[row];
    bool bad = false;
    // (u, v) of packed entry k, stepped along with k (rows of r - u
    // entries) instead of solved for at every k.
    int u = 0, v = 0;
    if (lane < rp) upper_pair(lane, r, &u, &v);
    for (i64 k = lane; k < rp; k += ws, v += ws) {
        while (v >= r) { ++u; v -= r - u; }
        const double f_uv = u == 0 ? (v == 0 ? -mu2 : 0.0) : (u == 1 ? S[v] : 0.0) - theta_q(w, oz, r, u, v);
        const double h =
            hess_entry(j, f_uv, F_au[u], F_au[v], a_u[u], a_u[v], rho[u], rho[v], tau[u], tau[v], u == 1 ? ruv[v] : 0.0);
        H[k] = h;
        bad |= !isfinite(h);
    }
    for (int u = lane; u < r; u += ws) {
        const double g = j.A * (chi * a_u[u] + rho[u]);
        grad[u] = g;
        bad |= !isfinite(g);
    }
    bad = __any_sync(0xffffffffu, bad);
    if (lane == 0) {
        const double nl = -wt * log_cdf;
        out_neglog[row] = nl;
        out_status[row] = (bad || !isfinite(nl)) ? ROW_NON_FINITE : ROW_OK;
    }
}


// The dense tiles (bms_row_dense<NT>, rows of nr <= 8 NT raw functions):
// each cell's 4 x nr matrix U of cubics (U[k][f]: coefficient k of raw
// function f in the cell, zero where the cell does not carry f) makes Q +=
// U^T M U, formed as the tensor cores' 8 x 8 tiles (I, J), I <= J, of the
// row's whole Q, summed in the lanes' registers over the row's cells: no
// places, no shared-memory adds, no synchronisation between cells. Lane l
// holds U[l % 4][8 I + l / 4] of row block I (A of W_I = U_I^T M' and B
// of the tiles (., I)); W_I's column 1, M' kappa m there, is D of U_I's
// functions (dense_bm). The extra flops on zeros cost less than places:
// at NT = 3 a cell takes 3 DMMA.16x8x4 and 3 DMMA.8x8x4 (W_0 and W_1 at
// once, W_2; the tiles (0, 0), (0..1, 1), (0..1, 2), (2, 2)).
// Arrays of NT (at least one: bms_row_raw instantiates NT = 0).
#define DENSE_N(n) ((n) > 0 ? (n) : 1)

// The tiles of 8 a dense kernel takes for rows of r coordinates (its r +
// 2 raw functions), 0 past 4: rows.rs' dense_kernel, which the replay
// checks against this.
__host__ __device__ constexpr int dense_tiles(int r)
{
    return r + 2 <= 24 ? 3 : r + 2 <= 32 ? 4 : 0;
}

// A lane's part of the row's tiles (I, J), I <= J, in order (dense_tile),
// and of its D sums (lanes 4 i: function 8 I + i).
__host__ __device__ constexpr int dense_tile(int nt, int I, int J)
{
    return I * nt - I * (I - 1) / 2 + (J - I);
}

template <int NT>
struct DenseSums {
    double q[DENSE_N(NT * (NT + 1) / 2)][2];
    double d[DENSE_N(NT)];
};

#if RAW_TENSOR
// A cell's side sum at place d, if the cell has one there (false if not):
// D(AA), D(AB), D(BB) at places 0..2, D(Bw_j') and D(z Bw_j') at 3 + jw
// and 3 + p_w + jw for the cell's link columns j = jw - lf < ww.
__device__ __forceinline__ bool side_value(const double* C, int d, int p_w, int lf, int ww, double* v)
{
    const bool link = d >= 3, z = d >= 3 + p_w;
    const int j = link ? d - 3 - (z ? p_w : 0) - lf : 0;
    if ((unsigned)j >= (unsigned)(link ? ww : 1)) return false;
    *v = C[link ? (z ? RAW_ZW1 : RAW_W1) + j : RAW_DENSE + d];
    return true;
}

// Where lane l reads U[k][f] of block I in a cell's values (f = 8 I + l/4,
// k = l%4), or -1: the score column j = f - 4 - sf where j < wh, the link
// column j = f - 4 - p_h - lf where j < ww (either j is out of range where
// f is not of that basis), else, in block 0, d eta/da or d eta/db (lanes
// 0..7, stored first) or the centre (U[0][3], lane 12; the rest of the
// columns 1 and z are the constants dense_one gives).
__device__ __forceinline__ int dense_at(int I, int lane, int sf, int lf, int p_h, int wh, int ww)
{
    const int f = 8 * I + (lane >> 2), q = lane & 3, js = f - 4 - sf, jl = f - 4 - p_h - lf;
    int at = I > 0 ? -1 : lane < 8 ? lane : lane == 12 ? RAW_CENTER : -1;
    // Selects, not branches: every lane forms both places.
    const int score = stored_column(4) + 4 * js + q, link = stored_column(8) + 4 * jl + q;
    at = (unsigned)jl < (unsigned)ww ? link : at;
    return (unsigned)js < (unsigned)wh ? score : at;
}

// U[k][f] where dense_at gives -1: U[0][2] = U[1][3] = 1 (the columns 1
// and z = c + x about the centre c), else zero.
__device__ __forceinline__ double dense_one(int I, int lane)
{
    return I == 0 && (lane == 8 || lane == 13) ? 1.0 : 0.0;
}

// Where lane l's B of W_I = U_I^T M' lies in a cell's values (-1: zero):
// B[k][n] = M'[k][n], k = l%4, n = l/4, M' M's columns 0..3 in its columns
// 0, 2, 4, 6 and kappa m in column 1. W_I's entries (i, 2 k) then sit in
// lane 4 i + k, component 0: A's layout of the tiles, no shuffles.
__device__ __forceinline__ int dense_bm(int lane)
{
    const int k = lane & 3, n = lane >> 2;
    return n % 2 == 0 ? RAW_T + k + n / 2 : n == 1 ? RAW_KM + k : -1;
}

// One cell (its values C) added to the lane's tiles and D sums.
template <int NT>
__device__ __forceinline__ void dense_cell(const double* C, int p_h, int wh, int ww, int bm_at, DenseSums<NT>& acc,
                                           int lane)
{
    const int sf = first_of(C, 0), lf = first_of(C, 1);
    const double bm = bm_at >= 0 ? C[bm_at] : 0.0;
    double x[DENSE_N(NT)], wa[DENSE_N(NT)];
#pragma unroll
    for (int I = 0; I < NT; ++I) {
        const int at = dense_at(I, lane, sf, lf, p_h, wh, ww);
        x[I] = at >= 0 ? C[at] : dense_one(I, lane);
    }
    // W_I[l/4][l%4] lands in the lane's first component, as A of the tiles
    // needs it (dense_bm); D of function 8 I + l/4 is added to its second
    // where l%4 = 0. Blocks two at a time, by the 16 x 8 x 4 product.
#pragma unroll
    for (int I = 0; I < NT; I += 2) {
        wa[I] = 0.0;
        if (I + 1 < NT) {
            wa[I + 1] = 0.0;
            mma1684(wa[I], acc.d[I], wa[I + 1], acc.d[I + 1], x[I], x[I + 1], bm);
        } else {
            mma884(wa[I], acc.d[I], x[I], bm);
        }
    }
    // The tiles (I, J), I <= J: rows I and I + 1 of column J at once where
    // both are wanted.
#pragma unroll
    for (int J = 0; J < NT; ++J)
#pragma unroll
        for (int I = 0; I <= J; I += 2) {
            double* q0 = acc.q[dense_tile(NT, I, J)];
            if (I + 1 <= J) {
                double* q1 = acc.q[dense_tile(NT, I + 1, J)];
                mma1684(q0[0], q0[1], q1[0], q1[1], wa[I], wa[I + 1], x[J]);
            } else {
                mma884(q0[0], q0[1], wa[I], x[J]);
            }
        }
}

// A tile's side sums added to the row's, a lane a place (d = lane, lane +
// 32, ...), each place's cells in order in a register: no two lanes add at
// one place, and the sums are those (the same order, the same bits) the
// cell loop formed before by a read-modify-write of shared memory at every
// cell. Out of the cell loop they leave it free of shared-memory stores,
// so that it unrolls (DENSE_UNROLL) without spills.
__device__ void dense_sides(const RawRow& w, const double* tile, int nc, int p_w, int ww, int lane)
{
    for (int d = lane; d < 3 + 2 * p_w; d += 32) {
        double s = w.dense[d];
        for (int j = 0; j < nc; ++j) {
            const double* C = tile + j * CELL_VALUES;
            double v;
            if (side_value(C, d, p_w, first_of(C, 1), ww, &v)) s += v;
        }
        w.dense[d] = s;
    }
}

// The lane's tiles and D sums into the row's raw Q (its upper triangle, and
// the lower halves of the diagonal tiles, which no one reads).
template <int NT>
__device__ void dense_store(const RawRow& w, const DenseSums<NT>& acc, int lane)
{
    const int q = lane & 3, i = lane >> 2;
#pragma unroll
    for (int I = 0; I < NT; ++I) {
        const int f = 8 * I + i;
        if (q == 0 && f < w.nr) w.Q[f * w.qs + w.nr] = acc.d[I];
#pragma unroll
        for (int J = I; J < NT; ++J)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int g = 8 * J + 2 * q + e;
                if (f < w.nr && g < w.nr) w.Q[f * w.qs + g] = acc.q[dense_tile(NT, I, J)][e];
            }
    }
}
#endif

// Warps a block of bms_row_raw (a row each): rows.rs RAW_WARPS. At least
// RAW_BLOCKS blocks an SM (registers capped at 128 a thread). Four warps a
// block, not two: the SM reserves 1 KB of shared memory a block, and with
// 8 blocks the seed shape's one tile of 27 cells a warp would not fit.
#define RAW_WARPS 4
// The dense kernels' cell loop unrolled by DENSE_UNROLL
// (MATFREE_NVRTC_OPTIONS=-DDENSE_UNROLL=k): the compiler overlaps one
// cell's loads and W = U^T M' with the last cell's tiles. At the seed
// shape (NVRTC 12.9, sm_90) 97 instructions a cell and a spilled reload,
// 85 without the side sums, 60 unrolled by 4 (no reloads); Stage 2 at 1M
// rows, H100, session 43: 10.38 ms before, 10.61 with the side sums after
// the loop alone, 9.80 unrolled by 2, 9.69-9.71 by 4.
#ifndef DENSE_UNROLL
#define DENSE_UNROLL 4
#endif
#define RAW_BLOCKS (16 / RAW_WARPS)

#define RAW_KERNEL_PARAMS                                                                                  \
    ROW_COMMON_PARAMS, MODEL_PARAMS, const double *__restrict__ raw_h, const double *__restrict__ first_h,  \
        const double *__restrict__ lin_h, const double *__restrict__ raw_w, const double *__restrict__ first_w, \
        const double *__restrict__ lin_w, int tile, const double *__restrict__ row_a,                       \
        const double *__restrict__ row_b, const double *__restrict__ bounds,                                \
        const double *__restrict__ cell_moments, ROW_TAIL_PARAMS
#define RAW_KERNEL_ARGS                                                                                    \
    n_rows, r, p_h, p_w, row_mu1, row_mu2, row_y, row_w, cell_offsets, MODEL_ARGS, raw_h, first_h, lin_h,  \
        raw_w, first_w, lin_w, tile, row_a, row_b, bounds, cell_moments, ROW_TAIL_ARGS

// A row of Stage 2 over the raw functions: its cells built a tile at a
// time, summed by the scattered blocks (NT = 0, bms_row_raw) or the dense
// tiles (NT > 0, bms_row_dense<NT>), then finished.
template <int NT>
__device__ void raw_row(RAW_KERNEL_PARAMS)
{
    extern __shared__ double raw_sh[];
    // A warp a row; a block of fewer than 32 threads (the host replay's one)
    // takes one row, its threads each lane in turn.
    const int ws = min((int)blockDim.x, 32), warps = max((int)blockDim.x / 32, 1);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const i64 row = (i64)blockIdx.x * warps + warp;
    if (row >= n_rows) return;
    const Model m = make_model(MODEL_ARGS);
    const RawBasis h = {raw_h, first_h, lin_h, min(dh, 4)}, lw = {raw_w, first_w, lin_w, min(dw, 4)};
    const RawRow w = raw_layout(raw_sh + (i64)warp * raw_row_doubles(r, p_w, tile, NT > 0), r, p_w, tile, NT > 0);
#if RAW_TENSOR
    const LaneMap lm = lane_map(lane, p_w, h.width, lw.width);
    DenseSums<NT> acc;
    const int bm_at = dense_bm(lane);
    for (int t = 0; t < NT * (NT + 1) / 2; ++t) acc.q[t][0] = acc.q[t][1] = 0.0;
    for (int I = 0; I < NT; ++I) acc.d[I] = 0.0;
#endif
    // The side sums, and the scattered blocks' Q (dense_store writes every
    // entry of it that is read).
    for (int k = lane; k < 3 + 2 * p_w + (NT > 0 ? 0 : w.nr * w.qs); k += ws)
        (k < 3 + 2 * p_w ? w.dense[k] : w.Q[k - 3 - 2 * p_w]) = 0.0;
    const double a = row_a[row], b = row_b[row];
    const i64 lo = cell_offsets[row], hi = cell_offsets[row + 1];
    for (i64 t0 = lo; t0 < hi; t0 += tile) {
        const int nc = (int)min((i64)tile, hi - t0);
        __syncwarp();
        for (int j = lane; j < nc; j += ws)
            build_cell(m, h, lw, a, b, bounds + 4 * (t0 + j), cell_moments + MOMENTS * (t0 + j),
                       w.tile + j * CELL_VALUES);
        __syncwarp();
#if RAW_TENSOR
        if (NT > 0) {
#pragma unroll DENSE_UNROLL
            for (int j = 0; j < nc; ++j) dense_cell<NT>(w.tile + j * CELL_VALUES, p_h, h.width, lw.width, bm_at, acc, lane);
            dense_sides(w, w.tile, nc, p_w, lw.width, lane);
            continue;
        }
        // The next cell's block is formed before this one's is added (it
        // reads only the tile), so that the two overlap.
        CellFrags f = cell_frags(w.tile, lane, lm);
        for (int j = 0; j < nc; ++j) {
            CellFrags next = f;
            if (j + 1 < nc) next = cell_frags(w.tile + (j + 1) * CELL_VALUES, lane, lm);
            __syncwarp();
            add_frags(w, f, lm, lane, p_h);
            f = next;
        }
#else
        for (int j = 0; j < nc; ++j) add_cell_serial(w, w.tile + j * CELL_VALUES, p_h, p_w, h.width, lw.width);
#endif
    }
    __syncwarp();
#if RAW_TENSOR
    if (NT > 0) {
        dense_store<NT>(w, acc, lane);
        __syncwarp();
    }
#endif
    for (int u = lane; u < r; u += ws) finish_coordinate(w, m, h, lw, r, p_h, a, b, u);
    __syncwarp();
    raw_row_tail(w, r, row, lane, ws, row_mu1, row_mu2, row_y, row_w, ROW_TAIL_ARGS);
}

extern "C" __global__ void __launch_bounds__(32 * RAW_WARPS, RAW_BLOCKS) bms_row_raw(RAW_KERNEL_PARAMS)
{
    raw_row<0>(RAW_KERNEL_ARGS);
}

// Rows of at most 8 NT raw functions (rows.rs: raw_kernel).
extern "C" __global__ void __launch_bounds__(32 * RAW_WARPS, RAW_BLOCKS) bms_row_dense3(RAW_KERNEL_PARAMS)
{
    raw_row<3>(RAW_KERNEL_ARGS);
}

extern "C" __global__ void __launch_bounds__(32 * RAW_WARPS, RAW_BLOCKS) bms_row_dense4(RAW_KERNEL_PARAMS)
{
    raw_row<4>(RAW_KERNEL_ARGS);
}
