"""How fast DRAM delivers a weight matrix (N x K, 16-bit, K contiguous) to the SMs under the read patterns a
small-M product can use, with no arithmetic: what rung 16's copies could reach at best.

A warp takes R rows at a time and walks K in runs of RUN bytes per row (R = 16, RUN = 512: a slot of rung
13's ring); a matrix is split into (R rows) x (K / KSPLIT) pieces handed to warps in turn. Two ways to fetch:
`ld` (16-byte loads into registers, every lane, all of a step's loads in flight) and `bulk` (one
cp.async.bulk per row into a per-warp ring of STAGES slots in shared memory, completed on mbarriers, as
rung 16 with COPY=1), and `blk` (the block's 256 threads together read R rows x RUN bytes per step). L2 flushed before every call (--clean: by a read, as the harness does; else by a
memset, which leaves dirty lines for the timed kernel to write back); medians of 9 calls.

    PYTHONPATH=src python3 scripts/stream_pattern_probe.py [--clean] [--shapes 8192x8192,28672x8192,8192x28672] [--only ld,blk,bulk]
"""

from __future__ import annotations

import argparse

SRC = r"""
__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// R rows x RUN bytes per step, 16-byte loads; every lane's loads of a step issued before any is used.
template <int R, int RUN>
__global__ void __launch_bounds__(256) ld_rows(const uint4* __restrict__ B, int n, int k_u4, int ksplit,
                                              unsigned* __restrict__ sink) {
    constexpr int RU = RUN / 16, PER = R * RU / 32;
    static_assert(R * RU % 32 == 0, "whole warps");
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (blockDim.x / 32);
    const long long items = (long long)(n / R) * ksplit;
    const int slice = k_u4 / ksplit;
    unsigned acc = 0;
    for (long long it = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; it < items; it += warps) {
        const int rg = it % (n / R), ks = it / (n / R);
        const uint4* base = B + (long long)rg * R * k_u4 + (long long)ks * slice;
        for (int s = 0; s < slice; s += RU) {
            uint4 v[PER];
#pragma unroll
            for (int i = 0; i < PER; ++i) {
                const int e = lane + 32 * i, row = e / RU, col = e % RU;
                v[i] = __ldcs(base + (long long)row * k_u4 + s + col);
            }
#pragma unroll
            for (int i = 0; i < PER; ++i) acc ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
        }
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

// The block's threads together read R rows x RUN bytes per step (a warp's lanes cover 512 contiguous bytes of
// one row per load); a matrix is split into (R rows) x (K / KSPLIT) pieces handed to blocks in turn.
template <int R, int RUN>
__global__ void __launch_bounds__(256) blk_rows(const uint4* __restrict__ B, int n, int k_u4, int ksplit,
                                               unsigned* __restrict__ sink) {
    constexpr int RU = RUN / 16, PER = R * RU / 256;
    static_assert(R * RU % 256 == 0, "whole blocks");
    const long long items = (long long)(n / R) * ksplit;
    const int slice = k_u4 / ksplit;
    unsigned acc = 0;
    for (long long it = blockIdx.x; it < items; it += gridDim.x) {
        const int rg = it % (n / R), ks = it / (n / R);
        const uint4* base = B + (long long)rg * R * k_u4 + (long long)ks * slice;
        for (int s = 0; s < slice; s += RU) {
            uint4 v[PER];
#pragma unroll
            for (int i = 0; i < PER; ++i) {
                const int e = threadIdx.x + 256 * i, row = e / RU, col = e % RU;
                v[i] = __ldcs(base + (long long)row * k_u4 + s + col);
            }
#pragma unroll
            for (int i = 0; i < PER; ++i) acc ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
        }
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

// The same pattern through the copy engine: per warp a ring of STAGES slots of R rows x RUN bytes, lane r
// copies row r (one cp.async.bulk), lane 0 arrives with the bytes; the warp waits, touches one word, refills.
template <int R, int RUN, int STAGES>
__global__ void __launch_bounds__(256) bulk_rows(const uint4* __restrict__ B, int n, int k_u4, int ksplit,
                                                unsigned* __restrict__ sink) {
    extern __shared__ __align__(128) unsigned char smem[];
    constexpr int SLOT = R * RUN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    unsigned char* ring = smem + warp * STAGES * SLOT;
    const unsigned bars = smem_u32(smem + (blockDim.x / 32) * STAGES * SLOT) + 8 * warp * STAGES;
    if (lane == 0) {
        for (int q = 0; q < STAGES; ++q) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bars + 8 * q));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();
    const long long warps = (long long)gridDim.x * (blockDim.x / 32);
    const long long items = (long long)(n / R) * ksplit;
    const int slice = k_u4 / ksplit, steps = slice / (RUN / 16);
    unsigned acc = 0;
    int use = 0;  // slot uses so far (parity)
    for (long long it = blockIdx.x * (blockDim.x / 32) + warp; it < items; it += warps) {
        const int rg = it % (n / R), ks = it / (n / R);
        const uint4* base = B + (long long)rg * R * k_u4 + (long long)ks * slice;
        auto issue = [&](int q) {
            const int slot = (use + q) % STAGES;
            for (int r = lane; r < R; r += 32)
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                             ::"r"(smem_u32(ring + slot * SLOT + r * RUN)), "l"(base + (long long)r * k_u4 + q * (RUN / 16)),
                             "r"(RUN), "r"(bars + 8 * slot) : "memory");
            if (lane == 0)
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bars + 8 * slot), "r"(SLOT) : "memory");
        };
        for (int q = 0; q < STAGES - 1 && q < steps; ++q) issue(q);
        for (int q = 0; q < steps; ++q) {
            const int slot = (use + q) % STAGES, parity = ((use + q) / STAGES) & 1;
            unsigned done = 0;
            while (!done)
                asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                             : "=r"(done) : "r"(bars + 8 * slot), "r"(parity) : "memory");
            acc ^= *reinterpret_cast<const unsigned*>(ring + slot * SLOT + lane * 16);
            __syncwarp();
            if (q + STAGES - 1 < steps) issue(q + STAGES - 1);
        }
        use += steps;
    }
    if (acc == 0x12345678u) sink[0] = acc;
}
"""

LD = [(16, 256), (16, 512), (16, 1024), (16, 2048), (2, 2048), (1, 512), (1, 4096)]
BLK = [(16, 512), (16, 1024), (16, 2048), (16, 4096), (8, 4096), (32, 1024), (32, 2048)]
BULK = [(16, 512, 4, 4), (16, 512, 3, 8), (16, 1024, 3, 4), (16, 2048, 2, 3), (8, 2048, 3, 4), (4, 4096, 3, 4),
        (1, 4096, 4, 8)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="8192x8192,28672x8192,8192x28672")
    ap.add_argument("--clean", action="store_true", help="flush L2 by reading a buffer, as the harness does (no dirty "
                                                        "lines left); without it, by a memset of 256 MB")
    import cupy as cp

    ap.add_argument("--only", default="ld,blk,bulk", help="which fetch patterns to run (comma separated)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    names = [f"ld_rows<{r},{run}>" for r, run in LD] + [f"bulk_rows<{r},{run},{s}>" for r, run, s, _ in BULK]
    blk_names = [f"blk_rows<{r},{run}>" for r, run in BLK]
    mod = cp.RawModule(code=SRC, options=("-std=c++17", "-arch=sm_90"), name_expressions=names + blk_names)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    from gemmlab.bench.timing import L2Flusher

    flush = cp.ones(256 << 20, dtype=cp.uint8)
    flush_read = L2Flusher()  # the harness's flush: a read of twice the L2
    sink = cp.zeros(4, dtype=cp.uint32)
    print("| N x K | pattern | TB/s |")
    print("|---|---|---|")
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        w = cp.random.random((n, k // 2), dtype=cp.float32).view(cp.uint8)  # N x K 16-bit values
        k_u4 = k * 2 // 16

        def timed(fn):
            ts = []
            for _ in range(9):
                if args.clean:
                    flush_read()
                else:
                    flush.fill(1)
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record()
                fn()
                e1.record()
                e1.synchronize()
                ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e-3)
            return sorted(ts)[len(ts) // 2]

        for (r, run), name in zip(BLK, blk_names):
            for ksplit in (1, 4):
                for per_sm in (1, 2, 4):
                    if "blk" not in only or (k_u4 // ksplit) % (run // 16):
                        continue
                    f = mod.get_function(name)
                    t = timed(lambda: f((sms * per_sm,), (256,), (w, cp.int32(n), cp.int32(k_u4), cp.int32(ksplit), sink)))
                    print(f"| {n} x {k} | blk R={r} RUN={run} x{per_sm}/SM ksplit={ksplit} | {n * k * 2 / t / 1e12:.2f} |",
                          flush=True)
        for (r, run), name in zip(LD, names):
            if "ld" not in only:
                continue
            for ksplit in (1, 4):
                if (k_u4 // ksplit) % (run // 16):
                    continue
                f = mod.get_function(name)
                t = timed(lambda: f((sms * 8,), (256,), (w, cp.int32(n), cp.int32(k_u4), cp.int32(ksplit), sink)))
                print(f"| {n} x {k} | ld R={r} RUN={run} ksplit={ksplit} | {n * k * 2 / t / 1e12:.2f} |", flush=True)
        for (r, run, st, warps), name in zip(BULK, names[len(LD):]):
            if "bulk" not in only:
                continue
            smem = warps * st * r * run + 8 * warps * st
            if smem > 227 * 1024:
                continue
            f = mod.get_function(name)
            f.max_dynamic_shared_size_bytes = smem
            per_sm = max(1, (228 * 1024) // (smem + 1024))
            for ksplit in (1, 4):
                if (k_u4 // ksplit) % (run // 16):
                    continue
                t = timed(lambda: f((sms * per_sm,), (32 * warps,), (w, cp.int32(n), cp.int32(k_u4), cp.int32(ksplit), sink),
                                    shared_mem=smem))
                print(f"| {n} x {k} | bulk R={r} RUN={run} STAGES={st} warps={warps} x{per_sm}/SM ksplit={ksplit} | "
                      f"{n * k * 2 / t / 1e12:.2f} |", flush=True)


if __name__ == "__main__":
    main()
