// Rung 10 - sgemm: the production FP32 kernel: a dense main loop fed by a cp.async ring, tiles chosen per
// shape, blocks ordered for L2 reuse, split-K.
//
// Idea: at rung 09's tile (256 x 128, 16 x 8 results per thread) the SM is issue-bound, so every
// instruction of the main loop that is not an FFMA costs an FFMA. This rung keeps the work per thread and
// strips the loop of everything else:
// - Global -> shared with cp.async (16-byte chunks straight into shared memory, no registers, no shared
//   stores, no transposition) in a ring of STAGES tiles, so steps k+1 .. k+STAGES-1 are in flight while
//   step k is computed. One barrier per step; with three or more slots it sits before the last four k
//   of the step, whose FFMAs then hide it and the first shared-memory reads of the next step.
// - Both tiles stay as they lie in global memory: A row-major (row pitch BK + 4 floats), B row-major.
//   A thread owns the rows tr + i * LROWS of its warp tile (rows LROWS apart, not four adjacent rows), so
//   one LDS.128 of A reads four consecutive k of one row, and the LROWS rows a warp reads at once are
//   (BK + 4) floats apart: eight different 16-byte bank groups for BK = 8, 16, 32 (conflict-free). Per
//   four k a thread reads TM LDS.128 of A and TN LDS.128 of B: (TM + TN) / 4 per k, as before, with no
//   transposition anywhere.
// - Every shared-memory address in the loop is a base register plus a compile-time offset; global
//   chunk addresses are fixed per thread and advance by one add per step.
// - Blocks inside C with 16-byte aligned rows copy whole chunks with no test; the others (edges, odd
//   leading dimensions) take a checked path that zero-fills what lies outside the matrices. That path
//   runs in a second copy of the loop (also the last STAGES - 1 steps of interior blocks), so the main
//   loop keeps only its own state in registers.
// Per shape: the spec picks (BM, BN, BK, warp and thread tiles) per shape class: the largest tile that
// still gives every SM work (256 x 128 for large problems, down to 64 x 64 for small or skinny ones), and
// the tuner can replace that choice per device. The grid is one-dimensional and blocks are ordered in
// groups of GROUP_M block rows: a wave of blocks touches about sqrt(blocks) row and column stripes instead
// of one row stripe and every column stripe.
// Split-K: when a problem has too few tiles of C to fill the GPU but a long K (K >> M*N), SPLIT_K blocks
// share each tile, each summing one slice of K into a workspace slab. The block that finishes a tile last
// (a per-tile counter tells it) adds the slabs in the fixed order 0, 1, ..., SPLIT_K - 1, so the result
// does not depend on which block came last, applies alpha and beta, writes C and resets the counter.
// No block waits for another, so any scheduling order is safe.
// Fused epilogue (epilogue.cuh, as rung 11): out = activation(alpha * acc + beta * C + bias) + residual,
// applied once to the final sums (after the split-K reduction, never per slice); epilogue == 0 keeps the
// plain 16-byte alpha / beta store.
// Changed from rung 09: cp.async ring instead of register staging, untransposed A with strided thread
// rows, per-shape tiles, grouped block order, dynamic shared memory, split-K, fused epilogue.
// Traffic: as rung 09 per block; DRAM traffic drops where the grouped order keeps operands in L2.
// Predicted (first version, rung 09's loop): rung 09's 46 TFLOP/s plus 5-10%; measured 1-2% below.
// Predicted (this loop): 2048 FFMA in 2176 instructions per step at 256 x 128 x 16 (94.1%, from 91.9%;
// scripts/sass_mix.py), 49 +- 1.5 TFLOP/s at 4096^3. Measured: docs/performance.md.
#include "tile_io.cuh"
#include "epilogue.cuh"

// How NT threads copy a tile of ROWS rows of CPR 16-byte chunks, PER chunks each: a thread takes CH chunks
// of one row, TPR threads apart (TPR = CPR / CH threads share a row, so a warp reads at least MIN_TPR
// consecutive chunks, 16 * MIN_TPR bytes, of a row at once), in H rows RSTEP apart. A thread's chunks are
// then compile-time offsets from its first one.
template <int ROWS, int CPR, int NT, int MIN_TPR>
struct ChunkPlan {
    static constexpr int PER = ROWS * CPR / NT;
    static constexpr int WANT = CPR / MIN_TPR > 1 ? CPR / MIN_TPR : 1;
    static constexpr int CH = PER < WANT ? PER : WANT;
    static constexpr int TPR = CPR / CH;
    static constexpr int H = PER / CH;
    static constexpr int RSTEP = NT / TPR;
    static_assert(PER >= 1 && PER * NT == ROWS * CPR, "a tile must split evenly into 16-byte chunks over the threads");
    static_assert(CH * TPR == CPR && NT % TPR == 0 && H * RSTEP == ROWS, "chunk rows must be whole");
};

// The thread and block indices, read in a way the compiler cannot merge with an earlier read: values
// derived from them after the main loop are recomputed there instead of being kept in registers (or
// spilled) across it.
__device__ __forceinline__ int fresh_tid() {
    int v;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(v));
    return v;
}
__device__ __forceinline__ int fresh_ctaid_x() {
    int v;
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v));
    return v;
}
__device__ __forceinline__ int fresh_ctaid_y() {
    int v;
    asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(v));
    return v;
}

// BM, BN: block tile; BK: depth per step; WM, WN: warp tile; TM, TN: thread tile (TN a multiple of 4),
// with (WM / TM) * (WN / TN) == 32 lanes; GROUP_M: block rows per group of the block order;
// SPLIT_K: blocks per tile of C along K (1: no split; then workspace and tile_counters are unused);
// MIN_BLOCKS: resident blocks per SM the register allocation must allow; STAGES: tiles in the ring.
// `bias` (length M or N) and `R` (M x N, leading dimension ldr) are read only when the `epilogue` flags
// (epilogue.cuh) ask for them.
template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, int GROUP_M, int SPLIT_K, int MIN_BLOCKS, int STAGES>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, MIN_BLOCKS)
sgemm_gemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
           const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc,
           float* __restrict__ workspace, int* __restrict__ tile_counters, const float* __restrict__ bias,
           const float* __restrict__ R, int ldr, int epilogue) {
    constexpr int WARPS_N = BN / WN, NT = (BM / WM) * WARPS_N * 32;
    constexpr int LROWS = WM / TM, LCOLS = WN / TN;
    constexpr int SA = BK + 4;                              // A row pitch in shared memory (floats)
    constexpr int A_FLOATS = BM * SA, STAGE_FLOATS = A_FLOATS + BK * BN;
    constexpr int G = BK / 4;                               // groups of four k per step
    static_assert(LROWS * LCOLS == 32, "a warp's lanes must tile its warp tile exactly");
    static_assert(TN % 4 == 0 && BK % 4 == 0, "TN and BK must be multiples of 4");
    static_assert(BM % WM == 0 && BN % WN == 0 && WM % TM == 0 && WN % TN == 0, "tiles must nest");
    static_assert(STAGES >= 2, "the ring needs at least two tiles");
    // This thread's chunks (see ChunkPlan): A chunk (h, c) is row ar + h * PA::RSTEP, column
    // ac + c * 4 * PA::TPR of the A tile; B chunk (h, c) likewise with PB. All offsets from the thread's
    // first chunk are compile-time constants, in shared memory and (along a row) in global memory.
    using PA = ChunkPlan<BM, BK / 4, NT, 2>;
    using PB = ChunkPlan<BK, BN / 4, NT, 8>;
    extern __shared__ __align__(16) float smem[];  // STAGES x (BM x (BK + 4) + BK x BN) floats, sized by the host

    // Everything a thread knows about its place, from its indices. Built twice: before the main loop and
    // again after it (from fresh reads of the indices), so that only the accumulators, the fragments and
    // the loop state stay in registers across the main loop.
    struct Place {
        int row0, col0;            // the block's tile of C
        int k_begin, k_end, steps; // its slice of K, in BK steps (the last one may be partial)
        int fast_steps;            // leading steps whose chunks all lie inside A and B, 16-byte aligned
        int a_row, a_k, b_k, b_col; // the thread's first chunk of A (row, k) and of B (k, column) at k_begin
        int crow, ccol;            // its first result in C
        bool vec_a, vec_b;
        unsigned a_dst, b_dst;     // shared addresses of its first A and B chunks in slot 0
        unsigned a_frag, b_frag;   // shared addresses of its first A and B fragments in slot 0
    };
    auto place_of = [&](int tid, int bx, int by) {
        Place p;
        const int lane = tid % 32, warp = tid / 32;
        const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
        const int tr = lane / LCOLS, tc = lane % LCOLS;
        // Grouped block order: blocks run down GROUP_M block rows before moving one block column right.
        const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
        const int per_group = GROUP_M * tiles_n;
        const int first_m = bx / per_group * GROUP_M;
        const int rows_in_group = min(tiles_m - first_m, GROUP_M);
        const int in_group = bx % per_group;
        p.row0 = (first_m + in_group % rows_in_group) * BM;
        p.col0 = (in_group / rows_in_group) * BN;
        // This block's slice of K: whole BK steps, split as evenly as they go (a slice may be empty).
        const int steps_per_split = ((K + BK - 1) / BK + SPLIT_K - 1) / SPLIT_K;
        p.k_begin = min(K, by * steps_per_split * BK);
        p.k_end = min(K, p.k_begin + steps_per_split * BK);
        p.steps = (p.k_end - p.k_begin + BK - 1) / BK;
        p.vec_a = rows_are_16B_aligned(A, lda);
        p.vec_b = rows_are_16B_aligned(B, ldb);
        const bool interior = p.vec_a && p.vec_b && p.row0 + BM <= M && p.col0 + BN <= N;
        p.fast_steps = interior ? (p.k_end - p.k_begin) / BK : 0;
        const int ar = tid / PA::TPR, ac = (tid % PA::TPR) * 4, br = tid / PB::TPR, bc = (tid % PB::TPR) * 4;
        p.a_row = p.row0 + ar;
        p.a_k = p.k_begin + ac;
        p.b_k = p.k_begin + br;
        p.b_col = p.col0 + bc;
        const unsigned smem0 = shared_addr(smem);
        p.a_dst = smem0 + 4 * (ar * SA + ac);
        p.b_dst = smem0 + 4 * (A_FLOATS + br * BN + bc);
        // Fragments: rows tr + i * LROWS of the warp tile (A, four k at a time) and columns
        // tc * 4 + g * 4 * LCOLS .. + 3 (B, one k at a time).
        p.a_frag = smem0 + 4 * ((wm + tr) * SA);
        p.b_frag = smem0 + 4 * (A_FLOATS + wn + tc * 4);
        p.crow = p.row0 + wm + tr;
        p.ccol = p.col0 + wn + tc * 4;
        return p;
    };
    const Place pl = place_of(threadIdx.x, blockIdx.x, blockIdx.y);

    // Global address of the thread's first chunk of interior blocks, advanced one step at a time (its other
    // rows are one wide multiply-add away).
    const float* a_src = A + (size_t)(pl.fast_steps ? pl.a_row : 0) * lda + pl.a_k;
    const float* b_src = B + (size_t)(pl.fast_steps ? pl.b_k : 0) * ldb + pl.b_col;
    // The next step into the ring slot at byte offset `off`, every chunk of it, with no test.
    auto copy_fast = [&](unsigned off) {
#pragma unroll
        for (int h = 0; h < PA::H; ++h) {
            const float* src = h ? advance_rows(a_src, h * PA::RSTEP, lda) : a_src;
#pragma unroll
            for (int c = 0; c < PA::CH; ++c)
                async_copy16(pl.a_dst + off + 4 * (h * PA::RSTEP * SA + c * 4 * PA::TPR), src + c * 4 * PA::TPR);
        }
#pragma unroll
        for (int h = 0; h < PB::H; ++h) {
            const float* src = h ? advance_rows(b_src, h * PB::RSTEP, ldb) : b_src;
#pragma unroll
            for (int c = 0; c < PB::CH; ++c)
                async_copy16(pl.b_dst + off + 4 * (h * PB::RSTEP * BN + c * 4 * PB::TPR), src + c * 4 * PB::TPR);
        }
        a_src += BK;
        b_src = advance_rows(b_src, BK, ldb);
    };
    // Step s into the slot at byte offset `off`, with edge tests: what lies past M, N or the slice's end
    // of K is written as zero. Not unrolled: it runs outside the main loop, where registers are scarce.
    auto copy_checked = [&](const Place& p, int s, unsigned off) {
#pragma unroll 1
        for (int h = 0; h < PA::H; ++h) {
#pragma unroll 1
            for (int c = 0; c < PA::CH; ++c) {
                const unsigned dst = p.a_dst + off + 4 * (h * PA::RSTEP * SA + c * 4 * PA::TPR);
                const int row = p.a_row + h * PA::RSTEP, kc = p.a_k + s * BK + c * 4 * PA::TPR;
                const int left = row < M ? min(max(p.k_end - kc, 0), 4) : 0;
                const float* src = A + (size_t)row * lda + kc;
                if (p.vec_a) {
                    async_copy16_zfill(dst, left > 0 ? src : A, 4 * left);
                } else {
#pragma unroll
                    for (int j = 0; j < 4; ++j) async_copy4_zfill(dst + 4 * j, j < left ? src + j : A, j < left);
                }
            }
        }
#pragma unroll 1
        for (int h = 0; h < PB::H; ++h) {
#pragma unroll 1
            for (int c = 0; c < PB::CH; ++c) {
                const unsigned dst = p.b_dst + off + 4 * (h * PB::RSTEP * BN + c * 4 * PB::TPR);
                const int krow = p.b_k + s * BK + h * PB::RSTEP, col = p.b_col + c * 4 * PB::TPR;
                const int left = krow < p.k_end ? min(max(N - col, 0), 4) : 0;
                const float* src = B + (size_t)krow * ldb + col;
                if (p.vec_b) {
                    async_copy16_zfill(dst, left > 0 ? src : B, 4 * left);
                } else {
#pragma unroll
                    for (int j = 0; j < 4; ++j) async_copy4_zfill(dst + 4 * j, j < left ? src + j : B, j < left);
                }
            }
        }
    };

    // The ring: step s lives in slot s % STAGES, at byte offset rd. Step s + STAGES - 1 is copied while
    // step s is computed, into the slot of step s - 1 (wr).
    constexpr unsigned SLOT = 4 * STAGE_FLOATS, LAST = (STAGES - 1) * SLOT;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < pl.fast_steps) copy_fast(s * SLOT);
        else if (s < pl.steps) copy_checked(pl, s, s * SLOT);
        async_commit();
    }
    // With three or more slots the barrier of step s sits before its last four k, not at its start: the
    // FFMAs of those four k (their operands are in registers or in slot s, which no copy touches until
    // the next barrier) hide the barrier and the first shared-memory reads of step s + 1, which are
    // issued during the last row. Waiting there for step s + 1 leaves STAGES - 2 steps in flight. With two
    // slots the copy into the other slot must wait for everyone to finish step s - 1: barrier first.
    constexpr bool EARLY = STAGES >= 3;
    float acc[TM][TN] = {};
    unsigned rd = 0, wr = LAST;
    // Carried from step to step: B's 4 x TN values of the current four k and the next row of A.
    float b[4][TN];
    float4 a_next;
    auto load_b = [&](float (&dst)[TN], unsigned addr) {
#pragma unroll
        for (int g = 0; g < TN / 4; ++g) *reinterpret_cast<float4*>(&dst[4 * g]) = lds128(addr + 16 * g * LCOLS);
    };
    auto load_first = [&](const Place& p, unsigned slot) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) load_b(b[kk], p.b_frag + slot + 4 * kk * BN);
        a_next = lds128(p.a_frag + slot);
    };
    if constexpr (EARLY) {
        async_wait<STAGES - 2>();  // step 0 has landed
        __syncthreads();
        load_first(pl, 0);
    }
    // One step on slot rd. Four k at a time: B's values in registers, A streamed row by row (one LDS.128 =
    // four k of one row, then 4 x TN FFMAs), the next row read one row ahead. B of the next four k is read
    // during the last row, each k as soon as the current one is done with, so B needs one set of
    // registers, not two. `sync_and_copy` is the barrier and the copy of step s + STAGES - 1 into wr.
    int s = 0;
    // The barrier and the copy of step s + STAGES - 1 into slot wr: whole interior steps (`fast`, no tests)
    // or checked ones. A flag, not a callable parameter: generic lambdas are host code to NVRTC 13.0.
    auto sync_and_copy = [&](const Place& p, bool fast) {
        async_wait<EARLY ? STAGES - 3 : STAGES - 2>();  // this thread's chunks of step s + 1 (s) have landed ...
        __syncthreads();  // ... and everyone's; and everyone is done with step s - 1, whose slot is refilled
        if (fast) {
            copy_fast(wr);
        } else {
            copy_checked(p, s + STAGES - 1, wr);  // past the slice's end: zeros, never read
        }
        async_commit();
    };
    auto step = [&](const Place& p, bool fast) {
        if constexpr (!EARLY) {
            sync_and_copy(p, fast);
            load_first(p, rd);
        }
        const unsigned as = p.a_frag + rd, bs = p.b_frag + rd;
        const unsigned nx = rd == LAST ? 0 : rd + SLOT;
#pragma unroll
        for (int q = 0; q < G; ++q) {
            if (EARLY && q == G - 1) sync_and_copy(p, fast);
#pragma unroll
            for (int i = 0; i < TM; ++i) {
                const float4 a = a_next;
                if (i + 1 < TM) a_next = lds128(as + 4 * ((i + 1) * LROWS * SA + 4 * q));
                else if (q + 1 < G) a_next = lds128(as + 16 * (q + 1));
                else if (EARLY) a_next = lds128(p.a_frag + nx);
                const float av[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
                for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
                    for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[kk], b[kk][j], acc[i][j]);
                    if (i == TM - 1) {
                        if (q + 1 < G) load_b(b[kk], bs + 4 * (4 * (q + 1) + kk) * BN);
                        else if (EARLY) load_b(b[kk], p.b_frag + nx + 4 * kk * BN);
                    }
                }
            }
        }
        wr = rd;
        rd = nx;
    };
    // The main loop: the step copied during each step is a whole interior one (no tests).
    for (; s + STAGES - 1 < pl.fast_steps; ++s) step(pl, true);
    // The last STAGES - 1 steps of interior blocks, and every step of the others, with the place
    // recomputed (see Place).
    const Place pt = place_of(fresh_tid(), fresh_ctaid_x(), fresh_ctaid_y());
    for (; s < pt.steps; ++s) step(pt, false);
    async_wait<0>();  // no copy may still be in flight when the block moves on (or exits)

    const Place pe = place_of(fresh_tid(), fresh_ctaid_x(), fresh_ctaid_y());
    const int tid = fresh_tid();
    const bool vec_c = rows_are_16B_aligned(C, ldc);
    if constexpr (SPLIT_K > 1) {
        // Publish this slice's partial tile, then count: the last block of the tile does the sum.
        const size_t slab = (size_t)M * N;
        const bool vec_w = (N & 3) == 0;
        const int by = fresh_ctaid_y();
        float* mine = workspace + by * slab;
        store_strided_tile<TM, TN, LROWS, 4 * LCOLS>(mine, N, pe.crow, pe.ccol, M, N, acc, vec_w, 1.0f, 0.0f);
        __threadfence();  // the partial is visible device-wide before the counter says so
        __syncthreads();
        __shared__ int arrived_last;
        int* counter = tile_counters + fresh_ctaid_x();
        if (tid == 0) arrived_last = atomicAdd(counter, 1) == SPLIT_K - 1;
        __syncthreads();
        if (!arrived_last) return;
        __threadfence();
        // Row by row, the slabs in the fixed order 0, 1, ..., SPLIT_K - 1 (the same bits whichever block is
        // last), TN x 4 loads in flight; the slab loop is not unrolled further, which keeps the code (and
        // the compile time) from growing with SPLIT_K.
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int row = pe.crow + i * LROWS;
            if (row >= M) continue;
            const float* rp = workspace + (size_t)row * N + pe.ccol;  // slab 0; slab s is s * slab further
            float sum[TN] = {};
#pragma unroll 4
            for (int s = 0; s < SPLIT_K; ++s) {
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    const int off = (j / 4) * 4 * LCOLS + j % 4;
                    if (off < N - pe.ccol) sum[j] += s == by ? acc[i][j] : __ldcg(rp + s * slab + off);
                }
            }
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = sum[j];
        }
        if (tid == 0) *counter = 0;  // ready for the next launch
    }
    if (epilogue)
        epilogue_fp32_tile<TM, TN, 1, LROWS, 4 * LCOLS>(C, ldc, pe.crow, pe.ccol, M, N, acc, alpha, beta, bias, R, ldr,
                                                        epilogue);
    else
        store_strided_tile<TM, TN, LROWS, 4 * LCOLS>(C, ldc, pe.crow, pe.ccol, M, N, acc, vec_c, alpha, beta);
}
