// Microbenchmark - tensor-core rate through mma.sync (m16n8k16, fp16 or bf16 inputs, fp32 accumulate).
//
// Each warp keeps CHAINS independent accumulator tiles (16 x 8 floats, 4 registers per lane) and feeds
// them the same A (16 x 16) and B (16 x 8) fragments in a loop: the tensor cores do the full work of every
// mma whatever the values. One mma is 2 * 16 * 8 * 16 = 4096 FLOPs. mma.sync is the Ampere-style warp
// instruction; on sm_90 the datasheet rate is reached only by the asynchronous warpgroup instruction
// (wgmma), so mma.sync there is expected to stay well short of it.
// Needs sm_80 or later; on older targets the kernel body is empty and the runner does not launch it.
// `clocks`: each block's (cycles, ns) over its run (block_clock.cuh).
#include "block_clock.cuh"

template <int BF16, int CHAINS>
__global__ void __launch_bounds__(256)
mma_peak(float* __restrict__ sink, int trips, unsigned long long* __restrict__ clocks) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const BlockClock start = block_clock_start();
    // Small, lane-dependent operands (0x2c00 is 1/16 in fp16, 0x3d80 is 1/16 in bf16): the accumulators
    // grow slowly and stay finite.
    const unsigned base = BF16 ? 0x3d803d80u : 0x2c002c00u;
    const unsigned a0 = base ^ (threadIdx.x & 1u), a1 = base ^ (threadIdx.x & 2u);
    const unsigned a2 = base ^ (threadIdx.x & 4u), a3 = base ^ (threadIdx.x & 8u);
    const unsigned b0 = base ^ (threadIdx.x & 3u), b1 = base ^ (threadIdx.x & 12u);
    float d[CHAINS][4];
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) d[c][0] = d[c][1] = d[c][2] = d[c][3] = 0.0f;
    for (int t = 0; t < trips; ++t) {
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) {
            if (BF16) {
                asm volatile(
                    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                    "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                    : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
            } else {
                asm volatile(
                    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                    "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                    : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
            }
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
    if (s == -1.0f) sink[blockIdx.x * blockDim.x + threadIdx.x] = s;
    block_clock_stop(start, clocks);
#endif
}
