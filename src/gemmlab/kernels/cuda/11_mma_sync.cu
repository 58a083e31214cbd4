// Rung 11 - mma_sync: tensor cores through warp-level mma.sync, fp16 / bf16 / tf32 in, fp32 accumulate, fused epilogue.
//
// Idea: leave the FMA pipes. One `mma.sync.aligned.m16n8k16` does 4096 multiply-adds for a warp in one
// instruction (the fp32 rungs need 128 FFMAs per lane for the same work), so the limit moves from issue
// slots to feeding the tensor cores: shared-memory bandwidth and global latency.
// - Global -> shared with `cp.async.cg` (16-byte chunks that bypass L1 and the register file), in a ring of
//   STAGES tiles: while the warps compute on tile k, tiles k+1 .. k+STAGES-1 are in flight.
// - Shared -> registers with `ldmatrix` (x4: four 8x8 matrices per instruction, already in the fragment
//   layout mma expects; `.trans` for B, which is stored k-major). Rows are padded by 8 elements (16 bytes),
//   so the eight 16-byte row reads of each ldmatrix phase fall into eight different bank groups
//   (row pitch 80 bytes for A at BK = 32, 272 bytes for B at BN = 128: conflict-free), and so are the
//   cp.async writes.
// - Edges: a chunk that starts outside A or B is copied with src-size 0 (cp.async writes zeros); a chunk
//   that overhangs the edge copies only its bytes inside. Operands whose rows are not 16-byte aligned
//   (odd base, lda or ldb not a multiple of 8) take a checked element-wise path into the same buffers.
// - Epilogue on the fp32 accumulator before the one store: alpha, beta * C (C not read when beta == 0),
//   bias, activation, residual, cast to the output type. out = act(alpha*acc + beta*C + bias) + residual.
// - TF32 (A_TYPE 3, only when the caller asks for precision "tf32"): fp32 operands in global and shared
//   memory, `mma.sync.aligned.m16n8k8...tf32` (k = 8 per instruction), each fragment element rounded with
//   `cvt.rna.tf32.f32` after the shared-memory read (the tensor cores would truncate). The same cp.async
//   ring moves 16-byte chunks of 4 floats. Shared-memory layout and why it is conflict-free:
//   * A (BM x BK, k contiguous), row pitch BK + 4 floats. `ldmatrix.x4.b16` on 32-bit data hands lane l
//     the 4 bytes at (row l / 4, bytes 4 (l % 4)) of each 8 x 16-byte matrix, i.e. the fp32 element
//     (g, t) with g = lane / 4, t = lane % 4: exactly the m16n8k8 tf32 A fragment (a0 = (g, t),
//     a1 = (g + 8, t), a2 = (g, t + 4), a3 = (g + 8, t + 4)) when lanes 0-15 point at rows 0-15, k 0 and
//     lanes 16-31 at rows 0-15, k 4. BK is a multiple of 8, so the pitch is (BK + 4) * 4 = 16 x (an odd
//     number) bytes: the 8 rows of each ldmatrix phase start in 8 different 16-byte bank groups.
//   * B (BK x BN, n contiguous: B stays k-major, as it lies in global memory), row pitch BN + 8 floats.
//     ldmatrix.trans moves 16-bit elements only, so B fragments are read with 32-bit LDS: b0 = (k = t,
//     n = g), b1 = (t + 4, g). With BN a multiple of 32 the pitch is 8 (mod 32) words, so lane (g, t)
//     reads bank (8 t + g + const) mod 32: the 32 lanes hit 32 different banks, for b0 and for b1.
//   Both pads are 16 bytes or more, so cp.async chunks stay 16-byte aligned.
// Changed from rung 10: tensor cores, 16-bit (or tf32) inputs, cp.async multistage pipeline, ldmatrix,
// fused epilogue.
// Traffic: as rung 10 in elements, half the bytes (2-byte inputs); the same bytes with tf32.
// Bottleneck left: mma.sync issues from every warp and ldmatrix feeds it through registers; Hopper's wgmma
// reads shared memory directly and is about twice as fast (next rung).
// The 16-byte pad has a price on the way in: at pitches of an odd number of 16-byte chunks (80 and 272
// bytes for bf16) every other row starts half a sector off, and cp.async carries those rows' sectors
// twice, 1.5x the tiles' bytes over the crossbar (ncu on the H100; docs/analysis.md). TMA's swizzled
// boxes avoid both the conflicts and that cost.
// Predicted: 55-70% of cuBLAS BF16/FP16 on H100 (cuBLAS uses wgmma); on sm_80-89, close to cuBLAS.
// TF32 predicted (before its first measurement): about half the fp16 rate of this kernel (m16n8k8 does half
// the multiply-adds of m16n8k16 per instruction, plus one cvt per fragment element), 20-35% of cuBLAS TF32
// on H100; relative error about 3e-4 against float64, independent of K.
// Measured: docs/journal.md (scripts/device_tensor_check.py prints the figures).

#include "common.cuh"
#include "epilogue.cuh"
#include "mma.cuh"

// ------------------------------------------------------------------------------------------ PTX wrappers

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// 16 bytes global -> shared, of which the first src_bytes (0..16) are read and the rest written as zero.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// D += A (16x8, row) * B (8x8, col) in tf32, fp32 accumulators. a and b hold tf32 bits (float_to_tf32).
__device__ __forceinline__ void mma_1688_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Copy a ROWS x COLS tile (elements of type T: 16-bit bits or fp32, row-major, row stride ld) into shared
// memory with row pitch PITCH. `rows_left` / `cols_left`: how much of the tile lies inside the matrix.
// cp.async in 16-byte chunks (8 16-bit elements or 4 floats) when `vec` (base 16-byte aligned and ld a
// multiple of the chunk), else element by element. Out-of-range elements are 0.
template <int ROWS, int COLS, int PITCH, int NT, typename T>
__device__ __forceinline__ void load_tile_async(T* dst, const T* __restrict__ src, int ld, int rows_left,
                                                int cols_left, bool vec, int tid) {
    constexpr int CHUNK = 16 / (int)sizeof(T);  // elements per 16-byte chunk
    constexpr int CHUNKS_PER_ROW = COLS / CHUNK, CHUNKS = ROWS * CHUNKS_PER_ROW;
    static_assert(COLS % CHUNK == 0 && PITCH % CHUNK == 0, "tile rows must be whole 16-byte chunks");
    static_assert(CHUNKS % NT == 0, "the tile's 16-byte chunks must split evenly over the block's threads");
#pragma unroll
    for (int i = 0; i < CHUNKS / NT; ++i) {
        const int e = tid + i * NT;
        const int r = e / CHUNKS_PER_ROW, c = (e % CHUNKS_PER_ROW) * CHUNK;
        T* d = dst + r * PITCH + c;
        const int left = r < rows_left ? cols_left - c : 0;  // elements of this chunk inside the matrix
        if (vec) {
            const int bytes = left >= CHUNK ? 16 : (left > 0 ? (int)sizeof(T) * left : 0);
            // A chunk with nothing to read still needs a valid address: point it at the tile's start.
            cp_async16(smem_addr(d), bytes ? src + (size_t)r * ld + c : src, bytes);
        } else {
#pragma unroll
            for (int j = 0; j < CHUNK; ++j) d[j] = j < left ? src[(size_t)r * ld + c + j] : (T)0;
        }
    }
}

// ------------------------------------------------------------------------------------------ kernel

// BM, BN: block tile; BK: depth per pipeline stage (multiple of 16; of 8 for tf32); WM, WN: warp tile (WM
// multiple of 16, WN multiple of 16); STAGES: tiles in the cp.async ring (>= 2); GROUP_M: block rows per
// group of the L2-friendly block order; A_TYPE: input type (1 fp16, 2 bf16, 3 tf32 from fp32 storage);
// C_TYPE: output type (1 fp32, 2 fp16, 3 bf16). A, B and C point at raw elements; `bias` (fp32, length M
// or N) and `R` (output type, leading dimension ldr) are read only when `epilogue` asks for them.
// BATCHED 1: product blockIdx.z of a batch, its A, B, C and R `sa`, `sb`, `sc`, `sr` elements after the
// previous product's (0: one matrix every product shares).
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int GROUP_M, int A_TYPE, int C_TYPE, int BATCHED>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
mma_sync_gemm(int M, int N, int K, float alpha, const typename In<A_TYPE>::T* __restrict__ A, int lda,
              const typename In<A_TYPE>::T* __restrict__ B, int ldb, float beta, typename Out<C_TYPE>::T* __restrict__ C,
              int ldc, const float* __restrict__ bias, const typename Out<C_TYPE>::T* __restrict__ R, int ldr,
              int epilogue, int batch, long long sa, long long sb, long long sc, long long sr) {
    static_assert(BATCHED == 0 || BATCHED == 1, "BATCHED: 0 or 1");
    if constexpr (BATCHED == 1) {
        const long long z = blockIdx.z;
        A += z * sa, B += z * sb, C += z * sc, R += z * sr;
    }
    (void)batch;
    typedef typename In<A_TYPE>::T InT;
    constexpr bool TF32 = A_TYPE == 3;
    constexpr int CHUNK = 16 / (int)sizeof(InT);  // elements per 16-byte chunk: 8 (16-bit), 4 (fp32)
    constexpr int KSTEP = TF32 ? 8 : 16;          // k per mma instruction: m16n8k8 (tf32), m16n8k16
    constexpr int WARPS_N = BN / WN, NT = (BM / WM) * WARPS_N * 32;
    constexpr int MI = WM / 16, NI = WN / 8;  // mma tiles per warp along M and N
    // A rows padded by 16 bytes (conflict-free ldmatrix); B rows by 8 elements: 16 bytes for 16-bit
    // (conflict-free ldmatrix.trans), 32 bytes for tf32 (conflict-free 32-bit LDS; see the header).
    constexpr int A_PITCH = BK + CHUNK, B_PITCH = BN + 8;
    constexpr int A_STAGE = BM * A_PITCH, B_STAGE = BK * B_PITCH;
    static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must divide the block tile");
    static_assert(WM % 16 == 0 && WN % 16 == 0, "WM and WN must be multiples of 16");
    static_assert(BK % KSTEP == 0, "BK must be a multiple of the mma's k: 16 (fp16, bf16) or 8 (tf32)");
    static_assert(!TF32 || (BK % 8 == 0 && B_PITCH % 32 == 8),
                  "tf32: BK a multiple of 8 and BN a multiple of 32 (conflict-free shared-memory layout)");
    static_assert(STAGES >= 2, "the pipeline needs at least two stages");
    static_assert(A_TYPE >= 1 && A_TYPE <= 3, "A_TYPE: 1 fp16, 2 bf16, 3 tf32");
    static_assert(C_TYPE >= 1 && C_TYPE <= 3, "C_TYPE: 1 fp32, 2 fp16, 3 bf16");

    // STAGES x (BM x A_PITCH + BK x B_PITCH) elements, sized by the host.
    extern __shared__ __align__(16) unsigned char smem_raw[];
    InT* As = reinterpret_cast<InT*>(smem_raw);
    InT* Bs = As + STAGES * A_STAGE;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
    int tile_row, tile_col;
    grouped_tile(GROUP_M, tile_row, tile_col);
    const int row0 = tile_row * BM, col0 = tile_col * BN;
    const bool vec_a = ((reinterpret_cast<size_t>(A) & 15) == 0) && (lda % CHUNK == 0);
    const bool vec_b = ((reinterpret_cast<size_t>(B) & 15) == 0) && (ldb % CHUNK == 0);

    const int k_tiles = (K + BK - 1) / BK;
    auto load_stage = [&](int stage, int kt) {
        const int k0 = kt * BK;
        load_tile_async<BM, BK, A_PITCH, NT>(As + stage * A_STAGE, A + (size_t)row0 * lda + k0, lda, M - row0, K - k0,
                                             vec_a, tid);
        load_tile_async<BK, BN, B_PITCH, NT>(Bs + stage * B_STAGE, B + (size_t)k0 * ldb + col0, ldb, K - k0, N - col0,
                                             vec_b, tid);
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

    // Prologue: STAGES - 1 tiles in flight (one commit group each, empty past the end of K).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) load_stage(s, s);
        cp_async_commit();
    }

    // Fragment coordinates of m16n8kK: g = lane / 4 (row of A and C, column of B), t = lane % 4.
    const int g = lane / 4, t = lane % 4;
    // ldmatrix lane addressing: A x4 covers 16 rows x 16 bytes of k (lanes 0-15 rows at k, 16-31 rows at
    // k + 16 bytes: k + 8 for 16-bit, k + 4 for tf32); B x4.trans covers 16 (k) x 16 (n): lanes 0-15 rows k
    // at n, 16-31 rows k at n + 8.
    const int a_row = lane % 16, a_col = (lane / 16) * CHUNK;
    const int b_row = lane % 16, b_col = (lane / 16) * 8;

    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<STAGES - 2>();  // tile kt has landed (this thread's copies) ...
        __syncthreads();              // ... everyone's, and every warp is done with the stage refilled below
        {
            const int next = kt + STAGES - 1;
            if (next < k_tiles) load_stage(next % STAGES, next);
            cp_async_commit();
        }
        const InT* as = As + (kt % STAGES) * A_STAGE;
        const InT* bs = Bs + (kt % STAGES) * B_STAGE;
        if constexpr (TF32) {
#pragma unroll
            for (int kk = 0; kk < BK; kk += 8) {
                unsigned af[MI][4], bf[NI][2];
#pragma unroll
                for (int i = 0; i < MI; ++i) {
                    ldmatrix_x4(af[i], smem_addr(as + (wm + i * 16 + a_row) * A_PITCH + kk + a_col));
#pragma unroll
                    for (int q = 0; q < 4; ++q) af[i][q] = float_to_tf32(__uint_as_float(af[i][q]));
                }
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    const InT* b = bs + (kk + t) * B_PITCH + wn + j * 8 + g;
                    bf[j][0] = float_to_tf32(b[0]);
                    bf[j][1] = float_to_tf32(b[4 * B_PITCH]);
                }
#pragma unroll
                for (int i = 0; i < MI; ++i)
#pragma unroll
                    for (int j = 0; j < NI; ++j) mma_1688_tf32(acc[i][j], af[i], bf[j][0], bf[j][1]);
            }
        } else {
#pragma unroll
            for (int kk = 0; kk < BK; kk += 16) {
                unsigned af[MI][4], bf[NI / 2][4];
#pragma unroll
                for (int i = 0; i < MI; ++i)
                    ldmatrix_x4(af[i], smem_addr(as + (wm + i * 16 + a_row) * A_PITCH + kk + a_col));
#pragma unroll
                for (int j = 0; j < NI / 2; ++j)
                    ldmatrix_x4_trans(bf[j], smem_addr(bs + (kk + b_row) * B_PITCH + wn + j * 16 + b_col));
#pragma unroll
                for (int i = 0; i < MI; ++i)
#pragma unroll
                    for (int j = 0; j < NI; ++j)
                        mma_16816<A_TYPE>(acc[i][j], af[i], bf[j / 2][(j % 2) * 2], bf[j / 2][(j % 2) * 2 + 1]);
            }
        }
    }
    cp_async_wait<0>();  // no copy may still target shared memory when the block exits

    // Epilogue. Accumulator layout of m16n8: d0, d1 at (row g, cols 2t, 2t+1), d2, d3 at row g + 8.
    // Pairs of adjacent outputs move as one 8-byte (fp32) or 4-byte (16-bit) access when rows allow it.
    const bool vec_c = pairs_aligned(C, ldc);
    const bool vec_r = !(epilogue & EPI_RESIDUAL) || pairs_aligned(R, ldr);
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + wm + i * 16 + g + h * 8;
            if (row >= M) continue;
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int col = col0 + wn + j * 8 + 2 * t;
                if (col >= N) continue;
                epilogue_pair<C_TYPE>(C, ldc, row, col, col + 1 < N, acc[i][j][2 * h], acc[i][j][2 * h + 1], alpha,
                                      beta, bias, R, ldr, epilogue, vec_c, vec_r);
            }
        }
    }
}
