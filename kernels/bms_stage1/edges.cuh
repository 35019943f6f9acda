// ---------------------------------------------------------------------------
// Cell edges: the score knots merged with the link knots mapped through
// z = (t - a) / b (increasing in z whatever the sign of b; none when b = 0),
// without non-finite values or repeats.

struct Edges {
    int i, j;
    bool any;
    double last;
};

__device__ bool next_edge(const Model& m, double a, double b, Edges& it, double* out)
{
    const int kl = (b != 0.0) ? m.w.k : 0;
    for (;;) {
        const bool has_s = it.i < m.h.k, has_l = it.j < kl;
        if (!has_s && !has_l) return false;
        double e;
        if (has_l) {
            const int idx = b > 0.0 ? it.j : kl - 1 - it.j;
            const double zl = (m.w.knots[idx] - a) / b;
            if (!has_s || zl < m.h.knots[it.i]) { e = zl; ++it.j; }
            else { e = m.h.knots[it.i]; ++it.i; }
        } else {
            e = m.h.knots[it.i]; ++it.i;
        }
        if (!isfinite(e) || (it.any && e == it.last)) continue;
        it.any = true;
        it.last = e;
        *out = e;
        return true;
    }
}

// Every cell slot's edges lo, hi into bounds[4 c], bounds[4 c + 1] (NaN
// past the row's cells, and for every slot of a row whose intercept
// failed), written once a row by the calibration, so that the cells
// kernel's thread for slot c reads them instead of walking c edges.
__device__ void row_edges(const Model& m, double a, double b, bool ok, double* bounds, int slots)
{
    int c = 0;
    if (ok) {
        Edges it = {0, 0, false, 0.0};
        double left = -INF_D, e;
        for (bool more = true; more && c < slots; ++c) {
            more = next_edge(m, a, b, it, &e);
            const double right = more ? e : INF_D;
            // One 16-byte store a slot (a slot's four values are 32 bytes
            // apart from an aligned start): each lane's row lies elsewhere,
            // so every store is a request a lane.
            *reinterpret_cast<double2*>(bounds + 4 * c) = make_double2(left, right);
            left = right;
        }
    }
    const double nan = __longlong_as_double(0x7ff8000000000000LL);
    for (; c < slots; ++c) *reinterpret_cast<double2*>(bounds + 4 * c) = make_double2(nan, nan);
}
