// Microbenchmark - peak fp32 FMA rate.
//
// Every thread runs CHAINS independent chains of fused multiply-adds, UNROLL deep per loop trip. An FMA's
// result is ready about 4 cycles after issue and each of an SM's four schedulers issues one
// warp-instruction per cycle, so a scheduler needs 4 independent FMAs ready every 4 cycles: CHAINS = 8 at
// full occupancy (16 warps per scheduler) leaves a wide margin. The loop costs about 3 instructions
// (add, compare, branch) per trip, 1% of the CHAINS * UNROLL = 256 FMAs at 8 x 32.
// FLOPs counted: 2 per FMA. x and y are kernel arguments, so nothing can be folded at compile time; the
// chains are summed and stored only if the sum equals a value it never takes, which keeps every chain live
// without a memory write per thread. `clocks`: each block's (cycles, ns) over its run (block_clock.cuh).
#include "block_clock.cuh"

template <int CHAINS, int UNROLL>
__global__ void __launch_bounds__(256)
fma_peak(float* __restrict__ sink, int trips, float x, float y, unsigned long long* __restrict__ clocks) {
    const BlockClock start = block_clock_start();
    float v[CHAINS];
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) v[c] = (float)(threadIdx.x + c);
    for (int t = 0; t < trips; ++t) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
            for (int c = 0; c < CHAINS; ++c) v[c] = fmaf(v[c], x, y);
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) s += v[c];
    if (s == -1.0f) sink[blockIdx.x * blockDim.x + threadIdx.x] = s;
    block_clock_stop(start, clocks);
}
