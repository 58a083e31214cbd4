// Rung 01 - naive: one thread per element of C.
//
// Idea: thread (x, y) computes C[row, col] as a K-long dot product of a row of A and a column of B,
// straight from global memory.
// Changed from the previous rung: nothing; this is the starting point.
// Bottleneck: memory access pattern. threadIdx.x walks *rows* of C, so a warp (16 rows x 2 columns at
// the default 16 x 16 block) reads 16 different rows of A per load: 16 separate 32-byte sectors to use
// 4 bytes of each, while its B reads touch only 2 words. At BX = 32 the warp reads 32 rows: half again
// as fast; at BX = 8 it reads 8: twice as fast (see docs/journal.md).
// Global loads: 2*M*N*K elements (every thread reads K of A and K of B); intensity 2 FLOP per 8 bytes.
// Predicted: limited by L1/L2 transactions, about 1% of cuBLAS. Measured: see docs/journal.md.
#include "common.cuh"

// BX: threads per block along rows of C (threadIdx.x), BY: along columns (threadIdx.y).
template <int BX, int BY>
__global__ void __launch_bounds__(BX * BY)
naive_gemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
           const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    static_assert(BX >= 1 && BY >= 1 && BX * BY <= 1024, "block must have 1..1024 threads");
    const int row = blockIdx.x * BX + threadIdx.x;
    const int col = blockIdx.y * BY + threadIdx.y;
    if (row >= M || col >= N) return;
    const float* a = A + (size_t)row * lda;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        acc += a[k] * B[(size_t)k * ldb + col];
    }
    store_c(C, (size_t)row * ldc + col, acc, alpha, beta);
}
