// Rung 06 - vectorized: 16-byte global loads and stores, and A stored transposed in shared memory.
//
// Idea: the blocktile_2d algorithm with every memory access made four words wide. Global tiles are read
// with float4 loads (one instruction instead of four); the A tile is written to shared memory transposed
// (As[k][m]), so that a thread's TM values of A for one k are contiguous and, like its TN values of B,
// come in TM/4 + TN/4 LDS.128 instead of TM + TN scalar loads. C is written with float4 stores.
// Each thread's TM x TN tile is contiguous (rows trow*TM.., columns tcol*TN..).
// Changed from rung 05: access width (4 -> 16 bytes) and the transposed A tile; the same tiling.
// Alignment: 16-byte accesses need 16-byte aligned rows (base pointer and leading dimension); the kernel
// checks once and otherwise, and at every edge, falls back to zero-padded scalar accesses.
// Traffic: as rung 05; shared-memory *instructions* per k fall from TM + TN to (TM + TN) / 4.
// Bottleneck left: bank conflicts. Contiguous 8-wide thread tiles put quarter-warp lanes 32 bytes apart
// (2-way conflicts on B reads), and the transposed A stores collide (2-way). Rung 07 removes both.
// Predicted: 1.15-1.3x rung 05 (fewer load instructions, same conflicts). Measured: docs/journal.md.
#include "tile_io.cuh"

// BM, BN: block tile; BK: depth per step (a multiple of 4); TM, TN: thread tile (multiples of 4).
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
vectorized_gemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    constexpr int TCOLS = BN / TN, NT = (BM / TM) * TCOLS;
    static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "TM, TN and BK must be multiples of 4");
    static_assert(BM % TM == 0 && BN % TN == 0, "thread tiles must divide the block tile");
    __shared__ __align__(16) float As[BK * BM];   // transposed: As[k * BM + m]
    __shared__ __align__(16) float Bs[BK * BN];   // Bs[k * BN + n]

    const int tid = threadIdx.x;
    const int tcol = tid % TCOLS, trow = tid / TCOLS;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const bool vec_a = rows_are_16B_aligned(A, lda), vec_b = rows_are_16B_aligned(B, ldb);
    const bool vec_c = rows_are_16B_aligned(C, ldc);

    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        load_step_tiles<BM, BN, BK, NT, BM>(As, Bs, A, lda, B, ldb, row0, col0, k0, M, N, K, vec_a, vec_b, tid);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; i += 4)
                *reinterpret_cast<float4*>(&a[i]) = *reinterpret_cast<const float4*>(&As[k * BM + trow * TM + i]);
#pragma unroll
            for (int j = 0; j < TN; j += 4)
                *reinterpret_cast<float4*>(&b[j]) = *reinterpret_cast<const float4*>(&Bs[k * BN + tcol * TN + j]);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + trow * TM + i;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            const int col = col0 + tcol * TN + j;
            store4_c(C + (size_t)row * ldc + col, make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]),
                     row < M ? N - col : 0, vec_c, alpha, beta);
        }
    }
}
