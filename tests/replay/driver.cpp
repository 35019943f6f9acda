// Runs the BMS kernels on the host (see shim.h). Files are arrays of f64,
// each after its u64 length.
//
//     replay IN OUT TILE           both stages from the bases
//     replay IN OUT TILE raw       both stages, Stage 2 over the raw functions
//                                  (built with WARP_EMULATION: a row a warp
//                                  of 32 host threads, the tensor-core path)
//     replay IN OUT TILE dense     the same by the dense tiles where they
//                                  apply (bms_row_dense3 or 4; the same as
//                                  raw without WARP_EMULATION)
//     replay IN OUT TILE bundle    Stage 2 over a CPU Stage-1 bundle
//     replay IN OUT - erfcx        erfcx_pos (basis.cuh) of each value
//     replay IN OUT - exp          exp_c (basis.cuh) of each value
//     replay IN OUT - layout       for (r, p_w, tile, dense) quadruples,
//                                  raw_row_doubles and dense_tiles(r)
//
// TILE is the cells a Stage-2 tile holds; a trailing g ("9g") keeps the
// rows' Q sums in the Hessian output instead of shared memory.
//
// Both stages: reads the problem that tests/kernel_replay.rs wrote, launches
// bms_calibrate, bms_observed, bms_cell_moments and bms_cell_quadrature a
// block (of one thread) at a time, then bms_row_bases with the tile size
// given (bms_row_raw in raw mode, bms_row_dense<NT> in dense), and writes the intercepts, per-row neglog, gradient, Hessian (packed) and status. Bundle: reads a
// RowKernelInputs bundle, launches bms_row, and writes the same minus the
// intercepts (an empty array in their place).
#include "shim.h"
#include "bms_stage1.cu"
#include "bms_row.cu"
#include "bms_row_raw.cu"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

typedef std::vector<double> V;
// The kernels' dynamic shared memory (`extern __shared__ double row_sh[]`,
// and `raw_sh[]` in bms_row_raw.cu's row template).
double row_sh[1 << 18];
double raw_sh[1 << 18];

static V get(FILE* f)
{
    uint64_t n = 0;
    if (fread(&n, 8, 1, f) != 1) { fprintf(stderr, "short input\n"); exit(2); }
    V v(n);
    if (n && fread(v.data(), 8, n, f) != n) { fprintf(stderr, "short input\n"); exit(2); }
    return v;
}

static void put(FILE* f, const V& v)
{
    const uint64_t n = v.size();
    fwrite(&n, 8, 1, f);
    fwrite(v.data(), 8, n, f);
}

static void write_rows(const char* path, const V& a, const V& neglog, const V& grad, const V& hess,
                       const V& status)
{
    FILE* o = fopen(path, "wb");
    if (!o) { perror(path); exit(2); }
    put(o, a);
    put(o, neglog);
    put(o, grad);
    put(o, hess);
    put(o, status);
    fclose(o);
}

// Stage 2 over a bundle in RowKernelInputs order: [n, r, p_h, p_w], the
// offsets, mu_1, mu_2, y, w, the cell arrays (c0..c3, a, aa, r, ar, sbb, sbh,
// sbw, moments) and the observed ones (chi, xi, rho, tau, r_uv, e_obs).
static int bundle(FILE* f, const char* out, int tile, int g_shared)
{
    const V hdr = get(f);
    const int n = (int)hdr[0], r = (int)hdr[1], p_h = (int)hdr[2], p_w = (int)hdr[3];
    const V off = get(f);
    std::vector<unsigned> offsets(off.begin(), off.end());
    V rows[4], cells[12], obs[6];
    for (V& v : rows) v = get(f);
    for (V& v : cells) v = get(f);
    for (V& v : obs) v = get(f);
    fclose(f);
    // Zero-length arrays (no h or w block) still need a valid pointer.
    for (V& v : cells) if (v.empty()) v.push_back(0.0);
    V neglog(n), grad((size_t)n * r), hess((size_t)n * r * (r + 1) / 2);
    std::vector<unsigned> st(n);
    for (int i = 0; i < n; ++i) {
        blockIdx.x = i;
        bms_row(n, r, p_h, p_w, rows[0].data(), rows[1].data(), rows[2].data(), rows[3].data(), offsets.data(),
                tile, g_shared, cells[0].data(), cells[1].data(), cells[2].data(), cells[3].data(), cells[4].data(),
                cells[5].data(), cells[6].data(), cells[7].data(), cells[8].data(), cells[9].data(),
                cells[10].data(), cells[11].data(), obs[0].data(), obs[1].data(), obs[2].data(), obs[3].data(),
                obs[4].data(), obs[5].data(), neglog.data(), grad.data(), hess.data(), st.data());
    }
    write_rows(out, V(), neglog, grad, hess, V(st.begin(), st.end()));
    return 0;
}

int main(int argc, char** argv)
{
    if (argc != 4 && argc != 5) { fprintf(stderr, "usage: replay IN OUT TILE [bundle|raw|dense|erfcx|exp|layout]\n"); return 2; }
    FILE* f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    const int g_shared = strchr(argv[3], 'g') ? 0 : 1;
    if (argc == 5 && (strcmp(argv[4], "erfcx") == 0 || strcmp(argv[4], "exp") == 0)) {
        const bool erfcx = strcmp(argv[4], "erfcx") == 0;
        V x = get(f);
        fclose(f);
        for (double& v : x) v = erfcx ? erfcx_pos(v) : exp_c(v);
        FILE* o = fopen(argv[2], "wb");
        put(o, x);
        fclose(o);
        return 0;
    }
    if (argc == 5 && strcmp(argv[4], "layout") == 0) {
        // (r, p_w, tile, dense) quadruples: the doubles a warp's row takes,
        // and the dense kernel's tiles for r.
        V x = get(f), y;
        fclose(f);
        for (size_t k = 0; k + 3 < x.size(); k += 4) {
            y.push_back(raw_row_doubles((int)x[k], (int)x[k + 1], (int)x[k + 2], x[k + 3] != 0.0));
            y.push_back(dense_tiles((int)x[k]));
        }
        FILE* o = fopen(argv[2], "wb");
        put(o, y);
        fclose(o);
        return 0;
    }
    const bool dense = argc == 5 && strcmp(argv[4], "dense") == 0;
    const bool raw = dense || (argc == 5 && strcmp(argv[4], "raw") == 0);
    if (argc == 5 && !raw) return bundle(f, argv[2], atoi(argv[3]), g_shared);
    const V hdr = get(f);
    const int n = (int)hdr[0], p_m = (int)hdr[1], p_g = (int)hdr[2], p_h = (int)hdr[3], p_w = (int)hdr[4];
    const int dh = (int)hdr[5], dw = (int)hdr[6], rigid = (int)hdr[8];
    const double s_f = hdr[7];
    // Each basis: knots, pieces, combinations, raw blocks, their first
    // functions, the linear parts.
    const V kh = get(f), ph = get(f), ch = get(f), rh = get(f), fh = get(f), lh = get(f);
    const V kw = get(f), pw = get(f), cw = get(f), rw = get(f), fw = get(f), lw = get(f);
    const V xm = get(f), xg = get(f), bm = get(f), bg = get(f), bh = get(f), bw = get(f), z = get(f);
    const V y = get(f), w = get(f);
    fclose(f);
    const int r = 2 + p_h + p_w, slots = (int)(kh.size() + kw.size()) + 1, tile = atoi(argv[3]);
    const int khn = (int)kh.size(), kwn = (int)kw.size();
#define MODEL khn, dh, kh.data(), ph.data(), ch.data(), kwn, dw, kw.data(), pw.data(), cw.data(), s_f
    V q(n), b(n), a(n);
    std::vector<unsigned> st(n), ost(n);
    const long long cells = (long long)n * slots;
    V bounds(4 * cells), moments(10 * cells);
    // Rows in reverse: the order threads take rows in changes no value.
    std::vector<unsigned> order(n);
    for (int i = 0; i < n; ++i) order[i] = (unsigned)(n - 1 - i);
    for (int i = 0; i < n; ++i) {
        blockIdx.x = i;
        bms_calibrate(n, order.data(), p_m, p_g, xm.data(), xg.data(), bm.data(), bg.data(), rigid, MODEL, q.data(), b.data(),
                      a.data(), st.data(), slots, bounds.data());
    }
    V e(n), chi(n), xi(n), rho((size_t)n * r), tau((size_t)n * r), r1v((size_t)n * r), m1(n), m2(n);
    for (int i = 0; i < (n + OBS_ROWS - 1) / OBS_ROWS; ++i) {
        blockIdx.x = i;
        bms_observed(n, p_h, p_w, MODEL, bh.data(), bw.data(), q.data(), b.data(), a.data(), z.data(), e.data(),
                     chi.data(), xi.data(), rho.data(), tau.data(), r1v.data(), m1.data(), m2.data());
    }
    std::vector<unsigned> queue(cells);
    unsigned queued = 0;
    // The blocks of CELL_ROWS rows by CELL_SLOTS slots (bms_cell_moments).
    const long long cell_blocks = (long long)((n + CELL_ROWS - 1) / CELL_ROWS) * ((slots + CELL_SLOTS - 1) / CELL_SLOTS);
    for (long long c = 0; c < cell_blocks; ++c) {
        blockIdx.x = (unsigned)c;
        bms_cell_moments(n, order.data(), slots, MODEL, b.data(), a.data(), st.data(), bounds.data(), moments.data(),
                         queue.data(), &queued);
    }
    // One block of one thread strides the whole queue.
    blockIdx.x = 0;
    bms_cell_quadrature(slots, MODEL, b.data(), a.data(), bounds.data(), moments.data(), queue.data(), &queued);
    std::vector<unsigned> offsets(n + 1);
    for (int i = 0; i <= n; ++i) offsets[i] = (unsigned)i * slots;
    V neglog(n), grad((size_t)n * r), hess((size_t)n * r * (r + 1) / 2);
    for (int i = 0; i < n && raw; ++i) {
        blockIdx.x = i;
        // The kernel rows.rs (raw_tile) picks: the dense tiles where the
        // r + 2 raw functions fit 3 or 4 tiles of 8, else the scattered one.
        const int nt = dense ? dense_tiles(r) : 0;
        auto kernel = nt == 3 ? bms_row_dense3 : nt == 4 ? bms_row_dense4 : bms_row_raw;
        auto launch = [&] {
            kernel(n, r, p_h, p_w, m1.data(), m2.data(), y.data(), w.data(), offsets.data(), MODEL, rh.data(),
                   fh.data(), lh.data(), rw.data(), fw.data(), lw.data(), tile, a.data(), b.data(), bounds.data(),
                   moments.data(), chi.data(), xi.data(), rho.data(), tau.data(), r1v.data(), e.data(),
                   neglog.data(), grad.data(), hess.data(), ost.data());
        };
#ifdef WARP_EMULATION
        // A row a warp of 32 host threads, the tensor-core path (warp.h).
        warp_run(launch);
#else
        launch();
#endif
    }
    for (int i = 0; i < n && !raw; ++i) {
        blockIdx.x = i;
        bms_row_bases(n, r, p_h, p_w, m1.data(), m2.data(), y.data(), w.data(), offsets.data(), MODEL, tile, g_shared,
                      a.data(), b.data(), bounds.data(), moments.data(), chi.data(), xi.data(), rho.data(),
                      tau.data(), r1v.data(), e.data(), neglog.data(), grad.data(), hess.data(),
                      ost.data());
    }
    V status(n);
    for (int i = 0; i < n; ++i) status[i] = st[i] != 0u ? st[i] : ost[i];
    write_rows(argv[2], a, neglog, grad, hess, status);
    return 0;
}
