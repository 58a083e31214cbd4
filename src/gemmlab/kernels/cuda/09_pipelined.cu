// Rung 09 - pipelined: the loads of step k+1 overlap the math of step k.
//
// Idea: two shared-memory buffers per operand and a register stage. At each step the block first issues
// the global loads of the *next* tile into registers, then does the math on the current buffer from
// shared memory, then writes the registers into the other buffer, then meets one barrier. The global
// latency (hundreds of cycles) is covered by BK * TM * TN FMAs of every thread, and the two barriers per
// step of rungs 03-08 become one. Inside a step, the fragments of A and B for k + 1 are read from shared
// memory while the FMAs of k run (a second register set), so LDS latency hides behind FMAs too.
// Changed from rung 08: double buffering (shared memory and fragments) and register prefetch.
// Traffic: as rung 08; shared memory doubles (2 x BK x (BM + 4 + BN) floats).
// Bottleneck left: issue slots (address arithmetic, edge checks) and, for small or odd shapes, tile and
// wave quantization; rung 10 chooses tiles per shape.
// Predicted: 1.2-1.4x rung 08, toward 80-90% of cuBLAS at 4096^3. Measured: docs/journal.md.
#include "tile_io.cuh"

// BM, BN: block tile; BK: depth per step; WM, WN: warp tile; TM, TN: thread tile (multiples of 4),
// with (WM / TM) * (WN / TN) == 32 lanes.
template <int BM, int BN, int BK, int WM, int WN, int TM, int TN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
pipelined_gemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
               const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    constexpr int WARPS_N = BN / WN, NT = (BM / WM) * WARPS_N * 32;
    constexpr int LROWS = WM / TM, LCOLS = WN / TN;
    constexpr int A_PER = BM * BK / 4 / NT, B_PER = BK * BN / 4 / NT;  // float4 loads per thread and step
    constexpr int BMP = BM + 4;
    static_assert(LROWS * LCOLS == 32, "a warp's lanes must tile its warp tile exactly");
    static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "TM, TN and BK must be multiples of 4");
    static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must divide the block tile");
    static_assert(A_PER * NT * 4 == BM * BK && B_PER * NT * 4 == BK * BN, "tiles must split evenly into float4s");
    __shared__ __align__(16) float As[2][BK * BMP];
    __shared__ __align__(16) float Bs[2][BK * BN];

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
    const int tr = lane / LCOLS, tc = lane % LCOLS;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const bool vec_a = rows_are_16B_aligned(A, lda), vec_b = rows_are_16B_aligned(B, ldb);
    const bool vec_c = rows_are_16B_aligned(C, ldc);

    // Where this thread's float4s of each tile come from and go to (fixed for the whole loop).
    int a_r[A_PER], a_kq[A_PER], b_r[B_PER], b_c[B_PER];
#pragma unroll
    for (int i = 0; i < A_PER; ++i) {
        const int e = tid + i * NT;
        a_r[i] = e / (BK / 4);
        a_kq[i] = (e % (BK / 4)) * 4;
    }
#pragma unroll
    for (int i = 0; i < B_PER; ++i) {
        const int e = tid + i * NT;
        b_r[i] = e / (BN / 4);
        b_c[i] = (e % (BN / 4)) * 4;
    }
    float4 ra[A_PER], rb[B_PER];
    auto load_global = [&](int k0) {
#pragma unroll
        for (int i = 0; i < A_PER; ++i) {
            const int row = row0 + a_r[i];
            ra[i] = load4_zero_padded(A + (size_t)row * lda + k0 + a_kq[i], row < M ? K - k0 - a_kq[i] : 0, vec_a);
        }
#pragma unroll
        for (int i = 0; i < B_PER; ++i) {
            const int krow = k0 + b_r[i];
            rb[i] = load4_zero_padded(B + (size_t)krow * ldb + col0 + b_c[i], krow < K ? N - col0 - b_c[i] : 0, vec_b);
        }
    };
    auto store_shared = [&](int buf) {
#pragma unroll
        for (int i = 0; i < A_PER; ++i) {
            As[buf][(a_kq[i] + 0) * BMP + a_r[i]] = ra[i].x;
            As[buf][(a_kq[i] + 1) * BMP + a_r[i]] = ra[i].y;
            As[buf][(a_kq[i] + 2) * BMP + a_r[i]] = ra[i].z;
            As[buf][(a_kq[i] + 3) * BMP + a_r[i]] = ra[i].w;
        }
#pragma unroll
        for (int i = 0; i < B_PER; ++i) *reinterpret_cast<float4*>(&Bs[buf][b_r[i] * BN + b_c[i]]) = rb[i];
    };

    float acc[TM][TN] = {};
    float a[2][TM], b[2][TN];
    auto load_fragments = [&](int buf, int k, int slot) {
#pragma unroll
        for (int g = 0; g < TM / 4; ++g)
            *reinterpret_cast<float4*>(&a[slot][4 * g]) =
                *reinterpret_cast<const float4*>(&As[buf][k * BMP + wm + g * 4 * LROWS + tr * 4]);
#pragma unroll
        for (int g = 0; g < TN / 4; ++g)
            *reinterpret_cast<float4*>(&b[slot][4 * g]) =
                *reinterpret_cast<const float4*>(&Bs[buf][k * BN + wn + g * 4 * LCOLS + tc * 4]);
    };

    load_global(0);
    store_shared(0);
    __syncthreads();
    int buf = 0;
    for (int k0 = 0; k0 < K; k0 += BK) {
        const bool has_next = k0 + BK < K;
        if (has_next) load_global(k0 + BK);  // in flight during the math below
        load_fragments(buf, 0, 0);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            if (k + 1 < BK) load_fragments(buf, k + 1, (k + 1) % 2);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[k % 2][i] * b[k % 2][j];
        }
        if (has_next) store_shared(buf ^ 1);  // the other buffer was last read before the previous barrier
        __syncthreads();
        buf ^= 1;
    }
    store_grouped_tile<TM, TN, 4 * LROWS, 4 * LCOLS>(C, ldc, row0 + wm + tr * 4, col0 + wn + tc * 4, M, N, acc, vec_c,
                                                    alpha, beta);
}
