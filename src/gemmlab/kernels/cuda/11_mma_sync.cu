// Rung 11 - mma_sync: tensor cores through warp-level mma.sync, fp16 / bf16 in, fp32 accumulate, fused epilogue.
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
// Changed from rung 10: tensor cores, 16-bit inputs, cp.async multistage pipeline, ldmatrix, fused epilogue.
// Traffic: as rung 10 in elements, half the bytes (2-byte inputs).
// Bottleneck left: mma.sync issues from every warp and ldmatrix feeds it through registers; Hopper's wgmma
// reads shared memory directly and is about twice as fast (next rung).
// Predicted: 55-70% of cuBLAS BF16/FP16 on H100 (cuBLAS uses wgmma); on sm_80-89, close to cuBLAS.
// Measured: docs/performance.md (scripts/device_tensor_check.py prints the figures).

// Input element type codes (A_TYPE): 1 = fp16, 2 = bf16. Output element type codes (C_TYPE): 1 = fp32,
// 2 = fp16, 3 = bf16. 16-bit values travel as raw bits (unsigned short); conversions are single PTX cvt
// instructions, so the kernel needs neither cuda_fp16.h nor cuda_bf16.h.
#include "common.cuh"

typedef unsigned short bits16;

// Epilogue flags (a run-time int: one uniform branch per element, negligible next to the K loop; a
// template parameter per combination would multiply compile time by 30).
#define EPI_BIAS_MASK 3      // bits 0-1: 0 no bias, 1 per row (length M), 2 per column (length N)
#define EPI_BIAS_ROW 1
#define EPI_BIAS_COL 2
#define EPI_ACT_SHIFT 2      // bits 2-4: activation
#define EPI_ACT_MASK 7
#define EPI_ACT_RELU 1
#define EPI_ACT_GELU_TANH 2
#define EPI_ACT_GELU_ERF 3
#define EPI_ACT_SILU 4
#define EPI_RESIDUAL 32      // bit 5: add a residual matrix R (output type, leading dimension ldr)

// ------------------------------------------------------------------------------------------ conversions

__device__ __forceinline__ float half_bits_to_float(bits16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ float bf16_bits_to_float(bits16 h) { return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ bits16 float_to_half_bits(float f) {
    bits16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ bits16 float_to_bf16_bits(float f) {
    bits16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// The output element type of code C_TYPE, with load / store of one and of two adjacent elements.
template <int C_TYPE> struct Out;
template <> struct Out<1> {
    typedef float T;
    static __device__ __forceinline__ float load(const float* p) { return *p; }
    static __device__ __forceinline__ void store(float* p, float v) { *p = v; }
    static __device__ __forceinline__ void store2(float* p, float v0, float v1) {
        *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
    }
    static __device__ __forceinline__ float2 load2(const float* p) { return *reinterpret_cast<const float2*>(p); }
};
template <int C_TYPE> struct Out16 {
    typedef bits16 T;
    static __device__ __forceinline__ float cvt_in(bits16 h) { return C_TYPE == 2 ? half_bits_to_float(h) : bf16_bits_to_float(h); }
    static __device__ __forceinline__ bits16 cvt_out(float f) { return C_TYPE == 2 ? float_to_half_bits(f) : float_to_bf16_bits(f); }
    static __device__ __forceinline__ float load(const bits16* p) { return cvt_in(*p); }
    static __device__ __forceinline__ void store(bits16* p, float v) { *p = cvt_out(v); }
    static __device__ __forceinline__ void store2(bits16* p, float v0, float v1) {
        *reinterpret_cast<unsigned*>(p) = (unsigned)cvt_out(v0) | ((unsigned)cvt_out(v1) << 16);
    }
    static __device__ __forceinline__ float2 load2(const bits16* p) {
        const unsigned u = *reinterpret_cast<const unsigned*>(p);
        return make_float2(cvt_in((bits16)(u & 0xffff)), cvt_in((bits16)(u >> 16)));
    }
};
template <> struct Out<2> : Out16<2> {};
template <> struct Out<3> : Out16<3> {};

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

// D += A (16x16, row) * B (16x8, col), fp32 accumulators; A_TYPE 1: fp16, 2: bf16.
template <int A_TYPE>
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    if (A_TYPE == 1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// ------------------------------------------------------------------------------------------ epilogue

__device__ __forceinline__ float activate(float v, int act) {
    switch (act) {
        case EPI_ACT_RELU: return fmaxf(v, 0.0f);
        case EPI_ACT_GELU_TANH: {
            const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);  // sqrt(2/pi) (v + 0.044715 v^3)
            return 0.5f * v * (1.0f + tanhf(u));
        }
        case EPI_ACT_GELU_ERF: return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
        case EPI_ACT_SILU: return v / (1.0f + __expf(-v));
        default: return v;
    }
}

// Copy a ROWS x COLS tile (16-bit elements, row-major, row stride ld) into shared memory with row pitch
// PITCH. `rows_left` / `cols_left`: how much of the tile lies inside the matrix. cp.async when `vec`
// (base 16-byte aligned and ld a multiple of 8), else element by element. Out-of-range elements are 0.
template <int ROWS, int COLS, int PITCH, int NT>
__device__ __forceinline__ void load_tile_async(bits16* dst, const bits16* __restrict__ src, int ld, int rows_left,
                                                int cols_left, bool vec, int tid) {
    constexpr int CHUNKS_PER_ROW = COLS / 8, CHUNKS = ROWS * CHUNKS_PER_ROW;
    static_assert(CHUNKS % NT == 0, "the tile's 16-byte chunks must split evenly over the block's threads");
#pragma unroll
    for (int i = 0; i < CHUNKS / NT; ++i) {
        const int e = tid + i * NT;
        const int r = e / CHUNKS_PER_ROW, c = (e % CHUNKS_PER_ROW) * 8;
        bits16* d = dst + r * PITCH + c;
        const int left = r < rows_left ? cols_left - c : 0;  // elements of this chunk inside the matrix
        if (vec) {
            const int bytes = left >= 8 ? 16 : (left > 0 ? 2 * left : 0);
            // A chunk with nothing to read still needs a valid address: point it at the tile's start.
            cp_async16(smem_addr(d), bytes ? src + (size_t)r * ld + c : src, bytes);
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) d[j] = j < left ? src[(size_t)r * ld + c + j] : (bits16)0;
        }
    }
}

// ------------------------------------------------------------------------------------------ kernel

// BM, BN: block tile; BK: depth per pipeline stage (multiple of 16); WM, WN: warp tile (WM multiple of 16,
// WN multiple of 16); STAGES: tiles in the cp.async ring (>= 2); GROUP_M: block rows per group of the
// L2-friendly block order; A_TYPE: input type (1 fp16, 2 bf16); C_TYPE: output type (1 fp32, 2 fp16,
// 3 bf16). A, B and C point at raw elements; `bias` (fp32, length M or N) and `R` (output type, leading
// dimension ldr) are read only when `epilogue` asks for them.
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int GROUP_M, int A_TYPE, int C_TYPE>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
mma_sync_gemm(int M, int N, int K, float alpha, const bits16* __restrict__ A, int lda,
              const bits16* __restrict__ B, int ldb, float beta, typename Out<C_TYPE>::T* __restrict__ C, int ldc,
              const float* __restrict__ bias, const typename Out<C_TYPE>::T* __restrict__ R, int ldr, int epilogue) {
    typedef Out<C_TYPE> O;
    typedef typename O::T OutT;
    constexpr int WARPS_N = BN / WN, NT = (BM / WM) * WARPS_N * 32;
    constexpr int MI = WM / 16, NI = WN / 8;        // mma tiles per warp along M and N
    constexpr int A_PITCH = BK + 8, B_PITCH = BN + 8;  // +16 bytes per row: conflict-free ldmatrix
    constexpr int A_STAGE = BM * A_PITCH, B_STAGE = BK * B_PITCH;
    static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must divide the block tile");
    static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "WM, WN and BK must be multiples of 16");
    static_assert(STAGES >= 2, "the pipeline needs at least two stages");
    static_assert(A_TYPE == 1 || A_TYPE == 2, "A_TYPE: 1 fp16, 2 bf16");
    static_assert(C_TYPE >= 1 && C_TYPE <= 3, "C_TYPE: 1 fp32, 2 fp16, 3 bf16");

    extern __shared__ __align__(16) bits16 smem[];  // STAGES x (BM x A_PITCH + BK x B_PITCH), sized by the host
    bits16* As = smem;
    bits16* Bs = smem + STAGES * A_STAGE;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
    int tile_row, tile_col;
    grouped_tile(GROUP_M, tile_row, tile_col);
    const int row0 = tile_row * BM, col0 = tile_col * BN;
    const bool vec_a = ((reinterpret_cast<size_t>(A) & 15) == 0) && (lda % 8 == 0);
    const bool vec_b = ((reinterpret_cast<size_t>(B) & 15) == 0) && (ldb % 8 == 0);

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

    // ldmatrix lane addressing: A x4 covers a 16x16 block (lanes 0-15 rows at k, 16-31 rows at k + 8);
    // B x4.trans covers 16 (k) x 16 (n): lanes 0-15 rows k at n, 16-31 rows k at n + 8.
    const int a_row = lane % 16, a_col = (lane / 16) * 8;
    const int b_row = lane % 16, b_col = (lane / 16) * 8;

    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<STAGES - 2>();  // tile kt has landed (this thread's copies) ...
        __syncthreads();              // ... everyone's, and every warp is done with the stage refilled below
        {
            const int next = kt + STAGES - 1;
            if (next < k_tiles) load_stage(next % STAGES, next);
            cp_async_commit();
        }
        const bits16* as = As + (kt % STAGES) * A_STAGE;
        const bits16* bs = Bs + (kt % STAGES) * B_STAGE;
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
    cp_async_wait<0>();  // no copy may still target shared memory when the block exits

    // Epilogue. Accumulator layout of m16n8: d0, d1 at (row g, cols 2t, 2t+1), d2, d3 at row g + 8.
    const int g = lane / 4, t = lane % 4;
    const int bias_mode = epilogue & EPI_BIAS_MASK;
    const int act = (epilogue >> EPI_ACT_SHIFT) & EPI_ACT_MASK;
    const bool residual = (epilogue & EPI_RESIDUAL) != 0;
    // Pairs of adjacent outputs move as one 8-byte (fp32) or 4-byte (16-bit) access when rows allow it.
    const bool vec_c = ((reinterpret_cast<size_t>(C) & (2 * sizeof(OutT) - 1)) == 0) && (ldc % 2 == 0);
    const bool vec_r = !residual || (((reinterpret_cast<size_t>(R) & (2 * sizeof(OutT) - 1)) == 0) && (ldr % 2 == 0));
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + wm + i * 16 + g + h * 8;
            if (row >= M) continue;
            const float row_bias = bias_mode == EPI_BIAS_ROW ? bias[row] : 0.0f;
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int col = col0 + wn + j * 8 + 2 * t;
                if (col >= N) continue;
                const bool pair = col + 1 < N;
                float v[2] = {alpha * acc[i][j][2 * h], alpha * acc[i][j][2 * h + 1]};
                OutT* c = C + (size_t)row * ldc + col;
                if (beta != 0.0f) {  // BLAS rule: C is not read when beta == 0
                    if (pair && vec_c) {
                        const float2 old = O::load2(c);
                        v[0] += beta * old.x;
                        v[1] += beta * old.y;
                    } else {
                        v[0] += beta * O::load(c);
                        if (pair) v[1] += beta * O::load(c + 1);
                    }
                }
                if (bias_mode == EPI_BIAS_ROW) {
                    v[0] += row_bias;
                    v[1] += row_bias;
                } else if (bias_mode == EPI_BIAS_COL) {
                    v[0] += bias[col];
                    if (pair) v[1] += bias[col + 1];
                }
                if (act) {
                    v[0] = activate(v[0], act);
                    v[1] = activate(v[1], act);
                }
                if (residual) {
                    const OutT* r = R + (size_t)row * ldr + col;
                    if (pair && vec_r) {
                        const float2 rr = O::load2(r);
                        v[0] += rr.x;
                        v[1] += rr.y;
                    } else {
                        v[0] += O::load(r);
                        if (pair) v[1] += O::load(r + 1);
                    }
                }
                if (pair && vec_c) {
                    O::store2(c, v[0], v[1]);
                } else {
                    O::store(c, v[0]);
                    if (pair) O::store(c + 1, v[1]);
                }
            }
        }
    }
}
