// Stand-ins for the CUDA built-ins the BMS kernels use, so that
// kernels/bms_stage1.cu, kernels/bms_row.cu and kernels/bms_row_raw.cu
// compile as C++ and run on the host with one thread per block
// (tests/kernel_replay.rs). A block of one thread takes every strided loop
// in turn and, without __CUDA_ARCH__, the scalar path of Stage 2's Q sums
// instead of the tensor cores. With WARP_EMULATION, bms_row_raw and
// bms_row_dense<NT> take their tensor-core paths instead, a warp of 32
// host threads (warp.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __shared__
#define __constant__
#define __align__(x)
#define __launch_bounds__(a, b)

using std::exp; using std::fabs; using std::fma; using std::fmax; using std::fmin; using std::isfinite;
using std::isinf; using std::isnan; using std::log; using std::log1p; using std::sqrt; using std::trunc;
using std::expm1; using std::nan; using std::pow;
using std::max; using std::min;

struct double2 { double x, y; };
inline double2 make_double2(double x, double y) { return {x, y}; }

struct Dim3 { unsigned x, y, z; };
static Dim3 blockIdx{0, 0, 0}, blockDim{1, 1, 1}, gridDim{1, 1, 1};
static thread_local Dim3 threadIdx{0, 0, 0};

inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long min(long long a, int b) { return a < b ? a : b; }
inline int min(int a, long long b) { return a < b ? a : (int)b; }

inline double normcdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

// exp(x^2) erfc(x); past x = 25 (where exp(x^2) overflows) its asymptotic
// series, which is exact to rounding there.
inline double erfcx(double x)
{
    if (x < 25.0) return std::exp(x * x) * std::erfc(x);
    const double t = 1.0 / (2.0 * x * x);
    return (1.0 - t * (1.0 - 3.0 * t * (1.0 - 5.0 * t))) / (x * 1.7724538509055160273);
}

inline double __longlong_as_double(long long x)
{
    double d;
    std::memcpy(&d, &x, 8);
    return d;
}

inline long long __double_as_longlong(double d)
{
    long long x;
    std::memcpy(&x, &d, 8);
    return x;
}

inline int __double2hiint(double d) { return (int)(__double_as_longlong(d) >> 32); }
inline int __double2loint(double d) { return (int)(unsigned)__double_as_longlong(d); }
inline double __hiloint2double(int hi, int lo)
{
    return __longlong_as_double((long long)(((unsigned long long)(unsigned)hi << 32) | (unsigned)lo));
}

inline unsigned atomicOr(unsigned* p, unsigned v)
{
    const unsigned old = *p;
    *p |= v;
    return old;
}

inline unsigned atomicAdd(unsigned* p, unsigned v)
{
    const unsigned old = *p;
    *p += v;
    return old;
}

inline unsigned long long atomicMax(unsigned long long* p, unsigned long long v)
{
    const unsigned long long old = *p;
    if (v > old) *p = v;
    return old;
}

inline double __shfl_xor_sync(unsigned, double v, int) { return v; }
inline void __syncthreads() {}
#ifdef WARP_EMULATION
#include "warp.h"
#else
inline double __shfl_sync(unsigned, double v, int) { return v; }
inline void __syncwarp() {}
inline bool __any_sync(unsigned, bool p) { return p; }
#endif
