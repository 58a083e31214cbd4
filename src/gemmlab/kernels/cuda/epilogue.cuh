// epilogue.cuh: the fused epilogue every tensor-core rung (and the fp32 kernel that takes one) shares.
//
// out = activation(alpha * acc + beta * C + bias) + residual, cast to the output type, applied to the fp32
// accumulator before the one store. C is not read when beta == 0 (BLAS rule). The epilogue is a run-time
// int of flags (one uniform branch per element, negligible next to the K loop; a template parameter per
// combination would multiply compile time by 30).
#pragma once

// Input element type codes (A_TYPE): 1 = fp16, 2 = bf16, 3 = tf32 (fp32 storage, rounded to tf32 on the
// way into the tensor cores). Output element type codes (C_TYPE): 1 = fp32, 2 = fp16, 3 = bf16. 16-bit
// values travel as raw bits (unsigned short); conversions are single PTX cvt instructions, so the kernel
// needs neither cuda_fp16.h nor cuda_bf16.h.
typedef unsigned short bits16;

// The storage type of input code A_TYPE: 16-bit raw bits for fp16 / bf16, float for tf32.
template <int A_TYPE> struct In {
    static_assert(A_TYPE >= 1 && A_TYPE <= 3, "A_TYPE: 1 fp16, 2 bf16, 3 tf32");
    typedef bits16 T;
};
template <> struct In<3> { typedef float T; };

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
#define EPI_FLAGS_MASK 63    // bits 0-5: the epilogue proper; above them, 8-bit inputs' scales:
#define EPI_SCALE_SHIFT 6    // bits 6-7 A's scale, 8-9 B's (0 none, 1 one per tensor, 2 per row of A / column of B,
                             // 3 per block)
#define EPI_SCALE_ONE 1
#define EPI_SCALE_VECTOR 2
#define EPI_SCALE_BLOCK 3    // one per 1 x 128 block of A (row, k step) / 128 x 128 block of B (k step, 128 columns)

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
// fp32 -> tf32 (10-bit mantissa), rounded to nearest with ties away from zero, as the bits mma.sync's
// .tf32 operands expect (the low 13 bits zero). The tensor cores would otherwise truncate.
__device__ __forceinline__ unsigned float_to_tf32(float f) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
    return r;
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
    // bf16: one packing conversion (v0 to the low half), the same rounding as two single ones. fp16 keeps
    // two conversions: with `cvt.rn.f16x2.f32` in inline asm, ptxas compiled rung 11 (fp16 out) with 40
    // registers and 2 KB of spills, as it did once for `tanh.approx.f32` (see activate).
    // Two outputs as one 32-bit word, v0 in the low half (also what shared-memory staging writes).
    static __device__ __forceinline__ unsigned pack2(float v0, float v1) {
        unsigned u;
        if (C_TYPE == 2)
            u = (unsigned)cvt_out(v0) | ((unsigned)cvt_out(v1) << 16);
        else
            asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(v1), "f"(v0));
        return u;
    }
    static __device__ __forceinline__ void store2(bits16* p, float v0, float v1) {
        *reinterpret_cast<unsigned*>(p) = pack2(v0, v1);
    }
    static __device__ __forceinline__ float2 load2(const bits16* p) {
        const unsigned u = *reinterpret_cast<const unsigned*>(p);
        return make_float2(cvt_in((bits16)(u & 0xffff)), cvt_in((bits16)(u >> 16)));
    }
};
template <> struct Out<2> : Out16<2> {};
template <> struct Out<3> : Out16<3> {};

// A cheaper tanh for 16-bit outputs: 1 - 2 / (e^(2x) + 1) with the fast exponential and division
// (about 4 instructions against about 20 for tanhf; saturates correctly to +-1). Its relative error, about
// 2^-20 away from x = 0 and larger only within 1e-3 of it where tanh(x) ~ x is tiny next to 1 in GELU's
// 1 + tanh(u), is far below a 16-bit output's rounding (2^-8 for bf16, 2^-11 for fp16).
__device__ __forceinline__ float tanh_fast(float x) { return 1.0f - __fdividef(2.0f, __expf(2.0f * x) + 1.0f); }

// GELU (tanh form) as x sigma(2u) = x / (1 + e^z), z = -2u = x (K0 + K1 x^2): three multiplies or FMAs,
// the fast exponential (a multiply and MUFU.EX2), an add and the fast division (MUFU.RCP and a multiply),
// about half the FP32 work of 0.5 x (1 + tanh_fast(u)), and no cancellation where 1 + tanh(u) is small
// (x < -2). Relative error about 1e-5 at most on [-12, 12]; the limits are exact (e^z = inf gives -0, e^z = 0
// gives x). Used by rung 15's epilogues from registers (measured 0.941 -> 0.972 of the plain call at 8192^3,
// docs/journal.md). Not in `activate`: inlined into rung 11's unrolled epilogue, it made ptxas compile
// its 16-bit-output instantiations with 40 registers and 2 KB of spills (234 registers, none, with the
// tanh form).
__device__ __forceinline__ float gelu_tanh_sigmoid(float x) {
    constexpr float K0 = -1.5957691216057308f;  // -2 sqrt(2/pi)
    constexpr float K1 = -1.5957691216057308f * 0.044715f;
    return __fdividef(x, 1.0f + __expf(x * fmaf(K1, x * x, K0)));
}

template <bool FAST = false>
__device__ __forceinline__ float activate(float v, int act) {
    switch (act) {
        case EPI_ACT_RELU: return fmaxf(v, 0.0f);
        case EPI_ACT_GELU_TANH: {
            const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);  // sqrt(2/pi) (v + 0.044715 v^3)
            return 0.5f * v * (1.0f + (FAST ? tanh_fast(u) : tanhf(u)));
        }
        case EPI_ACT_GELU_ERF: return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
        case EPI_ACT_SILU: return FAST ? __fdividef(v, 1.0f + __expf(-v)) : v / (1.0f + __expf(-v));
        default: return v;
    }
}

// The epilogue of two horizontally adjacent outputs (row, col) and (row, col + 1) with accumulators acc0,
// acc1; `pair` says whether col + 1 < N (else only the first is written). `vec_c` / `vec_r`: C and R allow
// one 2-element access at even columns (base aligned to two elements, even leading dimension).
template <int C_TYPE>
__device__ __forceinline__ void epilogue_pair(typename Out<C_TYPE>::T* __restrict__ C, int ldc, int row, int col,
                                              bool pair, float acc0, float acc1, float alpha, float beta,
                                              const float* __restrict__ bias, const typename Out<C_TYPE>::T* __restrict__ R,
                                              int ldr, int epilogue, bool vec_c, bool vec_r) {
    typedef Out<C_TYPE> O;
    typedef typename O::T OutT;
    const int bias_mode = epilogue & EPI_BIAS_MASK;
    const int act = (epilogue >> EPI_ACT_SHIFT) & EPI_ACT_MASK;
    float v0 = alpha * acc0, v1 = alpha * acc1;
    OutT* c = C + (size_t)row * ldc + col;
    if (beta != 0.0f) {  // BLAS rule: C is not read when beta == 0
        if (pair && vec_c) {
            const float2 old = O::load2(c);
            v0 += beta * old.x;
            v1 += beta * old.y;
        } else {
            v0 += beta * O::load(c);
            if (pair) v1 += beta * O::load(c + 1);
        }
    }
    if (bias_mode == EPI_BIAS_ROW) {
        const float b = bias[row];
        v0 += b;
        v1 += b;
    } else if (bias_mode == EPI_BIAS_COL) {
        v0 += bias[col];
        if (pair) v1 += bias[col + 1];
    }
    if (act) {
        v0 = activate<C_TYPE != 1>(v0, act);  // 16-bit outputs take the fast tanh and division
        v1 = activate<C_TYPE != 1>(v1, act);
    }
    if (epilogue & EPI_RESIDUAL) {
        const OutT* r = R + (size_t)row * ldr + col;
        if (pair && vec_r) {
            const float2 rr = O::load2(r);
            v0 += rr.x;
            v1 += rr.y;
        } else {
            v0 += O::load(r);
            if (pair) v1 += O::load(r + 1);
        }
    }
    if (pair && vec_c) {
        O::store2(c, v0, v1);
    } else {
        O::store(c, v0);
        if (pair) O::store(c + 1, v1);
    }
}

// True when a matrix allows one 2-element access at every even column: the base is aligned to two
// elements and the leading dimension is even (the `vec_c` / `vec_r` arguments of epilogue_pair).
template <typename T>
__device__ __forceinline__ bool pairs_aligned(const T* p, int ld) {
    return ((reinterpret_cast<size_t>(p) & (2 * sizeof(T) - 1)) == 0) && (ld % 2 == 0);
}

// The fused epilogue over a thread's TM x TN fp32 results (the fp32 register-tiled kernels' layouts):
// result (i, j) belongs at row row0 + (i / ROW_GROUP) * ROW_STEP + i % ROW_GROUP and column
// col0 + (j / 4) * COL_STEP + j % 4 of C (ROW_GROUP 1: rows ROW_STEP apart; 4: groups of four adjacent
// rows). Adjacent pairs (j, j + 1) go through epilogue_pair; outputs outside M x N are skipped. fp32 out.
template <int TM, int TN, int ROW_GROUP, int ROW_STEP, int COL_STEP>
__device__ __forceinline__ void epilogue_fp32_tile(float* __restrict__ C, int ldc, int row0, int col0, int M, int N,
                                                   const float (&acc)[TM][TN], float alpha, float beta,
                                                   const float* __restrict__ bias, const float* __restrict__ R,
                                                   int ldr, int epilogue) {
    static_assert(TM % ROW_GROUP == 0 && TN % 4 == 0, "TM must be whole row groups, TN a multiple of 4");
    static_assert(COL_STEP % 2 == 0, "pairs must start at even columns");
    const bool even = col0 % 2 == 0;  // then every pair starts at an even column (j % 4 and COL_STEP are even)
    const bool vec_c = even && pairs_aligned(C, ldc);
    const bool vec_r = even && (!(epilogue & EPI_RESIDUAL) || pairs_aligned(R, ldr));
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + (i / ROW_GROUP) * ROW_STEP + i % ROW_GROUP;
        if (row >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; j += 2) {
            const int col = col0 + (j / 4) * COL_STEP + j % 4;
            if (col >= N) continue;
            epilogue_pair<1>(C, ldc, row, col, col + 1 < N, acc[i][j], acc[i][j + 1], alpha, beta, bias, R, ldr,
                             epilogue, vec_c, vec_r);
        }
    }
}

// A warp's TM x TN-per-lane fp32 results (rung 10's layout: lane (tr, tc) = (lane / LCOLS, lane % LCOLS) holds
// rows 4 tr + (i / 4) 4 LROWS + i % 4 and columns 4 tc + (j / 4) 4 LCOLS + j % 4 of the warp's WM x WN tile at
// (row0, col0) of C) written row by row through `stage` (a shared-window address), the warp's own 4 LROWS x
// (WN + 4) floats of shared memory. A group of four rows a lane goes in as 16-byte pieces, times alpha (new
// registers: written as they are, the accumulators were held in aligned quads across the main loop, which
// spilled), and comes out a row at a time, lane l taking columns l, l + 32, ..., so that each store covers
// consecutive floats of one row of C (for C whose rows are not 16-byte aligned, where the lanes' own stores
// would each cover 8 rows' sectors in part). Then beta and the flags per element; outputs outside M x N skipped.
template <int TM, int TN, int LROWS, int LCOLS>
__device__ __forceinline__ void store_rows_staged(float* __restrict__ C, int ldc, int row0, int col0, int M, int N,
                                                  const float (&acc)[TM][TN], float alpha, float beta,
                                                  const float* __restrict__ bias, const float* __restrict__ R, int ldr,
                                                  int epilogue, unsigned stage, int lane) {
    constexpr int WN = TN * LCOLS, SP = WN + 4, ROWS = 4 * LROWS;  // (+ 4: a quarter warp's pieces in distinct banks)
    static_assert(TM % 4 == 0 && TN % 4 == 0 && LROWS * LCOLS == 32, "rung 10's thread tile");
    const int tr = lane / LCOLS, tc = lane % LCOLS;
#pragma unroll
    for (int gi = 0; gi < TM / 4; ++gi) {
        __syncwarp();  // the group before is out of `stage`
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int q = 0; q < TN / 4; ++q)
                st_shared4(stage + 4 * ((4 * tr + r) * SP + 4 * tc + 4 * LCOLS * q),
                           make_float4(alpha * acc[4 * gi + r][4 * q], alpha * acc[4 * gi + r][4 * q + 1],
                                       alpha * acc[4 * gi + r][4 * q + 2], alpha * acc[4 * gi + r][4 * q + 3]));
        __syncwarp();
        // The lane's column of each row of the group, down the rows: a load, a store and a step of the pointer
        // per row where nothing more is asked, the tests made once a group (with them in the row loop, 1000 x
        // 3001 x 200 ran at 0.76 of cuBLAS on the H100; without, 0.82).
        const int first = row0 + gi * ROWS, rows = min(ROWS, opaque(M) - first);
#pragma unroll
        for (int h = 0; h < (WN + 31) / 32; ++h) {
            const int c = lane + 32 * h, col = col0 + c;
            if (c >= WN || col >= N) continue;
            const unsigned src = stage + 4 * c;
            float* cp = C + (size_t)first * ldc + col;
            if (!epilogue && beta == 0.0f) {
#pragma unroll 4
                for (int rr = 0; rr < rows; ++rr, cp += ldc) *cp = ld_shared1(src + 4 * SP * rr);
            } else {
#pragma unroll 1
                for (int rr = 0; rr < rows; ++rr, cp += ldc) {
                    const float v = ld_shared1(src + 4 * SP * rr);
                    if (epilogue)  // (alpha applied as the values went in: 1 x v is v)
                        epilogue_pair<1>(C, ldc, first + rr, col, false, v, 0.0f, 1.0f, beta, bias, R, ldr, epilogue,
                                         false, false);
                    else
                        *cp = v + beta * *cp;
                }
            }
        }
    }
}

// ------------------------------------------------------------------------------------------ split-K's sum

// A split over K leaves `slices` slabs of fp32 partial sums in `ws`, each M rows of ldw = N rounded up to a
// multiple of 4 floats. This sums them and applies the epilogue, as a second launch over all of C, so that
// the whole GPU shares the reading (a long split of a small C is mostly this reading: 132 slabs of a 64 x 64
// C are 2 MB). LANES lanes take one 4-column piece of a row: lane l adds slices l, l + LANES, ... (several
// loads in flight each), then the lanes' sums meet in a fixed tree of shuffles, so the bits of C depend only
// on the slice count (which chooses LANES), never on timing. LANES 1 for a few slices of a large C (eight
// lanes left most of them idle and the launch issue-bound: 26 us for two slabs of 128 x 11008), 8 for many
// slices of a small C. Launched with SPLIT_REDUCE_THREADS threads per block over M x (ldw / 4) x LANES
// threads (the spec's geometry says the same).
#define SPLIT_REDUCE_THREADS 256
template <int C_TYPE, int LANES>
__device__ __forceinline__ void split_sum_epilogue(int M, int N, int slices, float alpha, float beta,
                                                   typename Out<C_TYPE>::T* __restrict__ C, int ldc,
                                                   const float* __restrict__ ws, const float* __restrict__ bias,
                                                   const typename Out<C_TYPE>::T* __restrict__ R, int ldr, int epilogue) {
    static_assert(LANES == 1 || LANES == 2 || LANES == 4 || LANES == 8, "LANES: 1, 2, 4 or 8 lanes per 4 columns");
    const int ldw = (N + 3) & ~3, quads = ldw / 4;
    const long long q = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / LANES;
    const int lane = threadIdx.x % LANES;
    const bool live = q < (long long)M * quads;  // every lane reaches the shuffles below
    const int row = live ? (int)(q / quads) : 0, col = live ? (int)(q % quads) * 4 : 0;
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (live) {
        const size_t slab = (size_t)M * ldw;
        const float* p = ws + (size_t)row * ldw + col;
#pragma unroll 4
        for (int s = lane; s < slices; s += LANES) {
            const float4 v = __ldcg(reinterpret_cast<const float4*>(p + s * slab));
            sum.x += v.x;
            sum.y += v.y;
            sum.z += v.z;
            sum.w += v.w;
        }
    }
#pragma unroll
    for (int off = LANES / 2; off > 0; off /= 2) {
        sum.x += __shfl_down_sync(0xffffffffu, sum.x, off, LANES);
        sum.y += __shfl_down_sync(0xffffffffu, sum.y, off, LANES);
        sum.z += __shfl_down_sync(0xffffffffu, sum.z, off, LANES);
        sum.w += __shfl_down_sync(0xffffffffu, sum.w, off, LANES);
    }
    if (!live || lane != 0) return;
    const bool vec_c = pairs_aligned(C, ldc), vec_r = !(epilogue & EPI_RESIDUAL) || pairs_aligned(R, ldr);
    epilogue_pair<C_TYPE>(C, ldc, row, col, col + 1 < N, sum.x, sum.y, alpha, beta, bias, R, ldr, epilogue, vec_c, vec_r);
    if (col + 2 < N)
        epilogue_pair<C_TYPE>(C, ldc, row, col + 2, col + 3 < N, sum.z, sum.w, alpha, beta, bias, R, ldr, epilogue, vec_c,
                              vec_r);
}
