// Rung 08 - warptile: a warp-level tile between the block tile and the thread tile.
//
// Idea: the block's BM x BN tile is split into warp tiles of WM x WN, and each warp's 32 lanes form a
// (WM/TM) x (WN/TN) grid of thread tiles (8 x 4 at the defaults), built from 4 x 4 groups as in rung 07.
// A warp then reads only WM/TM distinct float4 of A and WN/TN of B per group and k; every other lane
// gets a broadcast. Per k a warp needs 4 shared-memory wavefronts (2 for A, 2 for B) against 6 in
// rung 07 (whose warps span 2 x 16 thread tiles: 2 for A, 4 for B), and its C tile is a compact 64 x 32
// region instead of two 8-row strips.
// Changed from rung 07: the thread-to-element map (block -> warp -> thread); loads and arithmetic as before.
// Traffic: as rung 07 (global); shared-memory wavefronts per FMA down by a third.
// Predicted (before measuring): 1.1-1.3x rung 07. Measured: 1.00x (36.6 TFLOP/s at 4096^3 both). Why:
// at 6 wavefronts per 64 warp-FMAs rung 07 used under a fifth of the shared-memory bandwidth, so cutting
// wavefronts bought nothing; both kernels wait on the single-buffered loop (load, barrier, math,
// barrier) that rung 09 removes. The warp tile pays off there, where it sets the fragment reuse.
#include "tile_io.cuh"

// BM, BN: block tile; BK: depth per step; WM, WN: warp tile; TM, TN: thread tile (multiples of 4),
// with (WM / TM) * (WN / TN) == 32 lanes.
template <int BM, int BN, int BK, int WM, int WN, int TM, int TN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
warptile_gemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
              const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    constexpr int WARPS_N = BN / WN, NT = (BM / WM) * WARPS_N * 32;
    constexpr int LROWS = WM / TM, LCOLS = WN / TN;  // the lane grid inside a warp
    constexpr int BMP = BM + 4;
    static_assert(LROWS * LCOLS == 32, "a warp's lanes must tile its warp tile exactly");
    static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "TM, TN and BK must be multiples of 4");
    static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must divide the block tile");
    __shared__ __align__(16) float As[BK * BMP];
    __shared__ __align__(16) float Bs[BK * BN];

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;  // the warp tile's corner
    const int tr = lane / LCOLS, tc = lane % LCOLS;
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
                    *reinterpret_cast<const float4*>(&As[k * BMP + wm + g * 4 * LROWS + tr * 4]);
#pragma unroll
            for (int g = 0; g < TN / 4; ++g)
                *reinterpret_cast<float4*>(&b[4 * g]) =
                    *reinterpret_cast<const float4*>(&Bs[k * BN + wn + g * 4 * LCOLS + tc * 4]);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
    store_grouped_tile<TM, TN, 4 * LROWS, 4 * LCOLS>(C, ldc, row0 + wm + tr * 4, col0 + wn + tc * 4, M, N, acc, vec_c, alpha, beta);
}
