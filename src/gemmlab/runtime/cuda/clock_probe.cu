// clock_probe.cu: the SM clock as an SM counts it. One thread spins on the global timer (nanoseconds) for
// `spin_ns` and records how many SM cycles passed meanwhile (clock64): cycles / ns is the clock of that SM
// over those nanoseconds. Launched between the calls of a measurement on their stream, it samples the clock
// the calls left the GPU at, which NVML's reading (a few-millisecond average of a clock that moves under a
// power cap) does not give.
__global__ void clock_probe(unsigned long long* __restrict__ out, int slot, long long spin_ns) {
    unsigned long long t0, t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    const long long c0 = clock64();
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    } while ((long long)(t1 - t0) < spin_ns);
    const long long c1 = clock64();
    out[2 * slot] = (unsigned long long)(c1 - c0);
    out[2 * slot + 1] = t1 - t0;
}
