// hopper.cuh: the PTX of Hopper (sm_90) that the rungs share, written once: tensor maps and the copy engine
// (TMA tile copies, 1-D bulk copies, bulk groups), mbarriers, proxy fences, clusters, stmatrix, named
// warpgroup barriers, setmaxnreg, and wgmma itself (descriptors, fences, commit / wait, the k steps). Only a kernel compiled for sm_90 or later may call these; a rung that also runs on
// older GPUs calls them under `#if __CUDA_ARCH__ >= 900` (unused, they generate no code).
#pragma once

// CUtensorMap: 128 opaque bytes, 64-byte aligned, encoded on the host (runtime/tma.py).
struct __align__(64) TensorMap {
    unsigned long long opaque[16];
};

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
// Arrive once and add `bytes` to the transaction count the phase waits for (the TMA copies complete them).
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Wait until the phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n"
            "}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}

// A 2-D tile copy global -> shared by the copy engine; coordinates are (inner, outer) element indices.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TensorMap* map, int inner, int outer, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(inner), "r"(outer), "r"(bar)
        : "memory");
}

// A 1-D bulk copy global -> shared by the copy engine: `bytes` (a multiple of 16; both addresses 16-byte
// aligned) complete on the mbarrier's transaction count. No tensor map: any contiguous run, e.g. a row.
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
// The same with an L2 eviction priority: `policy` from l2_evict_first (data read once, e.g. weights
// streamed by a decoding step, leaves L2 to what is read again).
__device__ __forceinline__ void bulk_load_hint(unsigned dst, const void* src, unsigned bytes, unsigned bar,
                                               unsigned long long policy) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar), "l"(policy)
                 : "memory");
}
__device__ __forceinline__ unsigned long long l2_evict_first() {
    unsigned long long p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}
// Programmatic dependent launch: a grid launched after this one on the stream with the programmatic
// serialisation attribute may start once every block of this grid has called grid_dependents_launch (or
// exited); it must call grid_dependency_wait before reading what this grid writes (the wait returns when this
// grid has completed and its memory is visible). On an ordinary launch both are no-ops.
__device__ __forceinline__ void grid_dependents_launch() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// Every mbarrier this thread initialised is visible to the other threads and the copy engine (after a barrier).
__device__ __forceinline__ void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// The same copy written to the same shared-memory offset (and signalled on the same mbarrier offset) in
// every block of the cluster whose bit is set in `mask`: one L2 read feeds several SMs.
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TensorMap* map, int inner, int outer, unsigned bar,
                                                      unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(inner), "r"(outer), "r"(bar), "h"(mask)
        : "memory");
}

// The same copies of one matrix of a batch (3-D maps, BATCHED builds): `z` is the matrix. A negative z is a
// 2-D map (the builds without a batch pass the constant -1, so only the 2-D form is compiled in).
__device__ __forceinline__ void tma_load(unsigned dst, const TensorMap* map, int inner, int outer, int z, unsigned bar) {
    if (z < 0) {
        tma_load_2d(dst, map, inner, outer, bar);
        return;
    }
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(inner), "r"(outer), "r"(z), "r"(bar)
        : "memory");
}
__device__ __forceinline__ void tma_load_multicast(unsigned dst, const TensorMap* map, int inner, int outer, int z,
                                                   unsigned bar, unsigned short mask) {
    if (z < 0) {
        tma_load_2d_multicast(dst, map, inner, outer, bar, mask);
        return;
    }
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(inner), "r"(outer), "r"(z), "r"(bar), "h"(mask)
        : "memory");
}

// Arrive on the mbarrier at the same shared-memory offset in cluster block `rank` (this block included).
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned rank) {
    asm volatile(
        "{\n"
        ".reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
        "}\n" ::"r"(bar), "r"(rank)
        : "memory");
}

// TMA store of one box from shared memory into the matrix of `map` (clipped to it), as a bulk async group of
// the issuing thread: the copy engine reads the box out of shared memory, then writes it to global memory.
__device__ __forceinline__ void tma_store_2d(const TensorMap* map, unsigned src, int inner, int outer) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                     reinterpret_cast<unsigned long long>(map)), "r"(src), "r"(inner), "r"(outer)
                 : "memory");
}
// The same into matrix z of a batch (3-D maps); a negative z: the 2-D form.
__device__ __forceinline__ void tma_store(const TensorMap* map, unsigned src, int inner, int outer, int z) {
    if (z < 0) {
        tma_store_2d(map, src, inner, outer);
        return;
    }
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                     reinterpret_cast<unsigned long long>(map)), "r"(src), "r"(inner), "r"(outer), "r"(z)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until at most N of the thread's bulk groups are still reading their shared-memory source.
template <int N>
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory"); }
// Until at most N of the thread's bulk groups are still incomplete (writes done).
template <int N>
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory"); }
// `bytes` (a multiple of 16) from p (16-byte aligned) brought into L2 by the copy engine ahead of their use: one
// instruction, no register and no completion to wait for.
__device__ __forceinline__ void bulk_prefetch_l2(const void* p, unsigned bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
}
// The thread's shared-memory writes made visible to the copy engine (the async proxy).
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void sts32(unsigned addr, unsigned v) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
// Four 8 x 8 matrices of 16-bit values into shared memory (sm_90): register i of each thread is its piece of
// matrix i (row lane / 4, columns 2 (lane % 4) and + 1, the accumulator's layout); lane 8 i + r gives the
// address of matrix i's row r (16 contiguous bytes).
__device__ __forceinline__ void stsm_x4(unsigned addr, unsigned r0, unsigned r1, unsigned r2, unsigned r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
                 "r"(r2), "r"(r3)
                 : "memory");
}

__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

// Every thread of every block of the cluster: what each wrote before is visible to all after.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// Shared-memory matrix descriptor for a 128-byte swizzled operand: start address, leading and stride
// byte offsets (all >> 4), swizzle mode 1 (128 B) in bits 62-63.
__device__ __forceinline__ unsigned long long smem_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((lbo & 0x3FFFF) >> 4) << 16) |
           ((unsigned long long)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

// A descriptor `bytes` further into shared memory: the address field (bits 0-13, address / 16) is the low end
// of the descriptor and every address of the block's shared memory is below 2^18 (at most 228 KB), so the
// sum never carries into the next field. The main loops build one descriptor per operand and move it by
// compile-time offsets (k step, m64 tile) and the slot's offset, instead of encoding each address anew
// (which cost about 20 integer instructions and two register moves per wgmma).
// (`bytes` is a multiple of 16; only the low word changes.)
__device__ __forceinline__ unsigned long long desc_add(unsigned long long desc, unsigned bytes) {
    return (desc & 0xFFFFFFFF00000000ull) | (unsigned)((unsigned)desc + (bytes >> 4));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// Keep the compiler from moving accumulator reads or writes across the asynchronous wgmma window.
template <int R>
__device__ __forceinline__ void fence_accumulators(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The same for a register fragment of A (wgmma reads it asynchronously too).
__device__ __forceinline__ void fence_fragment(unsigned (&a)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

// The row (within a consumer's tile) of a thread's accumulators of m64 tile mt, half h: registers 4 j + 2 h
// and 4 j + 2 h + 1 of acc[mt] (the layout of m64nN: warp w holds rows 16 w + g and 16 w + g + 8).
__device__ __forceinline__ int acc_row(int mt, int warp, int g, int h) { return mt * 64 + warp * 16 + g + 8 * h; }

__device__ __forceinline__ unsigned lds32(unsigned addr) {
    unsigned v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr));
    return v;
}

// A named barrier of one warpgroup's 128 threads (ids 1-15; 0 is __syncthreads').
__device__ __forceinline__ void warpgroup_barrier(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }

// Warp specialisation's register split: every thread of a warpgroup gives registers back to the SM's pool
// (dec: a producer that only issues copies) or takes them from it (inc: consumers holding accumulators).
// N is a multiple of 8 in 24..256; the launch's registers per thread must allow the counts to balance.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }

// ------------------------------------------------------------------------------------------ wgmma
#define WG_REGS32 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WG_REGS64 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WG_REGS96 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define WG_REGS128 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

#define WG_ACC8(i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), \
    "+f"(d[(i) + 5]), "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define WG_ACC64(i) WG_ACC8(i), WG_ACC8((i) + 8), WG_ACC8((i) + 16), WG_ACC8((i) + 24), WG_ACC8((i) + 32), \
    WG_ACC8((i) + 40), WG_ACC8((i) + 48), WG_ACC8((i) + 56)
#define WG_ACC32(i) WG_ACC8(i), WG_ACC8((i) + 8), WG_ACC8((i) + 16), WG_ACC8((i) + 24)

// One k step of D (64 x N, fp32, N / 2 registers per thread) += A (64 x k, K-major, from desc_a) * B (k x N).
// fp16 / bf16 (k = 16): immediates scale-d 1, scale-a 1, scale-b 1, transpose-a 0, transpose-b TRANS_B
// (1: B N-major, row-major K x N; 0: B K-major, given as B^T). tf32 (k = 8): both operands must be K-major (B given as N x K), and the
// instruction has no transpose immediates; the tensor cores use the top 19 bits of each fp32 input.
// e4m3 / e5m2 (A_TYPE 5 / 6, k = 32): both operands K-major, no transpose immediates, as tf32.
template <int N, int A_TYPE, int TRANS_B>
__device__ __forceinline__ void wgmma_step(float (&d)[N / 2], unsigned long long desc_a, unsigned long long desc_b) {
    static_assert(N == 64 || N == 128 || N == 192 || N == 256, "wgmma tiles of N = 64, 128, 192 or 256 columns");
    static_assert(N != 64 || A_TYPE != 3, "N = 64 is built for fp16 / bf16 and 8-bit inputs");
    if constexpr (N == 64) {  // (one 128-byte chunk of B per k step: small M, where a split's sum would cost more)
        if constexpr (A_TYPE == 1) {
            asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {" WG_REGS32 "}, %32, %33, 1, 1, 1, 0, %34;\n"
                         : WG_ACC32(0) : "l"(desc_a), "l"(desc_b), "n"(TRANS_B));
        } else if constexpr (A_TYPE == 2) {
            asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WG_REGS32 "}, %32, %33, 1, 1, 1, 0, %34;\n"
                         : WG_ACC32(0) : "l"(desc_a), "l"(desc_b), "n"(TRANS_B));
        } else if constexpr (A_TYPE == 5) {
            asm volatile("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {" WG_REGS32 "}, %32, %33, 1, 1, 1;\n"
                         : WG_ACC32(0) : "l"(desc_a), "l"(desc_b));
        } else {
            asm volatile("wgmma.mma_async.sync.aligned.m64n64k32.f32.e5m2.e5m2 {" WG_REGS32 "}, %32, %33, 1, 1, 1;\n"
                         : WG_ACC32(0) : "l"(desc_a), "l"(desc_b));
        }
    } else if constexpr (A_TYPE == 5 || A_TYPE == 6) {
        static_assert(N != 192, "N = 192 is built for fp16 / bf16");
        if constexpr (N == 256 && A_TYPE == 5) {
            asm volatile("wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {" WG_REGS128 "}, %128, %129, 1, 1, 1;\n"
                         : WG_ACC64(0), WG_ACC64(64) : "l"(desc_a), "l"(desc_b));
        } else if constexpr (N == 256) {
            asm volatile("wgmma.mma_async.sync.aligned.m64n256k32.f32.e5m2.e5m2 {" WG_REGS128 "}, %128, %129, 1, 1, 1;\n"
                         : WG_ACC64(0), WG_ACC64(64) : "l"(desc_a), "l"(desc_b));
        } else if constexpr (A_TYPE == 5) {
            asm volatile("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" WG_REGS64 "}, %64, %65, 1, 1, 1;\n"
                         : WG_ACC64(0) : "l"(desc_a), "l"(desc_b));
        } else {
            asm volatile("wgmma.mma_async.sync.aligned.m64n128k32.f32.e5m2.e5m2 {" WG_REGS64 "}, %64, %65, 1, 1, 1;\n"
                         : WG_ACC64(0) : "l"(desc_a), "l"(desc_b));
        }
    } else if constexpr (N == 192) {  // (fp16 / bf16: a tile width that fills the last round of some shapes, e.g. 3000^3)
        static_assert(A_TYPE != 3, "N = 192 is built for fp16 / bf16");
        if constexpr (A_TYPE == 1) {
            asm volatile("wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 {" WG_REGS96 "}, %96, %97, 1, 1, 1, 0, %98;\n"
                         : WG_ACC64(0), WG_ACC8(64), WG_ACC8(72), WG_ACC8(80), WG_ACC8(88)
                         : "l"(desc_a), "l"(desc_b), "n"(TRANS_B));
        } else {
            asm volatile("wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {" WG_REGS96 "}, %96, %97, 1, 1, 1, 0, %98;\n"
                         : WG_ACC64(0), WG_ACC8(64), WG_ACC8(72), WG_ACC8(80), WG_ACC8(88)
                         : "l"(desc_a), "l"(desc_b), "n"(TRANS_B));
        }
    } else if constexpr (N == 256) {
        if constexpr (A_TYPE == 1) {
            asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {" WG_REGS128 "}, %128, %129, 1, 1, 1, 0, %130;\n"
                         : WG_ACC64(0), WG_ACC64(64) : "l"(desc_a), "l"(desc_b), "n"(TRANS_B));
        } else if constexpr (A_TYPE == 2) {
            asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" WG_REGS128 "}, %128, %129, 1, 1, 1, 0, %130;\n"
                         : WG_ACC64(0), WG_ACC64(64) : "l"(desc_a), "l"(desc_b), "n"(TRANS_B));
        } else {
            asm volatile("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {" WG_REGS128 "}, %128, %129, 1, 1, 1;\n"
                         : WG_ACC64(0), WG_ACC64(64) : "l"(desc_a), "l"(desc_b));
        }
    } else {
        if constexpr (A_TYPE == 1) {
            asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" WG_REGS64 "}, %64, %65, 1, 1, 1, 0, %66;\n"
                         : WG_ACC64(0) : "l"(desc_a), "l"(desc_b), "n"(TRANS_B));
        } else if constexpr (A_TYPE == 2) {
            asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WG_REGS64 "}, %64, %65, 1, 1, 1, 0, %66;\n"
                         : WG_ACC64(0) : "l"(desc_a), "l"(desc_b), "n"(TRANS_B));
        } else {
            asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {" WG_REGS64 "}, %64, %65, 1, 1, 1;\n"
                         : WG_ACC64(0) : "l"(desc_a), "l"(desc_b));
        }
    }
}

// 8-bit inputs, k = 32, N = 128, D = A B without adding the old D (scale-d 0): the first instruction of a k
// step whose sums are promoted on their own (block scales: a fresh partial accumulator per k step).
template <int A_TYPE>
__device__ __forceinline__ void wgmma_fresh_fp8_n128(float (&d)[64], unsigned long long desc_a, unsigned long long desc_b) {
    static_assert(A_TYPE == 5 || A_TYPE == 6, "8-bit inputs only (e4m3, e5m2)");
    if constexpr (A_TYPE == 5) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" WG_REGS64 "}, %64, %65, p, 1, 1;\n}\n"
                     : WG_ACC64(0) : "l"(desc_a), "l"(desc_b), "n"(0));
    } else {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k32.f32.e5m2.e5m2 {" WG_REGS64 "}, %64, %65, p, 1, 1;\n}\n"
                     : WG_ACC64(0) : "l"(desc_a), "l"(desc_b), "n"(0));
    }
}

// One k step with A from registers, tf32 (k = 8): D (64 x N) += A (64 x 8) * B (8 x N, K-major, from desc_b).
// a[0..3] hold A in mma.sync's m16n8k8 layout, warp w of the warpgroup taking rows 16 w .. 16 w + 15:
// (row g, k t), (g + 8, t), (g, t + 4), (g + 8, t + 4) with g = lane / 4, t = lane % 4 (rows relative to
// the warp's first). The registers are read asynchronously: they must keep their values until the wgmma
// has completed (wgmma.wait_group).
template <int N>
__device__ __forceinline__ void wgmma_step_rs_tf32(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long desc_b) {
    static_assert(N == 128 || N == 256, "wgmma tiles of N = 128 or 256 columns");
    if constexpr (N == 256) {
        asm volatile("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {" WG_REGS128 "}, {%128, %129, %130, %131}, %132, 1, 1, 1;\n"
                     : WG_ACC64(0), WG_ACC64(64) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
    } else {
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {" WG_REGS64 "}, {%64, %65, %66, %67}, %68, 1, 1, 1;\n"
                     : WG_ACC64(0) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
    }
}

// One k tile (one 128-byte swizzle row: 64 fp16 / bf16) of MT m64 wgmma tiles, issued as one commit group,
// for the Hopper steps (rungs 12-14). desc_a: this warpgroup's first row of A in the slot (m64 tile mt is
// 64 rows of 128 bytes further, the next k step 32 bytes); desc_b: B in the slot, K-major (laid out like A,
// 32 bytes per k step) or N-major (16 k rows of 128 bytes per k step; 64-column chunks at the descriptor's
// leading offset). Asynchronous: wgmma_retire before the accumulators are read or the slot is reused.
template <int MT, int BN, int A_TYPE, bool B_KMAJOR>
__device__ __forceinline__ void wgmma_k_tile(float (&acc)[MT][BN / 2], unsigned long long desc_a,
                                             unsigned long long desc_b) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) fence_accumulators(acc[mt]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {  // 4 steps of k = 16
        const unsigned long long b = desc_add(desc_b, B_KMAJOR ? kk * 32 : kk * 16 * 128);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            wgmma_step<BN, A_TYPE, B_KMAJOR ? 0 : 1>(acc[mt], desc_add(desc_a, mt * 64 * 128 + kk * 32), b);
    }
    wgmma_commit();
}

// Every wgmma this warp issued has completed (its reads of shared memory too); the accumulators may be read.
template <int MT, int ACC>
__device__ __forceinline__ void wgmma_retire(float (&acc)[MT][ACC]) {
    wgmma_wait<0>();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) fence_accumulators(acc[mt]);
}

