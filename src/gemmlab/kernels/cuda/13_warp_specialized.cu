// Rung 13 - warp_specialized: rung 12 with the work split by role: a producer warpgroup that only copies,
// two consumer warpgroups that only multiply, and the registers moved to where the accumulators are.
// (fp16 / bf16 in, fp32 accumulate, fused epilogue; sm_90a.)
//
// Idea: in rung 12 the threads that issue the wgmmas also wait for them before a slot can be refilled, and
// one thread among them issues the copies: every wait is on the tensor cores' critical path. Give each job
// its own warps and let mbarriers hand the slots over:
// - Warpgroup 0, the producer: one thread walks the k steps, waits until a slot is `empty`, and issues its
//   TMA copies onto the slot's `full` barrier. It never touches the data, so `setmaxnreg.dec` gives its
//   registers back to the SM (40 per thread).
// - Warpgroups 1 and 2, the consumers: each takes BM / 2 rows of the tile (cooperative), waits until a
//   slot is `full`, issues its wgmmas, and once they are done every warp arrives on the slot's `empty`
//   barrier (8 arrivals free it). `setmaxnreg.inc` raises them to 232 registers, room for 128 fp32
//   accumulators per thread: a 128 x 256 tile, whose k step reads 1.5 bytes of shared memory per
//   multiply-add against 2 for rung 12's 128 x 128.
// - The producer runs up to STAGES slots ahead of the slower consumer: the copies of the next k steps are
//   always in flight, and no consumer waits for the other.
// - One block of 384 threads per tile (one per SM with the default ring of four slots), grouped order.
// - Epilogue from the registers (wgmma_store.cuh), each consumer its own rows, staged (where it must) in a
//   region of its own after the ring (the other consumer may still be reading the ring).
// - Operands as rung 12: A row-major; B_LAYOUT 1 a row-major B read N-major, 2 B^T read K-major in place.
// What it leaves on the table (the next rung): the block ends with its tile, so each SM pays a block's
// start (barriers, the first copies' latency) and its epilogue with the tensor cores idle, once per tile.
// Changed from rung 12: producer / consumer warpgroups with full and empty barriers, setmaxnreg, a 128 x 256
// tile.
// Traffic: per tile BM x K of A and K x BN of B from L2, C once (B once per 128 rows instead of per 128 x 128
// tile of rung 12: half as many B reads per output).
// Predicted: 1.15-1.35 x rung 12 at 4096^3 and 8192^3 (the wgmma waits leave the critical path, a third
// less shared memory read per multiply-add). Measured: 1.25 x at 4096^3 (0.84 of cuBLAS), 1.29 x at 8192^3 (0.92).
#include "common.cuh"
#include "epilogue.cuh"
#include "hopper.cuh"
#include "wgmma_store.cuh"

// BM x BN: the tile, BM / 2 rows per consumer (64 or 128, one or two m64 wgmma tiles), BN = 128 or 256 (at
// most 128 accumulators per consumer thread); STAGES: slots in the ring; GROUP_M, A_TYPE, C_TYPE, B_LAYOUT
// and the tensor maps as rung 12.
template <int BM, int BN, int STAGES, int GROUP_M, int A_TYPE, int C_TYPE, int B_LAYOUT>
__global__ void __launch_bounds__(384, 1)
    warp_specialized_gemm(int M, int N, int K, float alpha, const void* __restrict__ A, int lda,
                          const void* __restrict__ B, int ldb, float beta, typename Out<C_TYPE>::T* __restrict__ C,
                          int ldc, const float* __restrict__ bias, const typename Out<C_TYPE>::T* __restrict__ R, int ldr,
                          int epilogue, const __grid_constant__ TensorMap tmap_a, const __grid_constant__ TensorMap tmap_b) {
    constexpr int BK = 64;
    constexpr int CONSUMERS = 2, WG_M = BM / CONSUMERS;
    constexpr int MT = WG_M / 64, ACC = BN / 2;
    constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128, STAGE_BYTES = A_BYTES + B_BYTES;
    constexpr int B_CHUNK = BK * 128;
    constexpr bool B_KMAJOR = B_LAYOUT == 2;
    static_assert(WG_M == 64 || WG_M == 128, "BM: 128 or 256 (64 or 128 rows per consumer)");
    static_assert(BN == 128 || BN == 256, "BN: 128 or 256 columns (the wgmma N)");
    static_assert(MT * ACC <= 128, "at most 128 accumulators per consumer thread (BM x BN <= 128 x 256)");
    static_assert(STAGES >= 2, "the ring needs at least two slots");
    static_assert(A_TYPE == 1 || A_TYPE == 2, "A_TYPE: 1 fp16, 2 bf16");
    static_assert(B_LAYOUT == 1 || B_LAYOUT == 2, "B_LAYOUT: 1 row-major B, 2 B^T given");

    // STAGES x (A tile, B tile), then WG_M x EPI_PITCH floats of staging per consumer, + 1024 bytes of slack.
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long full_bar[STAGES], empty_bar[STAGES];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    // The warpgroup through a shuffle from lane 0: the compiler then knows it is uniform across the warp, so
    // what derives from it (a consumer's rows and descriptors) stays in uniform registers.
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0), tid_wg = threadIdx.x % 128;

    if (threadIdx.x == 0) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(smem_u32(&full_bar[s]), 1);                  // the producer's arrive (+ the bytes)
            mbar_init(smem_u32(&empty_bar[s]), CONSUMERS * 4);     // one arrive per consuming warp
        }
        fence_mbar_init();
    }
    __syncthreads();

    // The tile (computed by each role after its setmaxnreg: values live across it would be spilled under
    // the launch's 168-register cap; `opaque` keeps the compiler from hoisting them above it).
#define WS_TILE                                                                                               \
    const int tiles_n = (opaque(N) + BN - 1) / BN, tiles_m = (opaque(M) + BM - 1) / BM;                      \
    int tile_row, tile_col;                                                                                   \
    grouped_tile_of(opaque(blockIdx.x), tiles_m, tiles_n, GROUP_M, tile_row, tile_col);                       \
    const int m0 = tile_row * BM, n0 = tile_col * BN, k_tiles = (opaque(K) + BK - 1) / BK;

    if (wg == 0) {
        // ---------------------------------------------------------------- producer
        setmaxnreg_dec<40>();
        WS_TILE
        if (tid_wg == 0) {
            for (int kt = 0; kt < k_tiles; ++kt) {
                const int s = kt % STAGES;
                // The slot's previous use (k step kt - STAGES) has been released; a fresh barrier passes
                // parity 1 at once, so the first round does not wait.
                mbar_wait(smem_u32(&empty_bar[s]), (unsigned)(((kt / STAGES) & 1) ^ 1));
                const unsigned full = smem_u32(&full_bar[s]);
                mbar_arrive_expect_tx(full, STAGE_BYTES);
                const unsigned a_dst = base + s * STAGE_BYTES, b_dst = a_dst + A_BYTES;
                tma_load_2d(a_dst, &tmap_a, kt * BK, m0, full);
                if constexpr (B_KMAJOR) {
                    tma_load_2d(b_dst, &tmap_b, kt * BK, n0, full);
                } else {
#pragma unroll
                    for (int c = 0; c < BN / 64; ++c) tma_load_2d(b_dst + c * B_CHUNK, &tmap_b, n0 + c * 64, kt * BK, full);
                }
            }
        }
    } else {
        // ---------------------------------------------------------------- consumers
        setmaxnreg_inc<232>();
        WS_TILE
        const int cw = wg - 1, warp = tid_wg / 32, lane = tid_wg % 32, g = lane / 4, t = lane % 4;
        float acc[MT][ACC];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int r = 0; r < ACC; ++r) acc[mt][r] = 0.0f;
        // This consumer's rows of A (WG_M rows further into the slot) and B, as in rung 12.
        const unsigned long long desc_a0 = smem_desc(base + cw * WG_M * 128, 16, 1024);
        const unsigned long long desc_b0 = smem_desc(base + A_BYTES, B_KMAJOR ? 16 : B_CHUNK, 1024);
        for (int kt = 0; kt < k_tiles; ++kt) {
            const int s = kt % STAGES;
            mbar_wait(smem_u32(&full_bar[s]), (unsigned)((kt / STAGES) & 1));
            wgmma_k_tile<MT, BN, A_TYPE, B_KMAJOR>(acc, desc_add(desc_a0, s * STAGE_BYTES),
                                                   desc_add(desc_b0, s * STAGE_BYTES));
            wgmma_retire(acc);  // this warp's share of the slot's wgmmas is done
            if (lane == 0) mbar_arrive(smem_u32(&empty_bar[s]));  // the slot back to the producer
        }
        float* stage = reinterpret_cast<float*>(smem_raw + (base - smem_u32(smem_raw)) + STAGES * STAGE_BYTES) +
                       cw * WG_M * EPI_PITCH;
        store_registers<C_TYPE, MT, ACC>(C, ldc, M, N, m0 + cw * WG_M, n0, acc, alpha, beta, bias, R, ldr, epilogue,
                                         stage, 1 + cw, warp, g, t, tid_wg);
    }
#undef WS_TILE
}
