// ---------------------------------------------------------------------------
// The polynomial pieces that hold on a cell (picked at a point inside it).

struct Pieces {
    double h[4];        // H(z)
    double l[4], l1[4], l2[4];  // L, L', L'' composed with t = a + b z
    int seg_h, seg_w;
};

// The segment of the score (which = 0) or link (1) basis that holds on the
// cell [lo, hi]; 0 for an absent basis.
__device__ int cell_segment(const Model& m, double a, double b, double lo, double hi, int which)
{
    const double zm = representative(lo, hi);
    if (which == 0) return m.h.k > 0 ? segment_of(m.h, zm) : 0;
    return m.w.k > 0 ? segment_of(m.w, a + b * zm) : 0;
}

// The pieces on the segments seg_h, seg_w.
__device__ void cell_pieces_at(const Model& m, double a, double b, int seg_h, int seg_w, Pieces& p)
{
    for (int k = 0; k < 4; ++k) { p.h[k] = 0.0; p.l[k] = 0.0; p.l1[k] = 0.0; p.l2[k] = 0.0; }
    p.seg_h = seg_h;
    p.seg_w = seg_w;
    if (m.h.k > 0) load_cubic(m.h.comb + seg_h * 4, p.h);
    if (m.w.k > 0) {
        double lt[4], l1t[4], l2t[4];
        load_cubic(m.w.comb + seg_w * 4, lt);
        deriv(lt, l1t);
        deriv(l1t, l2t);
        compose_affine(lt, a, b, p.l);
        compose_affine(l1t, a, b, p.l1);
        compose_affine(l2t, a, b, p.l2);
    }
}

__device__ void cell_pieces(const Model& m, double a, double b, double lo, double hi, Pieces& p)
{
    cell_pieces_at(m, a, b, cell_segment(m, a, b, lo, hi, 0), cell_segment(m, a, b, lo, hi, 1), p);
}

// eta = s_f (a + b z + b H(z) + L(t)) and d eta / da = s_f (1 + L'(t)).
__device__ void eta_and_a(const Pieces& p, double a, double b, double s_f, double* eta, double* A)
{
    const double base[4] = {a, b, 0.0, 0.0};
    for (int k = 0; k < 4; ++k) {
        eta[k] = s_f * ((base[k] + p.h[k] * b) + p.l[k]);
        A[k] = s_f * ((k == 0 ? 1.0 : 0.0) + p.l1[k]);
    }
}
