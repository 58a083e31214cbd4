// Rung 02 - coalesced: the naive computation with the thread-to-element map turned around.
//
// Idea: threadIdx.x walks *columns* of C. A warp's 32 threads now share one row of A (one broadcast
// load) and read 32 consecutive floats of a row of B: one 128-byte line per load instead of 32 sectors.
// Changed from rung 01: only the index map (row from y, column from x).
// Bottleneck: still every operand comes from global memory (through L1/L2): 2*M*N*K loads, intensity
// 2 FLOP per 8 bytes as far as the caches are concerned, but now each byte fetched is used.
// Predicted: about 8x fewer sectors per load than rung 01, roughly 10x faster. Measured: docs/journal.md.
#include "common.cuh"

// BX: threads per block along columns of C (threadIdx.x, the coalesced direction), BY: along rows.
template <int BX, int BY>
__global__ void __launch_bounds__(BX * BY)
coalesced_gemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
               const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    static_assert(BX >= 1 && BY >= 1 && BX * BY <= 1024, "block must have 1..1024 threads");
    const int col = blockIdx.x * BX + threadIdx.x;
    const int row = blockIdx.y * BY + threadIdx.y;
    if (row >= M || col >= N) return;
    const float* a = A + (size_t)row * lda;
    const float* b = B + col;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        acc += a[k] * b[(size_t)k * ldb];
    }
    store_c(C, (size_t)row * ldc + col, acc, alpha, beta);
}
