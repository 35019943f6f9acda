// PCG scalar and vector kernels. The scalar kernels are the device twins of
// pcg_alpha_slots / pcg_beta_slots in solvers/src/cpu.rs; the slot indices
// and status codes below must match solvers/src/backend.rs and pcg.rs.

#define RZ 0
#define PAP 1
#define ALPHA 2
#define NEG_ALPHA 3
#define RZ_NEW 4
#define BETA 5
#define RR 6
#define STATUS 7
#define ITERS 8
#define THRESH2 9
#define CULPRIT 10

#define RUNNING 0.0
#define CONVERGED 1.0
#define BREAKDOWN_PAP 2.0
#define BREAKDOWN_ALPHA 3.0
#define BREAKDOWN_BETA 4.0
#define BAD_PRECONDITIONER 5.0
#define BREAKDOWN_RESIDUAL 6.0

typedef long long i64;

// alpha = rz / pAp while running; zero once stopped.
extern "C" __global__ void pcg_alpha(double* s)
{
    double alpha = 0.0;
    if (s[STATUS] == RUNNING) {
        const double pap = s[PAP];
        const double a = s[RZ] / pap;
        if (!(pap > 0.0 && isfinite(pap))) {
            s[STATUS] = BREAKDOWN_PAP;
            s[CULPRIT] = pap;
        } else if (!isfinite(a)) {
            s[STATUS] = BREAKDOWN_ALPHA;
            s[CULPRIT] = a;
        } else {
            alpha = a;
        }
    }
    s[ALPHA] = alpha;
    s[NEG_ALPHA] = -alpha;
}

// beta = rz_new / rz, the iteration count, and the stop tests.
extern "C" __global__ void pcg_beta(double* s)
{
    double beta = 0.0;
    if (s[STATUS] == RUNNING) {
        s[ITERS] += 1.0;
        const double rz_new = s[RZ_NEW], rr = s[RR];
        const double b = rz_new / s[RZ];
        if (!isfinite(rr)) {
            s[STATUS] = BREAKDOWN_RESIDUAL;
            s[CULPRIT] = rr;
        } else if (rr <= s[THRESH2]) {
            s[STATUS] = CONVERGED;
        } else if (!(rz_new >= 0.0 && isfinite(rz_new))) {
            s[STATUS] = BAD_PRECONDITIONER;
            s[CULPRIT] = rz_new;
        } else if (!isfinite(b)) {
            s[STATUS] = BREAKDOWN_BETA;
            s[CULPRIT] = b;
        } else {
            beta = b;
            s[RZ] = rz_new;
        }
    }
    s[BETA] = beta;
}

// y = x + s[slot] * y
extern "C" __global__ void xpay(i64 n, const double* __restrict__ x, const double* __restrict__ s, int slot,
                                double* __restrict__ y)
{
    const double beta = s[slot];
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        y[i] = x[i] + beta * y[i];
}

// r = b - r
extern "C" __global__ void sub_from(i64 n, const double* __restrict__ b, double* __restrict__ r)
{
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        r[i] = b[i] - r[i];
}

// z = d .* r
extern "C" __global__ void mul_elementwise(i64 n, const double* __restrict__ d, const double* __restrict__ r,
                                           double* __restrict__ z)
{
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        z[i] = d[i] * r[i];
}

// out = 1 / (d + extra + ridge); the smallest index whose denominator is not
// finite and positive goes to *first_bad (integer atomicMin: the result does
// not depend on thread order).
extern "C" __global__ void invert_positive(i64 n, const double* __restrict__ d, const double* __restrict__ extra,
                                           double ridge, double* __restrict__ out, i64* first_bad)
{
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const double v = d[i] + (extra ? extra[i] : 0.0) + ridge;
        if (!(v > 0.0 && isfinite(v))) {
            atomicMin((unsigned long long*)first_bad, (unsigned long long)i);
        }
        out[i] = 1.0 / v;
    }
}
