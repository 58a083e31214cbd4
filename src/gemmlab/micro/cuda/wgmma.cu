// Microbenchmark - tensor-core rate through wgmma (Hopper warpgroup MMA, m64n256k16, fp16 or bf16 inputs,
// fp32 accumulate), the instruction the datasheet rate of sm_90 is quoted for.
//
// Each warpgroup (4 warps, 128 threads) holds one 64 x 256 fp32 accumulator tile (128 registers per thread)
// and multiplies the same shared-memory operands into it again and again: A is 64 x 64 and B^T 256 x 64,
// both K-major and 128-byte swizzled, as rung 15 lays out one stage of its ring, and each trip walks their
// k in four steps of 16 (one commit group of four wgmma). A group is committed and the warpgroup waits only
// for the group before it, so one group is always queued behind the one the tensor cores are working on.
// The operands are written once at kernel start and never change: the tensor cores do the full work of
// every wgmma whatever the values, and nothing here waits on global memory.
// One m64n256k16 is 2 * 64 * 256 * 16 = 524288 FLOPs; one trip is four of them per warpgroup. Each wgmma
// reads 10 KiB of operands (2 KiB of A, 8 KiB of B), 80 bytes per clock per SM at the datasheet's 4096
// FLOP/clk, the same ratio as rung 15's main loop with 64-row warpgroup tiles.
// Expected: close to the datasheet figure at the SM clock held during the run, and well above the
// mma.sync benchmark (about 669 TFLOP/s on an H100, less than rung 15 reaches).
// Needs sm_90a (wgmma exists on no other target, not even plain sm_90); elsewhere the kernel body is
// empty and the runner does not launch it.
//
// BF16: 1 bf16 inputs, 0 fp16. WARPGROUPS: warpgroups per block (1 or 2), each with its own accumulators
// over the same operands.

#include "block_clock.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WGMMA_PEAK_ENABLED 1
#endif

#ifdef WGMMA_PEAK_ENABLED
namespace {

constexpr int KSTEPS = 4;                 // wgmma per commit group: k 0..63 of the tile, 16 at a time
constexpr int A_BYTES = 64 * 128;         // 64 rows of A, 64 elements (128 bytes) of k each
constexpr int B_BYTES = 256 * 128;        // 256 rows of B^T, the same k
constexpr int TILE_BYTES = A_BYTES + B_BYTES;

// Shared-memory matrix descriptor of a K-major operand with the 128-byte swizzle: start address, leading
// byte offset (unused for this swizzle, 16 by convention) and stride byte offset (1024: the next group of
// 8 rows), each in units of 16 bytes; bits 62-63 = 1 select the 128-byte swizzle.
__device__ __forceinline__ unsigned long long kmajor_desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) | ((unsigned long long)(16u >> 4) << 16) |
           ((unsigned long long)(1024u >> 4) << 32) | (1ull << 62);
}

// The 128 accumulators as asm operands %0 .. %127, eight at a time.
#define PEAK_D8(i) "+f"(d[(i) + 0]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), \
                   "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define PEAK_D32(i) PEAK_D8(i), PEAK_D8((i) + 8), PEAK_D8((i) + 16), PEAK_D8((i) + 24)
#define PEAK_D128 PEAK_D32(0), PEAK_D32(32), PEAK_D32(64), PEAK_D32(96)
// "%0, %1, ..., %127": the accumulators' places in the instruction.
#define PEAK_REGS                                                                                              \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
    "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, " \
    "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, " \
    "%65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, " \
    "%86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, "      \
    "%105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, "   \
    "%122, %123, %124, %125, %126, %127"

// D (64 x 256, fp32) += A (64 x 16, from desc_a) * B (16 x 256, K-major, from desc_b). Immediates: scale-d 1
// (accumulate), scale-a 1, scale-b 1, no transpose of A or B (both K-major).
template <int BF16>
__device__ __forceinline__ void mma_64x256x16(float (&d)[128], unsigned long long desc_a, unsigned long long desc_b) {
    if constexpr (BF16) {
        asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
                     "{" PEAK_REGS "}, %128, %129, 1, 1, 1, 0, 0;\n"
                     : PEAK_D128 : "l"(desc_a), "l"(desc_b));
    } else {
        asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
                     "{" PEAK_REGS "}, %128, %129, 1, 1, 1, 0, 0;\n"
                     : PEAK_D128 : "l"(desc_a), "l"(desc_b));
    }
}

}  // namespace
#endif  // WGMMA_PEAK_ENABLED

template <int BF16, int WARPGROUPS>
__global__ void __launch_bounds__(WARPGROUPS * 128)
wgmma_peak(float* __restrict__ sink, int trips, unsigned long long* __restrict__ clocks) {
    static_assert(WARPGROUPS == 1 || WARPGROUPS == 2, "1 or 2 warpgroups per block");
#ifdef WGMMA_PEAK_ENABLED
    // The 128-byte swizzle repeats every 1024 bytes: the operands start on such a boundary.
    __shared__ __align__(1024) unsigned tiles[TILE_BYTES / 4];
    // Small values with a few low mantissa bits varying by position (0x2c00 is 1/16 in fp16, 0x3d80 is 1/16
    // in bf16): the tensor cores see changing data, as in a real GEMM, and the accumulators stay finite
    // (each trip adds about 64 x (1/16)^2 = 1/4 to each).
    const unsigned base = BF16 ? 0x3d803d80u : 0x2c002c00u;
    for (int i = threadIdx.x; i < TILE_BYTES / 4; i += blockDim.x) tiles[i] = base ^ ((i * 2654435761u) & 0x00070007u);
    // wgmma reads shared memory through the async proxy: make these generic-proxy writes visible to it,
    // then let every warpgroup start.
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();

    const unsigned a_tile = (unsigned)__cvta_generic_to_shared(tiles), b_tile = a_tile + A_BYTES;
    const BlockClock start = block_clock_start();  // (cycles, ns) of the trips: block_clock.cuh
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.0f;
    for (int t = 0; t < trips; ++t) {
        // Orders the accumulators' register writes above (first trip) before the asynchronous reads; between
        // wgmma of the same shape on the same accumulators the hardware keeps the order itself.
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int k = 0; k < KSTEPS; ++k)  // one k step further is 32 bytes along each 128-byte row
            mma_64x256x16<BF16>(d, kmajor_desc(a_tile + k * 32), kmajor_desc(b_tile + k * 32));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        // Wait for the group before this one only: this one stays queued while the next trip is issued.
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    // Pin the reads of the accumulators below the wait (the compiler sees no tie between the two).
#pragma unroll
    for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 128; ++i) s += d[i];
    if (s == -1.0f) sink[blockIdx.x * blockDim.x + threadIdx.x] = s;
    block_clock_stop(start, clocks);
#endif
}
