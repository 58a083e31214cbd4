// Rung 12 - tma_wgmma: Hopper's two new engines, one warpgroup. TMA fills a ring of shared-memory slots,
// wgmma multiplies straight out of them. (fp16 / bf16 in, fp32 accumulate, fused epilogue; sm_90a.)
//
// Idea: on sm_90a the tensor cores read their operands from shared memory themselves, and a copy engine
// moves whole tiles from global into shared memory. Rung 11 spent its issue slots on both: cp.async
// chunks per thread, ldmatrix into register fragments, one mma.sync per 16 x 8 x 16. Here:
// - `wgmma.mma_async.m64nNk16` (hopper.cuh, wgmma_step): the four warps of a warpgroup (128 threads) issue
//   one instruction that multiplies a 64 x 16 tile of A by a 16 x N tile of B (N = 128 or 256) into fp32
//   registers, asynchronously. Operands are named by 64-bit shared-memory descriptors (address, strides,
//   swizzle), not loaded into registers. A 128 x 128 tile is 2 x 4 such instructions per k step of 64.
// - TMA (`cp.async.bulk.tensor.2d`): one thread asks for a whole box (BM rows x 64 k of A, and B's box),
//   described by a tensor map the host encodes once per call. The engine writes it 128-byte swizzled, the
//   layout wgmma reads without bank conflicts, zero-fills what lies outside the matrix (edges need no
//   code: a zero adds nothing to the sums) and reports the bytes to an mbarrier.
// - An mbarrier ring of STAGES slots: thread 0 starts the first STAGES k steps' copies, then refills each
//   slot once the warpgroup's wgmmas have read it. The warpgroup waits on a slot's barrier (by phase
//   parity: the slot's use count mod 2) before its wgmmas, so STAGES - 1 copies are in flight while the
//   tensor cores work.
// - One block of 128 threads per tile, tiles in the grouped order of rung 10 (GROUP_M tile rows at a time).
// - Epilogue from the registers (wgmma_store.cuh): each pair of adjacent columns one store, the fused
//   bias / activation / residual applied on the way; staged through shared memory where C's rows allow no
//   pairs.
// - Operands: A is M x K row-major (read K-major). B_LAYOUT 1: B is K x N row-major, copied in boxes of 64
//   columns and read N-major (wgmma's transpose bit); B_LAYOUT 2: B^T (N x K, a linear layer's weight) read
//   K-major in place. TMA needs 16-byte aligned rows: the API copies other operands into padded rows first.
// What it leaves on the table (the next rungs): the same 128 threads issue the copies, wait for them and
// for their own wgmmas (one slot's wgmmas must finish before the thread that refills the slot goes on), and
// write the epilogue while nothing else runs on the SM's tensor cores but the other resident block's work.
// Changed from rung 11: TMA instead of cp.async, wgmma from shared memory instead of ldmatrix + mma.sync.
// Traffic: per tile BM x K of A and K x BN of B from L2, C once.
// Predicted: 0.55-0.70 of cuBLAS BF16 at 4096^3 (two blocks per SM of 128 x 128 at three stages; each
// slot waits out its wgmmas, about a tenth of a k step's time exposed per slot, and the epilogues and
// tile starts are not hidden). Measured: 2.90 x rung 11 at 4096^3 (0.67 of cuBLAS), 2.83 x at 8192^3 (0.71).
#include "common.cuh"
#include "epilogue.cuh"
#include "hopper.cuh"
#include "wgmma_store.cuh"

// BM x BN: the tile (BM = 64 or 128 rows: 1 or 2 m64 wgmma tiles; BN = 128 or 256 columns, the wgmma N;
// at most 128 accumulators per thread); STAGES: slots in the ring; GROUP_M: tile rows per group of the
// block order; A_TYPE: 1 fp16, 2 bf16; C_TYPE: 1 fp32, 2 fp16, 3 bf16; B_LAYOUT: 1 row-major B, 2 B^T.
// Tensor maps: tmap_a over A (M x K) in boxes of BM rows x 64; tmap_b over B (K x N) in boxes of 64 k rows
// x 64 columns, or with B_LAYOUT 2 over B^T (N x K) in boxes of BN rows x 64. A and B pointers are unused
// (the maps carry them) and kept for the common argument list.
template <int BM, int BN, int STAGES, int GROUP_M, int A_TYPE, int C_TYPE, int B_LAYOUT>
__global__ void __launch_bounds__(128, 1)
    tma_wgmma_gemm(int M, int N, int K, float alpha, const void* __restrict__ A, int lda, const void* __restrict__ B,
                   int ldb, float beta, typename Out<C_TYPE>::T* __restrict__ C, int ldc, const float* __restrict__ bias,
                   const typename Out<C_TYPE>::T* __restrict__ R, int ldr, int epilogue,
                   const __grid_constant__ TensorMap tmap_a, const __grid_constant__ TensorMap tmap_b) {
    constexpr int BK = 64;                       // one 128-byte swizzle row of 16-bit elements per k step
    constexpr int MT = BM / 64, ACC = BN / 2;    // m64 tiles; fp32 accumulators per thread per m64 tile
    constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128, STAGE_BYTES = A_BYTES + B_BYTES;
    constexpr int B_CHUNK = BK * 128;            // row-major B: 64 k rows of 64 columns (128 bytes), one box
    constexpr bool B_KMAJOR = B_LAYOUT == 2;
    static_assert(BM == 64 || BM == 128, "BM: 64 or 128 rows (one or two m64 wgmma tiles)");
    static_assert(BN == 128 || BN == 256, "BN: 128 or 256 columns (the wgmma N)");
    static_assert(MT * ACC <= 128, "at most 128 accumulators per thread (BM x BN <= 64 x 256 or 128 x 128)");
    static_assert(STAGES >= 2, "the ring needs at least two slots");
    static_assert(A_TYPE == 1 || A_TYPE == 2, "A_TYPE: 1 fp16, 2 bf16");
    static_assert(B_LAYOUT == 1 || B_LAYOUT == 2, "B_LAYOUT: 1 row-major B, 2 B^T given");

    // STAGES x (A tile, B tile) + 1024 bytes of alignment slack: the 128-byte swizzle repeats every 1024
    // bytes and the tiles start on such a boundary. The epilogue stages its rows (where it must) in the ring,
    // which every copy and wgmma is done with by then.
    static_assert(BM * EPI_PITCH * 4 <= STAGES * STAGE_BYTES, "the epilogue's staging rows fit in the ring");
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long full_bar[STAGES];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;

    int tile_row, tile_col;
    grouped_tile(GROUP_M, tile_row, tile_col);
    const int m0 = tile_row * BM, n0 = tile_col * BN;
    const int k_tiles = (K + BK - 1) / BK;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;

    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) mbar_init(smem_u32(&full_bar[s]), 1);  // thread 0's arrive + the bytes
        fence_mbar_init();
    }
    __syncthreads();

    // Thread 0: k step kt's boxes into slot kt % STAGES; the slot's barrier completes when all bytes landed.
    auto issue = [&](int kt) {
        const int s = kt % STAGES;
        const unsigned full = smem_u32(&full_bar[s]);
        mbar_arrive_expect_tx(full, STAGE_BYTES);  // (boxes past the matrix count whole: zero-filled bytes too)
        const unsigned a_dst = base + s * STAGE_BYTES, b_dst = a_dst + A_BYTES;
        tma_load_2d(a_dst, &tmap_a, kt * BK, m0, full);
        if constexpr (B_KMAJOR) {
            tma_load_2d(b_dst, &tmap_b, kt * BK, n0, full);  // BN rows of B^T, 64 k each
        } else {
#pragma unroll
            for (int c = 0; c < BN / 64; ++c) tma_load_2d(b_dst + c * B_CHUNK, &tmap_b, n0 + c * 64, kt * BK, full);
        }
    };
    if (tid == 0)
        for (int kt = 0; kt < STAGES && kt < k_tiles; ++kt) issue(kt);

    float acc[MT][ACC];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < ACC; ++r) acc[mt][r] = 0.0f;
    // Slot 0's descriptors: A in rows of 128 bytes, 8-row swizzle groups 1024 bytes apart; B N-major (64-column
    // chunks B_CHUNK apart, the leading byte offset) or K-major (laid out like A). Other slots and k steps are
    // offsets added to the address field.
    const unsigned long long desc_a0 = smem_desc(base, 16, 1024);
    const unsigned long long desc_b0 = smem_desc(base + A_BYTES, B_KMAJOR ? 16 : B_CHUNK, 1024);
    for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % STAGES;
        mbar_wait(smem_u32(&full_bar[s]), (unsigned)((kt / STAGES) & 1));  // the slot's copies have landed
        // 4 k steps x MT wgmmas out of slot s (hopper.cuh; the hardware applies the swizzle to the final address)
        wgmma_k_tile<MT, BN, A_TYPE, B_KMAJOR>(acc, desc_add(desc_a0, s * STAGE_BYTES), desc_add(desc_b0, s * STAGE_BYTES));
        wgmma_retire(acc);  // this slot's wgmmas are done
        __syncthreads();    // ... in every warp: the slot may be overwritten
        if (tid == 0 && kt + STAGES < k_tiles) issue(kt + STAGES);
    }

    float* stage = reinterpret_cast<float*>(smem_raw + (base - smem_u32(smem_raw)));  // the ring, free now
    store_registers<C_TYPE, MT, ACC>(C, ldc, M, N, m0, n0, acc, alpha, beta, bias, R, ldr, epilogue, stage, 1, warp, g,
                                     t, tid);
}
