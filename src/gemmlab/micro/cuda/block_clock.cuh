// block_clock.cuh: the SM clock over a block's whole run, counted by the block itself. Thread 0 reads the SM's
// cycle counter (clock64) and the global timer (nanoseconds) when the block's work starts and when it ends,
// and writes (cycles, nanoseconds) to slot blockIdx.x of `out`: cycles / ns is the clock the block ran at,
// whatever NVML's reading said. A rate per clock derived from it cannot pass the hardware's peak per clock.
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
        out[2 * blockIdx.x] = (unsigned long long)(c - start.cycles);
        out[2 * blockIdx.x + 1] = t - start.ns;
    }
}
