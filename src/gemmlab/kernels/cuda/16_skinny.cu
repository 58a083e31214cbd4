// Rung 16 - skinny: small M (decoding), where the product is a read of B. Every warp streams its own columns
// of B once through a ring in shared memory, split over K; tensor cores on C^T = B^T A^T.
//
// Idea: with M = 1 ... 64 rows of A (the tokens of a decoding step) and B the weights, a GEMM does 2 M
// flops per element of B: far too few to be limited by the tensor cores. The time is the bytes of B over
// the DRAM bandwidth, so the kernel is built to keep DRAM busy and do little else:
// - Enough bytes in flight. DRAM needs about bandwidth x latency in flight (3.35 TB/s x ~2 us: ~50 KB
//   per SM). Registers cannot hold that beside the accumulators (a first version that loaded B straight
//   into registers, double-buffered, peaked at 2.6 TB/s and held 1.6-1.8 TB/s for a transposed weight);
//   shared memory can. Each warp has its own ring of STAGES slots filled with cp.async (L1 bypassed: B is
//   read once), STAGES - 1 groups of UNROLL x 32 k in flight while it computes on the oldest, and needs
//   only __syncwarp, no block barrier, to hand slots round.
// - Whole lines: a warp-wide copy reads 128 contiguous bytes of each of 4 rows (B^T given) or k-rows
//   (row-major), so DRAM pages are read in runs, not in 64-byte scraps.
// - The tensor core's roles are swapped (C^T = B^T A^T): B's columns fill the m16 side of
//   mma.m16n8k16, A's rows the n8 side, so M = 1 wastes 7 / 8 of a small MMA instead of 15 / 16 of a
//   large one, and the MMAs cost little next to the copies.
// - Any permutation of k, applied alike to both operands, leaves the sum unchanged. The fragments are
//   assigned to k so that each is one shared-memory read as stored: for B^T given (B_LAYOUT 2, N x K, the
//   weight of a linear layer) a lane's 8 consecutive k of one column of B are (a0, a2) of one MMA and (a0,
//   a2) of the next, and A's rows are read the same way (b0, b1); for a row-major B (B_LAYOUT 1, K x N) a
//   lane reads 2 NT consecutive columns of 4 consecutive k-rows and pairs rows k, k + 1 with one byte
//   permute per fragment register (prmt). A's rows sit in a shared-memory panel, zero-padded.
// - Columns of C (rows of the swapped tile) are assigned in adjacent pairs (fragment rows g and g + 8 are
//   columns 2c and 2c + 1), so every lane ends with (row m, columns n, n + 1) pairs: one 4- or 8-byte
//   store through the shared epilogue (epilogue.cuh), alpha, beta * C, bias, activation and residual.
// - Split-K across blocks (grid.y = SPLIT slices of K, so that N x M alone need not fill the GPU): every
//   block writes its fp32 partial sums to a workspace (coalesced float4), the last block of a column of
//   blocks to finish (an atomic counter) adds the SPLIT partials in a fixed order (the result does not
//   depend on which block finished last), applies the epilogue and resets the counter for the next launch.
// - Rows of A beyond MT: grid.z tiles of MT rows (correct for any M; built for M <= MT).
// - Or a persistent grid (SCHED 1) where the slices of K would take more than one wave of blocks: each block
//   takes an equal run of (item, group) units across the items and keeps its ring full from one item into
//   the next; an item cut by a run is added from its parts in block order (stream-K, still repeatable).
// - On Hopper the copy engine can fill the slots instead of every lane (COPY 1-3: one bulk copy per row of a
//   slot, completed on an mbarrier per slot; COPY 3 brings A's rows along and needs no shared panel).
// - Strict fp32 (A_TYPE 4) on the CUDA cores, the same ring, panel, split and epilogue: each lane owns one
//   or two columns of C (two lanes share a column with NT = 1, taking alternate groups of 4 k, added by a
//   shuffle), and per 4 k does a float4 of its column of B, a float4 broadcast of each row of A and 4 FMAs
//   per row. A slot holds 64 UNROLL bytes of a row whatever the type (16 UNROLL fp32 k).
// Changed from rung 11: swapped operands, a private ring per warp instead of block tiles, split-K (or
// stream-K) with an in-kernel reduction, no ldmatrix (the fragments are read as stored).
// Traffic: B read once per tile of MT rows; A once per block (its panels); the partial sums (SPLIT x M x N
// fp32) written and read once, through L2.
// Bottleneck left: DRAM bandwidth for B (the goal); at M = 64 the MMAs and the shared-memory reads become a
// real share of the issue slots.
// Predicted (before the first measurement of the ring): weights streamed at 2.8-3.0 TB/s (85-90% of the
// 3.35 TB/s datasheet) for M <= 16 when B is 128 MB or more; 1.0-1.2 x cuBLAS. Measured (H100, B^T given, L2
// flushed by a read): 1.7-2.6 TB/s at M = 1, 0.83-0.95 x cuBLAS (which reads them at 1.8-2.8); M = 16
// 0.79-0.86. The copy engine (predicted to cut the instructions per byte tenfold and reach 2.6-2.9 TB/s)
// measured the same as cp.async or slower, so it is not the default; a pure read of the same pattern reaches
// 2.7-2.9 TB/s. fp32: 0.95-1.10 x cuBLAS at M = 1, 1.12-1.29 at M = 16. docs/journal.md has each version.

#include "common.cuh"
#include "epilogue.cuh"
#include "hopper.cuh"
#include "mma.cuh"

// W consecutive 32-bit words of A (W = 1, 2, 4: 4, 8 or 16 bytes, aligned to their size), which every warp
// of a column of blocks reads again: kept in L1.
template <int W>
__device__ __forceinline__ void load_shared_use(unsigned (&r)[W], const bits16* p) {
    if constexpr (W == 4) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
        r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
    } else if constexpr (W == 2) {
        const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
        r[0] = v.x, r[1] = v.y;
    } else {
        r[0] = __ldg(reinterpret_cast<const unsigned*>(p));
    }
}

// 2 W consecutive 16-bit elements p[0 .. 2W) of which those at index >= `left` are read as zero (the
// edge of a row): the slow path, only at the edges of the matrix.
template <int W>
__device__ __forceinline__ void load_edge(unsigned (&r)[W], const bits16* p, int left) {
#pragma unroll
    for (int w = 0; w < W; ++w) {
        const unsigned lo = 2 * w < left ? p[2 * w] : 0u;
        const unsigned hi = 2 * w + 1 < left ? p[2 * w + 1] : 0u;
        r[w] = lo | (hi << 16);
    }
}

template <int W>
__device__ __forceinline__ void zero(unsigned (&r)[W]) {
#pragma unroll
    for (int w = 0; w < W; ++w) r[w] = 0u;
}

// One pair of outputs through the shared epilogue, not inlined: inlined 2 x NT x MT / 8 times, its
// activation code kept ptxas from unrolling the loop around it, and the accumulators went to local memory.
template <int C_TYPE>
__device__ __noinline__ void epilogue_call(typename Out<C_TYPE>::T* __restrict__ C, int ldc, int m, int n, bool pair,
                                           float v0, float v1, float alpha, float beta, const float* __restrict__ bias,
                                           const typename Out<C_TYPE>::T* __restrict__ R, int ldr, int epilogue,
                                           bool vec_c, bool vec_r) {
    epilogue_pair<C_TYPE>(C, ldc, m, n, pair, v0, v1, alpha, beta, bias, R, ldr, epilogue, vec_c, vec_r);
}

// 16 bytes global -> shared, bypassing L1 (B is read once); of them the first src_bytes (0..16) are read and
// the rest written as zero.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// The element type of input code A_TYPE: 16-bit raw bits for fp16 / bf16 (1, 2), float for strict fp32 (4,
// on the CUDA cores: this rung's fp32 path).
template <int A_TYPE> struct Elem { typedef bits16 T; };
template <> struct Elem<4> { typedef float T; };

// Elements p[0 .. W) of a 16-byte piece as raw words (16-bit: 2 per word), those at index >= `left` zero.
__device__ __forceinline__ void load_edge_elems(unsigned (&r)[4], const bits16* p, int left) { load_edge<4>(r, p, left); }
__device__ __forceinline__ void load_edge_elems(unsigned (&r)[4], const float* p, int left) {
#pragma unroll
    for (int w = 0; w < 4; ++w) r[w] = w < left ? __float_as_uint(p[w]) : 0u;
}

// Shared-memory geometry, in bytes, shared with skinny.py (smem_bytes): a warp's slot of the ring holds one
// group (GK = 64 UNROLL bytes of k: UNROLL chunks of 32 16-bit k, or 16 UNROLL fp32 k) of its 16 NT columns
// of B, elements of EB bytes. B^T given: 16 NT rows of 64 UNROLL bytes, pitch + 32 for 16-bit (rows 2 apart
// 64 bytes apart in the banks: a phase of 16-byte reads, rows 2g + h and 4 lanes each, is conflict-free),
// + 16 for fp32 (8 consecutive rows of a phase in 8 distinct 16-byte bank groups). Row-major: GK k-rows of
// 16 NT EB bytes, pitch + 16.
// With COPY 3 the slot also holds the group's k of AROWS rows of A after B's rows (pitch APITCH elements,
// padded as the panel's rows are).
template <int NT, int UNROLL, bool KMAJOR, int EB, int AROWS>
struct Slot {
    static constexpr int GK = 64 * UNROLL / EB;  // k per group
    static constexpr int ROW_BYTES = KMAJOR ? GK * EB : 16 * NT * EB;
    static constexpr int PITCH = ROW_BYTES + (KMAJOR && EB == 2 ? 32 : 16);
    static constexpr int ROWS = KMAJOR ? 16 * NT : GK;
    static constexpr int A_OFF = PITCH * ROWS;  // bytes: where A's rows start
    static constexpr int APITCH = GK + (EB == 4 ? 4 : KMAJOR ? 32 : 16);  // elements
    static constexpr int BYTES = A_OFF + AROWS * APITCH * EB;
    static constexpr int PER_ROW = ROW_BYTES / 16;  // 16-byte copies per row
    static constexpr int PIECES = ROWS * PER_ROW;
};

// MT: rows of A per block (16-bit: n8 tiles of the swapped MMA, MT / 8). NT: 16 NT columns of C per warp
// (16-bit: m16 tiles). WARPS: warps per block, side by side over N. UNROLL: chunks of 32 k per group (one
// slot of a warp's ring). STAGES: slots per warp. COPY: who fills a slot: 0, every lane, 16 bytes per
// cp.async; 1, the copy engine, one bulk copy per row of the slot (where the kernel is compiled for sm_90 or
// later, K is a whole number of 16-byte pieces and the slot's rows hold 128 bytes or more; elsewhere it takes
// COPY 0's path); 2, as 1 with B marked evict-first in L2; 3, as 1 with the group's k of A's rows copied into
// the slot too (each warp its own: no shared panel of A, no block barrier in the main loop). SCHED: how work is dealt to blocks: 0, a grid of
// (column blocks, SPLIT slices of K, tiles of MT rows); 1, a persistent grid of SPLIT blocks, each taking an
// equal run of groups across the items (stream-K; see below). A_TYPE 1 fp16, 2 bf16 (tensor cores), 4 fp32
// (CUDA cores, strict). B_LAYOUT 1: B row-major (K x N, ldb >= N); 2: B^T given (N x K, row pitch ldb).
template <int MT, int NT, int WARPS, int UNROLL, int STAGES, int COPY, int SCHED, int A_TYPE, int C_TYPE,
          int B_LAYOUT>
__global__ void __launch_bounds__(WARPS * 32) skinny_gemm(
    int M, int N, int K, float alpha, const typename Elem<A_TYPE>::T* __restrict__ A, int lda,
    const typename Elem<A_TYPE>::T* __restrict__ B, int ldb, float beta, typename Out<C_TYPE>::T* __restrict__ C,
    int ldc, const float* __restrict__ bias, const typename Out<C_TYPE>::T* __restrict__ R, int ldr, int epilogue,
    float* __restrict__ ws, int* __restrict__ counters) {
    static_assert(MT % 8 == 0 && MT >= 8, "MT: whole n8 tiles");
    static_assert(NT == 1 || NT == 2 || NT == 4, "NT: 16, 32 or 64 columns of C per warp");
    static_assert(B_LAYOUT == 1 || B_LAYOUT == 2, "B_LAYOUT: 1 row-major, 2 B^T given");
    static_assert(A_TYPE == 1 || A_TYPE == 2 || A_TYPE == 4, "A_TYPE: 1 fp16, 2 bf16, 4 fp32");
    static_assert(STAGES >= 2, "STAGES: a ring of at least two slots");
    static_assert(COPY >= 0 && COPY <= 3, "COPY: 0 cp.async, 1 bulk copies, 2 evicting B first, 3 A in the slot");
    static_assert(SCHED == 0 || SCHED == 1, "SCHED: 0 a grid of slices, 1 persistent stream-K");
    typedef typename Elem<A_TYPE>::T E;
    constexpr bool F32 = A_TYPE == 4;
    constexpr int EB = sizeof(E), EPP = 16 / EB;  // bytes per element, elements per 16-byte piece
    constexpr bool KMAJOR = B_LAYOUT == 2;
    constexpr int KC = 32;        // k per chunk (16-bit: two m16n8k16 steps); splits are whole chunks
    constexpr int G = 64 * UNROLL / EB;  // k per group: 16-bit, UNROLL chunks; fp32, half as many k
    constexpr int J = MT / 8;     // n8 tiles over the rows of A
    constexpr int NTHREADS = WARPS * 32;
    // fp32: a lane's columns of C (RPL) and the lanes that share one (LPR), of the warp's 16 NT.
    constexpr int LPR = 16 * NT >= 32 ? 1 : 32 / (16 * NT), RPL = 16 * NT >= 32 ? 16 * NT / 32 : 1;
    constexpr int NACC = F32 ? RPL * MT : NT * J * 4;  // fp32 accumulators per thread
    constexpr bool A_SLOT = COPY == 3;
    typedef Slot<NT, UNROLL, KMAJOR, EB, A_SLOT ? MT : 0> S;
    static_assert(S::GK == G, "the slot holds one group");
    // A panel of XK k: about 16 KB of shared memory, a whole number of pairs of groups (skinny.panel_k).
    constexpr int XK = (16384 / EB / MT) / (2 * G) > 0 ? (16384 / EB / MT) / (2 * G) * (2 * G) : 2 * G;
    constexpr int XP = XK + (F32 ? 4 : KMAJOR ? 32 : 16);  // row pitch in elements
    constexpr int GK_BYTES = G * EB;  // a group's k of one row of A, in bytes

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    // The schedule. An item is a block's columns (WARPS x 16 NT) and a tile of MT rows of A; a segment, the
    // part of an item's K one block computes, the k of [kb, ke).
    // - SCHED 0: one segment per block: columns blockIdx.x, rows blockIdx.z, slice blockIdx.y of gridDim.y
    //   (slices of whole chunks: chunk boundaries never fall inside one, only K's end).
    // - SCHED 1 (persistent): the work is U units, a unit one group (G k) of one item, and block b of the
    //   P blocks takes units [U b / P, U (b + 1) / P): a run of groups from the end of one item into
    //   the next, so every block streams the same number of bytes of B and its ring never drains between
    //   items. An item cut by the run's ends is a sum of partials (below).
    const int col_blocks = (N + WARPS * 16 * NT - 1) / (WARPS * 16 * NT);
    const int kgroups = max(1, (K + G - 1) / G);  // (K = 0: one empty group, so that C is still written)
    const long long units = (long long)col_blocks * ((M + MT - 1) / MT) * kgroups;
    // Runs of P = min(gridDim.x, U) blocks, so that none is empty (an empty part would never arrive); blocks
    // from P on have nothing to do.
    const long long P = min((long long)gridDim.x, units);
    auto unit_start = [&](long long b) { return b >= P ? units : units * b / P; };  // SCHED 1
    auto block_of = [&](long long u) { return (int)min(P - 1, ((u + 1) * P - 1) / units); };  // whose run holds u
    const long long u_begin = SCHED ? unit_start(blockIdx.x) : 0, u_end = SCHED ? unit_start(blockIdx.x + 1) : 0;
    const int splits = gridDim.y;  // SCHED 0
    const int kper = ((K + splits - 1) / splits + KC - 1) / KC * KC;
    int n_warp = (blockIdx.x * WARPS + warp) * 16 * NT, m0 = blockIdx.z * MT;  // the current segment's
    int kb = min(K, (int)blockIdx.y * kper), ke = min(K, kb + kper);

    float accf[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) accf[i] = 0.0f;
    // Views of them: 16-bit, MMA fragments (NT x J x 4); fp32, columns x rows of A (RPL x MT). Each view is
    // used only where it covers accf exactly.
    float(&acc)[NT][J][4] = *reinterpret_cast<float(*)[NT][J][4]>(accf);
    float(&acc32)[RPL][MT] = *reinterpret_cast<float(*)[RPL][MT]>(accf);

    // 16-bit: the columns of C this lane's fragment rows g and g + 8 stand for: n_pair(i) and n_pair(i) + 1.
    auto n_pair = [&](int i) { return KMAJOR ? n_warp + 16 * i + 2 * g : n_warp + 2 * NT * g + 2 * i; };
    // fp32: column q of this lane's (RPL of them, within the warp's), and the share of k it takes (sub).
    const int own = lane / LPR, sub = lane % LPR;
    auto col32 = [&](int q) { return own + q * (32 / LPR); };

    // Shared memory: the panel of A (MT x XP elements), then each warp's ring of STAGES slots, then (COPY
    // 1-3) each warp's STAGES mbarriers, one per slot, on which its bulk copies complete.
    extern __shared__ __align__(16) unsigned char smem[];
    E* xs = reinterpret_cast<E*>(smem);
    unsigned char* ring = smem + MT * XP * EB + warp * STAGES * S::BYTES;

    // The copy engine fills the slots (`bulk`) where it can: compiled for sm_90 or later, rows of the slot of
    // at least 128 bytes (B^T given: every slot; row-major, 16 NT columns of 16-bit or 32 of fp32 elements
    // and more), K a whole number of 16-byte pieces (so every row's run is) and, row-major, N too. The same
    // decision for every warp, made once.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr bool BULK = COPY != 0 && (KMAJOR || S::ROW_BYTES >= 128);
#else
    constexpr bool BULK = false;
#endif
    const bool bulk = BULK && K % EPP == 0 && (KMAJOR || N % EPP == 0);
    const bool a_slot = A_SLOT && bulk;  // A's rows come with each group (else from the shared panel)
    const unsigned bars = smem_u32(smem + MT * XP * EB + WARPS * STAGES * S::BYTES) + 8 * warp * STAGES;
    if constexpr (BULK) {
        if (lane == 0) {
#pragma unroll
            for (int q = 0; q < STAGES; ++q) mbar_init(bars + 8 * q, 1);  // lane 0's arrive (+ the copies' bytes)
            fence_mbar_init();
        }
        __syncwarp();
    }

    // A's rows m0 .. m0 + MT, a panel of XK k from p0, zero outside M x [kb, ke) (the weights there are
    // zero too, and 0 x garbage could be NaN). Row pitch XP: the eight 16-byte reads of a B^T-given phase
    // (rows g, g + 1, 64 bytes each) and the sixteen 8-byte reads of a row-major one (four rows, 32 bytes
    // each) fall into distinct banks; fp32 reads are broadcasts.
    auto load_panel = [&](int p0) {
        const int pieces = MT * (XK / EPP);
        for (int e = threadIdx.x; e < pieces; e += NTHREADS) {
            const int r = e / (XK / EPP), c = (e % (XK / EPP)) * EPP;
            const int m = m0 + r, k = p0 + c;
            unsigned v[4];
            if (m >= M || k >= ke) zero<4>(v);
            else if (k + EPP <= ke) load_shared_use<4>(v, reinterpret_cast<const bits16*>(A + (size_t)m * lda + k));
            else load_edge_elems(v, A + (size_t)m * lda + k, ke - k);
            *reinterpret_cast<uint4*>(&xs[r * XP + c]) = make_uint4(v[0], v[1], v[2], v[3]);
        }
    };

    // The copies of one group (k0 .. k0 + G) into a slot: consecutive lanes take consecutive 16-byte pieces
    // of a row (B^T given: a row's 32 UNROLL elements; row-major: a k-row's 16 NT columns), so a warp-wide
    // copy reads whole runs of a row. A lane's pieces sit at the same place of every group: their shared-
    // memory offsets and source addresses are computed once and the sources advance by a group (G k) per
    // step. Outside N x [kb, ke): zero (src-size 0), checked only in groups that reach an edge.
    constexpr int PER_LANE = S::PIECES / 32;
    static_assert(S::PIECES % 32 == 0, "a slot's pieces split evenly over the lanes");
    unsigned dst_off[PER_LANE];
    const E* src0[PER_LANE];
    int lim_n[PER_LANE], off_k[PER_LANE];  // the piece's column of B (bounds N), its k within a group
#pragma unroll
    for (int q = 0; q < PER_LANE; ++q) {
        const int e = lane + 32 * q;
        const int row = e / S::PER_ROW, col = e % S::PER_ROW;
        if constexpr (KMAJOR) {
            lim_n[q] = n_warp + row, off_k[q] = EPP * col;
            src0[q] = B + (size_t)min(n_warp + row, N - 1) * ldb + EPP * col;
        } else {
            lim_n[q] = n_warp + EPP * col, off_k[q] = row;
            src0[q] = B + (size_t)row * ldb + min(n_warp + EPP * col, N - 1);
        }
        dst_off[q] = row * S::PITCH + 16 * col;
    }
    const bool full_n = n_warp + 16 * NT <= N;
    auto issue_group = [&](int slot, int k0) {
        const unsigned base = smem_u32(ring + slot * S::BYTES);
        const size_t step = KMAJOR ? (size_t)k0 : (size_t)k0 * ldb;  // the group's first k
        if (full_n && k0 + G <= ke) {
#pragma unroll
            for (int q = 0; q < PER_LANE; ++q) cp_async16(base + dst_off[q], src0[q] + step, 16);
        } else {
#pragma unroll
            for (int q = 0; q < PER_LANE; ++q) {
                int bytes;
                if constexpr (KMAJOR) {
                    const int k = k0 + off_k[q];
                    bytes = lim_n[q] < N && k < ke ? EB * min(EPP, ke - k) : 0;
                } else {
                    const int k = k0 + off_k[q];
                    bytes = k < ke && lim_n[q] < N ? EB * min(EPP, N - lim_n[q]) : 0;
                }
                cp_async16(base + dst_off[q], bytes ? src0[q] + step : B, bytes);
            }
        }
    };

    // The same copies with every address computed for the group (SCHED 1, where the columns change from item
    // to item).
    auto issue_any = [&](int slot, int n_w, int k0, int kend) {
        const unsigned base = smem_u32(ring + slot * S::BYTES);
#pragma unroll
        for (int q = 0; q < PER_LANE; ++q) {
            const int e = lane + 32 * q;
            const int row = e / S::PER_ROW, col = e % S::PER_ROW;
            int bytes;
            const E* src;
            if constexpr (KMAJOR) {
                const int n = n_w + row, k = k0 + EPP * col;
                bytes = n < N && k < kend ? EB * min(EPP, kend - k) : 0;
                src = B + (size_t)n * ldb + k;
            } else {
                const int k = k0 + row, n = n_w + EPP * col;
                bytes = k < kend && n < N ? EB * min(EPP, N - n) : 0;
                src = B + (size_t)k * ldb + n;
            }
            cp_async16(base + row * S::PITCH + 16 * col, bytes ? src : B, bytes);
        }
    };

    // The copy engine's version (COPY 1-3): lane r copies rows r, r + 32, ... of the slot, each one run of
    // bytes (B^T given: a row's kn k; row-major: a k-row's columns inside N), and lane 0 arrives on the slot's
    // mbarrier with the bytes to wait for (the copies may land before it: the phase needs its arrival too).
    // A group cut short by the end of the split (kn < G) leaves the rest of the slot as the previous group
    // left it, and 0 x Inf would be NaN: each lane zeroes that part of the rows it copies (lane r: rows r,
    // r + 32, ...) and orders the zeroes before its later copies into them (a fence between the generic and
    // the async proxy). Rows of B^T past N are neither copied nor zeroed: they meet only outputs past N,
    // which are never stored.
    auto issue_bulk = [&](int slot, int n_w, int m_0, int k0, int kend) {
      if constexpr (BULK) {
        unsigned char* slot_p = ring + slot * S::BYTES;
        const unsigned base = smem_u32(slot_p), bar = bars + 8 * slot;
        const int cols_here = max(0, min(16 * NT, N - n_w));  // the warp's columns of B inside N
        const int kn = min(G, kend - k0);
        const int rows = KMAJOR ? cols_here : kn;
        const unsigned bytes = KMAJOR ? kn * EB : cols_here * EB;
        if (kn < G) {
            if constexpr (KMAJOR) {
                for (int r = lane; r < rows; r += 32)
                    for (int c = kn * EB; c < S::ROW_BYTES; c += 16)
                        *reinterpret_cast<uint4*>(slot_p + r * S::PITCH + c) = make_uint4(0, 0, 0, 0);
            } else {
                for (int r = lane; r < G; r += 32) {
                    if (r < kn) continue;
                    for (int c = 0; c < S::ROW_BYTES; c += 16)
                        *reinterpret_cast<uint4*>(slot_p + r * S::PITCH + c) = make_uint4(0, 0, 0, 0);
                }
            }
            if constexpr (A_SLOT) {  // A's rows (those inside M) the same way
                for (int r = lane; r < min(MT, M - m_0); r += 32)
                    for (int c = kn * EB; c < GK_BYTES; c += 16)
                        *reinterpret_cast<uint4*>(slot_p + S::A_OFF + r * S::APITCH * EB + c) = make_uint4(0, 0, 0, 0);
            }
            fence_async_shared();
        }
        unsigned long long policy = 0;
        if constexpr (COPY == 2) policy = l2_evict_first();
        for (int r = lane; bytes > 0 && r < rows; r += 32) {
            const E* src = KMAJOR ? B + (size_t)(n_w + r) * ldb + k0 : B + (size_t)(k0 + r) * ldb + n_w;
            if constexpr (COPY == 2) bulk_load_hint(base + r * S::PITCH, src, bytes, bar, policy);
            else bulk_load(base + r * S::PITCH, src, bytes, bar);
        }
        unsigned total = rows * bytes;
        if constexpr (A_SLOT) {  // rows past M are not copied: they meet only outputs past M, never stored
            const int a_rows = max(0, min(MT, M - m_0));
            for (int r = lane; kn > 0 && r < a_rows; r += 32)
                bulk_load(base + S::A_OFF + r * S::APITCH * EB, A + (size_t)(m_0 + r) * lda + k0, kn * EB, bar);
            total += a_rows * kn * EB;
        }
        if (lane == 0) mbar_arrive_expect_tx(bar, total);
      }
    };

    // 16-bit: the MMAs of one group from its slot, A's fragments from the panel that starts at p0. Fragments
    // of B read from the slot as they would have been loaded: B^T given, 16 bytes of rows 16 i + 2 g + h at
    // k 32 u + 8 t; row-major, NT words of k-rows 32 u + 16 s + 4 t + r at column 2 NT g.
    // A's rows for a group: from its slot (COPY 3) or from the panel (k0 - p0 into it).
    auto a_source = [&](const unsigned char* base, int k0, int p0, const E*& abase, int& apitch) {
        if (a_slot) {
            abase = reinterpret_cast<const E*>(base + S::A_OFF), apitch = S::APITCH;
        } else {
            abase = xs + (k0 - p0), apitch = XP;
        }
    };
    auto compute_group = [&](int slot, int k0, int p0) {
      if constexpr (!F32) {
        const unsigned char* base = ring + slot * S::BYTES;
        const E* abase;
        int apitch;
        a_source(base, k0, p0, abase, apitch);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            unsigned w[8 * NT];
            if constexpr (KMAJOR) {
#pragma unroll
                for (int i = 0; i < NT; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const uint4 v = *reinterpret_cast<const uint4*>(base + (16 * i + 2 * g + h) * S::PITCH +
                                                                        64 * u + 16 * t);
                        w[(2 * i + h) * 4 + 0] = v.x, w[(2 * i + h) * 4 + 1] = v.y;
                        w[(2 * i + h) * 4 + 2] = v.z, w[(2 * i + h) * 4 + 3] = v.w;
                    }
            } else {
#pragma unroll
                for (int s = 0; s < 2; ++s)
#pragma unroll
                    for (int rr = 0; rr < 4; ++rr) {
                        const unsigned* src = reinterpret_cast<const unsigned*>(
                            base + (32 * u + 16 * s + 4 * t + rr) * S::PITCH + 4 * NT * g);
#pragma unroll
                        for (int q = 0; q < NT; ++q) w[(4 * s + rr) * NT + q] = src[q];
                    }
            }
#pragma unroll
            for (int j = 0; j < J; ++j) {
                // Row 8 j + g of the panel, the k this lane's b fragments stand for: B^T given, 8 from c + 8 t
                // (both steps); row-major, 4 from c + 16 s + 4 t (step s).
                const E* row = abase + (8 * j + g) * apitch + u * KC;
                unsigned x[4];
                if constexpr (KMAJOR) {
                    const uint4 v = *reinterpret_cast<const uint4*>(row + 8 * t);
                    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
                } else {
                    const uint2 v0 = *reinterpret_cast<const uint2*>(row + 4 * t);
                    const uint2 v1 = *reinterpret_cast<const uint2*>(row + 16 + 4 * t);
                    x[0] = v0.x, x[1] = v0.y, x[2] = v1.x, x[3] = v1.y;
                }
#pragma unroll
                for (int i = 0; i < NT; ++i)
#pragma unroll
                    for (int s = 0; s < 2; ++s) {
                        unsigned a0, a1, a2, a3;
                        if constexpr (KMAJOR) {
                            // Column pair (n, n + 1) = fragment rows (g, g + 8); words 2s, 2s + 1 of each.
                            const unsigned* c0 = &w[(2 * i) * 4];
                            const unsigned* c1 = &w[(2 * i + 1) * 4];
                            a0 = c0[2 * s], a2 = c0[2 * s + 1], a1 = c1[2 * s], a3 = c1[2 * s + 1];
                        } else {
                            // Word i of rows 4t + 0..3 holds columns (2 NT g + 2i, + 1): pair rows (0, 1)
                            // and (2, 3), the low halves for column 2i (row g), the high for 2i + 1 (g + 8).
                            const unsigned r0 = w[(4 * s + 0) * NT + i], r1 = w[(4 * s + 1) * NT + i];
                            const unsigned r2 = w[(4 * s + 2) * NT + i], r3 = w[(4 * s + 3) * NT + i];
                            a0 = __byte_perm(r0, r1, 0x5410), a1 = __byte_perm(r0, r1, 0x7632);
                            a2 = __byte_perm(r2, r3, 0x5410), a3 = __byte_perm(r2, r3, 0x7632);
                        }
                        const unsigned a[4] = {a0, a1, a2, a3};
                        mma_16816<A_TYPE>(acc[i][j], a, x[2 * s], x[2 * s + 1]);
                    }
            }
        }
      }
    };

    // fp32 on the CUDA cores: each lane owns RPL columns of C (its rows of B^T, or its columns of a row-major
    // B) and all MT rows of A; lanes that share a column (LPR = 2 with NT = 1) take alternate groups of 4 k.
    // Per 4 k: a float4 of the column (B^T given) or 4 scalars (row-major, consecutive lanes consecutive
    // columns: conflict-free), then MT float4 broadcasts of A's rows and 4 MT FMAs per column.
    auto compute_group32 = [&](int slot, int k0, int p0) {
      if constexpr (F32) {
        const unsigned char* base = ring + slot * S::BYTES;
        const E* abase;
        int apitch;
        a_source(base, k0, p0, abase, apitch);
#pragma unroll
        for (int s4 = 0; s4 < G / 4 / LPR; ++s4) {
            const int kk = 4 * (s4 * LPR + sub);  // k within the group
            float4 w[RPL];
#pragma unroll
            for (int q = 0; q < RPL; ++q) {
                if constexpr (KMAJOR) {
                    w[q] = *reinterpret_cast<const float4*>(base + col32(q) * S::PITCH + 4 * kk);
                } else {
                    const float* b0 = reinterpret_cast<const float*>(base + kk * S::PITCH) + col32(q);
                    w[q] = make_float4(b0[0], b0[S::PITCH / 4], b0[2 * S::PITCH / 4], b0[3 * S::PITCH / 4]);
                }
            }
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                const float4 x = *reinterpret_cast<const float4*>(abase + m * apitch + kk);
#pragma unroll
                for (int q = 0; q < RPL; ++q) {
                    float a = acc32[q][m];
                    a = fmaf(w[q].x, x.x, a);
                    a = fmaf(w[q].y, x.y, a);
                    a = fmaf(w[q].z, x.z, a);
                    a = fmaf(w[q].w, x.w, a);
                    acc32[q][m] = a;
                }
            }
        }
      }
    };

    // The ring: STAGES - 1 groups in flight while the warp computes on the oldest. Every lane commits a group
    // per step (empty past the end), so wait_group counts alike everywhere. A new panel of A at every XK k,
    // between two block barriers (every warp walks the same groups).
    // The epilogue of the current segment's outputs (alpha, beta C, bias, activation, residual).
    auto epilogue_segment = [&]() {
        if constexpr (F32) {
            // fp32: lane `own` writes (m, n) for its columns n and every row m (consecutive lanes consecutive
            // columns); the second lane of a shared column writes nothing.
            if (sub != 0) return;
#pragma unroll
            for (int q = 0; q < RPL; ++q) {
                const int n = n_warp + col32(q);
                if (n >= N) continue;
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    if (m0 + m >= M) continue;
                    epilogue_call<C_TYPE>(C, ldc, m0 + m, n, false, acc32[q][m], 0.0f, alpha, beta, bias, R, ldr,
                                          epilogue, false, false);
                }
            }
        } else {
            // Epilogue: acc[i][j] = (m, n), (m + 1, n), (m, n + 1), (m + 1, n + 1) with m = m0 + 8 j + 2 t and
            // n = n_pair(i): row m's pair is (acc[.][.][0], acc[.][.][2]), row m + 1's (acc[.][.][1], acc[.][.][3]).
            const bool vec_c = pairs_aligned(C, ldc);
            const bool vec_r = !(epilogue & EPI_RESIDUAL) || pairs_aligned(R, ldr);
#pragma unroll
            for (int i = 0; i < NT; ++i) {
                const int n = n_pair(i);
                if (n >= N) continue;
#pragma unroll
                for (int j = 0; j < J; ++j)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int m = m0 + 8 * j + 2 * t + h;
                        if (m >= M) continue;
                        epilogue_call<C_TYPE>(C, ldc, m, n, n + 1 < N, acc[i][j][h], acc[i][j][2 + h], alpha, beta, bias,
                                              R, ldr, epilogue, vec_c, vec_r);
                    }
            }
        }
    };

    // The block's groups as one stream (v = 0, 1, ...: its segments one after the other), each into slot
    // v % STAGES: STAGES - 1 groups in flight while a warp computes on the oldest, across segments too. With
    // the copy engine, lane 0's arrival and the bytes complete a slot's phase (its use, v / STAGES, gives the
    // parity); with cp.async every lane commits a group per step (empty past the end), so wait_group counts
    // alike everywhere.
    const long long stream = SCHED ? u_end - u_begin : (ke - kb + G - 1) / G;
    // SCHED 1: where the next group to prefetch lies (column block, row tile, group), advanced one group per
    // prefetch (v runs 0, 1, 2, ...): no 64-bit division per group.
    int pf_col = 0, pf_row = 0, pf_g = 0;
    if constexpr (SCHED == 1) {
        const long long item = u_begin / kgroups;
        pf_col = (int)(item % col_blocks), pf_row = (int)(item / col_blocks), pf_g = (int)(u_begin % kgroups);
    }
    auto prefetch = [&](long long v) {  // group v into its slot; nothing past the last
        if (v < stream) {
            int n_w = n_warp, m_0 = m0, k0 = kb + (int)v * G, kend = ke;
            if constexpr (SCHED == 1) {
                n_w = (pf_col * WARPS + warp) * 16 * NT, m_0 = pf_row * MT, k0 = pf_g * G, kend = K;
                if (++pf_g == kgroups) {
                    pf_g = 0;
                    if (++pf_col == col_blocks) pf_col = 0, ++pf_row;
                }
            }
            if (bulk) issue_bulk((int)(v % STAGES), n_w, m_0, k0, kend);
            else if constexpr (SCHED == 1) issue_any((int)(v % STAGES), n_w, k0, kend);
            else issue_group((int)(v % STAGES), k0);
        }
        if (!bulk) cp_async_commit();
    };
    auto landed = [&](long long v) {  // wait until group v has landed in its slot
        if constexpr (BULK) {
            if (bulk) {
                mbar_wait(bars + 8 * (int)(v % STAGES), (int)(v / STAGES) & 1);
                __syncwarp();
                return;
            }
        }
        cp_async_wait<STAGES - 2>();
        __syncwarp();
    };
#pragma unroll
    for (int q = 0; q < STAGES - 1; ++q) prefetch(q);

    long long v0 = 0;  // the current segment's first group in the stream
    for (int seg = 0;; ++seg) {
        // The segment: SCHED 0 has one (a block past K's end too: its partial sums are zero); SCHED 1 walks
        // its run.
        long long item = 0;
        bool whole;
        int groups;
        if constexpr (SCHED == 0) {
            if (seg > 0) break;
            groups = (int)stream;
            whole = splits == 1;
        } else {
            if (u_begin + v0 >= u_end) break;
            const long long u = u_begin + v0;
            item = u / kgroups;
            const int gi0 = (int)(u % kgroups), gi1 = (int)min((long long)kgroups, gi0 + (u_end - u));
            n_warp = ((int)(item % col_blocks) * WARPS + warp) * 16 * NT;
            m0 = (int)(item / col_blocks) * MT;
            kb = gi0 * G, ke = min(K, gi1 * G);
            groups = gi1 - gi0;
            whole = gi0 == 0 && gi1 == kgroups;
        }
#pragma unroll
        for (int i = 0; i < NACC; ++i) accf[i] = 0.0f;

        // A new panel of A at every XK k, between two block barriers (every warp walks the same groups); none
        // where A comes in the slots.
        int p0 = kb;
        for (int q = 0; q < groups; ++q) {
            const int k0 = kb + q * G;
            if (!a_slot && (k0 - kb) % XK == 0) {
                __syncthreads();
                p0 = k0;
                load_panel(p0);
                __syncthreads();
            }
            landed(v0 + q);
            // The slot group v0 + q - 1 used is free again: every lane is past its reads (the barrier above).
            prefetch(v0 + q + STAGES - 1);
            if constexpr (F32) compute_group32((int)((v0 + q) % STAGES), k0, p0);
            else compute_group((int)((v0 + q) % STAGES), k0, p0);
        }
        v0 += groups;
        if constexpr (F32 && LPR == 2) {  // the two lanes of a column add their halves of k
#pragma unroll
            for (int i = 0; i < NACC; ++i) accf[i] += __shfl_xor_sync(0xffffffffu, accf[i], 1);
        }

        // An item computed in parts: every part writes its partial sums to its slot of the workspace (float4s,
        // consecutive threads consecutive 16 bytes), and the last part to finish (an atomic counter per
        // item, left zero again) adds all of them in a fixed order (the result does not depend on which
        // finished last) and stores. SCHED 0: the parts are the slices, slot column x SPLIT + slice.
        // SCHED 1: the blocks whose runs cover the item, in block order; block b's first segment has slot
        // 2 b, its last 2 b + 1.
        bool store = true;
        if (!whole) {
            constexpr int F4 = NACC / 4;
            long long mine, first_slot = 0;
            int parts, counter, b_first = 0;
            if constexpr (SCHED == 0) {
                const int column = blockIdx.z * gridDim.x + blockIdx.x;
                parts = splits, counter = column;
                first_slot = (long long)column * splits, mine = first_slot + blockIdx.y;
            } else {
                const long long item_u = item * kgroups;
                b_first = block_of(item_u);
                parts = block_of(item_u + kgroups - 1) - b_first + 1;
                counter = (int)item;
                mine = 2LL * blockIdx.x + (u_begin >= item_u ? 0 : 1);
            }
            auto slot_of = [&](int j) {
                if constexpr (SCHED == 0) return first_slot + j;
                const int b = b_first + j;
                return 2LL * b + (unit_start(b) >= item * kgroups ? 0 : 1);
            };
            float4* part = reinterpret_cast<float4*>(ws);
#pragma unroll
            for (int i = 0; i < F4; ++i)
                part[(mine * F4 + i) * NTHREADS + threadIdx.x] =
                    make_float4(accf[4 * i], accf[4 * i + 1], accf[4 * i + 2], accf[4 * i + 3]);
            __threadfence();
            __syncthreads();
            __shared__ int last;
            if (threadIdx.x == 0) last = atomicAdd(&counters[counter], 1) == parts - 1;
            __syncthreads();
            store = last;
            if (store) {
                __threadfence();
                if (threadIdx.x == 0) counters[counter] = 0;  // zero again for the next launch
                // Part by part, all of a part's F4 loads in flight at once (a loop over the parts inside one
                // over the accumulators waited on one L2 round trip per part and float4: 126 parts x 16 took
                // 0.19 ms at 64 x 64 x 131072). Each sum still adds the parts in order from zero.
#pragma unroll
                for (int i = 0; i < NACC; ++i) accf[i] = 0.0f;
                for (int j = 0; j < parts; ++j) {
                    const float4* src = part + slot_of(j) * F4 * NTHREADS + threadIdx.x;
                    float4 v[F4];
#pragma unroll
                    for (int i = 0; i < F4; ++i) v[i] = __ldcg(src + i * NTHREADS);
#pragma unroll
                    for (int i = 0; i < F4; ++i)
                        accf[4 * i] += v[i].x, accf[4 * i + 1] += v[i].y, accf[4 * i + 2] += v[i].z,
                            accf[4 * i + 3] += v[i].w;
                }
            }
        }
        if (store) epilogue_segment();
    }
    cp_async_wait<0>();  // no copy may still target shared memory when the block exits
}
