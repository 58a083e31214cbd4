// Rung 04 - blocktile_1d: each thread computes a column of TM results held in registers.
//
// Idea: a block computes a BM x BN tile of C with BM*BN/TM threads. Per step it stages a BM x BK tile of A
// and a BK x BN tile of B in shared memory; each thread then, for every k, reads one element of B into a
// register and reuses it for TM multiply-adds against TM elements of A (a broadcast within the warp).
// Changed from rung 03: TM results per thread instead of one; tiles are no longer square (BK << BM).
// Traffic: global loads M*K*ceil(N/BN) + K*N*ceil(M/BM) elements (fewer than rung 03 for BN, BM > 32);
// shared loads per FMA drop from 2 to (1 + 1/TM).
// Bottleneck: the latency of the single-buffered loop (load, barrier, compute, barrier), hidden only by
// other resident blocks; hence MIN_BLOCKS, which trades registers per thread for blocks per SM.
// Predicted: about 2x rung 03 at (BM, BN, BK, TM) = (128, 64, 8, 16). Measured: docs/journal.md.
#include "common.cuh"

// BM, BN: block tile of C; BK: depth of one shared-memory step; TM: results per thread (a column);
// MIN_BLOCKS: resident blocks per SM the register allocation must allow (caps registers at
// 65536 / (threads * MIN_BLOCKS)): more blocks hide the single-buffered loop's load latency.
template <int BM, int BN, int BK, int TM, int MIN_BLOCKS>
__global__ void __launch_bounds__(BM * BN / TM, MIN_BLOCKS)
blocktile_1d_gemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                  const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    constexpr int NT = BM * BN / TM;
    static_assert(BM % TM == 0, "TM must divide BM");
    static_assert(NT >= 32 && NT <= 1024, "the block must have 32..1024 threads");
    static_assert((BM * BK) % NT == 0 && (BK * BN) % NT == 0, "tiles must split evenly over the threads");
    __shared__ float As[BM * BK];
    __shared__ float Bs[BK * BN];

    const int tid = threadIdx.x;
    const int tcol = tid % BN;          // the column of C this thread owns inside the tile
    const int trow = tid / BN;          // its TM rows are trow*TM ... trow*TM + TM - 1
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const float* Ablk = A + (size_t)row0 * lda;
    const float* Bblk = B + col0;

    float acc[TM] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        load_tile_zero_padded<BM, BK, NT>(As, Ablk + k0, lda, M - row0, K - k0, tid);
        load_tile_zero_padded<BK, BN, NT>(Bs, Bblk + (size_t)k0 * ldb, ldb, K - k0, N - col0, tid);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float b = Bs[k * BN + tcol];
#pragma unroll
            for (int m = 0; m < TM; ++m) acc[m] += As[(trow * TM + m) * BK + k] * b;
        }
        __syncthreads();
    }
    const int col = col0 + tcol;
    if (col < N) {
#pragma unroll
        for (int m = 0; m < TM; ++m) {
            const int row = row0 + trow * TM + m;
            if (row < M) store_c(C, (size_t)row * ldc + col, acc[m], alpha, beta);
        }
    }
}
