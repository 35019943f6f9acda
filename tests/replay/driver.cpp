// Runs the BMS kernels on the host (see shim.h): reads the problem that
// tests/kernel_replay.rs wrote, launches bms_calibrate, bms_observed and
// bms_cell_moments a block (of one thread) at a time, then bms_row_bases with
// the tile size given, and writes the intercepts, per-row neglog, gradient,
// Hessian and status. Files are arrays of f64, each after its u64 length.
//
//     replay IN OUT TILE
#include "shim.h"
#include "bms_stage1.cu"
#include "bms_row.cu"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

typedef std::vector<double> V;
// The kernels' dynamic shared memory (`extern __shared__ double row_sh[]`).
double row_sh[1 << 18];

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

int main(int argc, char** argv)
{
    if (argc != 4) { fprintf(stderr, "usage: replay IN OUT TILE\n"); return 2; }
    FILE* f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    const V hdr = get(f);
    const int n = (int)hdr[0], p_m = (int)hdr[1], p_g = (int)hdr[2], p_h = (int)hdr[3], p_w = (int)hdr[4];
    const int dh = (int)hdr[5], dw = (int)hdr[6], rigid = (int)hdr[8];
    const double s_f = hdr[7];
    const V kh = get(f), ph = get(f), ch = get(f), kw = get(f), pw = get(f), cw = get(f), gl = get(f);
    const V xm = get(f), xg = get(f), bm = get(f), bg = get(f), bh = get(f), bw = get(f), z = get(f);
    const V y = get(f), w = get(f);
    fclose(f);
    const int r = 2 + p_h + p_w, slots = (int)(kh.size() + kw.size()) + 1, tile = atoi(argv[3]);
    const int khn = (int)kh.size(), kwn = (int)kw.size();
#define MODEL khn, dh, kh.data(), ph.data(), ch.data(), kwn, dw, kw.data(), pw.data(), cw.data(), s_f, gl.data()
    V q(n), b(n), a(n);
    std::vector<unsigned> st(n), ost(n);
    for (int i = 0; i < n; ++i) {
        blockIdx.x = i;
        bms_calibrate(n, p_m, p_g, xm.data(), xg.data(), bm.data(), bg.data(), rigid, MODEL, q.data(), b.data(),
                      a.data(), st.data());
    }
    V e(n), chi(n), xi(n), rho((size_t)n * r), tau((size_t)n * r), r1v((size_t)n * r), m1(n), m2(n);
    for (int i = 0; i < n; ++i) {
        blockIdx.x = i;
        bms_observed(n, p_h, p_w, MODEL, bh.data(), bw.data(), q.data(), b.data(), a.data(), z.data(), e.data(),
                     chi.data(), xi.data(), rho.data(), tau.data(), r1v.data(), m1.data(), m2.data());
    }
    const long long cells = (long long)n * slots;
    V bounds(2 * cells), moments(10 * cells);
    for (long long c = 0; c < cells; ++c) {
        blockIdx.x = (unsigned)c;
        bms_cell_moments(n, slots, MODEL, b.data(), a.data(), st.data(), bounds.data(), moments.data());
    }
    std::vector<unsigned> offsets(n + 1);
    for (int i = 0; i <= n; ++i) offsets[i] = (unsigned)i * slots;
    V neglog(n), grad((size_t)n * r), hess((size_t)n * r * r), f_au((size_t)n * r);
    for (int i = 0; i < n; ++i) {
        blockIdx.x = i;
        bms_row_bases(n, r, p_h, p_w, m1.data(), m2.data(), y.data(), w.data(), offsets.data(), MODEL, tile,
                      a.data(), b.data(), bounds.data(), moments.data(), chi.data(), xi.data(), rho.data(),
                      tau.data(), r1v.data(), e.data(), f_au.data(), neglog.data(), grad.data(), hess.data(),
                      ost.data());
    }
    V status(n);
    for (int i = 0; i < n; ++i) status[i] = st[i] != 0u ? st[i] : ost[i];
    FILE* o = fopen(argv[2], "wb");
    if (!o) { perror(argv[2]); return 2; }
    put(o, a);
    put(o, neglog);
    put(o, grad);
    put(o, hess);
    put(o, status);
    fclose(o);
    return 0;
}
