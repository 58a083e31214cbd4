// block_clock.cuh: what each SM counted while a launch ran, recorded by the blocks themselves. Thread 0 of
// every block writes its SM (%smid), the SM's cycle counter (clock64) and the global timer (nanoseconds) at
// the start and the end of the block's work to slot blockIdx.x of `out` (5 values). Per SM, the span from its
// first block's start to its last block's end is counted in that SM's own cycles: the work per SM-cycle it
// gives cannot pass the hardware's peak per clock, whatever the clock did, and cycles over nanoseconds is the
// clock the launch ran at (runtime/clocks.py, sm_spans).
#pragma once

struct BlockClock {
    long long cycles;
    unsigned long long ns;
};

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ BlockClock block_clock_start() { return BlockClock{clock64(), global_ns()}; }

__device__ __forceinline__ void block_clock_stop(const BlockClock& start, unsigned long long* __restrict__ out) {
    if (threadIdx.x == 0 && out != nullptr) {
        const long long c = clock64();
        const unsigned long long t = global_ns();
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        unsigned long long* slot = out + 5 * blockIdx.x;
        slot[0] = sm;
        slot[1] = (unsigned long long)start.cycles;
        slot[2] = (unsigned long long)c;
        slot[3] = start.ns;
        slot[4] = t;
    }
}
