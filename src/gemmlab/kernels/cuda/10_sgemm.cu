// Rung 10 - sgemm: the production FP32 kernel: rung 09's pipeline, tiles chosen per shape, blocks
// ordered for L2 reuse, shared memory beyond the 48 KiB static limit.
//
// Idea: no single tile suits every shape. The spec picks (BM, BN, BK, warp and thread tiles) per shape
// class: the largest tile that still gives every SM work (256 x 128 for large problems, down to 64 x 64
// for small or skinny ones), and the tuner can replace that choice per device. The grid is
// one-dimensional and blocks are ordered in groups of GROUP_M block rows: consecutive blocks share B
// tiles across a group and A tiles within it, so a wave of blocks touches about sqrt(blocks) row and
// column stripes instead of one row stripe and every column stripe. The double-buffered tiles live in
// dynamic shared memory, so deeper steps (BK = 16) fit with large tiles.
// Split-K: when a problem has too few tiles of C to fill the GPU but a long K (K >> M*N), SPLIT_K blocks
// share each tile, each summing one slice of K into a workspace slab. The block that finishes a tile last
// (a per-tile counter tells it) adds the slabs in the fixed order 0, 1, ..., SPLIT_K - 1, so the result
// does not depend on which block came last, applies alpha and beta, writes C and resets the counter.
// No block waits for another, so any scheduling order is safe.
// Changed from rung 09: per-shape tiles, grouped block order, dynamic shared memory, split-K.
// Traffic: as rung 09 per block; DRAM traffic drops where the grouped order keeps operands in L2.
// Predicted: rung 09's 46 TFLOP/s at 4096^3 plus 5-10% from BK = 16 at 256 x 128 and from more warps
// per SM; toward cuBLAS. Measured: docs/performance.md.
#include "tile_io.cuh"

// BM, BN: block tile; BK: depth per step; WM, WN: warp tile; TM, TN: thread tile (multiples of 4),
// with (WM / TM) * (WN / TN) == 32 lanes; GROUP_M: block rows per group of the block order;
// SPLIT_K: blocks per tile of C along K (1: no split; then workspace and tile_counters are unused);
// MIN_BLOCKS: resident blocks per SM the register allocation must allow.
template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, int GROUP_M, int SPLIT_K, int MIN_BLOCKS>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, MIN_BLOCKS)
sgemm_gemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
           const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc,
           float* __restrict__ workspace, int* __restrict__ tile_counters) {
    constexpr int WARPS_N = BN / WN, NT = (BM / WM) * WARPS_N * 32;
    constexpr int LROWS = WM / TM, LCOLS = WN / TN;
    constexpr int A_PER = BM * BK / 4 / NT, B_PER = BK * BN / 4 / NT;  // float4 loads per thread and step
    constexpr int BMP = BM + 4;
    static_assert(LROWS * LCOLS == 32, "a warp's lanes must tile its warp tile exactly");
    static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "TM, TN and BK must be multiples of 4");
    static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must divide the block tile");
    static_assert(A_PER * NT * 4 == BM * BK && B_PER * NT * 4 == BK * BN, "tiles must split evenly into float4s");
    extern __shared__ __align__(16) float smem[];  // 2 x BK x (BM + 4 + BN) floats, sized by the host
    float (*As)[BK * BMP] = reinterpret_cast<float (*)[BK * BMP]>(smem);
    float (*Bs)[BK * BN] = reinterpret_cast<float (*)[BK * BN]>(smem + 2 * BK * BMP);

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
    const int tr = lane / LCOLS, tc = lane % LCOLS;
    // Grouped block order: blocks run down GROUP_M block rows before moving one block column right.
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int per_group = GROUP_M * tiles_n;
    const int group = blockIdx.x / per_group, first_m = group * GROUP_M;
    const int rows_in_group = min(tiles_m - first_m, GROUP_M);
    const int in_group = blockIdx.x % per_group;
    const int row0 = (first_m + in_group % rows_in_group) * BM, col0 = (in_group / rows_in_group) * BN;
    // This block's slice of K: whole BK steps, split as evenly as they go (a slice may be empty).
    const int steps_per_split = ((K + BK - 1) / BK + SPLIT_K - 1) / SPLIT_K;
    const int k_begin = min(K, (int)blockIdx.y * steps_per_split * BK);
    const int k_end = min(K, k_begin + steps_per_split * BK);
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
    // Blocks whose tile lies inside C with 16-byte aligned rows load whole steps without any edge test:
    // one uniform branch per step instead of a test and a branch per load (about 3% of the loop's
    // instructions at the default tile).
    const bool interior = vec_a && vec_b && row0 + BM <= M && col0 + BN <= N;
    const float* a_src[A_PER];
    const float* b_src[B_PER];
#pragma unroll
    for (int i = 0; i < A_PER; ++i) a_src[i] = A + (size_t)(row0 + a_r[i]) * lda + a_kq[i];
#pragma unroll
    for (int i = 0; i < B_PER; ++i) b_src[i] = B + (size_t)b_r[i] * ldb + col0 + b_c[i];
    auto load_global = [&](int k0) {
        if (interior && k0 + BK <= k_end) {
#pragma unroll
            for (int i = 0; i < A_PER; ++i) ra[i] = __ldg(reinterpret_cast<const float4*>(a_src[i] + k0));
#pragma unroll
            for (int i = 0; i < B_PER; ++i) rb[i] = __ldg(reinterpret_cast<const float4*>(b_src[i] + (size_t)k0 * ldb));
            return;
        }
#pragma unroll
        for (int i = 0; i < A_PER; ++i) {
            const int row = row0 + a_r[i];
            ra[i] = load4_zero_padded(A + (size_t)row * lda + k0 + a_kq[i], row < M ? k_end - k0 - a_kq[i] : 0, vec_a);
        }
#pragma unroll
        for (int i = 0; i < B_PER; ++i) {
            const int krow = k0 + b_r[i];
            rb[i] = load4_zero_padded(B + (size_t)krow * ldb + col0 + b_c[i], krow < k_end ? N - col0 - b_c[i] : 0, vec_b);
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

    load_global(k_begin);
    store_shared(0);
    __syncthreads();
    int buf = 0;
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
        const bool has_next = k0 + BK < k_end;
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
    if constexpr (SPLIT_K > 1) {
        // Publish this slice's partial tile, then count: the last block of the tile does the sum.
        const size_t slab = (size_t)M * N;
        const bool vec_w = (N & 3) == 0;
        float* mine = workspace + blockIdx.y * slab;
        store_grouped_tile<TM, TN, 4 * LROWS, 4 * LCOLS>(mine, N, row0 + wm + tr * 4, col0 + wn + tc * 4, M, N, acc, vec_w,
                                                        1.0f, 0.0f);
        __threadfence();  // the partial is visible device-wide before the counter says so
        __syncthreads();
        __shared__ int arrived_last;
        int* counter = tile_counters + blockIdx.x;
        if (tid == 0) arrived_last = atomicAdd(counter, 1) == SPLIT_K - 1;
        __syncthreads();
        if (!arrived_last) return;
        __threadfence();
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int row = row0 + wm + (i / 4) * 4 * LROWS + tr * 4 + i % 4;
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int col = col0 + wn + (j / 4) * 4 * LCOLS + tc * 4 + j % 4;
                if (row >= M || col >= N) continue;
                const size_t at = (size_t)row * N + col;
                float sum = 0.0f;
                for (int s = 0; s < SPLIT_K; ++s)  // fixed order: the same bits whichever block is last
                    sum += s == (int)blockIdx.y ? acc[i][j] : __ldcg(workspace + s * slab + at);
                acc[i][j] = sum;
            }
        }
        if (tid == 0) *counter = 0;  // ready for the next launch
    }
    store_grouped_tile<TM, TN, 4 * LROWS, 4 * LCOLS>(C, ldc, row0 + wm + tr * 4, col0 + wn + tc * 4, M, N, acc, vec_c,
                                                    alpha, beta);
}
