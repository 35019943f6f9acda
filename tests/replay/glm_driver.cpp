// Runs the GLM kernels (kernels/glm_family.cuh, kernels/glm.cu) on the host
// with one thread a block (see shim.h), for tests/gam_replay.rs. Files are
// arrays of f64, each after its u64 length.
//
//     glm_replay IN OUT STAGE
//
// IN: [n, p, family, link, inv_phi, m, given, rows_per_block], x (n p),
// beta (p), y, trials, weights, offset (n each; the absent ones flagged in
// `given` are not read), the directions (m p), the lower factor K (p p).
// OUT: neglog, grad, hess (n each) and the sums [gradient, value, rejected]
// of a ROWS pass; the sums [value, rejected] of a VALUE pass; u (n m) and
// the sums of a THIRD pass; the traces sum_i ||K^T x_i||^2 u[i, k] (m); each
// block's first rejected row of the ROWS pass. The blocks' partials are
// summed in block order (the device sums them in a fixed tree: the same
// values to rounding). Z = X K is formed here by a plain loop (cuBLAS on the
// device).
#include "shim.h"
#include "glm_family.cuh"
#include "glm.cu"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <vector>

typedef std::vector<double> V;
// The kernels' dynamic shared memory.
double sh[1 << 20];
double sacc[1 << 12];

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

// The blocks' partials (blocks x len) summed in block order.
static V reduce(const V& partial, i64 blocks, int len)
{
    V out(len, 0.0);
    for (i64 b = 0; b < blocks; ++b)
        for (int e = 0; e < len; ++e) out[e] += partial[b * len + e];
    return out;
}

int main(int argc, char** argv)
{
    if (argc != 4) { fprintf(stderr, "usage: glm_replay IN OUT STAGE\n"); return 2; }
    FILE* in = fopen(argv[1], "rb");
    if (!in) { perror(argv[1]); return 2; }
    const V head = get(in);
    const i64 n = (i64)head[0];
    const int p = (int)head[1], family = (int)head[2], link = (int)head[3];
    const double inv_phi = head[4];
    const int m = (int)head[5], given = (int)head[6];
    const i64 rpb = (i64)head[7];
    const V x = get(in), beta = get(in), y = get(in), trials = get(in), weights = get(in), offset = get(in);
    const V dirs = get(in), factor = get(in);
    fclose(in);
    const int stage = atoi(argv[3]), stride = p | 1;
    const i64 blocks = (n + rpb - 1) / rpb;
    const double none = 0.0;
    auto col = [&](const V& v) { return v.empty() ? &none : v.data(); };
    V neglog(n), grad(n), hess(n), third(n * (i64)m), partial(blocks * (p + 2));
    std::vector<i64> first_bad(blocks);
    V firsts(blocks);
    auto pass = [&](int mode, int cols) {
        for (i64 b = 0; b < blocks; ++b) {
            blockIdx.x = (unsigned)b;
            glm_rows(n, p, stride, stage, rpb, mode, family, link, inv_phi, x.data(), beta.data(), y.data(),
                     col(trials), col(weights), col(offset), given, m ? dirs.data() : &none, m, neglog.data(),
                     grad.data(), hess.data(), m ? third.data() : nullptr, partial.data(), first_bad.data());
        }
        return reduce(partial, blocks, cols);
    };
    const V rows_sums = pass(MODE_ROWS, p + 2);
    for (i64 b = 0; b < blocks; ++b) firsts[b] = (double)first_bad[b];
    const V value_sums = pass(MODE_VALUE, 2);
    V third_sums, traces;
    if (m > 0) {
        third_sums = pass(MODE_THIRD, 2);
        V z(n * (i64)p, 0.0);
        for (i64 i = 0; i < n; ++i)
            for (int c = 0; c < p; ++c) {
                double s = 0.0;
                for (int a = 0; a < p; ++a) s += x[i * p + a] * factor[a * p + c];
                z[i * p + c] = s;
            }
        const i64 lrows = 1024, lblocks = (n + lrows - 1) / lrows;
        V lpartial(lblocks * m);
        for (i64 b = 0; b < lblocks; ++b) {
            blockIdx.x = (unsigned)b;
            glm_leverage_partial(n, p, m, lrows, z.data(), third.data(), lpartial.data());
        }
        traces = reduce(lpartial, lblocks, m);
    }
    FILE* out = fopen(argv[2], "wb");
    if (!out) { perror(argv[2]); return 2; }
    for (const V* v : std::initializer_list<const V*>{&neglog, &grad, &hess, &rows_sums, &value_sums, &third, &third_sums, &traces, &firsts})
        put(out, *v);
    fclose(out);
    return 0;
}
