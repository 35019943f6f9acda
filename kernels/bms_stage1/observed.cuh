// Values and derivatives of basis function j at x on segment seg.
__device__ void basis_jet(const Basis& B, int seg, int j, double x, double* v, double* d1, double* d2)
{
    const double* p = B.pieces + ((i64)seg * B.dim + j) * 4;
    double dp[4], ddp[4];
    deriv(p, dp);
    deriv(dp, ddp);
    *v = horner(p, x);
    *d1 = horner(dp, x);
    *d2 = horner(ddp, x);
}

// The observed-point jets (cells.rs, Bases::observed). The explicit second
// derivatives r_uv are zero off row and column 1 (only b multiplies the
// bases), so the kernel writes r_1v, row 1 of r_uv: n x r instead of n x r^2.
// A block takes OBS_ROWS rows in two phases: a thread per row for the
// per-row values (and the sums h, L', L'' the coordinate-1 entries need),
// then a thread per (row, coordinate) for the n x r arrays, so that a
// warp's stores are consecutive; a thread per row wrote them r apart (one
// sector a lane and store).
#define OBS_ROWS 128
extern "C" __global__ void bms_observed(
    int n, int p_h, int p_w, MODEL_PARAMS, const double* __restrict__ beta_h, const double* __restrict__ beta_w,
    const double* __restrict__ row_q, const double* __restrict__ row_b, const double* __restrict__ row_a,
    const double* __restrict__ z_obs, double* __restrict__ e_obs, double* __restrict__ chi_obs,
    double* __restrict__ xi_obs, double* __restrict__ rho, double* __restrict__ tau,
    double* __restrict__ r1v, double* __restrict__ mu_1, double* __restrict__ mu_2)
{
    __shared__ double sh_z[OBS_ROWS], sh_t[OBS_ROWS], sh_b[OBS_ROWS], sh_h[OBS_ROWS], sh_l1[OBS_ROWS],
        sh_l2[OBS_ROWS];
    __shared__ int sh_seg_h[OBS_ROWS], sh_seg_w[OBS_ROWS];
    const Model m = make_model(MODEL_ARGS);
    const int r = 2 + p_h + p_w;
    const i64 row0 = (i64)blockIdx.x * OBS_ROWS;
    const int rows = (int)min((i64)OBS_ROWS, (i64)n - row0);
    for (int i = threadIdx.x; i < rows; i += blockDim.x) {
        const i64 row = row0 + i;
        const double q = row_q[row], b = row_b[row], a = row_a[row], z = z_obs[row], t = a + b * z;
        double h = 0.0, l = 0.0, l1 = 0.0, l2 = 0.0, v, d1, d2;
        const int seg_h = m.h.k > 0 ? segment_of(m.h, z) : 0, seg_w = m.w.k > 0 ? segment_of(m.w, t) : 0;
        if (m.h.k > 0)
            for (int j = 0; j < p_h; ++j) {
                basis_jet(m.h, seg_h, j, z, &v, &d1, &d2);
                h += beta_h[j] * v;
            }
        if (m.w.k > 0)
            for (int k = 0; k < p_w; ++k) {
                basis_jet(m.w, seg_w, k, t, &v, &d1, &d2);
                l += beta_w[k] * v;
                l1 += beta_w[k] * d1;
                l2 += beta_w[k] * d2;
            }
        sh_z[i] = z; sh_t[i] = t; sh_b[i] = b; sh_h[i] = h; sh_l1[i] = l1; sh_l2[i] = l2;
        sh_seg_h[i] = seg_h; sh_seg_w[i] = seg_w;
        e_obs[row] = s_f * (a + b * z + b * h + l);
        chi_obs[row] = s_f * (1.0 + l1);
        xi_obs[row] = s_f * l2;
        const double phi = norm_pdf(q);
        mu_1[row] = phi;
        mu_2[row] = -q * phi;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < rows * r; e += blockDim.x) {
        const int i = e / r, u = e - i * r;
        const double z = sh_z[i];
        double rh = 0.0, ta = 0.0, rv = 0.0, v, d1, d2;
        if (u == 1) {
            rh = s_f * (z + sh_h[i] + z * sh_l1[i]);
            ta = s_f * z * sh_l2[i];
            rv = s_f * z * z * sh_l2[i];
        } else if (u >= 2 && u < 2 + p_h) {
            if (m.h.k > 0) {
                basis_jet(m.h, sh_seg_h[i], u - 2, z, &v, &d1, &d2);
                rh = s_f * sh_b[i] * v;
                rv = s_f * v;
            }
        } else if (u >= 2 + p_h && m.w.k > 0) {
            basis_jet(m.w, sh_seg_w[i], u - 2 - p_h, sh_t[i], &v, &d1, &d2);
            rh = s_f * v;
            ta = s_f * d1;
            rv = s_f * z * d1;
        }
        const i64 at = (row0 + i) * r + u;
        rho[at] = rh;
        tau[at] = ta;
        r1v[at] = rv;
    }
}

// Stage 1's verdict wins over Stage 2's: a row whose intercept failed keeps
// its calibration code.
extern "C" __global__ void merge_status(int n, const unsigned int* __restrict__ first,
                                        unsigned int* __restrict__ second)
{
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && first[i] != 0u) second[i] = first[i];
}
