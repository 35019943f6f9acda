// A warp of 32 host threads for the replay (shim.h with WARP_EMULATION):
// the warp-wide built-ins bms_row_raw's tensor-core path uses, each a
// collective over the 32 threads of the warp that warp_run starts (every
// lane deposits, all wait, each reads), and the FP64 mma.m8n8k4 in the
// fragment layout of the PTX ISA: A row-major, lane l holds A[l/4][l%4]; B
// column-major, lane l holds B[l%4][l/4]; C and D, lane l holds
// C[l/4][2 (l%4)] and C[l/4][2 (l%4) + 1]. Outside warp_run (one thread)
// each built-in is that thread's alone.
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

struct EmulatedWarp {
    std::mutex mu;
    std::condition_variable cv;
    int waiting = 0;
    unsigned long long generation = 0;
    double a[32], b[32], c0[32], c1[32];
    bool any[32];

    // All 32 lanes reach this point before any goes on.
    void wait()
    {
        std::unique_lock<std::mutex> lock(mu);
        const unsigned long long gen = generation;
        if (++waiting == 32) {
            waiting = 0;
            ++generation;
            cv.notify_all();
        } else {
            cv.wait(lock, [&] { return generation != gen; });
        }
    }
};

static EmulatedWarp* emulated_warp = nullptr;

inline void __syncwarp()
{
    if (emulated_warp) emulated_warp->wait();
}

inline double __shfl_sync(unsigned, double v, int src)
{
    EmulatedWarp* w = emulated_warp;
    if (!w) return v;
    w->a[threadIdx.x] = v;
    w->wait();
    const double out = w->a[src & 31];
    w->wait();
    return out;
}

inline bool __any_sync(unsigned, bool p)
{
    EmulatedWarp* w = emulated_warp;
    if (!w) return p;
    w->any[threadIdx.x] = p;
    w->wait();
    bool out = false;
    for (int l = 0; l < 32; ++l) out = out || w->any[l];
    w->wait();
    return out;
}

// D = A B + C for one lane's fragments (m8n8k4, FP64).
inline void emulated_mma884(double& c0, double& c1, double a, double b)
{
    EmulatedWarp* w = emulated_warp;
    const int l = threadIdx.x;
    w->a[l] = a;
    w->b[l] = b;
    w->wait();
    const int i = l / 4, j = 2 * (l % 4);
    double d0 = c0, d1 = c1;
    for (int k = 0; k < 4; ++k) {
        d0 = std::fma(w->a[4 * i + k], w->b[4 * j + k], d0);
        d1 = std::fma(w->a[4 * i + k], w->b[4 * (j + 1) + k], d1);
    }
    w->wait();
    c0 = d0;
    c1 = d1;
}

// Run body(lane) on 32 threads, one warp (blockDim.x = 32 while it runs).
inline void warp_run(const std::function<void()>& body)
{
    EmulatedWarp w;
    emulated_warp = &w;
    const unsigned saved = blockDim.x;
    blockDim.x = 32;
    std::vector<std::thread> lanes;
    for (unsigned l = 0; l < 32; ++l)
        lanes.emplace_back([&body, l] {
            threadIdx.x = l;
            body();
        });
    for (auto& t : lanes) t.join();
    blockDim.x = saved;
    emulated_warp = nullptr;
}
