// Rung 07 - conflict_free: the vectorised kernel with shared-memory layouts that no warp access splits.
//
// Idea: a thread's TM x TN tile is no longer contiguous but made of 4 x 4 groups spread across the block
// tile: rows  g * (4 * BM/TM) + trow * 4 + (0..3),  columns  g * (4 * BN/TN) + tcol * 4 + (0..3).
// Each LDS.128 of a quarter-warp then covers 8 consecutive 16-byte chunks (128 bytes, every bank once)
// instead of chunks 32 bytes apart (two lanes per bank). The transposed A tile gets 4 floats of padding
// per k-row (As[k * (BM + 4) + m]): the two lanes of a warp that store the same m for k and k + 4 now
// land in different banks (bank = 4k + m mod 32 instead of m mod 32). C is stored in the same groups.
// Changed from rung 06: the thread-to-element map and the padding; the arithmetic is identical.
// Traffic: as rung 06; shared-memory wavefronts per LDS.128 drop to the minimum (4 per warp).
// Predicted: 1.1-1.2x rung 06; with ncu, l1tex__data_bank_conflicts_pipe_lsu_mem_shared falls to ~0.
// Measured: docs/journal.md.
#include "tile_io.cuh"

// BM, BN: block tile; BK: depth per step (a multiple of 4); TM, TN: thread tile (multiples of 4).
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
conflict_free_gemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                   const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    constexpr int TROWS = BM / TM, TCOLS = BN / TN, NT = TROWS * TCOLS;
    constexpr int BMP = BM + 4;  // padded k-row of the transposed A tile
    static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "TM, TN and BK must be multiples of 4");
    static_assert(BM % TM == 0 && BN % TN == 0, "thread tiles must divide the block tile");
    __shared__ __align__(16) float As[BK * BMP];
    __shared__ __align__(16) float Bs[BK * BN];

    const int tid = threadIdx.x;
    const int tcol = tid % TCOLS, trow = tid / TCOLS;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const bool vec_a = rows_are_16B_aligned(A, lda), vec_b = rows_are_16B_aligned(B, ldb);
    const bool vec_c = rows_are_16B_aligned(C, ldc);

    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        load_step_tiles<BM, BN, BK, NT, BMP>(As, Bs, A, lda, B, ldb, row0, col0, k0, M, N, K, vec_a, vec_b, tid);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
#pragma unroll
            for (int g = 0; g < TM / 4; ++g)
                *reinterpret_cast<float4*>(&a[4 * g]) =
                    *reinterpret_cast<const float4*>(&As[k * BMP + g * 4 * TROWS + trow * 4]);
#pragma unroll
            for (int g = 0; g < TN / 4; ++g)
                *reinterpret_cast<float4*>(&b[4 * g]) =
                    *reinterpret_cast<const float4*>(&Bs[k * BN + g * 4 * TCOLS + tcol * 4]);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
    store_grouped_tile<TM, TN, 4 * TROWS, 4 * TCOLS>(C, ldc, row0 + trow * 4, col0 + tcol * 4, M, N, acc, vec_c, alpha, beta);
}
