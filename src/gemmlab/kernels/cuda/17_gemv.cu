// Rung 17 - gemv: small M (decoding) with the weights loaded straight into registers, the warps of a block
// side by side along K of the same rows, so that DRAM sees long runs of each row.
//
// Idea: rung 16 gives every warp its own 16 columns of C (rows of the weight W = B^T) and a private ring;
// eight warps of a block then read 128 different rows of W at once in runs of a few hundred bytes. What
// DRAM delivers depends on that pattern as much as on the bytes in flight (scripts/stream_pattern_probe.py):
// when the threads of a block together read 16 rows x 1-4 KB per step, the same 134 MB weight streams at
// 2.7-2.8 TB/s. So here all warps of a block take the same 16 NT rows of W; block step s covers k
// [kb + s BK, kb + (s + 1) BK) (BK = WARPS x 32 UNROLL) and warp w the w-th run of 32 UNROLL k of it.
// - Registers, not shared memory: each lane's 16-byte loads are already its MMA fragments. Any permutation
//   of k applied alike to both operands leaves the sum unchanged, so lane (g, c) loads 8 consecutive k
//   (8c .. 8c + 7 of a chunk of 32) of two rows of W and of one row of A (a token), and those 16 bytes are
//   (a0, a2) and (b0, b1) of one m16n8k16 MMA and of the next. No ring, no barrier in the main loop.
// - Two steps of loads in flight per thread (two register sets, loaded one step ahead), and two to four
//   blocks per SM (__launch_bounds__ keeps a thread at 128 registers), so that one block's first bytes are
//   covered by the others' streams: 32-64 KB of W in flight per SM.
// - The tensor core's roles are swapped as in rung 16 (C^T = B^T A^T): W's rows on the m16 side, the tokens
//   on the n8 side (MT = 8 or 16 rows of A per block). Fragment rows g and g + 8 are columns 2g and 2g + 1
//   of the block's 16, so each lane ends with (row m, columns n, n + 1) pairs for the shared epilogue.
// - One unit of work per block (16 NT columns x a slice of K x MT rows of A). A persistent grid whose blocks
//   walked equal runs of units, loading the next unit during the last one's sums, measured 3-30 % slower
//   (docs/journal.md): each unit's end waits on shared memory, fences and the slices' counter in turn.
// - The warps' sums over their k are added through shared memory in warp order; the slices of K (SPLIT,
//   grid.y) write their sums to a workspace and the last of a tile's slices to finish (an atomic counter)
//   adds them in slice order: the result does not depend on timing.
// Changed from rung 16: the block's warps share columns and split K between them; registers instead of a
// ring; B only as given transposed (N x K, K contiguous: a linear layer's weight W, as x @ W.t()); fp16 /
// bf16 only (strict fp32 on these loads, FMAs reading A's rows per chunk, measured slower than rung 16's
// panel: docs/journal.md).
// Traffic: W read once per tile of MT rows of A; A's rows once per block (L1 holds them for the block's
// warps); C once; SPLIT x M x N fp32 partial sums through L2.
// Bottleneck left: DRAM bandwidth for W; the fill of each block's first steps and the last wave's tail.
// Predicted (from the probe of this main loop, before it was a rung): 0.96-1.13 x cuBLAS at M = 1-8 and
// 0.93-1.05 at M = 16 on 4096-14336 x 4096-28672 weights (rung 16: 0.74-0.97). Measured (H100, bf16, L2
// flushed): 0.97-1.15 x cuBLAS at M = 1-8 and 0.98-1.02 at M = 16 on 23-470 MB weights, 2.0-3.0 TB/s;
// docs/journal.md has each version.

#include "common.cuh"
#include "epilogue.cuh"
#include "mma.cuh"

// 16 bytes of a row whose first `left` elements (0 < left < 8) are inside the slice: the rest read as zero
// (the end of K; the slow path of one chunk per row).
__device__ __forceinline__ uint4 load_part(const bits16* p, int left) {
    unsigned r[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        const unsigned lo = 2 * w < left ? p[2 * w] : 0u;
        const unsigned hi = 2 * w + 1 < left ? p[2 * w + 1] : 0u;
        r[w] = lo | (hi << 16);
    }
    return make_uint4(r[0], r[1], r[2], r[3]);
}

// MT: rows of A per unit (8 or 16: J = MT / 8 n8 tiles). NT: m16 tiles of W's rows per unit (16 NT columns
// of C). WARPS: warps per block, side by side along K. UNROLL: chunks of 32 k per warp per step. A_TYPE 1
// fp16, 2 bf16; C_TYPE 1 fp32, 2 fp16, 3 bf16. B_LAYOUT 2: B given transposed (N x K, pitch ldb), the only
// layout this rung reads. Grid: (column blocks of 16 NT, SPLIT slices of K, tiles of MT rows of A), one unit
// of work per block.
template <int MT, int NT, int WARPS, int UNROLL, int A_TYPE, int C_TYPE, int B_LAYOUT>
__global__ void __launch_bounds__(WARPS * 32, 16 / WARPS) gemv_gemm(
    int M, int N, int K, float alpha, const bits16* __restrict__ A, int lda, const bits16* __restrict__ B, int ldb,
    float beta, typename Out<C_TYPE>::T* __restrict__ C, int ldc, const float* __restrict__ bias,
    const typename Out<C_TYPE>::T* __restrict__ R, int ldr, int epilogue, float* __restrict__ ws,
    int* __restrict__ counters) {
    static_assert(MT == 8 || MT == 16, "MT: one or two n8 tiles of rows of A");
    static_assert(NT == 1 || NT == 2, "NT: 16 or 32 columns of C per unit");
    static_assert(WARPS == 4 || WARPS == 8 || WARPS == 16, "WARPS: 4, 8 or 16");
    static_assert(UNROLL == 1 || UNROLL == 2 || UNROLL == 4, "UNROLL: 1, 2 or 4 chunks of 32 k per step");
    static_assert(A_TYPE == 1 || A_TYPE == 2, "A_TYPE: 1 fp16, 2 bf16");
    static_assert(B_LAYOUT == 2, "B_LAYOUT: this rung reads B only as given transposed (2)");
    constexpr int J = MT / 8, U = UNROLL;
    constexpr int WK = 32 * U, BK = WARPS * WK;  // k per warp step, per block step
    constexpr int F = NT * J * 4;                // accumulators per lane
    constexpr int PAIRS = NT * J * 2 * 32;       // (row m, columns n, n + 1) pairs of a unit's tile
    constexpr int PER = (PAIRS + WARPS * 32 - 1) / (WARPS * 32);  // pairs per thread

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int splits = gridDim.y;
    const int kper = ((K + splits - 1) / splits + 31) / 32 * 32;  // slices of whole chunks of 32 k

    // The block's unit: 16 NT columns from n0, k [kb, ke), MT rows of A from m0; its block steps.
    struct Unit {
        int n0, m0, slice, kb, ke, steps;
    };
    Unit t;
    t.n0 = blockIdx.x * 16 * NT, t.m0 = blockIdx.z * MT, t.slice = blockIdx.y;
    t.kb = min(K, t.slice * kper), t.ke = min(K, t.kb + kper);
    t.steps = (t.ke - t.kb + BK - 1) / BK;

    float acc[NT][J][4];
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int j = 0; j < J; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

    // One warp step's loads: lane (g, c) takes rows 2g and 2g + 1 of each m16 tile (fragment rows g and
    // g + 8; rows past N read row N - 1, whose columns are never stored) and row g of each n8 tile of A, k 8c
    // .. 8c + 7 of every chunk. A step whole inside [kb, ke) in one 16-byte load per row (W streamed past L1,
    // evicted first; A kept in L1, which every warp of the block reads again); else the chunk that K's end
    // cuts elementwise and chunks past it zero.
    typedef uint4 Wregs[U][NT][2];
    typedef uint4 Xregs[U][J];
    auto load = [&](Wregs& w, Xregs& x, int step) {
        const int k0 = t.kb + step * BK + warp * WK;
        auto wp = [&](int i, int h) { return B + (size_t)min(t.n0 + 16 * i + 2 * g + h, N - 1) * ldb + k0 + 8 * c; };
        auto xp = [&](int j) { return A + (size_t)min(t.m0 + 8 * j + g, M - 1) * lda + k0 + 8 * c; };
        if (k0 + WK <= t.ke) {  // the whole step inside the slice: no checks but A's rows
#pragma unroll
            for (int u = 0; u < U; ++u) {
#pragma unroll
                for (int i = 0; i < NT; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h) w[u][i][h] = __ldcs(reinterpret_cast<const uint4*>(wp(i, h) + 32 * u));
#pragma unroll
                for (int j = 0; j < J; ++j)
                    x[u][j] = t.m0 + 8 * j + g < M ? __ldg(reinterpret_cast<const uint4*>(xp(j) + 32 * u))
                                                   : make_uint4(0, 0, 0, 0);
            }
            return;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int left = t.ke - (k0 + 32 * u + 8 * c);
#pragma unroll
            for (int i = 0; i < NT; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    w[u][i][h] = left >= 8 ? __ldcs(reinterpret_cast<const uint4*>(wp(i, h) + 32 * u))
                                 : left > 0 ? load_part(wp(i, h) + 32 * u, left) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int j = 0; j < J; ++j)
                x[u][j] = t.m0 + 8 * j + g >= M || left <= 0 ? make_uint4(0, 0, 0, 0)
                          : left >= 8 ? __ldg(reinterpret_cast<const uint4*>(xp(j) + 32 * u))
                                      : load_part(xp(j) + 32 * u, left);
        }
    };
    // Lane (g, c)'s 8 k of a chunk: the first four are k slots (2c, 2c+1, 2c+8, 2c+9) of one MMA, the last
    // four of the next, for A's and W's fragments alike.
    auto compute = [&](const Wregs& w, const Xregs& x) {
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int i = 0; i < NT; ++i) {
                const unsigned lo[4] = {w[u][i][0].x, w[u][i][1].x, w[u][i][0].y, w[u][i][1].y};
                const unsigned hi[4] = {w[u][i][0].z, w[u][i][1].z, w[u][i][0].w, w[u][i][1].w};
#pragma unroll
                for (int j = 0; j < J; ++j) {
                    mma_16816<A_TYPE>(acc[i][j], lo, x[u][j].x, x[u][j].y);
                    mma_16816<A_TYPE>(acc[i][j], hi, x[u][j].z, x[u][j].w);
                }
            }
    };

    // The unit's end: the warps' sums through shared memory, added in warp order (thread e takes pair e:
    // lane l's tile (i, j) and row h of its two, values (acc[i][j][h], acc[i][j][2 + h])); with slices of K,
    // the unit's pairs to its slot of the workspace, and the last of a tile's slices to arrive (an atomic
    // counter) adds all slots in slice order from zero; then the epilogue: pair e is row m = m0 + 8j + 2c +
    // h, columns n = n0 + 16i + 2g and n + 1.
    __shared__ float red[WARPS][F][32];
    __shared__ int last;
    const bool vec_c = pairs_aligned(C, ldc);
    const bool vec_r = !(epilogue & EPI_RESIDUAL) || pairs_aligned(R, ldr);
    auto finish = [&](const Unit& t) {
#pragma unroll
        for (int i = 0; i < NT; ++i)
#pragma unroll
            for (int j = 0; j < J; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) red[warp][(i * J + j) * 4 + q][lane] = acc[i][j][q];
        __syncthreads();
        float v[PER][2];
#pragma unroll
        for (int p = 0; p < PER; ++p) {
            const int e = threadIdx.x + p * WARPS * 32;
            v[p][0] = v[p][1] = 0.0f;
            if (e < PAIRS) {
                const int l = e % 32, h = (e / 32) % 2, f = (e / 64) * 4;  // f: the (i, j) tile's first accumulator
                for (int w = 0; w < WARPS; ++w) v[p][0] += red[w][f + h][l], v[p][1] += red[w][f + 2 + h][l];
            }
        }
        bool store = true;
        if (splits > 1) {
            const int column = blockIdx.z * gridDim.x + blockIdx.x;
            float2* slots = reinterpret_cast<float2*>(ws) + (size_t)column * splits * PAIRS;
#pragma unroll
            for (int p = 0; p < PER; ++p) {
                const int e = threadIdx.x + p * WARPS * 32;
                if (e < PAIRS) slots[(size_t)t.slice * PAIRS + e] = make_float2(v[p][0], v[p][1]);
            }
            __threadfence();
            __syncthreads();
            if (threadIdx.x == 0) last = atomicAdd(&counters[column], 1) == splits - 1;
            __syncthreads();
            store = last;
            if (store) {
                __threadfence();
                if (threadIdx.x == 0) counters[column] = 0;  // zero again for the next launch
#pragma unroll
                for (int p = 0; p < PER; ++p) v[p][0] = v[p][1] = 0.0f;
                for (int s = 0; s < splits; ++s) {
                    float2 part[PER];
#pragma unroll
                    for (int p = 0; p < PER; ++p) {
                        const int e = threadIdx.x + p * WARPS * 32;
                        part[p] = e < PAIRS ? __ldcg(slots + (size_t)s * PAIRS + e) : make_float2(0.0f, 0.0f);
                    }
#pragma unroll
                    for (int p = 0; p < PER; ++p) v[p][0] += part[p].x, v[p][1] += part[p].y;
                }
            }
        }
        if (store) {
#pragma unroll
            for (int p = 0; p < PER; ++p) {
                const int e = threadIdx.x + p * WARPS * 32;
                if (e >= PAIRS) continue;
                const int l = e % 32, h = (e / 32) % 2, tile = e / 64, i = tile / J, j = tile % J;
                const int m = t.m0 + 8 * j + 2 * (l & 3) + h, n = t.n0 + 16 * i + 2 * (l >> 2);
                if (m >= M || n >= N) continue;
                epilogue_pair<C_TYPE>(C, ldc, m, n, n + 1 < N, v[p][0], v[p][1], alpha, beta, bias, R, ldr, epilogue,
                                      vec_c, vec_r);
            }
        }
    };

    // Two register sets, loads one step ahead of the computation: while the warp computes step s, steps s + 1
    // and s + 2 are in flight.
    Wregs wa, wb;
    Xregs xa, xb;
    load(wa, xa, 0);
    for (int s = 0; s < t.steps; s += 2) {
        load(wb, xb, s + 1);
        compute(wa, xa);
        load(wa, xa, s + 2);
        compute(wb, xb);
    }
    finish(t);
}
