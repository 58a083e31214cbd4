// Rung 10 - sgemm: the production FP32 kernel: a dense main loop fed by a cp.async ring, tiles chosen per
// shape, blocks ordered for L2 reuse, split-K.
//
// Idea: at rung 09's tile (256 x 128, 16 x 8 results per thread, 8 warps per SM) the SM has two warps
// per scheduler, so every cycle one warp waits on a shared-memory read or a barrier is a cycle the FMA
// pipe may idle. This rung keeps the work per thread and gives the schedulers a loop with no such waits:
// - Global -> shared with cp.async in a ring of STAGES tiles (no staging registers, no shared stores):
//   B in 16-byte chunks as it lies (row-major), A element by element (4-byte copies) into a k-major tile
//   (rows of BM + 4 floats), so that the fragments of A and B are both LDS.128 of one k. A B given
//   transposed (B_LAYOUT 2: N x K, K contiguous, a linear layer's weight W as W.t()) is copied as A is,
//   element by element into a k-major tile of rows of BN + 4 floats: read in place, with no copy of W^T
//   and no other change to the loop.
// - Fragments double-buffered in registers for the whole loop, across step boundaries: the TM + TN values
//   of k + 1 are read while the FFMAs of k run, one LDS.128 about every 20 FFMAs, never in bursts.
// - One barrier per step, before its last k: the copies of step s + STAGES - 1 are issued into the slot
//   of step s - 1 (every thread finished reading it before the previous barrier), the thread waits for its
//   copies of step s + 1, the block meets, and the fragments of step s + 1's first k are read while the
//   FFMAs of step s's last k run. The barrier's wait hides behind 128 FFMAs per thread.
// - Every shared-memory address in the loop is a base register plus a compile-time offset; global
//   addresses are fixed per thread and advance by one add per step.
// - Whole steps copy with no test when B's rows are 16-byte aligned, or always when B is copied in 4-byte
//   pieces (B_COPY = 4, what the heuristic picks for a B with unaligned rows; A's 4-byte copies need no
//   alignment; the API pads an unaligned B for large products on the 128 x 256 tile): blocks inside C in
//   one copy of the loop, blocks at its edge in another whose copies are clamped (A's rows past M read row
//   M - 1, B's pieces past N are zero-filled), since what those feed lies outside C and is never stored.
//   The last, partial step of K, and every step of an unaligned B copied in 16-byte pieces, take a checked
//   path that zero-fills what lies outside the matrices, in a third copy of the loop (it also runs the
//   last STAGES - 1 steps), so that each loop keeps only its own state in registers.
// Per shape: the spec picks (BM, BN, BK, warp and thread tiles) per shape class: the largest tile that
// still gives every SM work (128 x 256 for large problems, down to 64 x 64 for small or skinny ones), and
// the tuner can replace that choice per device. The grid is one-dimensional and blocks are ordered in
// groups of GROUP_M block rows: a wave of blocks touches about sqrt(blocks) row and column stripes instead
// of one row stripe and every column stripe.
// Split-K: when a problem has too few tiles of C to fill the GPU but a long K (K >> M*N), SPLIT_K blocks
// share each tile, each summing one slice of K into a workspace slab. Slices form groups of up to eight:
// the block that finishes a group last (a per-group counter tells it) adds the group's slabs in a fixed
// order into the group's first slab; the block that finishes the last group (a per-tile counter) adds the
// group sums in a fixed order, applies the epilogue and writes C (with one group, the last block adds
// every slab into C). The result does not depend on which blocks came last; no block reads more than
// 8 + SPLIT_K / 8 slabs; each counter is reset by the block that read it last. No block waits for
// another, so any scheduling order is safe. Slab rows are N rounded up to 4 floats, so that partial tiles
// move in 16-byte pieces whatever N is. With REDUCE = 2 the blocks only write their slabs, and a second
// kernel (sgemm_split_reduce, at the end of this file) sums them over all of C with the whole GPU: the
// in-kernel sum has one block per tile read every slab of its tile, a chain of up to megabytes through
// one SM at the end of the kernel.
// Split tail (WAVE > 1): with more tiles than one wave of blocks, the tiles of the whole waves run whole
// and only those of the partial last wave are split, SPLIT_K blocks each, so that the last wave's work is
// spread over the GPU instead of a few SMs working a whole tile's time while the rest idle.
// Fused epilogue (epilogue.cuh, as rung 11): out = activation(alpha * acc + beta * C + bias) + residual,
// applied once to the final sums (after the split-K reduction, never per slice); epilogue == 0 keeps the
// plain 16-byte alpha / beta store.
// C off 16 bytes (C_STAGE 1, N not a multiple of 4): each lane's 4-byte stores would cover 8 rows' sectors in
// part, each sector written 4 times over; the tile goes out a row at a time through the ring's shared memory
// instead (store_rows_staged, epilogue.cuh). Predicted 0.67 -> 0.95 x cuBLAS at 1000 x 3001 x 200; measured
// 0.76: L2 write requests 780 k -> 177 k, but the staging's instructions cost 7.5 %; 0.82 with the row loop's
// tests made once a group of rows (docs/journal.md).
// Changed from rung 09: cp.async ring instead of register staging, fragments double-buffered across steps,
// the barrier before the last k, per-shape tiles, grouped block order, dynamic shared memory, split-K,
// fused epilogue.
// Traffic: as rung 09 per block; DRAM traffic drops where the grouped order keeps operands in L2.
// History: the first version (rung 09's loop) measured 1-2% below rung 09; the second (untransposed A,
// four k per LDS.128 of A) had 94% FFMAs but read fragments in bursts and measured 88% of cuBLAS.
// Predicted (this loop): issue rate 0.79 -> 0.88 per scheduler and cycle, 50-52 TFLOP/s at 4096^3 at
// 256 x 128 x 8. Measured: docs/journal.md ("Rung 10, third main loop").
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
__device__ __forceinline__ int fresh_ctaid_y() {
    int v;
    asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(v));
    return v;
}
__device__ __forceinline__ int fresh_ctaid_x() {
    int v;
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v));
    return v;
}

// acc += a b^T (TM x TN FFMAs) in one of several orders. The order decides which source registers repeat
// from one FFMA to the next, and so what the operand reuse cache can serve instead of the register file.
// 1: row by row (a[i] held for TN FFMAs); 2: two columns at a time, down the rows (a[i] held for two,
// b[j], b[j + 1] alternating); 3: two rows at a time, along the columns (b[j] held for two, a[i], a[i + 1]
// alternating); 4: row by row, every other row backwards (b at each row change held); 5: four columns
// at a time, down the rows; 6: column by column, every other column upwards.
template <int ORDER, int TM, int TN>
__device__ __forceinline__ void outer_product(float (&acc)[TM][TN], const float (&a)[TM], const float (&b)[TN]) {
    if constexpr (ORDER == 2) {
#pragma unroll
        for (int j = 0; j < TN; j += 2)
#pragma unroll
            for (int i = 0; i < TM; ++i) {
                acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
                acc[i][j + 1] = fmaf(a[i], b[j + 1], acc[i][j + 1]);
            }
    } else if constexpr (ORDER == 3) {
#pragma unroll
        for (int i = 0; i < TM; i += 2)
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
                acc[i + 1][j] = fmaf(a[i + 1], b[j], acc[i + 1][j]);
            }
    } else if constexpr (ORDER == 4) {
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int jj = 0; jj < TN; ++jj) {
                const int j = i % 2 ? TN - 1 - jj : jj;
                acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
            }
    } else if constexpr (ORDER == 5) {
#pragma unroll
        for (int j = 0; j < TN; j += 4)
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int jj = 0; jj < 4; ++jj) acc[i][j + jj] = fmaf(a[i], b[j + jj], acc[i][j + jj]);
    } else if constexpr (ORDER == 6) {
#pragma unroll
        for (int j = 0; j < TN; ++j)
#pragma unroll
            for (int ii = 0; ii < TM; ++ii) {
                const int i = j % 2 ? TM - 1 - ii : ii;
                acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
            }
    } else {
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
}

// BM, BN: block tile; BK: depth per step; WM, WN: warp tile; TM, TN: thread tile (multiples of 4),
// with (WM / TM) * (WN / TN) == 32 lanes; GROUP_M: block rows per group of the block order;
// SPLIT_K: blocks per tile of C along K (1: no split; then workspace and tile_counters are unused);
// MIN_BLOCKS: resident blocks per SM the register allocation must allow; STAGES: tiles in the ring (>= 3);
// ORDER: the order of the FFMAs of one k (outer_product); B_COPY: bytes per copy of B, 16 (B's rows must
// be 16-byte aligned for the unchecked loops; any other B takes the checked loop) or 4 (any B);
// WAVE: with SPLIT_K > 1, 1 splits every tile of C, W > 1 only the tiles past the last whole wave of W
// tiles (the rest run whole; see `Place`); REDUCE: with SPLIT_K > 1, 1 sums the slices in this kernel (the
// last blocks to finish, below), 2 leaves the sum to sgemm_split_reduce, launched after it (WAVE == 1).
// `bias` (length M or N) and `R` (M x N, leading dimension ldr) are read only when the `epilogue` flags
// (epilogue.cuh) ask for them.
// C_STAGE 1: an unsplit tile, and a split tail's whole tiles, go to C a row at a time through the ring's shared
// memory, for C whose rows are not 16-byte aligned (store_rows_staged; the host sets it from N, so that C's
// other forms keep their instantiations as they were: beside the direct stores it spilled 128 x 128 at two
// blocks an SM). A split tile's sum still stores from its lanes.
// BATCHED 1: product blockIdx.z of a batch, its A, B, C and R `sa`, `sb`, `sc`, `sr` elements after the
// previous product's (0: one matrix every product shares); no split-K (the host runs a batch unsplit).
// B_LAYOUT 1: B row-major (K x N, ldb apart); 2: B^T given (N x K, element (k, n) at B[n * ldb + k]), copied
// in 4-byte pieces like A (B_COPY does not apply).
template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, int GROUP_M, int SPLIT_K, int MIN_BLOCKS, int STAGES,
          int ORDER, int B_COPY, int WAVE, int REDUCE, int C_STAGE, int BATCHED, int B_LAYOUT>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, MIN_BLOCKS)
sgemm_gemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
           const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc,
           float* __restrict__ workspace, int* __restrict__ tile_counters, const float* __restrict__ bias,
           const float* __restrict__ R, int ldr, int epilogue, int batch, long long sa, long long sb, long long sc,
           long long sr) {
    static_assert(BATCHED == 0 || (BATCHED == 1 && SPLIT_K == 1), "BATCHED: 0, or 1 without split-K");
    if constexpr (BATCHED == 1) {
        const long long z = blockIdx.z;
        A += z * sa, B += z * sb, C += z * sc, R += z * sr;
    }
    (void)batch;
    constexpr int WARPS_N = BN / WN, NT = (BM / WM) * WARPS_N * 32;
    constexpr int LROWS = WM / TM, LCOLS = WN / TN;
    static_assert(B_LAYOUT == 1 || B_LAYOUT == 2, "B_LAYOUT: 1 (B row-major) or 2 (B^T given)");
    constexpr bool BT = B_LAYOUT == 2;                     // B^T given: copied element by element, as A
    constexpr int SA = BM + 4;                              // k-major A: one k per row of BM (+ 4) floats
    constexpr int SB = BT ? BN + 4 : BN;                    // B: one k per row of BN floats (+ 4 when copied as A)
    constexpr int A_FLOATS = BK * SA, STAGE_FLOATS = A_FLOATS + BK * SB;
    // A's copies: thread t copies elements (row, k) = (t / BK + i * A_RSTEP, t % BK), i < A_PER: a warp
    // reads whole 32-byte sectors of 32 / BK rows, and its writes land in distinct banks (row + 4 k).
    constexpr int A_PER = BM * BK / NT, A_RSTEP = NT / BK;
    // B^T's copies, the same way: thread t copies elements (column, k) = (t / BK + i * A_RSTEP, t % BK), i < BT_PER.
    constexpr int BT_PER = BN * BK / NT;
    static_assert(!BT || BT_PER * NT == BN * BK, "the B^T tile must split evenly over the threads by k");
    static_assert(LROWS * LCOLS == 32, "a warp's lanes must tile its warp tile exactly");
    static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "TM, TN and BK must be multiples of 4");
    static_assert(BM % WM == 0 && BN % WN == 0 && WM % TM == 0 && WN % TN == 0, "tiles must nest");
    static_assert(NT % BK == 0 && A_PER * NT == BM * BK, "the A tile must split evenly over the threads by k");
    static_assert(STAGES >= 3, "the ring needs at least three tiles (two in flight while one is read)");
    // This thread's chunks of B (see ChunkPlan): chunk (h, c) is k row br + h * PB::RSTEP, column
    // bc + c * 4 * PB::TPR of the B tile. All offsets from the thread's first chunk are compile-time
    // constants, in shared memory and (along a row) in global memory.
    using PB = ChunkPlan<BK, BN / 4, NT, 8>;
    constexpr bool VEC_B = B_COPY == 16 && !BT;
    static_assert(B_COPY == 16 || B_COPY == 4, "B is copied in 16- or 4-byte pieces");
    // With B_COPY == 4, B's copies are single floats: thread t copies elements t, t + NT, ... of the tile in
    // row-major order, so a warp reads 32 consecutive floats of a row; the offsets of its i-th element from
    // its first are compile-time constants (rows B4_ROW(i), columns B4_COL(i)) since NT and BN divide.
    constexpr int B4_PER = BK * BN / NT;
    static_assert(VEC_B || BT || ((NT % BN == 0 || BN % NT == 0) && B4_PER * NT == BK * BN),
                  "4-byte B copies need NT and BN to divide one another");
    // Where registers are tightest (a split tail's longer place, four-byte B copies' extra addresses), what is
    // derived from M, N and K (tile counts, steps, the edge clamp of A's rows) is worked out from opaque copies
    // of them: recomputed where it is needed rather than kept (or spilled) across the main loop. Elsewhere
    // the compiler is left to choose (the 16-byte forms' allocation is what was measured).
    constexpr bool OPAQUE = WAVE > 1 || !VEC_B;
    extern __shared__ __align__(16) float smem[];  // STAGES x (BK x (BM + 4) + BK x SB) floats, sized by the host

    // Everything a thread knows about its place, from its indices. Built twice: before the main loop and
    // again after it (from fresh reads of the indices), so that only the accumulators, the fragments and
    // the loop state stay in registers across the main loop.
    struct Place {
        int tile, slice, slices;   // the block's tile of C (grouped order), its slice of K and their number
        int row0, col0;            // the tile's first row and column
        int k_begin, k_end, steps; // its slice of K, in BK steps (the last one may be partial)
        int fast_steps;            // leading whole steps, copied without tests (B's rows 16-byte aligned)
        bool interior;             // the tile lies inside C: no copy needs clamping
        int a_row, a_k, b_k, b_col; // the thread's first element of A (row, k) and chunk of B (k, column)
        int crow, ccol;            // its first result in C
        bool vec_b;
        unsigned a_dst, b_dst;     // shared addresses of its first A element and B chunk in slot 0
        unsigned a_frag, b_frag;   // shared addresses of its first A and B fragments in slot 0 (k = 0)
    };
    auto place_of = [&](int tid, int bx, int by) {
        Place p;
        const int lane = tid % 32, warp = tid / 32;
        const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
        const int tr = lane / LCOLS, tc = lane % LCOLS;
        const int m_ = OPAQUE ? opaque(M) : M, n_ = OPAQUE ? opaque(N) : N;
        const int tiles_m = (m_ + BM - 1) / BM, tiles_n = (n_ + BN - 1) / BN;
        // Which tile and slice: without a split, block bx computes tile bx. With every tile split (WAVE ==
        // 1), block (bx, by) computes slice by of tile bx. With a split tail, the grid is one-dimensional:
        // the first `whole` tiles (those of the whole waves of WAVE tiles) run whole in blocks 0 .. whole -
        // 1, and each of the other `split` tiles has SPLIT_K blocks, slice-major after them, so a partial
        // last wave becomes SPLIT_K times as many blocks of 1 / SPLIT_K the work. The host sizes the grid
        // to match (rung sgemm's geometry).
        p.tile = bx;
        p.slice = 0;
        p.slices = 1;
        if constexpr (SPLIT_K > 1 && WAVE == 1) {
            p.slice = by;
            p.slices = SPLIT_K;
        } else if constexpr (SPLIT_K > 1) {
            const int tiles = tiles_m * tiles_n, split = tiles % WAVE, whole = tiles - split;
            if (bx >= whole) {
                p.tile = whole + (bx - whole) % split;
                p.slice = (bx - whole) / split;
                p.slices = SPLIT_K;
            }
        }
        // Grouped block order: tiles run down GROUP_M block rows before moving one block column right.
        const int per_group = GROUP_M * tiles_n;
        const int first_m = p.tile / per_group * GROUP_M;
        const int rows_in_group = min(tiles_m - first_m, GROUP_M);
        const int in_group = p.tile % per_group;
        p.row0 = (first_m + in_group % rows_in_group) * BM;
        p.col0 = (in_group / rows_in_group) * BN;
        // This block's slice of K: whole BK steps, split as evenly as they go (a slice may be empty).
        const int k_ = OPAQUE ? opaque(K) : K, k_steps = (k_ + BK - 1) / BK;
        const int steps_per_split = p.slices == 1 ? k_steps : (k_steps + SPLIT_K - 1) / SPLIT_K;
        p.k_begin = min(k_, p.slice * steps_per_split * BK);
        p.k_end = min(k_, p.k_begin + steps_per_split * BK);
        p.steps = (p.k_end - p.k_begin + BK - 1) / BK;
        p.vec_b = VEC_B && rows_are_16B_aligned(B, ldb);
        p.interior = p.row0 + BM <= M && p.col0 + BN <= N;
        p.fast_steps = p.vec_b || !VEC_B ? (p.k_end - p.k_begin) / BK : 0;
        const int ar = tid / BK, ak = tid % BK;
        const int br = VEC_B ? tid / PB::TPR : BT ? tid % BK : tid / BN;
        const int bc = VEC_B ? (tid % PB::TPR) * 4 : BT ? tid / BK : tid % BN;
        p.a_row = p.row0 + ar;
        p.a_k = p.k_begin + ak;
        p.b_k = p.k_begin + br;
        p.b_col = p.col0 + bc;
        const unsigned smem0 = shared_addr(smem);
        p.a_dst = smem0 + 4 * (ak * SA + ar);
        p.b_dst = smem0 + 4 * (A_FLOATS + br * SB + bc);
        // Fragments: rows wm + tr * 4 + g * 4 * LROWS .. + 3 of A and columns wn + tc * 4 + g * 4 * LCOLS
        // .. + 3 of B, one k at a time.
        p.a_frag = smem0 + 4 * (wm + tr * 4);
        p.b_frag = smem0 + 4 * (A_FLOATS + wn + tc * 4);
        p.crow = p.row0 + wm + tr * 4;
        p.ccol = p.col0 + wn + tc * 4;
        return p;
    };
    const Place pl = place_of(threadIdx.x, blockIdx.x, blockIdx.y);

    // Global addresses of the thread's first A element and B chunk, advanced one step at a time (its other A
    // rows and B chunk rows are one wide multiply-add away). In blocks at the edge of C, A's rows past M are
    // read as row M - 1 and B's chunks past N as zeros (a straddling chunk in part): what they feed are
    // results outside C, never stored; only K must be exact, and whole steps lie inside it.
    const float* a_src = A + (size_t)(pl.fast_steps ? min(pl.a_row, M - 1) : 0) * lda + pl.a_k;
    // B^T: as A, with columns past N read as column N - 1.
    const float* b_src = BT ? B + (size_t)(pl.fast_steps ? min(pl.b_col, N - 1) : 0) * ldb + pl.b_k
                            : B + (size_t)(pl.fast_steps ? pl.b_k : 0) * ldb + pl.b_col;

    // The next step into the ring slot at byte offset `off`, every copy of it, with no test.
    auto copy_fast = [&](unsigned off) {
#pragma unroll
        for (int i = 0; i < A_PER; ++i)
            async_copy4(pl.a_dst + off + 4 * i * A_RSTEP, i ? advance_rows(a_src, i * A_RSTEP, lda) : a_src);
        if constexpr (VEC_B) {
#pragma unroll
            for (int h = 0; h < PB::H; ++h) {
                const float* src = h ? advance_rows(b_src, h * PB::RSTEP, ldb) : b_src;
#pragma unroll
                for (int c = 0; c < PB::CH; ++c)
                    async_copy16(pl.b_dst + off + 4 * (h * PB::RSTEP * SB + c * 4 * PB::TPR), src + c * 4 * PB::TPR);
            }
        } else if constexpr (BT) {
#pragma unroll
            for (int i = 0; i < BT_PER; ++i)
                async_copy4(pl.b_dst + off + 4 * i * A_RSTEP, i ? advance_rows(b_src, i * A_RSTEP, ldb) : b_src);
        } else {
#pragma unroll
            for (int i = 0; i < B4_PER; ++i)  // element i lies (i NT) / BN rows and (i NT) % BN columns on
                async_copy4(pl.b_dst + off + 4 * i * NT, advance_rows(b_src, i * NT / BN, ldb) + i * NT % BN);
        }
        a_src += BK;
        b_src = BT ? b_src + BK : advance_rows(b_src, BK, ldb);
    };
    // The same for a block at the edge of C: A's row offsets clamped, B's chunks zero-filled past N (the
    // clamps are recomputed per step from M, N and the thread's place rather than held in registers
    // across the loop: edge blocks are few, registers are not).
    auto copy_edge = [&](unsigned off) {
        const int a_lim = max((OPAQUE ? opaque(M) : M) - 1 - pl.a_row, 0);  // rows past a_src that lie inside A
#pragma unroll
        for (int i = 0; i < A_PER; ++i)
            async_copy4(pl.a_dst + off + 4 * i * A_RSTEP, i ? advance_rows(a_src, min(i * A_RSTEP, a_lim), lda) : a_src);
        if constexpr (VEC_B) {
#pragma unroll
            for (int h = 0; h < PB::H; ++h) {
                const float* src = h ? advance_rows(b_src, h * PB::RSTEP, ldb) : b_src;
#pragma unroll
                for (int c = 0; c < PB::CH; ++c) {
                    const int left = min(max(N - pl.b_col - c * 4 * PB::TPR, 0), 4);
                    // An empty chunk still names an address inside B (the block's first column); none is read.
                    async_copy16_zfill(pl.b_dst + off + 4 * (h * PB::RSTEP * SB + c * 4 * PB::TPR),
                                       src + (left ? c * 4 * PB::TPR : pl.col0 - pl.b_col), 4 * left);
                }
            }
        } else if constexpr (BT) {
            // Columns past b_src that lie inside B (from N itself: an opaque copy of it spilled on 128 x 128).
            const int b_lim = max(N - 1 - pl.b_col, 0);
#pragma unroll
            for (int i = 0; i < BT_PER; ++i)
                async_copy4(pl.b_dst + off + 4 * i * A_RSTEP,
                            i ? advance_rows(b_src, min(i * A_RSTEP, b_lim), ldb) : b_src);
        } else {
#pragma unroll
            for (int i = 0; i < B4_PER; ++i) {
                const bool inside = pl.b_col + i * NT % BN < N;
                async_copy4_zfill(pl.b_dst + off + 4 * i * NT,
                                  advance_rows(b_src, i * NT / BN, ldb) + (inside ? i * NT % BN : pl.col0 - pl.b_col),
                                  inside);
            }
        }
        a_src += BK;
        b_src = BT ? b_src + BK : advance_rows(b_src, BK, ldb);
    };
    // Step s into the slot at byte offset `off`, with edge tests: what lies past M, N or the slice's end
    // of K is written as zero. Not unrolled: it runs outside the main loop, where registers are scarce.
    auto copy_checked = [&](const Place& p, int s, unsigned off) {
        const int kc = p.a_k + s * BK;
#pragma unroll 1
        for (int i = 0; i < A_PER; ++i) {
            const int row = p.a_row + i * A_RSTEP;
            const bool inside = row < M && kc < p.k_end;
            async_copy4_zfill(p.a_dst + off + 4 * i * A_RSTEP, inside ? A + (size_t)row * lda + kc : A, inside);
        }
        if constexpr (BT) {
#pragma unroll 1
            for (int i = 0; i < BT_PER; ++i) {
                const int col = p.b_col + i * A_RSTEP;
                const bool inside = col < N && kc < p.k_end;
                async_copy4_zfill(p.b_dst + off + 4 * i * A_RSTEP, inside ? B + (size_t)col * ldb + kc : B, inside);
            }
            return;
        }
        if constexpr (!VEC_B) {
#pragma unroll 1
            for (int i = 0; i < B4_PER; ++i) {
                const int krow = p.b_k + s * BK + i * NT / BN, col = p.b_col + i * NT % BN;
                const bool inside = krow < p.k_end && col < N;
                async_copy4_zfill(p.b_dst + off + 4 * i * NT, inside ? B + (size_t)krow * ldb + col : B, inside);
            }
            return;
        }
#pragma unroll 1
        for (int h = 0; h < PB::H; ++h) {
#pragma unroll 1
            for (int c = 0; c < PB::CH; ++c) {
                const unsigned dst = p.b_dst + off + 4 * (h * PB::RSTEP * SB + c * 4 * PB::TPR);
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

    // The ring: step s lives in slot s % STAGES, at byte offset rd. Step s + STAGES - 1 is copied during
    // step s, into the slot of step s - 1 (wr).
    constexpr unsigned SLOT = 4 * STAGE_FLOATS, LAST = (STAGES - 1) * SLOT;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < pl.fast_steps && pl.interior) copy_fast(s * SLOT);
        else if (s < pl.fast_steps) copy_edge(s * SLOT);
        else if (s < pl.steps) copy_checked(pl, s, s * SLOT);
        async_commit();
    }
    float acc[TM][TN] = {};
    float fa[2][TM], fb[2][TN];  // fragments of k (slot k % 2) and of k + 1
    auto load_fragments = [&](int slot, unsigned a_addr, unsigned b_addr) {
#pragma unroll
        for (int g = 0; g < TM / 4; ++g) *reinterpret_cast<float4*>(&fa[slot][4 * g]) = lds128(a_addr + 16 * g * LROWS);
#pragma unroll
        for (int g = 0; g < TN / 4; ++g) *reinterpret_cast<float4*>(&fb[slot][4 * g]) = lds128(b_addr + 16 * g * LCOLS);
    };
    async_wait<STAGES - 2>();  // step 0 has landed
    __syncthreads();
    load_fragments(0, pl.a_frag, pl.b_frag);
    unsigned rd = 0, wr = LAST;
    int s = 0;
    // One step on slot rd. Before its last k: the copy of step s + STAGES - 1 into wr (`copy`: FAST whole
    // steps of interior blocks, EDGE whole steps of edge blocks, CHECKED the rest; a flag, not a callable
    // parameter: generic lambdas are host code to NVRTC 13.0), the wait for step s + 1, the barrier, and
    // the first fragments of step s + 1.
    enum { CHECKED, FAST, EDGE };
    auto step = [&](const Place& p, int copy) {
        const unsigned as = p.a_frag + rd, bs = p.b_frag + rd;
        const unsigned nx = rd == LAST ? 0 : rd + SLOT;
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            if (k + 1 < BK) {
                load_fragments((k + 1) % 2, as + 4 * (k + 1) * SA, bs + 4 * (k + 1) * SB);
            } else {
                if (copy == FAST) {
                    copy_fast(wr);
                } else if (copy == EDGE) {
                    copy_edge(wr);
                } else {
                    copy_checked(p, s + STAGES - 1, wr);  // past the slice's end: zeros, never read
                }
                async_commit();
                async_wait<STAGES - 2>();  // this thread's copies of step s + 1 have landed ...
                __syncthreads();           // ... and everyone's
                load_fragments(0, p.a_frag + nx, p.b_frag + nx);
            }
            outer_product<ORDER>(acc, fa[k % 2], fb[k % 2]);
        }
        wr = rd;
        rd = nx;
    };
    // The main loop: the step copied during each step is a whole one (no tests; clamped at the edges of C).
    if (pl.interior) {
        for (; s + STAGES - 1 < pl.fast_steps; ++s) step(pl, FAST);
    } else {
        for (; s + STAGES - 1 < pl.fast_steps; ++s) step(pl, EDGE);
    }
    // The last STAGES - 1 steps, and every step of blocks whose B rows are not 16-byte aligned, with the
    // place recomputed (see Place).
    const Place pt = place_of(fresh_tid(), fresh_ctaid_x(), fresh_ctaid_y());
    for (; s < pt.steps; ++s) step(pt, CHECKED);
    async_wait<0>();  // no copy may still be in flight when the block moves on (or exits)

    const Place pe = place_of(fresh_tid(), fresh_ctaid_x(), fresh_ctaid_y());
    const int tid = fresh_tid();
    const bool vec_c = rows_are_16B_aligned(C, ldc);
    // C_STAGE (C's rows not 16-byte aligned: N not a multiple of 4): the thread's results would go out 4 bytes
    // at a time, each warp store covering 16 sectors of 8 rows in part, 4 times over. Through the ring's shared
    // memory instead, so that each warp store covers WN consecutive floats of one row (whole sectors).
    auto store_c_staged = [&]() {
        constexpr int WARPS = NT / 32;
        static_assert(C_STAGE == 0 || WARPS * 4 * LROWS * (WN + 4) <= STAGES * STAGE_FLOATS,
                      "C_STAGE: the ring holds the staged rows");
        __syncthreads();  // every warp is done with the ring's fragments
        const int lane = tid % 32;
        const unsigned stage = (unsigned)opaque((int)shared_addr(smem)) + 4 * (tid / 32) * 4 * LROWS * (WN + 4);
        store_rows_staged<TM, TN, LROWS, LCOLS>(C, ldc, pe.crow - lane / LCOLS * 4, pe.ccol - lane % LCOLS * 4, M, N,
                                                acc, alpha, beta, bias, R, ldr, epilogue, stage, lane);
    };
    // The thread's results: row pe.crow + (i / 4) * 4 * LROWS + i % 4, column pe.ccol + (j / 4) * 4 * LCOLS
    // + j % 4.
    if constexpr (SPLIT_K > 1) {
        // Publish this slice's partial tile, then count. Slices form groups of up to G: the last block of a
        // group to finish sums the group's slabs into the group's first slab; the last group to finish
        // sums those into C (with one group, the last block of the tile sums every slab into C directly).
        // Each sum runs over its slabs in a fixed order, so the result is the same bits whichever blocks
        // finish last, and no block does more than G + SPLIT_K / G slabs' worth of reading, so long splits
        // (many slices for a tile of few blocks) do not end in one block reading them all.
        // A tile that runs whole (before the split tail, see Place) takes the same way through slab 0 with
        // no counting: its block stores the tile and reads it back a row at a time through the epilogue.
        // One store of the accumulators in this instantiation keeps its registers within MIN_BLOCKS' budget
        // (a second, direct store spilled); the round trip through L2 costs two tile-sized transfers.
        constexpr int G = 8, GROUPS = (SPLIT_K + G - 1) / G;
        // Slab rows are N rounded up to a multiple of 4 floats, so that partial tiles go out and come back in
        // 16-byte pieces whatever N is (the host sizes the workspace to match).
        const int ldw = (N + 3) & ~3;
        const size_t slab = (size_t)M * ldw;
        constexpr bool vec_w = true;
        const int by = pe.slice, group = by / G;
        const int members = min(G, SPLIT_K - group * G);
        const bool whole_tile = pe.slices == 1;
        if constexpr (C_STAGE == 1 && WAVE > 1) {  // a whole tile of a split tail: straight to C, a row at a time
            if (whole_tile) {
                store_c_staged();
                return;
            }
        }
        store_strided_tile<TM, TN, 4, 4 * LROWS, 4 * LCOLS>(workspace + by * slab, ldw, pe.crow, pe.ccol, M, N, acc,
                                                            vec_w, 1.0f, 0.0f);
        int* counters = tile_counters + pe.tile * (GROUPS + 1);  // one per group, then one per tile
        __shared__ int arrived_last;
        // The last to arrive at `counter` of `expected` (its stores, and everyone's before it, visible).
        // One thread releases and acquires for the block, between barriers: the barrier orders every thread's
        // slab stores before its fence and increment; its fence after a last increment orders the others'
        // slabs (released the same way) before the reads that follow the second barrier.
        auto last_of = [&](int* counter, int expected) {
            __syncthreads();
            if (tid == 0) {
                __threadfence();
                const bool last = atomicAdd(counter, 1) == expected - 1;
                if (last) __threadfence();
                arrived_last = last;
            }
            __syncthreads();
            return arrived_last != 0;
        };
        // Row by row, the sums of `count` slabs first, first + stride, ... in that order, each row stored as
        // soon as it is complete: into slab `first` (a group's sum) or through the epilogue into C. The
        // accumulators are dead from here on, so only one row of sums and the loads in flight hold registers
        // and the split instantiation needs no more registers than the main loop. 16-byte loads where the
        // slabs' rows allow them.
        // Whole: every 16-byte piece of the thread's row lies inside a slab row (pieces past N hold padding,
        // summed but never stored).
        const bool whole = (TN / 4 - 1) * 4 * LCOLS + 4 <= ldw - pe.ccol;
        // Slabs whose loads are issued together: 4 (8 measured 2% faster on the long in-kernel sums of 128 x
        // 256 tiles on sm_90, which the second kernel now does, and spilled 128 x 128 and 128 x 64 on sm_80,
        // sm_86 and sm_89).
        constexpr int SLABS_IN_FLIGHT = 4;
        auto reduce = [&](int first, int stride, int count, bool to_c) {
#pragma unroll 1
            for (int i = 0; i < TM; ++i) {
                const int row = pe.crow + (i / 4) * 4 * LROWS + i % 4;
                if (row >= M) continue;
                const float* rp = workspace + (size_t)first * slab + (size_t)row * ldw + pe.ccol;
                const size_t step = (size_t)stride * slab;
                float sum[1][TN] = {};
                if (whole) {
#pragma unroll SLABS_IN_FLIGHT
                    for (int s = 0; s < count; ++s) {
#pragma unroll
                        for (int g = 0; g < TN / 4; ++g) {
                            const float4 v = __ldcg(reinterpret_cast<const float4*>(rp + s * step + g * 4 * LCOLS));
                            sum[0][4 * g] += v.x;
                            sum[0][4 * g + 1] += v.y;
                            sum[0][4 * g + 2] += v.z;
                            sum[0][4 * g + 3] += v.w;
                        }
                    }
                } else {
#pragma unroll 1  // (2 spilled 64 x 64 split in two with four-byte B copies on sm_80)
                    for (int s = 0; s < count; ++s) {
#pragma unroll
                        for (int j = 0; j < TN; ++j) {
                            const int off = (j / 4) * 4 * LCOLS + j % 4;
                            if (off < N - pe.ccol) sum[0][j] += __ldcg(rp + s * step + off);
                        }
                    }
                }
                if (!to_c)
                    store_strided_tile<1, TN, 1, 1, 4 * LCOLS>(workspace + (size_t)first * slab, ldw, row, pe.ccol, M, N,
                                                               sum, vec_w, 1.0f, 0.0f);
                else if (epilogue)
                    epilogue_fp32_tile<1, TN, 1, 1, 4 * LCOLS>(C, ldc, row, pe.ccol, M, N, sum, alpha, beta, bias, R,
                                                               ldr, epilogue);
                else
                    store_strided_tile<1, TN, 1, 1, 4 * LCOLS>(C, ldc, row, pe.ccol, M, N, sum, vec_c, alpha, beta);
            }
        };
        if constexpr (REDUCE == 2) return;  // sgemm_split_reduce sums the slabs
        if (WAVE > 1 && whole_tile) {  // only a split tail leaves tiles whole
            __syncthreads();  // the block's stores are visible to all its threads (and in L2, where .cg reads)
            reduce(0, 1, 1, true);
            return;
        }
        if (!last_of(counters + group, members)) return;
        if (tid == 0) counters[group] = 0;  // ready for the next launch
        if constexpr (GROUPS == 1) {
            reduce(0, 1, SPLIT_K, true);
        } else {
            reduce(group * G, 1, members, false);
            if (!last_of(counters + GROUPS, GROUPS)) return;
            if (tid == 0) counters[GROUPS] = 0;
            reduce(0, G, GROUPS, true);
        }
        return;
    }
    if constexpr (C_STAGE == 1) {
        store_c_staged();
        return;
    }
    if (epilogue)
        epilogue_fp32_tile<TM, TN, 4, 4 * LROWS, 4 * LCOLS>(C, ldc, pe.crow, pe.ccol, M, N, acc, alpha, beta, bias, R,
                                                            ldr, epilogue);
    else
        store_strided_tile<TM, TN, 4, 4 * LROWS, 4 * LCOLS>(C, ldc, pe.crow, pe.ccol, M, N, acc, vec_c, alpha, beta);
}

// The slices' sum for REDUCE == 2: one thread per 4 columns of a row of C adds the SPLIT_K slabs' values
// in slice order (the same order, so the same bits, as the in-kernel reduction), applies the epilogue and
// stores. The whole GPU shares the reading, where the in-kernel reduction has one block per tile read
// every slab of its tile (for long splits of large tiles, a chain of megabytes through one SM).
__global__ void __launch_bounds__(256)
sgemm_split_reduce(int M, int N, int slices, float alpha, float beta, float* __restrict__ C, int ldc,
                   const float* __restrict__ workspace, const float* __restrict__ bias, const float* __restrict__ R,
                   int ldr, int epilogue) {
    const int ldw = (N + 3) & ~3, quads = ldw / 4;
    const long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= (long long)M * quads) return;
    const int row = (int)(q / quads), col = (int)(q % quads) * 4;
    const size_t slab = (size_t)M * ldw;
    const float* p = workspace + (size_t)row * ldw + col;
    float sum[1][4] = {};
#pragma unroll 8
    for (int s = 0; s < slices; ++s) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(p + s * slab));
        sum[0][0] += v.x;
        sum[0][1] += v.y;
        sum[0][2] += v.z;
        sum[0][3] += v.w;
    }
    if (epilogue)
        epilogue_fp32_tile<1, 4, 1, 1, 4>(C, ldc, row, col, M, N, sum, alpha, beta, bias, R, ldr, epilogue);
    else
        store_strided_tile<1, 4, 1, 1, 4>(C, ldc, row, col, M, N, sum, rows_are_16B_aligned(C, ldc), alpha, beta);
}
