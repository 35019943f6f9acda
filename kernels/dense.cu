// Small dense helpers for the exact (Cholesky) path.

typedef long long i64;

// out[0] = 2 * sum_i ln(a[i, i]) for an n x n factor, summed by one block of
// 256 threads in a fixed order (strided partial sums, then a fixed tree).
extern "C" __global__ void log_diag_sum(int n, const double* __restrict__ a, double* __restrict__ out)
{
    __shared__ double buf[256];
    double acc = 0.0;
    for (int i = threadIdx.x; i < n; i += 256) acc += log(a[(i64)i * n + i]);
    buf[threadIdx.x] = acc;
    __syncthreads();
    for (int half = 128; half > 0; half >>= 1) {
        if (threadIdx.x < half) buf[threadIdx.x] += buf[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = 2.0 * buf[0];
}

// y += x, elementwise.
extern "C" __global__ void add_into(i64 n, const double* __restrict__ x, double* __restrict__ y)
{
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        y[i] += x[i];
}
