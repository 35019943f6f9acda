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
#define BB 11
#define RR0 12
#define TRUE_RR 13

#define RUNNING 0.0
#define CONVERGED 1.0
#define BREAKDOWN_PAP 2.0
#define BREAKDOWN_ALPHA 3.0
#define BREAKDOWN_BETA 4.0
#define BAD_PRECONDITIONER 5.0
#define BREAKDOWN_RESIDUAL 6.0

typedef long long i64;

// alpha = rz / pAp while running; zero once stopped.
__device__ void alpha_step(double* s)
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
__device__ void beta_step(double* s)
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

// The start: threshold, rr0, no iterations, and the status before the first
// iteration (pcg_start_slots in solvers/src/cpu.rs).
__device__ void start_step(double* s, double rtol, double atol)
{
    const double threshold = fmax(rtol * sqrt(s[BB]), atol);
    const double rr = s[RR], rz = s[RZ];
    s[THRESH2] = threshold * threshold;
    s[RR0] = rr;
    s[ITERS] = 0.0;
    s[CULPRIT] = rz;
    if (sqrt(rr) <= threshold) s[STATUS] = CONVERGED;
    else if (!(rz > 0.0 && isfinite(rz))) s[STATUS] = BAD_PRECONDITIONER;
    else s[STATUS] = RUNNING;
}

extern "C" __global__ void pcg_start(double* s, double rtol, double atol) { start_step(s, rtol, atol); }

extern "C" __global__ void pcg_alpha(double* s) { alpha_step(s); }
extern "C" __global__ void pcg_beta(double* s) { beta_step(s); }

// Sum of one value per thread over a block of 256, in a fixed tree; every
// thread gets the total.
__device__ double block_sum_256(double v, double* buf)
{
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int half = 128; half > 0; half >>= 1) {
        if (threadIdx.x < half) buf[threadIdx.x] += buf[threadIdx.x + half];
        __syncthreads();
    }
    const double total = buf[0];
    __syncthreads();
    return total;
}

// One whole PCG iteration after q = A p, for z = d .* r, in one block of 256
// threads (for short vectors, where launches dominate): the same updates and
// slot rules as the unfused sequence while the solve runs. A solve that
// stops here returns early, leaving p and the beta slot as they were (the
// unfused sequence sets them to z and 0; nothing reads them after a stop).
// Thread i owns entries i, i + 256, ...
extern "C" __global__ void pcg_step_small(i64 n, const double* __restrict__ d, double* __restrict__ x,
                                          double* __restrict__ r, double* __restrict__ z, double* __restrict__ p,
                                          const double* __restrict__ q, double* s)
{
    __shared__ double buf[256];
    __shared__ double coef;
    after_previous(); // launched as a dependent of the product that wrote q
    let_next_start();
    double acc = 0.0;
    for (i64 i = threadIdx.x; i < n; i += 256) acc += p[i] * q[i];
    const double pap = block_sum_256(acc, buf);
    __shared__ int stopped;
    if (threadIdx.x == 0) {
        s[PAP] = pap;
        alpha_step(s);
        coef = s[ALPHA];
        stopped = s[STATUS] != RUNNING;
    }
    __syncthreads();
    // A stopped solve's vectors stay as they are (x finite even where the
    // direction is not).
    if (stopped) return;
    const double alpha = coef;
    double rz = 0.0, rr = 0.0;
    for (i64 i = threadIdx.x; i < n; i += 256) {
        x[i] += alpha * p[i];
        r[i] += -alpha * q[i];
        z[i] = d[i] * r[i];
        rz += r[i] * z[i];
        rr += r[i] * r[i];
    }
    const double rz_new = block_sum_256(rz, buf);
    const double rr_new = block_sum_256(rr, buf);
    if (threadIdx.x == 0) {
        s[RZ_NEW] = rz_new;
        s[RR] = rr_new;
        beta_step(s);
        coef = s[BETA];
    }
    __syncthreads();
    const double beta = coef;
    for (i64 i = threadIdx.x; i < n; i += 256) p[i] = z[i] + beta * p[i];
}

// PCG's start for z = d .* r in one block of 256 (short vectors): z, p = z,
// the slots rz, rr, bb, then the start.
extern "C" __global__ void pcg_restart_small(i64 n, const double* __restrict__ d, const double* __restrict__ b,
                                             const double* __restrict__ r, double* __restrict__ z,
                                             double* __restrict__ p, double* s, double rtol, double atol)
{
    __shared__ double buf[256];
    double rz = 0.0, rr = 0.0, bb = 0.0;
    for (i64 i = threadIdx.x; i < n; i += 256) {
        const double zi = d[i] * r[i];
        z[i] = zi;
        p[i] = zi;
        rz += r[i] * zi;
        rr += r[i] * r[i];
        bb += b[i] * b[i];
    }
    rz = block_sum_256(rz, buf);
    rr = block_sum_256(rr, buf);
    bb = block_sum_256(bb, buf);
    if (threadIdx.x == 0) {
        s[RZ] = rz;
        s[RR] = rr;
        s[BB] = bb;
        start_step(s, rtol, atol);
    }
}

// r = b - r (r holding A x) and s[TRUE_RR] = r^T r, in one block of 256.
extern "C" __global__ void pcg_true_residual_small(i64 n, const double* __restrict__ b, double* __restrict__ r,
                                                   double* s)
{
    __shared__ double buf[256];
    double rr = 0.0;
    for (i64 i = threadIdx.x; i < n; i += 256) {
        const double ri = b[i] - r[i];
        r[i] = ri;
        rr += ri * ri;
    }
    rr = block_sum_256(rr, buf);
    if (threadIdx.x == 0) s[TRUE_RR] = rr;
}

// y = x + s[slot] * y; y = x when the slot is zero (whatever y held)
extern "C" __global__ void xpay(i64 n, const double* __restrict__ x, const double* __restrict__ s, int slot,
                                double* __restrict__ y)
{
    const double beta = s[slot];
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        y[i] = beta == 0.0 ? x[i] : x[i] + beta * y[i];
}

// y += s[slot] * x; nothing when the slot is zero (a stopped PCG)
extern "C" __global__ void axpy(i64 n, const double* __restrict__ s, int slot, const double* __restrict__ x,
                                double* __restrict__ y)
{
    const double a = s[slot];
    if (a == 0.0) return;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        y[i] += a * x[i];
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
