// Rung 15 - wgmma: Hopper warpgroup MMA fed by the tensor memory accelerator, warp-specialised, persistent.
//
// The production kernel and the last Hopper step. Rungs 12-14 build it one idea at a time (TMA + wgmma from
// one warpgroup; producer / consumer warpgroups with setmaxnreg; a persistent grid in grouped order with
// clusters sharing B); this rung adds the epilogue through shared memory and TMA stores, issued under the
// next tile's first k steps, and the tiles chosen per shape (ping-pong consumers, 64- and 192-row or -column
// tiles, clusters or none), stream-K and split-K, tf32 and batches. Predicted over rung 14 at 4096^3 and
// 8192^3: 1.05-1.15 x; measured 1.15 x and 1.04 x (at 8192^3 a tile's epilogue is half the share it is at
// 4096^3). The whole kernel, from the start:
//
// Idea: on sm_90a the tensor cores take their operands straight from shared memory. One
// `wgmma.mma_async.m64nNk16` issued by a warpgroup (4 warps, 128 threads) multiplies a 64 x 16 tile of A by
// a 16 x N tile of B (N up to 256) into fp32 registers, asynchronously; no ldmatrix, no register
// fragments, so the issue slots that rung 11 spent feeding mma.sync are free.
// - Global -> shared by TMA (`cp.async.bulk.tensor.2d`): one thread issues a whole tile copy described by
//   a tensor map (built on the host by the driver, passed by value as a __grid_constant__ parameter). The
//   copy engine writes the tile 128-byte swizzled, which is the layout wgmma reads without bank conflicts,
//   zero-fills what lies outside the matrix (edges need no code), and signals an mbarrier with the bytes.
// - Warp specialisation: warpgroup 0 is the producer (one thread issues TMA copies into a ring of STAGES
//   slots; `setmaxnreg` gives its registers away), warpgroups 1 and 2 are consumers, up to 128 fp32
//   accumulators per thread. Cooperative (SCHEDULE 1): the consumers split each tile, BM / 2 rows each.
//   Ping-pong (SCHEDULE 2): they take alternate tiles; the producer fills the ring in tile order, so the
//   second consumer's main loop starts as the first one's ends and runs while the first one writes its
//   epilogue (the tensor cores are not left idle during epilogues). Slots are handed over with two
//   mbarriers each: `full` (the producer's copy has landed: transaction bytes) and `empty` (every
//   consuming warp is done).
// - Persistent grid: as many blocks as can be resident walk the tiles in a grouped order (GROUP_M tile
//   rows, then the next column), so the producer loads the next tile while the consumers run the
//   epilogue of the last one, and the tiles in flight at once share panels of A and B in L2.
// - Clusters (CLUSTER 2): two blocks take two vertically adjacent tiles, which need the same B tile; each
//   copies half of it and the copy engine writes it into both blocks' shared memory (TMA multicast), so B
//   is read from L2 once per cluster. A slot is then free only when the consumers of both blocks are done
//   with it (their arrivals go to both blocks' `empty` barriers), and no block exits while the other may
//   still write into it (a cluster barrier at the end).
// - Operands: A is M x K row-major (K-major for wgmma). B_LAYOUT 1: B is K x N row-major, read N-major
//   (the "transposed" bit; allowed for 16-bit types). B_LAYOUT 2: B^T is given (N x K; B column-major, as
//   in x @ w.t() with an N x K weight) and read K-major in place. TF32 (A_TYPE 3, fp32 storage, k = 8 per
//   wgmma) allows K-major operands only from shared memory. With B^T given, B_LAYOUT 2; with a row-major B,
//   B_LAYOUT 3 computes the transpose, C^T = B^T A^T: A^T is A read K-major from shared memory, and B^T is
//   the wgmma's A operand, which may come from registers in any layout: each consumer thread reads its
//   fragments (4 floats per k step of 8) out of B's N-major tile in shared memory, and the epilogue writes
//   the tile of C^T into C (each warp store 32-byte pieces of C's rows). (Before this, a row-major B was
//   first transposed into a temporary, a tenth of the call's time at 4096^3.) TMA needs 16-byte aligned rows (leading dimensions multiples of 16 bytes, aligned base):
//   the API copies other operands into row-padded arrays first (a copy costs less than a lower rung).
// - 8-bit floats (A_TYPE 5 e4m3, 6 e5m2; k = 32 per wgmma): a k step is still one 128-byte swizzle row, now
//   128 elements, so the ring, the maps and the descriptors are the 16-bit path's with half the elements'
//   bytes. The instruction reads both operands K-major only: B^T given (B_LAYOUT 2), as a linear layer's
//   weight is. Scales (one per tensor, or one per row of A and per column of B) multiply the accumulators
//   once a unit's k steps are done (scale_accumulators); alpha, bias and the rest follow as for any input.
// - Block scales (PROMOTE 1; 1 x 128 of A, 128 x 128 of B, DeepSeek-V3's recipe): a k step is exactly one
//   block along K, so each step's products go, 128 columns at a time, into a fresh partial accumulator
//   (wgmma with scale-d 0), and once they complete are added into the fp32 sums times A's row scale and B's
//   block scale for that step, loaded a step ahead. The tensor cores' own accumulation of 8-bit products is
//   narrower than fp32; promoting every 128 of K keeps long K exact to fp32 (1.3e-4 at K = 16384, against
//   3.1e-3 with one scale per tensor). Predicted: within 10 % of per-tensor. Measured: 128 x 128 tiles 0.58-
//   0.61 of per-tensor, 128 x 256 tiles 0.66-0.74; then 0.74-0.82 (1,000-1,110 TFLOP/s) once B's scales were
//   spread over the lanes (each step had waited a whole L2 latency for them). What is left is the promotion
//   itself: its FMAs (a quarter of the tensor cores' time) do not run under the other consumer's wgmmas (ncu:
//   they stall at dispatch), so the two times add, as the model's `promotion` bound says (0.80). Taking turns
//   on the tensor cores (named barriers between the consumers) did not change that (0.63-0.77), nor did
//   128 x 192 tiles, one partial group a step (0.83-0.90 of the 256-column tiles' speed).
// - Epilogue: 16-bit outputs with beta == 0 and no residual (plain, or a linear layer's act(alpha * acc +
//   bias)) go through shared memory and TMA stores (store_tma), so that the writes to C drain while the next
//   tile's main loop runs. Otherwise a plain epilogue (alpha, beta * C) or a linear layer's, with or without
//   a residual R (added after the activation, read once from global memory), is written straight from the
//   accumulators, each register pair two adjacent outputs (C with an even N and 2-element aligned rows). Everything else (beta with flags, odd C or R) is staged through
//   shared memory 32 columns at a time and written by an out-of-line routine through epilogue.cuh.
// - Deferred stores (DEFER 1, the default): the TMA-store epilogue packs the tile's outputs into registers
//   (half as many as the accumulators) and hands them to the copy engine a box at a time after each of the
//   next tile's first k steps' wgmmas, so the stores run while the tensor cores work.
// - wgmma descriptors are built once per operand and moved by adding offsets (the address field is their
//   low word); the warpgroup index is made warp-uniform (a shuffle), so all of it stays in uniform registers.
// - Stream-K (STREAM_K 1): the tiles of the last, partial round cut into 2-4 parts by k steps, each part on
//   its own cluster (where that round leaves half the clusters idle or more), or the last rounds cut into
//   equal runs of k steps, one per cluster (no gain measured on the H100); partial sums handed over through
//   global memory (work_unit).
// - Split-K (SPLIT_K > 1, for long K on a C of few tiles): (slice, tile) units whose partial sums are added in
//   slice order by the tile's last unit to finish, which then stores the tile as an unsplit one does
//   (split_last, a few slices), or go to fp32 slabs that a second launch (wgmma_split_reduce) sums and
//   applies the epilogue to (split_unit).
// Changed from rung 11: wgmma instead of mma.sync + ldmatrix, TMA instead of cp.async, producer /
// consumer warpgroups, persistent grouped tile order, clusters.
// Traffic: per tile BM x K of A and K x BN of B, B read from L2 once per cluster.
// Predicted (first version): 80-100% of cuBLAS BF16 at 4096^3; measured 47%, then 82-89% once the
// epilogue was staged. Predicted for clusters + the epilogue from registers: 95% at 4096^3, 97% at
// 8192^3; measured 80-94% and 97-112% (run to run; docs/journal.md, scripts/device_wgmma_check.py).
// Predicted for TMA stores (ncu put the gap to cuBLAS in the per-tile cost, not the main loop): -5-10% of
// the cycles at 4096^3; measured -10% (ncu), 1.01-1.04x cuBLAS at 4096^3.
// Predicted for groups of 16 tile rows instead of 8 (a wave's panels 2048 x 2112 instead of 1024 x 4224,
// best_group): 20% less read from memory; measured 1.53 -> 1.23 GB at 8192^3 (cuBLAS 1.25), 1-2% less time
// and energy per call at the power limit, where time is energy / 700 W (scripts/power_probe.py).
// Predicted for the TMA-store epilogue's box loop in order (the bias a box ahead, a box computed before it is
// stored) and bf16 GELU through one MUFU.TANH: the GELU epilogue 14% -> ~5% of 4096^3 (bias 6% -> ~4%);
// measured 8.3% (5.2%): it sits at the multi-function unit's bound (gemmlab timeline's epilogue detail).
// Predicted for descriptors built once: 28 -> ~19 M instructions at 4096^3; measured 18.6 M (cuBLAS 16.9 M).
// Predicted for deferred stores: the plain epilogue 3.3 -> 1.5-2% of 4096^3, +1-1.5% net; measured 1.1%, and
// at the power limit 0.2088 -> 0.2078 ms (4096^3), 1.640 -> 1.615 ms (8192^3): ahead of cuBLAS at both.
#include "common.cuh"
#include "epilogue.cuh"
#include "hopper.cuh"
#include "wgmma_store.cuh"


// ------------------------------------------------------------------------------------------ timeline
// Compiled only with -DGEMMLAB_TRACE (analysis/timeline.py builds and reads it; nothing else changes). Per
// block: globaltimer and clock64 at entry, its SM, globaltimer and clock64 at each consumer's exit (after the
// cluster barrier). Per consumer and work unit (tile or stream-K run), from the consumer's first thread:
// globaltimer and clock64 when the unit begins, clock64 once its first slot of data is there, after its last
// wgmma, and once its epilogue is issued (the start of the next unit's bookkeeping), then the tile and its k
// steps. Blocks past TRACE_BLOCKS and units past TRACE_UNITS are not recorded.
#ifdef GEMMLAB_TRACE
#if !defined(GEMMLAB_TRACE_BLOCKS) || !defined(GEMMLAB_TRACE_UNITS)
#error "the traced build takes the record counts from the host: -DGEMMLAB_TRACE_BLOCKS=... -DGEMMLAB_TRACE_UNITS=..."
#endif
constexpr int TRACE_BLOCKS = GEMMLAB_TRACE_BLOCKS, TRACE_UNITS = GEMMLAB_TRACE_UNITS;
__device__ unsigned long long gemmlab_trace_block[TRACE_BLOCKS][8];
__device__ unsigned long long gemmlab_trace_unit[TRACE_BLOCKS][2][TRACE_UNITS][8];
// Inside the TMA-store epilogue (store_tma), per consumer and unit: clock64 once the bias is loaded, then per
// box of 64 columns: its outputs computed, its buffer free (the wait and barrier), its TMA store issued.
__device__ unsigned long long gemmlab_trace_epilogue[TRACE_BLOCKS][2][TRACE_UNITS][16];
__device__ __forceinline__ unsigned long long trace_globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned trace_smid() {
    unsigned r;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned long long* trace_unit(int cw, int unit) {
    return blockIdx.x < TRACE_BLOCKS && unit < TRACE_UNITS ? gemmlab_trace_unit[blockIdx.x][cw][unit] : nullptr;
}
#define TRACE_UNIT(cw, unit, field, value)                                  \
    do {                                                                    \
        unsigned long long* tr_ = trace_unit((cw), (unit));                 \
        if (tr_) tr_[(field)] = (unsigned long long)(value);                \
    } while (0)
#define TRACE_EPILOGUE(cw, unit, field)                                                                              \
    do {                                                                                                             \
        if (blockIdx.x < TRACE_BLOCKS && (unit) >= 0 && (unit) < TRACE_UNITS)                                        \
            gemmlab_trace_epilogue[blockIdx.x][(cw)][(unit)][(field)] = (unsigned long long)clock64();              \
    } while (0)
#define TRACE_BLOCK(field, value)                                                                          \
    do {                                                                                                   \
        if (blockIdx.x < TRACE_BLOCKS) gemmlab_trace_block[blockIdx.x][(field)] = (unsigned long long)(value); \
    } while (0)
#else
#define TRACE_EPILOGUE(cw, unit, field) \
    do {                                 \
    } while (0)
#define TRACE_UNIT(cw, unit, field, value) \
    do {                                    \
    } while (0)
#define TRACE_BLOCK(field, value) \
    do {                           \
    } while (0)
#endif


// The epilogue of a tile computed transposed (B_LAYOUT 3: D = C^T): accumulator (r, c) of the tile at
// (row0, col0) of D is C's element (col0 + c, row0 + r). A warp's store of one register writes, for each of
// its 4 columns of D (rows of C), 8 consecutive rows of D: 32 contiguous bytes of fp32 C, a whole sector.
// rows_left, cols_left: rows and columns of D from (row0, col0) on.
template <int C_TYPE, int MT, int ACC>
__device__ __forceinline__ void store_transposed(typename Out<C_TYPE>::T* __restrict__ C, int ldc, int row0, int col0,
                                                 int rows_left, int cols_left, const float (&acc)[MT][ACC], float alpha,
                                                 float beta, const float* __restrict__ bias,
                                                 const typename Out<C_TYPE>::T* __restrict__ R, int ldr, int epilogue,
                                                 int warp, int g, int t) {
    typedef Out<C_TYPE> O;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = acc_row(mt, warp, g, h);
            if (r >= rows_left) continue;
#pragma unroll
            for (int j = 0; j < ACC / 4; ++j)
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    const int c = 8 * j + 2 * t + q;
                    if (c >= cols_left) continue;
                    const float v = acc[mt][4 * j + 2 * h + q];
                    typename O::T* p = C + (size_t)(col0 + c) * ldc + row0 + r;
                    if (epilogue)
                        epilogue_one<C_TYPE>(C, ldc, col0 + c, row0 + r, v, alpha, beta, bias, R, ldr, epilogue);
                    else if (beta == 0.0f)  // BLAS rule: C is not read
                        O::store(p, alpha * v);
                    else
                        O::store(p, alpha * v + beta * O::load(p));
                }
        }
}


// The bias in registers before it is used: a row's once per tile, a box's columns one box ahead. Each
// st.shared is ordered against every memory access (its asm clobbers memory), so a load written between
// two stores waits for the one before it, and each element's arithmetic waits for its load (before this,
// the timeline measured a column bias at +60 % of the plain epilogue's cycles and GELU at +270 %;
// after, +40 % and +180 %: docs/journal.md, rung 15's sixth round).
// BIAS (here and below): which bias the code is compiled for: 0 none, EPI_BIAS_ROW, EPI_BIAS_COL, or
// BIAS_EITHER (whichever bias_mode names, both added per element).
constexpr int BIAS_EITHER = EPI_BIAS_ROW | EPI_BIAS_COL;
template <int MT, int BIAS>
__device__ __forceinline__ void load_bias_rows(float (&brow)[MT][2], const float* __restrict__ bias, int bias_mode,
                                               int row0, int rows_left, int warp, int g) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = acc_row(mt, warp, g, h);
            brow[mt][h] = (BIAS & EPI_BIAS_ROW) && bias_mode == EPI_BIAS_ROW && r < rows_left ? bias[row0 + r] : 0.0f;
        }
}
template <int BIAS>
__device__ __forceinline__ void load_bias_cols(float2 (&bcol)[8], const float* __restrict__ bias, int bias_mode,
                                               int col0, int cols_left, int cb, int t) {
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
        const int c = 64 * cb + 8 * jj + 2 * t;
        bcol[jj] = (BIAS & EPI_BIAS_COL) && bias_mode == EPI_BIAS_COL && c < cols_left ? *reinterpret_cast<const float2*>(bias + col0 + c)
                                                                      : make_float2(0.0f, 0.0f);
    }
}

// Box cb's outputs (64 columns of the consumer's rows), act(alpha * acc + bias), packed in pairs: out[mt][h][jj]
// holds row acc_row(mt, warp, g, h), columns 64 cb + 8 jj + 2 t and + 1. The arithmetic of all 16 pairs
// interleaves (GELU's multi-function operations) before anything waits.
// HALVES: 8 pairs at a time (the deferred stores' fp16 GELU and SiLU, whose exponential forms need more
// temporaries than the registers beside the held outputs allow for 16).
// RES: `res` (a residual whose rows allow pairs; it points at the consumer's first row and the tile's first
// column) adds R's pair at the same place after the activation (zero outside C). Compiled in only where a call
// has one: a runtime test per pair was if-converted by ptxas into a predicated load, two adds and the bounds
// tests on every pair of every plain tile, which ncu counted (96 x 2048 x 2048 x 128: 129 M instructions
// against cuBLAS's 41 M; the store-bound epilogue issues them all).
// UNIT: alpha is 1 (the caller's test, uniform over the grid): no multiply per element.
template <int C_TYPE, int MT, int ACC, int ACT, int BIAS, bool HALVES = false, bool RES = false, bool UNIT = false>
__device__ __forceinline__ void pack_box(unsigned (&out)[MT][2][8], const float (&acc)[MT][ACC], int cb, float alpha,
                                         const float2 (&bcol)[8], const float (&brow)[MT][2],
                                         const typename Out<C_TYPE>::T* __restrict__ res = nullptr, int ldr = 0,
                                         int rows_left = 0, int cols_left = 0, int warp = 0, int g = 0, int t = 0) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if (HALVES && h == 1) __syncwarp();
#pragma unroll
            for (int jj = 0; jj < 8; ++jj) {
                const int j = 8 * cb + jj;
                const float a0 = acc[mt][4 * j + 2 * h], a1 = acc[mt][4 * j + 2 * h + 1];
                // The bias term: one FADD per element less where the bias's kind is known.
                const float b0 = BIAS == EPI_BIAS_COL   ? bcol[jj].x
                                 : BIAS == EPI_BIAS_ROW ? brow[mt][h]
                                                        : bcol[jj].x + brow[mt][h];
                const float b1 = BIAS == EPI_BIAS_COL   ? bcol[jj].y
                                 : BIAS == EPI_BIAS_ROW ? brow[mt][h]
                                                        : bcol[jj].y + brow[mt][h];
                float v0, v1;
                if constexpr (UNIT) {
                    v0 = activate_direct<C_TYPE, ACT>(BIAS ? a0 + b0 : a0);
                    v1 = activate_direct<C_TYPE, ACT>(BIAS ? a1 + b1 : a1);
                } else {
                    v0 = activate_direct<C_TYPE, ACT>(BIAS ? fmaf(alpha, a0, b0) : alpha * a0);
                    v1 = activate_direct<C_TYPE, ACT>(BIAS ? fmaf(alpha, a1, b1) : alpha * a1);
                }
                if constexpr (RES) {
                    const int r = acc_row(mt, warp, g, h), c = 64 * cb + 8 * jj + 2 * t;
                    if (r < rows_left && c < cols_left) {
                        const float2 rr = Out<C_TYPE>::load2(res + (size_t)r * ldr + c);
                        v0 += rr.x, v1 += rr.y;
                    }
                }
                out[mt][h][jj] = Out<C_TYPE>::pack2(v0, v1);
            }
        }
}

// k steps before a unit's last at which the producer brings its residual's rows into L2: 8 steps of a 128 x 256
// tile at 16 bits are about 4.5 us, time for the DRAM to deliver the 8.6 MB that every SM's tile asks for at
// once, and late enough that the main loop's operands passing through L2 do not evict them first.
constexpr int RESIDUAL_LEAD = 8;

// The residual's part of a tile (rows m0 .. m0 + ROWS - 1 below rows_end, columns n0 .. n0 + COLS - 1 below n)
// into L2, a bulk prefetch per row, so that the epilogue's loads of R (pack_box, box by box, each waiting for its
// own) find it there instead of waiting on the DRAM under idle tensor cores. Rows whose start is not 16-byte
// aligned are left to the loads (a prefetch is only a hint); a row's last bytes short of 16 likewise.
template <int ROWS, int COLS, typename T>
__device__ __forceinline__ void prefetch_tile_l2(const T* __restrict__ r, long long ldr, int m0, int rows_end, int n0,
                                                 int n) {
    const unsigned bytes = (unsigned)(min(COLS, n - n0) * (int)sizeof(T)) & ~15u;
    if (bytes == 0 || ((reinterpret_cast<unsigned long long>(r + n0) | (unsigned long long)(ldr * (long long)sizeof(T))) & 15))
        return;
    const T* p = r + m0 * ldr + n0;
    // (one row at a time: the producer runs in 40 registers)
#pragma unroll 1
    for (int i = min(ROWS, rows_end - m0); i > 0; --i, p += ldr) bulk_prefetch_l2(p, bytes);
}

// Box cb of packed outputs to C through shared memory and a TMA store (clipped to C at the edges). Two boxes
// alternate in `buf` (WG_M x 128 bytes each, 1024-byte aligned, 128-byte swizzled: 16-byte piece p of row r at
// p ^ (r % 8)); before writing one, the warpgroup waits until the store that last read it (two boxes ago) is
// done with it. A warp writes its rows with stmatrix, four 8 x 8 matrices (two 8-row halves x two 8-column
// pieces) per instruction: 4 instructions per 64 columns of one m64 tile where 4-byte stores took 16. Lane
// 8 i + r addresses row 8 (i % 2) + r of its warp's 16 rows, piece 2 q + i / 2 of the box's eight for
// instruction q; the swizzled piece (2 q + i / 2) ^ r is (i / 2 ^ r) ^ 2 q, so the q-th address is the first
// one XOR 32 q. `unit`: the traced build's record (-1: none).
template <int MT, int NB>
__device__ __forceinline__ void store_box(const TensorMap* map, unsigned buf, const unsigned (&out)[MT][2][8], int cb,
                                          int row0, int col0, int warp, int g, int t, int tid_wg, int barrier,
                                          int unit, int z = -1) {
    constexpr int BOX = MT * 64 * 128;
    (void)unit;
    const int lane = 4 * g + t, mi = lane / 8, mr = lane % 8;
    const unsigned stsm_off = (unsigned)(warp * 16 + 8 * (mi & 1) + mr) * 128u + (unsigned)(((mi >> 1) ^ mr) << 4);
    const unsigned box = buf + (cb % 2) * BOX;
    // The store that last read this box is done with it: two boxes ago, except for the first box of a tile
    // of an odd number NB of boxes (192 columns: 3), which reuses the box of the tile before's last store.
    if (tid_wg == 0) {
        if (NB % 2 == 1 && cb == 0)
            bulk_wait_read<0>();
        else
            bulk_wait_read<1>();
    }
    warpgroup_barrier(barrier);
    if (tid_wg == 0) TRACE_EPILOGUE(barrier - 1, unit, 2 + 3 * cb);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int q = 0; q < 4; ++q)
            stsm_x4((box + mt * 64 * 128 + stsm_off) ^ (32u * q), out[mt][0][2 * q], out[mt][1][2 * q],
                    out[mt][0][2 * q + 1], out[mt][1][2 * q + 1]);
    fence_async_shared();
    warpgroup_barrier(barrier);  // the box is complete
    if (tid_wg == 0) {
        tma_store(map, box, col0 + 64 * cb, row0, z);
        bulk_commit();
        TRACE_EPILOGUE(barrier - 1, unit, 3 + 3 * cb);
    }
}

// The epilogue through the copy engine (16-bit outputs, beta == 0, no residual): the consumer's WG_M x BN
// results, act(alpha * acc + bias), go to C a box of 64 columns at a time, each box computed (pack_box) and
// then stored (store_box), so the copy engine reads one box while the next is computed; the writes to C then
// drain while the consumers run the next tile's main loop, where the stores from registers (which all SMs
// issue at once at the end of a tile) held the consumers until the memory system took them. `buf`: the two
// boxes, WG_M x 128 bytes each, 1024-byte aligned. bias is read as in store_direct_fused; BIAS 0 (no bias)
// compiles the plain alpha x acc.
template <int C_TYPE, int MT, int ACC, int ACT, int BIAS = BIAS_EITHER>
__device__ __forceinline__ void store_tma(const TensorMap* map, unsigned buf, int row0, int col0, int rows_left,
                                          int cols_left, const float (&acc)[MT][ACC], float alpha,
                                          const float* __restrict__ bias, int bias_mode, int warp, int g, int t,
                                          int tid_wg, int barrier, int unit = -1,
                                          const typename Out<C_TYPE>::T* __restrict__ R = nullptr, int ldr = 0,
                                          int z = -1) {
    const typename Out<C_TYPE>::T* res = R != nullptr ? R + (size_t)row0 * ldr + col0 : nullptr;
    (void)unit;  // (the traced build's record index)
    float brow[MT][2];
    float2 bcol[8];
    load_bias_rows<MT, BIAS>(brow, bias, bias_mode, row0, rows_left, warp, g);
    load_bias_cols<BIAS>(bcol, bias, bias_mode, col0, cols_left, 0, t);
    if (tid_wg == 0) TRACE_EPILOGUE(barrier - 1, unit, 0);
#pragma unroll
    for (int cb = 0; cb < ACC / 32; ++cb) {
        unsigned out[MT][2][8];
        if (res != nullptr)
            pack_box<C_TYPE, MT, ACC, ACT, BIAS, false, true>(out, acc, cb, alpha, bcol, brow, res, ldr, rows_left,
                                                              cols_left, warp, g, t);
        else if (alpha == 1.0f)
            pack_box<C_TYPE, MT, ACC, ACT, BIAS, false, false, true>(out, acc, cb, alpha, bcol, brow);
        else
            pack_box<C_TYPE, MT, ACC, ACT, BIAS>(out, acc, cb, alpha, bcol, brow);
        if (cb + 1 < ACC / 32) load_bias_cols<BIAS>(bcol, bias, bias_mode, col0, cols_left, cb + 1, t);
        if (tid_wg == 0) TRACE_EPILOGUE(barrier - 1, unit, 1 + 3 * cb);
        store_box<MT, ACC / 32>(map, buf, out, cb, row0, col0, warp, g, t, tid_wg, barrier, unit, z);
    }
}

// The deferred form (DEFER 1): all of a tile's boxes packed into `held` (half as many registers as the
// accumulators, which the next tile's main loop then reuses), stored box by box (store_box) during the next
// tile's first k steps (a box after each step's wgmmas), while they run. The traced build records the
// packing as fields 0 and 1.
template <int C_TYPE, int MT, int ACC, int ACT, int BIAS>
__device__ __forceinline__ void pack_tile(unsigned (&held)[ACC / 32][MT][2][8], int row0, int col0, int rows_left,
                                          int cols_left, const float (&acc)[MT][ACC], float alpha,
                                          const float* __restrict__ bias, int bias_mode, int warp, int g, int t,
                                          int tid_wg, int cw, int unit) {
    (void)unit, (void)cw;
    float brow[MT][2];
    float2 bcol[8];
    load_bias_rows<MT, BIAS>(brow, bias, bias_mode, row0, rows_left, warp, g);
    load_bias_cols<BIAS>(bcol, bias, bias_mode, col0, cols_left, 0, t);
    if (tid_wg == 0) TRACE_EPILOGUE(cw, unit, 0);
#pragma unroll
    for (int cb = 0; cb < ACC / 32; ++cb) {
        constexpr bool HALVES = C_TYPE == 2 && (ACT == EPI_ACT_GELU_TANH || ACT == EPI_ACT_SILU);
        if (alpha == 1.0f)
            pack_box<C_TYPE, MT, ACC, ACT, BIAS, HALVES, false, true>(held[cb], acc, cb, alpha, bcol, brow);
        else
            pack_box<C_TYPE, MT, ACC, ACT, BIAS, HALVES>(held[cb], acc, cb, alpha, bcol, brow);
        if (cb + 1 < ACC / 32) load_bias_cols<BIAS>(bcol, bias, bias_mode, col0, cols_left, cb + 1, t);
        // fp16: one box's activations at a time (their exponential forms, interleaved over all boxes, run out
        // of registers beside `held`). bf16's one MUFU.TANH per element fits: boxes interleave (measured: GELU's
        // packing 4,470 -> 3,740 cycles per tile without the barrier).
        if (ACT != 0 && ACT != EPI_ACT_RELU && C_TYPE != 3) __syncwarp();
    }
    if (tid_wg == 0) TRACE_EPILOGUE(cw, unit, 1);
}

// The same for a tile computed transposed (B_LAYOUT 3: D = C^T, fp32 C, beta == 0, no flags): the
// consumer's tile of D (rows: C's columns from row0, columns: C's rows from col0) goes to C 32 of C's rows at
// a time, through boxes of 32 x 32 floats (C's rows of 128 bytes, 128-byte swizzled), one per 32 of the
// tile's rows; transposing through shared memory makes each box a dense piece of C. A warp's 4-byte stores
// of one register hit 32 distinct banks (4 rows of C whose swizzles differ by 2, 4 and 6, 8 columns each).
// The boxes of two steps alternate in `buf` (2 x WG_M x 128 bytes, 1024-byte aligned).
template <int MT, int ACC>
__device__ __forceinline__ void store_tma_transposed(const TensorMap* map, unsigned buf, int row0, int col0,
                                                     const float (&acc)[MT][ACC], float alpha, int warp, int g,
                                                     int t, int tid_wg, int barrier, int z = -1) {
    constexpr int WG_M = MT * 64, STEP = WG_M * 128;  // WG_M / 32 boxes of 4 KB
#pragma unroll
    for (int st = 0; st < ACC / 16; ++st) {  // 32 of C's rows (4 register pairs per row of the tile) per step
        const unsigned step = buf + (st % 2) * STEP;
        if (tid_wg == 0) bulk_wait_read<1>();  // the step before the last is done with this half of `buf`
        warpgroup_barrier(barrier);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = acc_row(mt, warp, g, h);  // the tile's row: C's column row0 + r
                const unsigned box = step + (r / 32) * 4096;
                const int nl = r % 32;
#pragma unroll
                for (int jj = 0; jj < 4; ++jj)
#pragma unroll
                    for (int q = 0; q < 2; ++q) {
                        const int ml = 8 * jj + 2 * t + q;  // C's row col0 + 32 st + ml
                        sts32(box + ml * 128 + (((nl >> 2) ^ (ml & 7)) << 4) + (nl & 3) * 4,
                              __float_as_uint(alpha * acc[mt][4 * (4 * st + jj) + 2 * h + q]));
                    }
            }
        fence_async_shared();
        warpgroup_barrier(barrier);
        if (tid_wg == 0) {
#pragma unroll
            for (int nb = 0; nb < WG_M / 32; ++nb) tma_store(map, step + nb * 4096, row0 + 32 * nb, col0 + 32 * st, z);
            bulk_commit();
        }
    }
}

// ------------------------------------------------------------------------------------------ stream-K

// The work of a persistent grid of P clusters over `tiles` cluster tiles of k_tiles k steps each. Whole
// tiles first, round-robin (cluster c takes c, c + P, ...), except the last `sk_tiles`, which are cut by k
// steps so that the last, partial round of whole tiles (tiles % P of them) is spread over more SMs instead
// of leaving the rest idle. Two ways (sk_parts says which):
// - runs (sk_parts 0): the stream-K tiles' k steps, all in a row (tile by tile), cut into P equal ranges, one
//   per cluster, each cut again at tile boundaries into units. With sk_tiles = tiles % P + P every range
//   spans at least one tile's k steps, so a tile is shared by at most two clusters: the one whose range
//   starts inside it (kb > 0: it writes its partial sums first, at the start of its stream-K work) and the
//   one whose range ends in it (kb = 0: it takes the other's sums and writes C, at the end of its work).
// - parts (sk_parts >= 2, sk_tiles = tiles % P, sk_tiles x sk_parts <= P): each of the last tiles cut into
//   sk_parts even k ranges; part q of stream tile j goes to cluster j sk_parts + q. Every part starts when
//   the whole rounds end, at one of sk_parts k offsets shared by all stream tiles, so the tiles that share a
//   panel still read its k slices together. Part 0 (kb = 0) adds the sums of clusters c + 1 ...
//   c + sk_parts - 1 in that order and writes C; the others hand theirs over.
// Unit i of cluster c: tile `tile`, k steps [kb, ke); `ring`: the k steps the cluster took before it (its
// position in the TMA ring). False past the last unit.
struct WorkUnit {
    int tile, kb, ke;
    long long ring;
};

// The first k step of cluster c's stream-K run, in the row of all `steps` of them (32-bit arithmetic: the
// host keeps steps x clusters under 2^31, and the producer, at 40 registers, has no room for a 64-bit
// division).
__device__ __forceinline__ int sk_range_start(int c, int clusters, int steps) { return steps * c / clusters; }

__device__ __forceinline__ bool work_unit(int i, int c, int clusters, int tiles, int sk_tiles, int sk_parts, int k_tiles,
                                          WorkUnit& w) {
    if (sk_parts > 0 ? sk_parts < 2 || sk_tiles > tiles || sk_tiles * sk_parts > clusters || k_tiles < sk_parts
                     : sk_tiles < clusters || sk_tiles > tiles || (long long)sk_tiles * k_tiles * clusters >= (1ll << 31))
        sk_tiles = 0;  // (runs need P <= sk_tiles <= tiles and 32-bit arithmetic; parts, a cluster each and a k step)
    const int dp_tiles = tiles - sk_tiles;
    const int whole = c < dp_tiles ? (dp_tiles - 1 - c) / clusters + 1 : 0;  // whole tiles of this cluster
    if (i < whole) {
        w.tile = c + i * clusters;
        w.kb = 0;
        w.ke = k_tiles;
        w.ring = (long long)i * k_tiles;
        return true;
    }
    if (sk_tiles == 0) return false;
    if (sk_parts > 0) {
        if (i > whole || c >= sk_tiles * sk_parts) return false;
        const int q = c % sk_parts;
        w.tile = dp_tiles + c / sk_parts;
        w.kb = k_tiles * q / sk_parts;
        w.ke = k_tiles * (q + 1) / sk_parts;
        w.ring = (long long)whole * k_tiles;
        return true;
    }
    const int steps = sk_tiles * k_tiles;
    const int s0 = sk_range_start(c, clusters, steps), s1 = sk_range_start(c + 1, clusters, steps);
    const int t = s0 / k_tiles + (i - whole);  // stream-K tile of this unit
    const int b = t * k_tiles;                 // its first k step in the row of all of them
    if (b >= s1) return false;
    const int lo = max(b, s0), hi = min(b + k_tiles, s1);
    w.tile = dp_tiles + t;
    w.kb = lo - b;
    w.ke = hi - b;
    w.ring = (long long)whole * k_tiles + (lo - s0);
    return true;
}

// ------------------------------------------------------------------------------------------ split-K

// SPLIT_K > 1, for a C of too few tiles to occupy the GPU over a long K: every tile's k steps are cut into
// SPLIT_K slices as even as they go (slice s starts at step s (k_tiles / SPLIT_K) + min(s, k_tiles % SPLIT_K)),
// and the walk is over (slice, tile) units, slice-major: unit u is slice u / tiles_one of tile u % tiles_one
// (w.tile = u, so the product index of the walk is the slice), cluster c taking c, c + P, ... as whole
// tiles are taken. The clusters at work at one time are on the same slice, so they read the same k range
// of A and B, which L2 then serves to the tiles that share it. Each unit stores its fp32 sums to its
// slice's slab of the workspace, and a second launch (wgmma_split_reduce) adds the slabs in slice order
// and applies the epilogue; or, for a few slices (the host says which), the tile's last unit adds them
// (split_last, below) and stores the tile itself.
template <int SPLIT_K>
__device__ __forceinline__ int split_begin(int slice, int k_tiles) {
    return slice * (k_tiles / SPLIT_K) + min(slice, k_tiles % SPLIT_K);
}

// Unit i of cluster c; the ring position is the k steps of its earlier units (slices differ by one step
// at most, so they are summed, not multiplied out).
template <int SPLIT_K>
__device__ __forceinline__ bool split_unit(int i, int c, int clusters, int tiles_one, int k_tiles, WorkUnit& w) {
    const int u = c + i * clusters;
    if (u >= tiles_one * SPLIT_K) return false;
    const int slice = u / tiles_one;
    w.tile = u;
    w.kb = split_begin<SPLIT_K>(slice, k_tiles);
    w.ke = split_begin<SPLIT_K>(slice + 1, k_tiles);
    long long ring = 0;
    for (int j = 0; j < i; ++j) {
        const int sj = (c + j * clusters) / tiles_one;
        ring += split_begin<SPLIT_K>(sj + 1, k_tiles) - split_begin<SPLIT_K>(sj, k_tiles);
    }
    w.ring = ring;
    return true;
}

// ------------------------------------------------------------------------------------------ groups

// BATCHED 2 (grouped products, mixture-of-experts layers): G groups, each a product of its own rows of A (M x K,
// 2-D) with its own matrix of B (a 3-D map, group g at depth g) into the same rows of C. The rows of group g are
// given by `groups`: with group_rows 0, cumulative ends (torch._grouped_mm's offsets): rows [end of g - 1, end of
// g); with group_rows R > 0 (the masked layout, a fixed capacity per group), rows [g R, g R + count of g), the
// count clamped to [0, R]. Ends are clamped too (at least the last group's end, at most M), so no values in
// `groups` send a tile outside A or C. The walk is over every group's cluster tiles, group after group, in the
// grouped order within each; the host does not know how many there are (the groups are on the GPU), so the
// persistent grid walks until a lookup finds no group.
// A lookup (group_tile) is one warp's: lane l reads group cursor.g + 1 + l, the lanes' row ranges and tile
// counts are prefix-scanned by shuffles, and a ballot finds the group of the tile; 32 groups per round, and the
// cursor (the last tile's group) makes a walk's lookups cost about one round each, since a unit's tiles only
// grow. Every lane of the calling warp must take part.
struct GroupCursor {
    int g, first, tiles, row0, rows;  // the group, its first cluster tile, its cluster tiles, first row and rows
};

__device__ __forceinline__ void group_cursor_reset(GroupCursor& c) { c.g = -1, c.first = 0, c.tiles = 0, c.row0 = 0, c.rows = 0; }

template <int BM, int CLUSTER>
__device__ __forceinline__ bool group_tile(int tile, const int* __restrict__ groups, int num_groups, int group_rows,
                                           int M, int tiles_n, GroupCursor& c) {
    const int lane = threadIdx.x % 32;
    while (tile >= c.first + c.tiles) {
        const int gb = c.g + 1;
        if (gb >= num_groups) return false;
        const int gl = gb + lane;
        const int prev_end = c.row0 + c.rows;
        int start, rows;
        if (group_rows > 0) {
            start = gl < num_groups ? (int)min((long long)gl * group_rows, (long long)M) : M;
            rows = gl < num_groups ? min(max(__ldg(groups + gl), 0), min(group_rows, M - start)) : 0;
        } else {
            int end = gl < num_groups ? __ldg(groups + gl) : prev_end;
            end = max(end, prev_end);
#pragma unroll
            for (int d = 1; d < 32; d *= 2) {  // ends never decrease: a running maximum
                const int o = __shfl_up_sync(0xffffffffu, end, d);
                if (lane >= d) end = max(end, o);
            }
            end = min(end, M);
            start = __shfl_up_sync(0xffffffffu, end, 1);
            if (lane == 0) start = prev_end;
            rows = end - start;
        }
        const int tiles = (((rows + BM - 1) / BM) + CLUSTER - 1) / CLUSTER * tiles_n;
        int incl = tiles;
#pragma unroll
        for (int d = 1; d < 32; d *= 2) {
            const int o = __shfl_up_sync(0xffffffffu, incl, d);
            if (lane >= d) incl += o;
        }
        const int first = c.first + c.tiles + incl - tiles;
        const unsigned hit = __ballot_sync(0xffffffffu, tiles > 0 && tile < first + tiles);
        const int from = hit ? __ffs(hit) - 1 : 31;  // the tile's group, or the round's last to go on from
        c.g = gb + from;
        c.first = __shfl_sync(0xffffffffu, first, from);
        c.tiles = __shfl_sync(0xffffffffu, tiles, from);
        c.row0 = __shfl_sync(0xffffffffu, start, from);
        c.rows = __shfl_sync(0xffffffffu, rows, from);
        if (!hit && c.g >= num_groups - 1) return false;
    }
    return true;
}

// ------------------------------------------------------------------------------------------ arrivals

// Row blocks of A that arrive while the kernel runs (gemmlab.distributed: an all-gather whose blocks other GPUs'
// copy engines write into this GPU's A, each followed by a flag). `arrive` (not null): one flag per block of
// arrive_rows rows, block j present once arrive[j] has reached `epoch` (a difference, so the count may wrap).
// The producer waits for the blocks of a tile's rows before it loads them: an acquire at system scope (the flag
// comes over NVLink), then a proxy fence, so the copy engine's reads of A (TMA, the async proxy) come after it.
// A wait of over ten seconds traps (a flag that never comes, say), so a broken exchange fails instead of
// hanging the GPU.
__device__ __forceinline__ unsigned ld_acquire_sys(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return t;
}
__device__ __forceinline__ void wait_rows(const unsigned* __restrict__ arrive, int arrive_rows, unsigned epoch, int row0,
                                          int rows) {
    if (arrive == nullptr || rows <= 0) return;
    const int last = (row0 + rows - 1) / arrive_rows;
    for (int j = row0 / arrive_rows; j <= last; ++j) {
        if ((int)(ld_acquire_sys(arrive + j) - epoch) >= 0) continue;
        const unsigned long long t0 = global_ns();
        while ((int)(ld_acquire_sys(arrive + j) - epoch) < 0) {
            __nanosleep(256);
            if (global_ns() - t0 > 10000000000ull) __trap();
        }
    }
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// Blocks that arrive in pieces (a flag per piece of arrive_rows rows, the pieces of a block pushed one after
// another): the tile order's groups are made no taller than a piece, so that the walk finishes the tiles of
// the rows that have arrived before it needs the next piece's rows (a group as tall as a block would reach
// into the block's last piece with its first tiles). Only where a piece is whole cluster-tile rows.
__device__ __forceinline__ int arrival_group(int group, const unsigned* arrive, int arrive_rows, int span) {
    if (arrive == nullptr || arrive_rows <= 0 || arrive_rows % span != 0) return group;
    const int piece = arrive_rows / span;
    return piece < group ? piece : group;
}

__device__ __forceinline__ void st_release_gpu(int* p, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// A consumer's partial sums of a stream-K tile to its slot of the workspace (float4 q of thread t at
// 128 q + t: a warp's stores are 512 contiguous bytes), then its flag set to tile + 1 (release: the sums
// are visible to whoever reads the flag).
template <int MT, int ACC>
__device__ __forceinline__ void sk_store_partial(float* __restrict__ ws, int* flag, int tile, const float (&acc)[MT][ACC],
                                                 int tid_wg, int barrier) {
    float4* dst = reinterpret_cast<float4*>(ws);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int q = 0; q < ACC / 4; ++q)
            __stcg(dst + (mt * (ACC / 4) + q) * 128 + tid_wg,
                   make_float4(acc[mt][4 * q], acc[mt][4 * q + 1], acc[mt][4 * q + 2], acc[mt][4 * q + 3]));
    __threadfence();
    warpgroup_barrier(barrier);  // every thread's sums are out
    if (tid_wg == 0) st_release_gpu(flag, tile + 1);
}

// The other cluster's partial sums of the tile added to this consumer's (once its flag says tile + 1),
// and the flag cleared for the next launch.
template <int MT, int ACC>
__device__ __forceinline__ void sk_add_partial(const float* __restrict__ ws, int* flag, int tile, float (&acc)[MT][ACC],
                                               int tid_wg, int barrier) {
    if (tid_wg == 0)
        while (ld_acquire_gpu(flag) != tile + 1) __nanosleep(64);
    warpgroup_barrier(barrier);
    const float4* src = reinterpret_cast<const float4*>(ws);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int q = 0; q < ACC / 4; ++q) {
            const float4 v = __ldcg(src + (mt * (ACC / 4) + q) * 128 + tid_wg);
            acc[mt][4 * q] += v.x;
            acc[mt][4 * q + 1] += v.y;
            acc[mt][4 * q + 2] += v.z;
            acc[mt][4 * q + 3] += v.w;
        }
    if (tid_wg == 0) *reinterpret_cast<volatile int*>(flag) = 0;
}

// Split-K summed by the last unit (SPLIT_K > 1, a few slices, where the host passes 1 as the second scalar):
// each consumer's unit stores its partial sums, as stream-K's parts are (each thread its accumulators as
// float4s, 128 threads apart: coalesced, and read back by the same thread of another block), to its slice's
// slot of the tile part's SPLIT_K slots, and counts itself on the part's counter. The unit that arrives last
// (the count says so; it clears the counter for the next launch) adds the slots in slice order, its own
// sums standing in for its slot, and returns true: its accumulators then hold the tile's sums, which the
// usual epilogue stores (TMA stores, bias, activation, residual). The others return false and are done with
// the tile. No unit waits for another, so any number of units per block and any scheduling is safe; the
// sum's order is fixed, so the bits do not depend on which unit came last (and equal the second launch's).
#define SPLIT_LAST_MAX 4  // the most slices split_last adds (the host's SPLIT_LAST_MAX; larger splits build none of it)
template <int MT, int ACC, int SPLIT_K>
__device__ __forceinline__ bool split_last(float* __restrict__ slots, int* counter, int slice, float (&acc)[MT][ACC],
                                           int tid_wg, int barrier, volatile int* last_flag) {
    constexpr int SLOT4 = MT * (ACC / 4) * 128;  // float4s per slot (WG_M x BN floats)
    float4* const mine = reinterpret_cast<float4*>(slots) + (size_t)slice * SLOT4;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int q = 0; q < ACC / 4; ++q)
            __stcg(mine + (mt * (ACC / 4) + q) * 128 + tid_wg,
                   make_float4(acc[mt][4 * q], acc[mt][4 * q + 1], acc[mt][4 * q + 2], acc[mt][4 * q + 3]));
    __threadfence();
    warpgroup_barrier(barrier);  // every thread's sums are out
    if (tid_wg == 0) {
        const bool last = atomicAdd(counter, 1) == SPLIT_K - 1;
        if (last) atomicExch(counter, 0);
        *last_flag = last;
    }
    warpgroup_barrier(barrier);
    if (!*last_flag) return false;  // (read by all before the next unit's first barrier, which precedes its write)
    __threadfence();
    const float4* const all = reinterpret_cast<const float4*>(slots);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int q = 0; q < ACC / 4; ++q) {
            const int i = (mt * (ACC / 4) + q) * 128 + tid_wg;
            const float4 own = make_float4(acc[mt][4 * q], acc[mt][4 * q + 1], acc[mt][4 * q + 2], acc[mt][4 * q + 3]);
            float4 sum = slice == 0 ? own : __ldcg(all + i);
#pragma unroll
            for (int s = 1; s < SPLIT_K; ++s) {
                const float4 v = slice == s ? own : __ldcg(all + s * SLOT4 + i);
                sum.x += v.x;
                sum.y += v.y;
                sum.z += v.z;
                sum.w += v.w;
            }
            acc[mt][4 * q] = sum.x;
            acc[mt][4 * q + 1] = sum.y;
            acc[mt][4 * q + 2] = sum.z;
            acc[mt][4 * q + 3] = sum.w;
        }
    return true;
}

// 8-bit inputs: a consumer's accumulators times their scales, alpha left to the epilogue. `scales`: A's mode in
// bits 0-1, B's in 2-3 (EPI_SCALE_ONE: scale_a[0] / scale_b[0] for the whole matrix; EPI_SCALE_VECTOR: one per
// row of A, scale_a[row], or per column of B, scale_b[col]). Accumulator (mt, 4 j + 2 h + q) of a thread holds
// row acc_row(mt, warp, g, h) and column 8 j + 2 t + q of the consumer's block; rows and columns past the
// matrix take 0 (they are never stored).
template <int MT, int ACC>
__device__ __forceinline__ void scale_accumulators(float (&acc)[MT][ACC], const float* __restrict__ scale_a,
                                                   const float* __restrict__ scale_b, int scales, int row0, int col0,
                                                   int M, int N, int warp, int g, int t) {
    const int mode_a = scales & 3, mode_b = (scales >> 2) & 3;
    const float whole = (mode_a == EPI_SCALE_ONE ? __ldg(scale_a) : 1.0f) * (mode_b == EPI_SCALE_ONE ? __ldg(scale_b) : 1.0f);
    float rs[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + acc_row(mt, warp, g, h);
            rs[mt][h] = mode_a == EPI_SCALE_VECTOR ? (row < M ? __ldg(scale_a + row) * whole : 0.0f) : whole;
        }
    }
    if (mode_b == EPI_SCALE_VECTOR) {
        // Column scales a warp at a time: lane l loads column 32 c + l of each 32 (coalesced, all in flight
        // at once), and the thread of (g, t) takes its columns 8 j + 2 t + q from lane 8 (j % 4) + 2 t + q of
        // chunk j / 4 by shuffle. (One load per column each, in turn, waited on one after another: per-row
        // scales ran at 0.85 of per-tensor ones at 4096^3.)
        const int lane = 4 * g + t;
        float chunk[ACC / 16];
#pragma unroll
        for (int c = 0; c < ACC / 16; ++c) {
            const int col = col0 + 32 * c + lane;
            chunk[c] = col < N ? __ldg(scale_b + col) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < ACC / 4; ++j) {
            const float c0 = __shfl_sync(0xffffffffu, chunk[j / 4], 8 * (j % 4) + 2 * t);
            const float c1 = __shfl_sync(0xffffffffu, chunk[j / 4], 8 * (j % 4) + 2 * t + 1);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    acc[mt][4 * j + 2 * h] *= rs[mt][h] * c0;
                    acc[mt][4 * j + 2 * h + 1] *= rs[mt][h] * c1;
                }
            }
        }
    } else {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int j = 0; j < ACC; ++j) acc[mt][j] *= rs[mt][(j >> 1) & 1];
        }
    }
}

// ------------------------------------------------------------------------------------------ kernel

// BM: rows of C per tile (two consumer warpgroups of BM / 2 rows; BM / 2 = 64 or 128); BN: columns per
// tile (64, 128, 192 or 256); BK is one 128-byte swizzle row (64 fp16/bf16, 32 tf32); STAGES: slots in the TMA
// ring; HELD: slots a consumer holds (1: wait for this slot's own wgmmas, then release it; 2: release the
// previous slot once this one's wgmmas are issued, which keeps the tensor cores queued but holds two
// slots per consumer); SCHEDULE: 1 cooperative, 2 ping-pong (see the header); GROUP_M: tile rows per group of the tile order; A_TYPE: 1 fp16, 2 bf16, 3 tf32 (fp32 storage), 5 e4m3, 6 e5m2; C_TYPE: 1 fp32, 2 fp16,
// 3 bf16; B_LAYOUT: 1 B row-major (K x N, read N-major), 2 B^T given (N x K, read K-major; tf32 needs it),
// 3 tf32 with B row-major: the tile is of C^T = B^T A^T (see SWAP; HELD is then 1); CLUSTER: 1 or 2 blocks
// sharing B; STREAM_K: 1 compiles stream-K for the last rounds of tiles (work_unit; sk_ws, sk_flags, sk_tiles
// and sk_parts from the host, sk_tiles 0 for none), 0 not (those four arguments are then unused).
// Tensor maps: tmap_a over A (M x K) in boxes of BM rows x BK; tmap_b over B (K x N) in boxes of BK rows
// x 64 columns (BK / CLUSTER rows where BN / 64 chunks do not split evenly over the cluster), or with
// B_LAYOUT 2 over B^T (N x K) in boxes of BN / CLUSTER rows x BK. With B_LAYOUT 3 the roles swap: tmap_a
// over B (K x N) in boxes of BK rows x 32 columns, tmap_b over A (M x K) in boxes of BN / CLUSTER rows x BK.
// A and B pointers are unused by the main loop (the maps carry them) and kept for the common argument list.
template <int BM, int BN, int STAGES, int HELD, int SCHEDULE, int GROUP_M, int A_TYPE, int C_TYPE, int B_LAYOUT, int CLUSTER,
          int STREAM_K, int DEFER, int BATCHED, int SPLIT_K, int PROMOTE>
__device__ __forceinline__ void
wgmma_body(int M, int N, int K, float alpha, int lda, int ldb, float beta, typename Out<C_TYPE>::T* __restrict__ C,
           int ldc, const float* __restrict__ bias, const typename Out<C_TYPE>::T* __restrict__ R, int ldr, int epilogue,
           const TensorMap& tmap_a, const TensorMap& tmap_b, const TensorMap& tmap_c, float* __restrict__ sk_ws,
           int* __restrict__ sk_flags, int sk_tiles_arg, int sk_parts, int batch, long long sa, long long sb, long long sc,
           long long sr, const float* __restrict__ scale_a, const float* __restrict__ scale_b, int sa_rs, int sa_ks,
           int sb_ks, int sb_cs, const int* __restrict__ groups, int group_rows, int bias_gs,
           const unsigned* __restrict__ arrive, int arrive_rows, unsigned arrive_epoch, int arrive_shift) {
    typedef typename Out<C_TYPE>::T OutT;
    constexpr bool FP8 = A_TYPE == 5 || A_TYPE == 6;
    constexpr int ELEM = A_TYPE == 3 ? 4 : FP8 ? 1 : 2;  // bytes per input element (tf32 travels as fp32)
    constexpr int BK = 128 / ELEM;               // one 128-byte swizzle row: 64 fp16/bf16, 32 tf32, 128 e4m3/e5m2
    constexpr int KSTEP = 32 / ELEM;             // k per wgmma: 16 (fp16/bf16), 8 (tf32), 32 (8-bit): 32 bytes each
    // 8-bit inputs' scales (above the epilogue's own flags): applied to the accumulators once a unit's k steps
    // are done, before anything else sees them (stream-K's and split-K's partial sums included: they add up).
    const int scales = epilogue >> EPI_SCALE_SHIFT;
    epilogue &= EPI_FLAGS_MASK;
    // B_LAYOUT 3 (SWAP): the tile is of D = C^T = B^T A^T: the wgmma's A is B^T, read from B's N-major tile into
    // registers, and its B is A^T, which is A read K-major (as B^T is with B_LAYOUT 2). Rows of a tile are
    // columns of C (N), its columns rows of C (M).
    constexpr bool SWAP = B_LAYOUT == 3;
    constexpr bool B_KMAJOR = B_LAYOUT != 1;     // the wgmma's B operand read K-major (B^T given, or A^T)
    static_assert(B_LAYOUT >= 1 && B_LAYOUT <= 3, "B_LAYOUT: 1 row-major K x N, 2 K-major (B^T given, N x K), 3 swapped (tf32)");
    static_assert(A_TYPE != 3 || B_KMAJOR, "tf32 wgmma reads B K-major only (B_LAYOUT 2 or 3)");
    static_assert(!FP8 || B_LAYOUT == 2, "8-bit wgmma reads B K-major only: B^T given (B_LAYOUT 2)");
    // PROMOTE 1 (8-bit inputs with block scales): each k step's products go, 128 columns at a time, to a fresh
    // partial accumulator (64 x 128 per consumer), which is added into the fp32 sums times that step's scales
    // (A's per row of the 1 x 128 block, B's per 128 x 128 block) once its wgmmas complete. With 256-column
    // tiles a consumer holds 128 sums and 64 partials, so the deferred stores' 64 registers do not fit (DEFER 0).
    constexpr bool PROMOTE_STEPS = PROMOTE == 1;
    static_assert(PROMOTE == 0 || PROMOTE == 1, "PROMOTE: 0 or 1");
    static_assert(!PROMOTE_STEPS || (FP8 && (BN == 128 || BN == 256) && SCHEDULE == 1 && BM == 128 &&
                                     (BN == 128 || DEFER == 0)),
                  "PROMOTE 1 is for 8-bit inputs on 128 x 128 or (DEFER 0) 128 x 256 tiles, cooperative");
    static_assert(!SWAP || A_TYPE == 3, "B_LAYOUT 3 (operands swapped) is the tf32 path for a row-major B");
    // With A in registers, a k step's fragments must stay untouched until its wgmmas complete: one slot held.
    constexpr int HOLD = SWAP ? 1 : HELD;
    constexpr int CONSUMERS = 2;
    constexpr bool PINGPONG = SCHEDULE == 2;     // 1: cooperative, 2: ping-pong
    // STREAM_K 1: stream-K for the last tiles (work_unit), where the host passes sk_tiles > 0; cooperative
    // schedule only (ping-pong consumers take alternate whole tiles). sk_ws holds one WG_M x BN slot of
    // partial sums per consumer of each block. STREAM_K 0 compiles none of it.
    constexpr bool SK = STREAM_K == 1 && !PINGPONG;
    static_assert(STREAM_K == 0 || STREAM_K == 1, "STREAM_K: 0 or 1");
    static_assert(DEFER == 0 || DEFER == 1, "DEFER: 0 or 1");
    static_assert(BATCHED >= 0 && BATCHED <= 2, "BATCHED: 0, 1 (a batch) or 2 (groups)");
    // BATCHED 2: grouped products (group_tile): A and C 2-D, B a 3-D map of `batch` groups; the group's rows
    // bound its stores, its bias is bias + g bias_gs, and (8-bit inputs) its scale of B scale_b + g sb_ks.
    constexpr bool GROUPS = BATCHED == 2;
    static_assert(!GROUPS || (!SWAP && PROMOTE == 0 && SPLIT_K == 1),
                  "BATCHED 2 (groups) goes without the swapped tf32 path, block scales and split-K");
    // SPLIT_K > 1: split-K (split_unit); its sums go to the slabs in sk_ws, never to C (no stream-K or batch
    // with it: the host keeps those apart).
    static_assert(SPLIT_K >= 1, "SPLIT_K: 1 (no split) or the number of slices");
    static_assert(SPLIT_K == 1 || (STREAM_K == 0 && BATCHED == 0), "SPLIT_K > 1 goes without stream-K and a batch");
    // BATCHED 1: `batch` products, the tiles of one after another's in the walk; the maps are 3-D (the matrix
    // is the third coordinate; an operand every product shares, stride 0, is always matrix 0), C and R are
    // offset by their strides. No stream-K (the host passes no stream-K tiles with a batch).
    const int sk_tiles = SK && !BATCHED ? sk_tiles_arg : 0;
    // SPLIT_K > 1: the second scalar says who sums the slices: 1, the tile's last unit (split_last); 0, the
    // second launch.
    const bool last_sums = SPLIT_K > 1 && SPLIT_K <= SPLIT_LAST_MAX && sk_parts == 1;
    constexpr int WG_M = PINGPONG ? BM : BM / CONSUMERS;  // rows per consumer warpgroup (all of a tile in ping-pong)
    constexpr int MT = WG_M / 64;                // m64 wgmma tiles per consumer
    constexpr int ACC = BN / 2;                  // fp32 accumulators per thread per m64 tile
    constexpr int A_BYTES = BM * 128;            // BM rows of 128 bytes (BK elements)
    constexpr int B_CHUNK = BK * 128;            // N-major B: BK k-rows of 64 columns (128 bytes), one TMA box
    constexpr int A_CHUNK = BK * 128;            // SWAP: B's tile in boxes of BK k-rows x 32 columns (128 bytes)
    constexpr int B_BYTES = BN * 128;            // either layout: BK x BN elements
    constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    // The epilogue's shared memory per consumer, after the ring: the staged path's WG_M x EPI_PITCH floats, or
    // (16-bit outputs) the TMA store's two boxes of WG_M x 128 bytes, whichever is larger.
    constexpr bool TMA_STORE = SWAP ? C_TYPE == 1 : C_TYPE != 1;  // what store_tma(_transposed) can write
    // DEFER 1: a tile's TMA stores are issued during the next tile's first k steps, one box after each step's
    // wgmmas, behind them (cooperative schedule, 16-bit outputs through store_tma; elsewhere DEFER changes
    // nothing).
    constexpr bool DEFERRED = DEFER == 1 && !PINGPONG && !SWAP && TMA_STORE;
    constexpr int BOXES = BN / 64;               // 64-column boxes of the TMA-store epilogue per tile
    constexpr int EPI_REGION = WG_M * (TMA_STORE && 256 > EPI_PITCH * 4 ? 256 : EPI_PITCH * 4);
    static_assert(WG_M == 64 || WG_M == 128, "a consumer warpgroup takes 64 or 128 rows (BM = 128 or 256 cooperative, 64 or 128 ping-pong)");
    static_assert(SCHEDULE == 1 || SCHEDULE == 2, "SCHEDULE: 1 (consumers split each tile) or 2 (ping-pong)");
    static_assert(BN == 128 || BN == 256 || (BN == 192 && A_TYPE <= 2) || (BN == 64 && A_TYPE != 3),
                  "BN must be 128 or 256 (192: fp16 / bf16; 64: fp16 / bf16 and 8-bit)");
    static_assert(MT * ACC <= 128, "at most 128 accumulators per consumer thread (BM x BN <= 128 x 256)");
    static_assert(STAGES >= 2, "the TMA ring needs at least two slots");
    static_assert(HELD == 1 || HELD == 2, "HELD: 1 or 2 slots per consumer");
    static_assert(A_TYPE >= 1 && A_TYPE <= 6 && A_TYPE != 4, "A_TYPE: 1 fp16, 2 bf16, 3 tf32, 5 e4m3, 6 e5m2");
    static_assert(!FP8 || BATCHED != 1, "8-bit inputs: one product per launch, or groups");
    static_assert(C_TYPE >= 1 && C_TYPE <= 3, "C_TYPE: 1 fp32, 2 fp16, 3 bf16");
    static_assert(CLUSTER == 1 || CLUSTER == 2, "CLUSTER: 1 or 2 blocks");
    // With a cluster, each block copies 1 / CLUSTER of the B tile and multicasts it to all blocks.
    // A row-major B goes by whole 64-column chunks where they split evenly over the cluster, else (BN 192)
    // by k rows of every chunk (B_SPLIT_ROWS; the map's box is then BK / CLUSTER rows).
    constexpr bool B_SPLIT_ROWS = !B_KMAJOR && CLUSTER > 1 && (BN / 64) % CLUSTER != 0;
    static_assert(B_KMAJOR ? (BN / CLUSTER) % 8 == 0 : (BN / 64) % CLUSTER == 0 || (BK / CLUSTER) % 8 == 0,
                  "B must split evenly over the cluster");

    // STAGES x (A tile, B tile), then one EPI_REGION per consumer, + 1024 bytes of alignment slack.
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long full_bar[STAGES], empty_bar[STAGES];
    // Ping-pong: consumer c may start a tile's main loop once the other one has taken every slot of the
    // tile before (an mbarrier wait by parity is only right when the waiter is at most one phase ahead).
    __shared__ __align__(8) unsigned long long order_bar[2];
    __shared__ int split_last_flag[2];  // split_last: whether a consumer's unit came last
    // The 128-byte swizzle repeats every 1024 bytes; the tiles start on such a boundary.
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;

    // Clusters of CLUSTER blocks take CLUSTER vertically adjacent tiles (one cluster tile) at a time: the
    // same columns of B, rows of A of their own. The walk is over cluster tiles; with an odd tile-row
    // count the last cluster tiles have a block below the matrix, which computes on a repeated A and
    // stores nothing.
    // Computed by each role after its setmaxnreg (values live across it are spilled under the 168-register
    // cap of the launch bounds); `opaque` keeps the compiler from hoisting them above it.
#define WGMMA_TILE_WALK                                                                          \
    const int tiles_m = (opaque(SWAP ? N : M) + BM - 1) / BM;                                     \
    const int tiles_n = (opaque(SWAP ? M : N) + BN - 1) / BN;                                     \
    const int ctiles_m = (tiles_m + CLUSTER - 1) / CLUSTER, tiles_one = ctiles_m * tiles_n;       \
    const int tiles = GROUPS ? (1 << 30) : tiles_one * (BATCHED ? opaque(batch) : SPLIT_K);      \
    const int group = arrival_group(GROUP_M / CLUSTER > 0 ? GROUP_M / CLUSTER : 1, arrive, arrive_rows,  \
                                    BM * CLUSTER);                                                \
    const int k_tiles = (opaque(K) + BK - 1) / BK;                                                \
    const int rank = CLUSTER > 1 ? (int)cluster_rank() : 0;                                       \
    const int cluster_id = opaque(blockIdx.x) / CLUSTER, clusters = opaque(gridDim.x) / CLUSTER;
    // The warpgroup, through a shuffle from lane 0: the compiler then knows it is the same in every lane of a
    // warp, so what is derived from it (the consumer's rows of A and their wgmma descriptors) stays in the
    // uniform registers that wgmma reads its descriptors from.
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0), tid_wg = threadIdx.x % 128;
#ifdef GEMMLAB_TRACE
    if (threadIdx.x == 0) {
        TRACE_BLOCK(0, trace_globaltimer());
        TRACE_BLOCK(1, clock64());
        TRACE_BLOCK(2, trace_smid());
    }
#endif
    // A split's second launch (its programmatic dependent) may be scheduled from now on: its blocks take SMs
    // this grid leaves free and wait in grid_dependency_wait for this grid's sums, so its launch is not
    // paid after this grid's last block.
    if constexpr (SPLIT_K > 1) {
        if (!last_sums) grid_dependents_launch();
    }

    if (threadIdx.x == 0) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(smem_u32(&full_bar[s]), 1);                  // the producer's arrive (+ TMA bytes)
            // one arrive per consuming warp of every block of the cluster (all of them read this slot's B)
            mbar_init(smem_u32(&empty_bar[s]), (PINGPONG ? 1 : CONSUMERS) * 4 * CLUSTER);
        }
        mbar_init(smem_u32(&order_bar[0]), 4);  // one arrive per warp of the other consumer
        mbar_init(smem_u32(&order_bar[1]), 4);
        fence_mbar_init();
    }
    if constexpr (CLUSTER > 1)
        cluster_sync();  // the other blocks' barriers exist before anything is copied or arrived on there
    else
        __syncthreads();

    if (wg == 0) {
        // ---------------------------------------------------------------- producer warpgroup
        setmaxnreg_dec<40>();
        WGMMA_TILE_WALK
        // (groups: the first warp walks, each lookup is a warp's (group_tile), and its first thread issues the copies)
        if ((GROUPS ? tid_wg < 32 : tid_wg == 0) && k_tiles > 0) {
            int s = 0;
            unsigned phase = 0;
            WorkUnit w;
            GroupCursor gc;
            group_cursor_reset(gc);
            for (int i = 0; SPLIT_K > 1 ? split_unit<SPLIT_K>(i, cluster_id, clusters, tiles_one, k_tiles, w)
                                        : work_unit(i, cluster_id, clusters, tiles, sk_tiles, sk_parts, k_tiles, w);
                 ++i) {
                int tile_row, tile_col, m0;
                // the product, or with split-K the slice, or the group (0 with none of them)
                int bz = BATCHED == 1 || SPLIT_K > 1 ? w.tile / tiles_one : 0;
                if constexpr (GROUPS) {
                    if (!group_tile<BM, CLUSTER>(w.tile, groups, batch, group_rows, M, tiles_n, gc)) break;
                    const int g_tiles_m = (gc.rows + BM - 1) / BM;
                    bz = gc.g;
                    grouped_tile_of(w.tile - gc.first, (g_tiles_m + CLUSTER - 1) / CLUSTER, tiles_n, group, tile_row,
                                    tile_col);
                    tile_row = min(tile_row * CLUSTER + rank, g_tiles_m - 1);  // a block below the group repeats A
                    m0 = gc.row0 + tile_row * BM;
                } else {
                    grouped_tile_of(w.tile - bz * tiles_one, ctiles_m, tiles_n, group, tile_row, tile_col);
                    if (arrive_shift > 0) tile_row = (tile_row + arrive_shift) % ctiles_m;  // arriving rows: own first
                    tile_row = min(tile_row * CLUSTER + rank, tiles_m - 1);  // a block below the matrix repeats A
                    m0 = tile_row * BM;
                    if (arrive != nullptr) wait_rows(arrive, arrive_rows, arrive_epoch, m0, min(BM, M - m0));
                }
                const int n0 = tile_col * BN;
                // the matrices of the two maps (-1: 2-D maps); tmap_a is over B when the roles swap; groups: A 2-D
                const int za = BATCHED == 1 ? ((SWAP ? sb : sa) != 0 ? bz : 0) : -1;
                const int zb = BATCHED ? ((SWAP ? sa : sb) != 0 ? bz : 0) : -1;
                if (GROUPS && tid_wg != 0) continue;  // (the walking warp's other lanes take part in lookups only)
                // A residual added box by box on the TMA stores (not deferred): its rows into L2 RESIDUAL_LEAD k
                // steps before the unit's last (at its first on a shorter unit).
                constexpr bool RESIDUAL_PREFETCH = TMA_STORE && !DEFERRED && !SWAP && !GROUPS && SPLIT_K == 1;
                const int residual_at =
                    RESIDUAL_PREFETCH && (epilogue & EPI_RESIDUAL) && R != nullptr ? max(w.kb, w.ke - RESIDUAL_LEAD) : -1;
                for (int kt = w.kb; kt < w.ke; ++kt) {
                    mbar_wait(smem_u32(&empty_bar[s]), phase ^ 1);  // a fresh barrier passes parity 1 at once
                    const unsigned full = smem_u32(&full_bar[s]);
                    mbar_arrive_expect_tx(full, STAGE_BYTES);
                    const unsigned a_dst = base + s * STAGE_BYTES, b_dst = a_dst + A_BYTES;
                    if constexpr (SWAP) {  // BM columns of B (rows of the tile), 32 at a time
#pragma unroll
                        for (int c = 0; c < BM / 32; ++c) tma_load(a_dst + c * A_CHUNK, &tmap_a, m0 + c * 32, kt * BK, za, full);
                    } else {
                        tma_load(a_dst, &tmap_a, kt * BK, m0, za, full);
                    }
                    if constexpr (CLUSTER == 1) {
                        if constexpr (B_KMAJOR) {
                            tma_load(b_dst, &tmap_b, kt * BK, n0, zb, full);  // BN rows of B^T, BK k each
                        } else {
#pragma unroll
                            for (int c = 0; c < BN / 64; ++c) tma_load(b_dst + c * B_CHUNK, &tmap_b, n0 + c * 64, kt * BK, zb, full);
                        }
                    } else {
                        // This block's share of B, to every block of the cluster (each one's `full` counts the
                        // whole stage: its own A and all shares of B).
                        constexpr unsigned short ALL = (1u << CLUSTER) - 1;
                        if constexpr (B_KMAJOR) {
                            constexpr int ROWS = BN / CLUSTER;  // rows of B^T per share (the map's box)
                            tma_load_multicast(b_dst + rank * ROWS * 128, &tmap_b, kt * BK, n0 + rank * ROWS, zb, full, ALL);
                        } else if constexpr (B_SPLIT_ROWS) {
                            // Chunks that do not split evenly over the cluster (BN 192): each block copies its
                            // BK / CLUSTER k rows of every chunk (whole 8-row swizzle groups, so the layout is
                            // the one a whole chunk's copy writes).
                            constexpr int ROWS = BK / CLUSTER;
#pragma unroll
                            for (int c = 0; c < BN / 64; ++c)
                                tma_load_multicast(b_dst + c * B_CHUNK + rank * ROWS * 128, &tmap_b, n0 + c * 64,
                                                   kt * BK + rank * ROWS, zb, full, ALL);
                        } else {
                            constexpr int SHARE = BN / 64 / CLUSTER;
#pragma unroll
                            for (int c = rank * SHARE; c < (rank + 1) * SHARE; ++c)
                                tma_load_multicast(b_dst + c * B_CHUNK, &tmap_b, n0 + c * 64, kt * BK, zb, full, ALL);
                        }
                    }
                    if constexpr (RESIDUAL_PREFETCH) {
                        if (kt == residual_at) prefetch_tile_l2<BM, BN>(BATCHED == 1 ? R + bz * sr : R, ldr, m0, M, n0, N);
                    }
                    if (++s == STAGES) {
                        s = 0;
                        phase ^= 1;
                    }
                }
            }
        }
    } else {
        // ---------------------------------------------------------------- consumer warpgroups
        setmaxnreg_inc<232>();
        const int cw = wg - 1;
        const int warp = tid_wg / 32, lane = tid_wg % 32;
        float acc[MT][ACC];
        // Accumulator layout of m64nN: warp w holds rows 16 w + g and 16 w + g + 8 (g = lane / 4); register
        // 4 j + q is column 8 j + 2 t + (q & 1) (t = lane % 4), row + 8 for q >= 2.
        const int g = lane / 4, t = lane % 4;
        int started = 0;  // tiles this consumer has begun
        // DEFER: the last tile's packed outputs, its place in C, and how many of its boxes are still to be
        // stored (BOXES after its epilogue, one fewer after each k step of the next tile).
        unsigned held[DEFERRED ? BOXES : 1][MT][2][8];
        int held_boxes = 0, held_row = 0, held_col = 0, held_z = -1;
        const unsigned epi_buf = base + STAGES * STAGE_BYTES + cw * EPI_REGION;
        // The next held box (box BOXES - held_boxes), a compile-time index into `held`.
        auto store_next = [&]() {
            if constexpr (DEFERRED) {
                const int next = BOXES - held_boxes;
#pragma unroll
                for (int cb = 0; cb < BOXES; ++cb)
                    if (next == cb)
                        store_box<MT, BOXES>(&tmap_c, epi_buf, held[cb], cb, held_row, held_col, warp, g, t, tid_wg, 1 + cw, -1,
                                      held_z);
                --held_boxes;
            }
        };
        // A slot is handed back to the producers of every block of the cluster (they all wrote into it).
        auto release = [&](int slot) {
            if constexpr (CLUSTER == 1) {
                mbar_arrive(smem_u32(&empty_bar[slot]));
            } else {
#pragma unroll
                for (int r = 0; r < CLUSTER; ++r) mbar_arrive_cluster(smem_u32(&empty_bar[slot]), r);
            }
        };
        GroupCursor gc;  // groups: the group of this consumer's last tile (group_tile)
        group_cursor_reset(gc);
        for (int i = PINGPONG ? cw : 0;; i += PINGPONG ? 2 : 1, ++started) {
#ifdef GEMMLAB_TRACE
            if (tid_wg == 0 && started > 0) TRACE_UNIT(cw, started - 1, 4, clock64());  // the last epilogue issued
#endif
            WGMMA_TILE_WALK  // per tile: nothing of it stays live across the epilogue
            WorkUnit w;  // (ping-pong: the block's i-th tile, whichever consumer takes it)
            if (!(SPLIT_K > 1 ? split_unit<SPLIT_K>(i, cluster_id, clusters, tiles_one, k_tiles, w)
                              : work_unit(i, cluster_id, clusters, tiles, sk_tiles, sk_parts, k_tiles, w))) {
                if constexpr (DEFERRED) {
                    while (held_boxes > 0) store_next();  // the consumer's last tile
                }
                break;
            }
            const int tile = w.tile, kb = w.kb, ke = w.ke;
#ifdef GEMMLAB_TRACE
            if (tid_wg == 0) {
                TRACE_UNIT(cw, started, 0, trace_globaltimer());
                TRACE_UNIT(cw, started, 1, clock64());
                TRACE_UNIT(cw, started, 5, tile);
                TRACE_UNIT(cw, started, 6, kb);
                TRACE_UNIT(cw, started, 7, ke);
            }
#endif
            int tile_row, tile_col;
            int bz = BATCHED == 1 || SPLIT_K > 1 ? tile / tiles_one : 0;  // the product, slice or group (0: none)
            int row_base = 0, m_end = M;  // the tile rows' first row and the end of its rows (groups: the group's)
            if constexpr (GROUPS) {
                if (!group_tile<BM, CLUSTER>(tile, groups, batch, group_rows, M, tiles_n, gc)) {
                    if constexpr (DEFERRED) {
                        while (held_boxes > 0) store_next();  // the consumer's last tile
                    }
                    break;
                }
                const int g_tiles_m = (gc.rows + BM - 1) / BM;
                bz = gc.g, row_base = gc.row0, m_end = gc.row0 + gc.rows;
                grouped_tile_of(tile - gc.first, (g_tiles_m + CLUSTER - 1) / CLUSTER, tiles_n, group, tile_row, tile_col);
            } else {
                grouped_tile_of(tile - bz * tiles_one, ctiles_m, tiles_n, group, tile_row, tile_col);
                if (arrive_shift > 0) tile_row = (tile_row + arrive_shift) % ctiles_m;
            }
            tile_row = tile_row * CLUSTER + rank;  // may be below the matrix (or group): nothing is stored
            // Ring position: the unit's k steps took the slots after the w.ring the block's earlier units
            // took from the producer, whichever consumer takes them.
            int s = (int)(w.ring % STAGES);
            unsigned phase = (unsigned)((w.ring / STAGES) & 1);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int r = 0; r < ACC; ++r) acc[mt][r] = 0.0f;
            int prev = -1;
            if (PINGPONG && (cw == 1 || started > 0))  // the other consumer has taken all slots of tile i - 1
                mbar_wait(smem_u32(&order_bar[cw]), (unsigned)((cw == 0 ? started - 1 : started) & 1));
#ifdef GEMMLAB_TRACE
            if (ke > kb) {  // (the main loop waits for this phase again; it has completed, so that returns at once)
                mbar_wait(smem_u32(&full_bar[s]), phase);
                if (tid_wg == 0) TRACE_UNIT(cw, started, 2, clock64());
            }
#endif
            if constexpr (SWAP) {
                // B^T's fragments, read out of each slot's N-major tile of B into registers, two k steps' worth
                // held at once: those of the next slot are read while this slot's wgmmas run. Element (row r, k)
                // of the tile is B's (k, column r): 32-column box r / 32, k-row k, 16-byte piece (r % 32) / 4
                // XOR k % 8 (the 128-byte swizzle), float r % 4. With r = (the consumer's first row) + 64 mt +
                // 16 warp + g + 8 h and k = 8 kk + t + 4 e, what varies with mt and kk is whole boxes and whole
                // 8-row swizzle periods: compile-time offsets from four per-thread addresses.
                unsigned frag_off[2][2];
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int rl = warp * 16 + g + 8 * h, kl = t + 4 * e;
                        frag_off[h][e] = (PINGPONG ? 0 : cw * WG_M / 32 * A_CHUNK) + (rl / 32) * A_CHUNK + kl * 128 +
                                         ((((rl % 32) >> 2) ^ kl) << 4) + (rl & 3) * 4;
                    }
                typedef unsigned Frags[MT][BK / KSTEP][4];
                Frags fa, fb;
                auto load = [&](Frags& f, int slot) {
                    const unsigned tile = base + slot * STAGE_BYTES;
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                        for (int kk = 0; kk < BK / KSTEP; ++kk)
#pragma unroll
                            for (int q = 0; q < 4; ++q)  // q = 2 e + h: (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)
                                f[mt][kk][q] = lds32(tile + frag_off[q % 2][q / 2] + mt * 2 * A_CHUNK + kk * KSTEP * 128);
                };
                // One slot: its wgmmas (fragments in `cur`), the next slot's fragments into `nxt` while they run,
                // then the wait for them and the slot handed back.
                const unsigned long long desc_b0 = smem_desc(base + A_BYTES, 16, 1024);  // slot 0's A^T, K-major
                auto step = [&](Frags& cur, Frags& nxt, int kt) {
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) fence_accumulators(acc[mt]);
                    wgmma_fence();
#pragma unroll
                    for (int kk = 0; kk < BK / KSTEP; ++kk) {
                        const unsigned long long desc_b = desc_add(desc_add(desc_b0, s * STAGE_BYTES), kk * 32);
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) wgmma_step_rs_tf32<BN>(acc[mt], cur[mt][kk], desc_b);
                    }
                    wgmma_commit();
                    const int ns = s + 1 == STAGES ? 0 : s + 1;
                    const unsigned nphase = s + 1 == STAGES ? phase ^ 1 : phase;
                    if (kt + 1 < ke) {
                        mbar_wait(smem_u32(&full_bar[ns]), nphase);
                        load(nxt, ns);
                    }
                    wgmma_wait<0>();
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        fence_accumulators(acc[mt]);
#pragma unroll
                        for (int kk = 0; kk < BK / KSTEP; ++kk) fence_fragment(cur[mt][kk]);
                    }
                    if (lane == 0) release(s);
                    s = ns;
                    phase = nphase;
                };
                if (ke > kb) {
                    mbar_wait(smem_u32(&full_bar[s]), phase);
                    load(fa, s);
                }
                for (int kt = kb; kt < ke; kt += 2) {  // two slots per trip: the fragment arrays alternate
                    step(fa, fb, kt);
                    if (kt + 1 < ke) step(fb, fa, kt + 1);
                }
            }
            // Slot 0's descriptors: this consumer's rows of A (rows of 128 bytes, 8-row groups 1024 bytes apart),
            // and B (N-major: 64-column chunks B_CHUNK apart as the leading byte offset, 8-row groups 1024 bytes
            // apart; K-major: laid out like A).
            const unsigned long long desc_a0 = smem_desc(base + (PINGPONG ? 0 : cw * WG_M * 128), 16, 1024);
            const unsigned long long desc_b0 = smem_desc(base + A_BYTES, B_KMAJOR ? 16 : B_CHUNK, 1024);
            // PROMOTE: a k step's scales (A's for this consumer's rows, B's for the tile's 128 columns; 1 where that
            // operand's scale is not per block), loaded one step ahead, under the step before.
            constexpr int HALVES = PROMOTE_STEPS ? BN / 128 : 1;  // 128-column pieces of a step, promoted in turn
            float part[PROMOTE_STEPS ? MT : 1][PROMOTE_STEPS ? 64 : 1];
            // B's scales are spread over the lanes (even lanes the first 128 columns, odd ones the next, unused
            // on 128-column tiles) and passed by shuffle where they are used: a load every lane shares goes to a
            // uniform register, and the compiler waited for it where it landed, a whole L2 latency before each
            // step's wgmmas. Each thread's
            // rows of A's scales and its lane's column block of B's are found once a unit (null where that
            // operand's scale is not per block, or the row or block lies past the matrix: scale 1).
            float sa_next[MT][2], sb_next;
            const bool a_blocks = ((scales & 3) == EPI_SCALE_BLOCK), b_blocks = (((scales >> 2) & 3) == EPI_SCALE_BLOCK);
            const float* sa_row[MT][2];
            const float* sb_col = nullptr;
            if constexpr (PROMOTE_STEPS) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int row = tile_row * BM + cw * WG_M + acc_row(mt, warp, g, h);
                        sa_row[mt][h] = a_blocks && row < M ? scale_a + (long long)row * sa_rs : nullptr;
                    }
                const int cb_lane = tile_col * (BN / 128) + (lane & 1);
                if (b_blocks && cb_lane * 128 < N) sb_col = scale_b + (long long)cb_lane * sb_cs;
            }
            auto load_step_scales = [&](int kt) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        sa_next[mt][h] = sa_row[mt][h] != nullptr ? __ldg(sa_row[mt][h] + (long long)kt * sa_ks) : 1.0f;
                sb_next = sb_col != nullptr ? __ldg(sb_col + (long long)kt * sb_ks) : 1.0f;
            };
            if (PROMOTE_STEPS && ke > kb) load_step_scales(kb);
            for (int kt = kb; kt < (SWAP ? kb : ke); ++kt) {  // (B_LAYOUT 3 ran its own loop above)
                mbar_wait(smem_u32(&full_bar[s]), phase);
                const unsigned long long desc_a1 = desc_add(desc_a0, s * STAGE_BYTES);
                const unsigned long long desc_b1 = desc_add(desc_b0, s * STAGE_BYTES);
                if constexpr (PROMOTE_STEPS) {
                    float f[MT][2][HALVES];
#pragma unroll
                    for (int hn = 0; hn < HALVES; ++hn) {
                        const float sb = __shfl_sync(0xffffffffu, sb_next, hn);
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                            for (int h = 0; h < 2; ++h) f[mt][h][hn] = sa_next[mt][h] * sb;
                    }
                    if (kt + 1 < ke) load_step_scales(kt + 1);
#pragma unroll
                    for (int hn = 0; hn < HALVES; ++hn) {
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) fence_accumulators(part[mt]);
                        wgmma_fence();
#pragma unroll
                        for (int kk = 0; kk < BK / KSTEP; ++kk) {
                            // K-major B: columns 128 hn ... of the tile are rows 128 hn ... of 128 bytes
                            const unsigned long long desc_b = desc_add(desc_b1, hn * 128 * 128 + kk * 32);
#pragma unroll
                            for (int mt = 0; mt < MT; ++mt) {
                                const unsigned long long desc_a = desc_add(desc_a1, mt * 64 * 128 + kk * 32);
                                if (kk == 0)
                                    wgmma_fresh_fp8_n128<A_TYPE>(part[mt], desc_a, desc_b);
                                else
                                    wgmma_step<128, A_TYPE, 0>(part[mt], desc_a, desc_b);
                            }
                        }
                        wgmma_commit();
                        if constexpr (DEFERRED) {
                            if (hn == 0 && held_boxes > 0) store_next();
                        }
                        wgmma_wait<0>();  // these sums are complete: promote them (the slot back after the last)
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) fence_accumulators(part[mt]);
                        if (hn == HALVES - 1 && lane == 0) release(s);
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                            for (int r = 0; r < 64; ++r)
                                acc[mt][64 * hn + r] = fmaf(part[mt][r], f[mt][(r >> 1) & 1][hn], acc[mt][64 * hn + r]);
                    }
                    if (++s == STAGES) {
                        s = 0;
                        phase ^= 1;
                    }
                    continue;
                }
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) fence_accumulators(acc[mt]);
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK / KSTEP; ++kk) {
                    // N-major B: KSTEP k-rows further is KSTEP x 128 bytes into each chunk; K-major B and A:
                    // 32 bytes further per k step (the swizzle is applied by the hardware on the final address).
                    const unsigned long long desc_b = desc_add(desc_b1, B_KMAJOR ? kk * 32 : kk * KSTEP * 128);
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        const unsigned long long desc_a = desc_add(desc_a1, mt * 64 * 128 + kk * 32);
                        wgmma_step<BN, A_TYPE, B_KMAJOR ? 0 : 1>(acc[mt], desc_a, desc_b);
                    }
                }
                wgmma_commit();
                if constexpr (DEFERRED) {
                    if (held_boxes > 0) store_next();  // the last tile's stores while these wgmmas run
                }
                if constexpr (HOLD == 2) {
                    wgmma_wait<1>();  // the previous slot's wgmmas are done: hand that slot back
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) fence_accumulators(acc[mt]);
                    if (prev >= 0 && lane == 0) release(prev);
                    prev = s;
                } else {
                    wgmma_wait<0>();  // this slot's wgmmas are done: hand it back at once
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) fence_accumulators(acc[mt]);
                    if (lane == 0) release(s);
                }
                if (++s == STAGES) {
                    s = 0;
                    phase ^= 1;
                }
            }
            if (PINGPONG && lane == 0) mbar_arrive(smem_u32(&order_bar[1 - cw]));  // the other may start
            wgmma_wait<0>();
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) fence_accumulators(acc[mt]);
            if (prev >= 0 && lane == 0) release(prev);
            if constexpr (DEFERRED) {
                while (held_boxes > 0) store_next();  // a unit of fewer k steps than boxes
            }
            if constexpr (FP8) {
                // (block scales were applied step by step: what is left is a scale per tensor, row or column)
                const int whole_scales = (a_blocks ? 0 : scales & 3) | (b_blocks ? 0 : scales & 12);
                if (whole_scales != 0)
                    scale_accumulators<MT, ACC>(acc, scale_a, GROUPS ? scale_b + (long long)bz * sb_ks : scale_b,
                                                whole_scales, row_base + tile_row * BM + (PINGPONG ? 0 : cw * WG_M),
                                                tile_col * BN, M, N, warp, g, t);
            }
#ifdef GEMMLAB_TRACE
            if (tid_wg == 0) TRACE_UNIT(cw, started, 3, clock64());
#endif

            // A tile shared with the next clusters (stream-K): each that took a later part (kb > 0) hands its
            // sums over and is done with it; the one that took the first (kb = 0) adds them, in cluster order
            // (one other with runs, sk_parts - 1 with parts), and writes C.
            if (SK && (kb > 0 || ke < k_tiles)) {
                if (kb > 0) {
                    const int slot = (int)blockIdx.x * CONSUMERS + cw;
                    sk_store_partial<MT, ACC>(sk_ws + (size_t)slot * WG_M * BN, sk_flags + slot, tile, acc, tid_wg, 1 + cw);
                    continue;
                }
                const int sharers = sk_parts > 0 ? sk_parts : 2;
                for (int q = 1; q < sharers; ++q) {
                    const int slot = ((cluster_id + q) * CLUSTER + rank) * CONSUMERS + cw;
                    sk_add_partial<MT, ACC>(sk_ws + (size_t)slot * WG_M * BN, sk_flags + slot, tile, acc, tid_wg, 1 + cw);
                }
            }

            // Split-K, a few slices: the tile part's last unit adds the others' sums and goes on to the epilogue;
            // the others are done. Else the unit's sums, as they are, to its slice's slab of C (M rows of N rounded
            // up to 4 floats; a pair of columns at an odd N's edge lands in the padding), and the second launch
            // does the rest.
            if constexpr (SPLIT_K > 1) {
                if (SPLIT_K <= SPLIT_LAST_MAX && last_sums) {
                    // (larger splits instantiate split_last with one slice: never called, nothing unrolled)
                    constexpr int LAST_SLICES = SPLIT_K <= SPLIT_LAST_MAX ? SPLIT_K : 1;
                    const int part =
                        ((tile % tiles_one) * CLUSTER + rank) * (PINGPONG ? 1 : CONSUMERS) + (PINGPONG ? 0 : cw);
                    if (!split_last<MT, ACC, LAST_SLICES>(sk_ws + (size_t)part * SPLIT_K * WG_M * BN, sk_flags + part,
                                                          bz, acc, tid_wg, 1 + cw, &split_last_flag[cw]))
                        continue;
                } else {
                    const int row_first = tile_row * BM + (PINGPONG ? 0 : cw * WG_M), col0 = tile_col * BN;
                    const int ldw = (N + 3) & ~3;
                    float* const slab = sk_ws + (size_t)bz * M * ldw;
                    if constexpr (SWAP)  // a tile of C^T: its rows are columns of C
                        store_transposed<1, MT, ACC>(slab, ldw, row_first, col0, N - row_first, M - col0, acc, 1.0f,
                                                     0.0f, nullptr, nullptr, 0, 0, warp, g, t);
                    else
                        store_direct<1, MT, ACC>(slab, ldw, row_first, col0, M - row_first, N - col0, acc, 1.0f, 0.0f,
                                                 warp, g, t);
                    continue;
                }
            }

            // Epilogue (the producer is already filling slots for the next tile). Plain, or a linear layer's:
            // straight from the registers. (Whether C and R allow 2-element accesses is computed here, not
            // kept in registers across the main loop.)
            const int row_first = row_base + tile_row * BM + (PINGPONG ? 0 : cw * WG_M);
            // the product's C and R (and the third coordinate of C's map: -1, a 2-D map, without a batch)
            OutT* const Cz = BATCHED == 1 ? C + bz * sc : C;
            const OutT* const Rz = BATCHED == 1 ? R + bz * sr : R;
            const int zc = BATCHED == 1 ? bz : -1;
            // groups: the group's bias; its rows end at m_end (a tile past them, below the group, stores nothing;
            // one that ends inside them stores from the registers, bounded there, unless C ends there too)
            const float* const bias_t = GROUPS && bias != nullptr ? bias + (long long)bz * bias_gs : bias;
            if (GROUPS && m_end - row_first <= 0) continue;
            const bool tma_rows = !GROUPS || m_end - row_first >= WG_M || m_end >= M;
            if constexpr (SWAP && TMA_STORE) {  // fp32 C, beta == 0, no flags, a map of C: through TMA stores
                if (tmap_c.opaque[0] != 0 && beta == 0.0f && epilogue == 0) {
                    store_tma_transposed<MT, ACC>(&tmap_c, base + STAGES * STAGE_BYTES + cw * EPI_REGION, row_first,
                                                  tile_col * BN, acc, alpha, warp, g, t, tid_wg, 1 + cw, zc);
                    continue;
                }
            }
            if constexpr (SWAP) {  // rows of the tile are columns of C
                store_transposed<C_TYPE, MT, ACC>(Cz, ldc, row_first, tile_col * BN, N - row_first, M - tile_col * BN, acc,
                                                  alpha, beta, bias_t, Rz, ldr, epilogue, warp, g, t);
                continue;
            }
            // 16-bit outputs with beta == 0 and no residual, where the host encoded a map of C (its rows 16-byte
            // aligned): through shared memory and the copy engine (store_tma).
            // (DEFER: GELU with erf goes to the stores from registers below, which take 32 elements' activations
            // at a time; its box of 64 beside the held outputs of the deferred stores runs out of registers.)
            if constexpr (TMA_STORE && !SWAP) {
                // A residual whose rows allow pairs is added box by box as the tile is stored, in builds without
                // deferred stores (DEFER 0, which the host picks for calls with a residual: beside the deferred
                // stores' held outputs its loads spilled); with DEFER 1 it takes the stores from registers.
                const typename Out<C_TYPE>::T* res_r =
                    !DEFERRED && (epilogue & EPI_RESIDUAL) && pairs_aligned(Rz, opaque(ldr)) ? Rz : nullptr;
                if (tma_rows && tmap_c.opaque[0] != 0 && beta == 0.0f && (!(epilogue & EPI_RESIDUAL) || res_r != nullptr) &&
                    !(DEFERRED && ((epilogue >> EPI_ACT_SHIFT) & EPI_ACT_MASK) == EPI_ACT_GELU_ERF)) {
                    const unsigned buf = epi_buf;
                    const int col0 = tile_col * BN, rows_left = m_end - row_first, cols_left = N - col0;
                    const int bias_mode = epilogue & EPI_BIAS_MASK;
                    if constexpr (DEFERRED) {
#define PACK_AS(ACT_, BIAS_)                                                                                        \
    pack_tile<C_TYPE, MT, ACC, ACT_, BIAS_>(held, row_first, col0, rows_left, cols_left, acc, alpha, bias_t, bias_mode, \
                                            warp, g, t, tid_wg, cw, started)
// (the bias's kind compiled in: no per-element sum of a zero row and a column bias; fp16's exponential GELU
// and SiLU keep the one form, which the register file holds beside stream-K's values)
#define PACK(ACT_)                                                                             \
    if constexpr (C_TYPE == 2 && (ACT_ == EPI_ACT_GELU_TANH || ACT_ == EPI_ACT_SILU)) {        \
        PACK_AS(ACT_, BIAS_EITHER);                                                            \
    } else {                                                                                   \
        if (bias_mode == EPI_BIAS_COL)                                                         \
            PACK_AS(ACT_, EPI_BIAS_COL);                                                       \
        else if (bias_mode == EPI_BIAS_ROW)                                                    \
            PACK_AS(ACT_, EPI_BIAS_ROW);                                                       \
        else                                                                                   \
            PACK_AS(ACT_, 0);                                                                  \
    }
                        switch ((epilogue >> EPI_ACT_SHIFT) & EPI_ACT_MASK) {
                            case EPI_ACT_RELU: PACK(EPI_ACT_RELU); break;
                            case EPI_ACT_GELU_TANH: PACK(EPI_ACT_GELU_TANH); break;
                            case EPI_ACT_SILU: PACK(EPI_ACT_SILU); break;
                            default: PACK(0);
                        }
#undef PACK_AS
#undef PACK
                        held_boxes = BOXES, held_row = row_first, held_col = col0, held_z = zc;
                        continue;
                    }
                    switch ((epilogue >> EPI_ACT_SHIFT) & EPI_ACT_MASK) {
                        case EPI_ACT_RELU:
                            store_tma<C_TYPE, MT, ACC, EPI_ACT_RELU>(&tmap_c, buf, row_first, col0, rows_left, cols_left,
                                                                     acc, alpha, bias_t, bias_mode, warp, g, t, tid_wg, 1 + cw, started, res_r, ldr, zc);
                            break;
                        case EPI_ACT_GELU_TANH:
                            store_tma<C_TYPE, MT, ACC, EPI_ACT_GELU_TANH>(&tmap_c, buf, row_first, col0, rows_left,
                                                                          cols_left, acc, alpha, bias_t, bias_mode, warp, g,
                                                                          t, tid_wg, 1 + cw, started, res_r, ldr, zc);
                            break;
                        case EPI_ACT_GELU_ERF:
                            store_tma<C_TYPE, MT, ACC, EPI_ACT_GELU_ERF>(&tmap_c, buf, row_first, col0, rows_left,
                                                                         cols_left, acc, alpha, bias_t, bias_mode, warp, g,
                                                                         t, tid_wg, 1 + cw, started, res_r, ldr, zc);
                            break;
                        case EPI_ACT_SILU:
                            store_tma<C_TYPE, MT, ACC, EPI_ACT_SILU>(&tmap_c, buf, row_first, col0, rows_left, cols_left,
                                                                     acc, alpha, bias_t, bias_mode, warp, g, t, tid_wg, 1 + cw, started, res_r, ldr, zc);
                            break;
                        default:
                            if (bias_mode != 0)
                                store_tma<C_TYPE, MT, ACC, 0>(&tmap_c, buf, row_first, col0, rows_left, cols_left, acc,
                                                              alpha, bias_t, bias_mode, warp, g, t, tid_wg, 1 + cw, started, res_r, ldr, zc);
                            else
                                store_tma<C_TYPE, MT, ACC, 0, 0>(&tmap_c, buf, row_first, col0, rows_left, cols_left,
                                                                     acc, alpha, bias_t, bias_mode, warp, g, t, tid_wg,
                                                                     1 + cw, started, res_r, ldr, zc);
                    }
                    continue;
                }
            }
            // Plain or fused from the registers, else staged (wgmma_store.cuh).
            float* stage = reinterpret_cast<float*>(smem_raw + (base - smem_u32(smem_raw)) + STAGES * STAGE_BYTES +
                                                    cw * EPI_REGION);
            if constexpr (GROUPS && TMA_STORE) {
                // (the staged path writes the region the TMA stores read their boxes from: those reads done first)
                if (tid_wg == 0) bulk_wait_read<0>();
                warpgroup_barrier(1 + cw);
            }
            store_registers<C_TYPE, MT, ACC>(Cz, ldc, m_end, N, row_first, tile_col * BN, acc, alpha, beta, bias_t, Rz,
                                             ldr, epilogue, stage, 1 + cw, warp, g, t, tid_wg);
        }
    }
    // The consumers' TMA stores are complete (their shared-memory boxes read, C written) before the block ends.
    if constexpr (TMA_STORE) {
        if (wg > 0 && tid_wg == 0) bulk_wait<0>();
    }
    // No block may leave while another can still copy into its shared memory or arrive on its barriers.
    if constexpr (CLUSTER > 1) cluster_sync();
#ifdef GEMMLAB_TRACE
    if (wg > 0 && tid_wg == 0) {  // each consumer's exit: fields 3, 4 (the first), 5, 6 (the second)
        TRACE_BLOCK(1 + 2 * wg, trace_globaltimer());
        TRACE_BLOCK(2 + 2 * wg, clock64());
    }
#endif
#undef WGMMA_TILE_WALK
}

// The kernel, twice: without a cluster (an ordinary launch) and with CLUSTER blocks per cluster (declared
// at compile time, so an ordinary launch call starts clusters). Template arguments pick one of the two.
template <bool COND>
struct EnableIf {};
template <>
struct EnableIf<true> {
    typedef void type;
};

#define WGMMA_PARAMS                                                                                              \
    int M, int N, int K, float alpha, const void* __restrict__ A, int lda, const void* __restrict__ B, int ldb,     \
        float beta, typename Out<C_TYPE>::T* __restrict__ C, int ldc, const float* __restrict__ bias,                \
        const typename Out<C_TYPE>::T* __restrict__ R, int ldr, int epilogue, const __grid_constant__ TensorMap tmap_a, \
        const __grid_constant__ TensorMap tmap_b, const __grid_constant__ TensorMap tmap_c, float* __restrict__ sk_ws,    \
        int* __restrict__ sk_flags, int sk_tiles, int sk_parts, int batch, long long sa, long long sb, long long sc, long long sr, \
        const float* __restrict__ scale_a, const float* __restrict__ scale_b, int sa_rs, int sa_ks, int sb_ks, int sb_cs, \
        const int* __restrict__ groups, int group_rows, int bias_gs, const unsigned* __restrict__ arrive,        \
        int arrive_rows, unsigned arrive_epoch, int arrive_shift
#define WGMMA_BODY                                                                                                 \
    wgmma_body<BM, BN, STAGES, HELD, SCHEDULE, GROUP_M, A_TYPE, C_TYPE, B_LAYOUT, CLUSTER, STREAM_K, DEFER, BATCHED, SPLIT_K, \
               PROMOTE>(        \
        M, N, K, alpha, lda, ldb, beta, C, ldc, bias, R, ldr, epilogue, tmap_a, tmap_b, tmap_c, sk_ws, sk_flags, sk_tiles,  \
        sk_parts, batch, sa, sb, sc, sr, scale_a, scale_b, sa_rs, sa_ks, sb_ks, sb_cs, groups, group_rows, bias_gs, arrive, arrive_rows, \
        arrive_epoch, arrive_shift)

template <int BM, int BN, int STAGES, int HELD, int SCHEDULE, int GROUP_M, int A_TYPE, int C_TYPE, int B_LAYOUT, int CLUSTER,
          int STREAM_K, int DEFER, int BATCHED, int SPLIT_K, int PROMOTE>
__global__ typename EnableIf<CLUSTER == 1>::type __launch_bounds__(384, 1) wgmma_gemm(WGMMA_PARAMS) {
    WGMMA_BODY;
}

template <int BM, int BN, int STAGES, int HELD, int SCHEDULE, int GROUP_M, int A_TYPE, int C_TYPE, int B_LAYOUT, int CLUSTER,
          int STREAM_K, int DEFER, int BATCHED, int SPLIT_K, int PROMOTE>
__global__ typename EnableIf<CLUSTER != 1>::type __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(384, 1)
    wgmma_gemm(WGMMA_PARAMS) {
    WGMMA_BODY;
}

// Split-K's second launch (SPLIT_K > 1): the slabs' sums in slice order, then the epilogue, over all of C
// (split_sum_epilogue, epilogue.cuh).
template <int C_TYPE, int LANES>
__global__ void __launch_bounds__(SPLIT_REDUCE_THREADS)
    wgmma_split_reduce(int M, int N, int slices, float alpha, float beta, typename Out<C_TYPE>::T* __restrict__ C, int ldc,
                       const float* __restrict__ ws, const float* __restrict__ bias,
                       const typename Out<C_TYPE>::T* __restrict__ R, int ldr, int epilogue) {
    grid_dependency_wait();  // launched as the split's programmatic dependent: the slabs are complete after this
    split_sum_epilogue<C_TYPE, LANES>(M, N, slices, alpha, beta, C, ldc, ws, bias, R, ldr, epilogue);
}
