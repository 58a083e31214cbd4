// Rung 03 - smem_tiled: BLOCK_DIM x BLOCK_DIM tiles of A and B staged in shared memory.
//
// Idea: a block computes a BLOCK_DIM^2 tile of C. At each of ceil(K / BLOCK_DIM) steps every thread loads
// one element of A and one of B into shared memory, the block waits at a barrier, then each thread
// takes BLOCK_DIM multiply-adds from shared memory; a second barrier protects the tiles before the next
// load. Tiles that run past M, N or K are padded with zeros, so any size works.
// Changed from rung 02: operands are read from global memory once per block instead of once per thread.
// Global loads: M*K*ceil(N/BD) + K*N*ceil(M/BD) elements, BLOCK_DIM times fewer than rung 02
// (a 4x4 product with 2x2 tiles: 8 global reads per thread become 4).
// Bottleneck: shared-memory bandwidth. Per 32 FMAs a warp issues 32 loads of Bs (32 distinct words: one
// wavefront each) and 8 four-wide broadcast loads of As: 40 wavefronts, and an SM serves one per clock
// while its FMA units could retire 4 warp-FMAs per clock. Ceiling: 32/40/4 = 20% of the FP32 peak
// (13.4 TFLOP/s on a 132-SM, 1.98 GHz H100), before load latency at the barriers.
// Block order (GROUP_M): with row-major block order the 264 blocks resident at once (2 per SM) cover two
// tile rows and read all of B, 64 MB at 4096^3, more than the 50 MB L2: ncu counted 8.4 GB of DRAM reads
// and a 38% L2 hit rate. Taking blocks in groups of GROUP_M tile rows keeps a wave's tiles in L2, so
// the loads that every barrier waits for come from L2 instead of DRAM.
// Predicted: 1.3-1.6x rung 02 at BLOCK_DIM = 32. Measured: docs/journal.md.
#include "common.cuh"

// BD: BLOCK_DIM, the tile edge; the block has BD x BD threads. GROUP_M: tile rows per group of the
// block order (1: row-major).
// The register cap asks for as many resident blocks as fill an SM's 2048 threads (2 at BD = 32): with
// one 1024-thread block per SM, every barrier idles the whole SM while the next tiles load.
template <int BD, int GROUP_M>
__global__ void __launch_bounds__(BD * BD, (2048 / (BD * BD) < 32 ? 2048 / (BD * BD) : 32))
smem_tiled_gemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    static_assert(BD >= 1 && BD * BD <= 1024, "BLOCK_DIM^2 must be at most 1024 threads");
    __shared__ float As[BD][BD];
    __shared__ float Bs[BD][BD];
    const int tx = threadIdx.x, ty = threadIdx.y;
    int tile_row, tile_col;
    grouped_tile(GROUP_M, tile_row, tile_col);
    const int row = tile_row * BD + ty;
    const int col = tile_col * BD + tx;
    const float* a = A + (size_t)row * lda + tx;   // this thread's element of each A tile, at k0 = 0
    const float* b = B + (size_t)ty * ldb + col;   // and of each B tile
    float acc = 0.0f;
    int k0 = 0;
    // Blocks whose tile lies inside C take the unchecked loop for every full step along K (all but the
    // edge blocks at large sizes); the checked loop below pads the rest with zeros.
    if ((tile_row + 1) * BD <= M && (tile_col + 1) * BD <= N) {
        for (; k0 + BD <= K; k0 += BD) {
            As[ty][tx] = a[k0];
            Bs[ty][tx] = b[(size_t)k0 * ldb];
            __syncthreads();
#pragma unroll
            for (int k = 0; k < BD; ++k) acc += As[ty][k] * Bs[k][tx];  // As: broadcast; Bs: 32 banks
            __syncthreads();
        }
    }
    for (; k0 < K; k0 += BD) {
        As[ty][tx] = (row < M && k0 + tx < K) ? a[k0] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? b[(size_t)k0 * ldb] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BD; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N) store_c(C, (size_t)row * ldc + col, acc, alpha, beta);
}
