// Rung 05 - blocktile_2d: each thread computes a TM x TN tile of C held in registers.
//
// Idea: per k, a thread loads TM elements of A and TN elements of B from shared memory into registers
// and does their outer product: TM*TN multiply-adds for TM+TN shared loads. The thread's rows are
// trow + i*(BM/TM) and its columns tcol + j*(BN/TN): strided, so that for a fixed j the 32 threads of a
// warp read consecutive words of Bs (no bank conflicts) and write consecutive addresses of C.
// Changed from rung 04: register blocking in both dimensions instead of one.
// Traffic: global loads M*K*ceil(N/BN) + K*N*ceil(M/BM) elements; shared loads per FMA
// (TM + TN) / (TM*TN) = 1/4 at 8x8, against 1 + 1/TM in rung 04.
// Bottleneck: scalar (4-byte) shared and global accesses and a single-buffered loop that stalls on
// each step's loads; the vectorised and pipelined rungs attack these.
// Predicted: about 1.5x rung 04 at (128, 128, 8, 8, 8). Measured: docs/journal.md.
#include "common.cuh"

// BM, BN: block tile of C; BK: depth of one shared-memory step; TM x TN: results per thread.
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
blocktile_2d_gemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                  const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    constexpr int TROWS = BM / TM, TCOLS = BN / TN, NT = TROWS * TCOLS;
    static_assert(BM % TM == 0 && BN % TN == 0, "TM must divide BM and TN must divide BN");
    static_assert(NT >= 32 && NT <= 1024, "the block must have 32..1024 threads");
    static_assert((BM * BK) % NT == 0 && (BK * BN) % NT == 0, "tiles must split evenly over the threads");
    __shared__ float As[BM * BK];
    __shared__ float Bs[BK * BN];

    const int tid = threadIdx.x;
    const int tcol = tid % TCOLS, trow = tid / TCOLS;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const float* Ablk = A + (size_t)row0 * lda;
    const float* Bblk = B + col0;

    float acc[TM][TN] = {};
    float a[TM], b[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        load_tile_zero_padded<BM, BK, NT>(As, Ablk + k0, lda, M - row0, K - k0, tid);
        load_tile_zero_padded<BK, BN, NT>(Bs, Bblk + (size_t)k0 * ldb, ldb, K - k0, N - col0, tid);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[(trow + i * TROWS) * BK + k];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k * BN + tcol + j * TCOLS];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + trow + i * TROWS;
        if (row >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = col0 + tcol + j * TCOLS;
            if (col < N) store_c(C, (size_t)row * ldc + col, acc[i][j], alpha, beta);
        }
    }
}
