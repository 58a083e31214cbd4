// Rung 03 - smem_tiled: BLOCK_DIM x BLOCK_DIM tiles of A and B staged in shared memory.
//
// Idea: a block computes a BLOCK_DIM^2 tile of C. At each of ceil(K / BLOCK_DIM) steps every thread loads
// one element of A and one of B into shared memory, the block waits at a barrier, then each thread
// takes BLOCK_DIM multiply-adds from shared memory; a second barrier protects the tiles before the next
// load. Tiles that run past M, N or K are padded with zeros, so any size works.
// Changed from rung 02: operands are read from global memory once per block instead of once per thread.
// Global loads: M*K*ceil(N/BD) + K*N*ceil(M/BD) elements, BLOCK_DIM times fewer than rung 02
// (seed example, 4x4 with 2x2 tiles: 8 global reads per thread become 4).
// Bottleneck: shared-memory bandwidth: two shared loads per FMA.
// Predicted: 1.3-1.6x rung 02 at BLOCK_DIM = 32. Measured: docs/performance.md.
#include "common.cuh"

// BD: BLOCK_DIM, the tile edge; the block has BD x BD threads.
template <int BD>
__global__ void __launch_bounds__(BD * BD)
smem_tiled_gemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    static_assert(BD >= 1 && BD * BD <= 1024, "BLOCK_DIM^2 must be at most 1024 threads");
    __shared__ float As[BD][BD];
    __shared__ float Bs[BD][BD];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * BD + ty;
    const int col = blockIdx.x * BD + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += BD) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * lda + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * ldb + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BD; ++k) {
            acc += As[ty][k] * Bs[k][tx];  // As: one address per warp row (broadcast); Bs: consecutive banks
        }
        __syncthreads();
    }
    if (row < M && col < N) store_c(C, (size_t)row * ldc + col, acc, alpha, beta);
}
