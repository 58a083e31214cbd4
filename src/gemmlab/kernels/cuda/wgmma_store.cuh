// wgmma_store.cuh: how the accumulators of a wgmma warpgroup reach C, for every Hopper rung.
//
// A consumer warpgroup holds MT m64 tiles of ACC fp32 accumulators per thread in wgmma's layout (hopper.cuh,
// acc_row: warp w holds rows 16 w + g and 16 w + g + 8 of each m64 tile, register 4 j + q column 8 j + 2 t +
// (q & 1)). They leave it one of three ways, chosen per tile by store_registers:
// - straight from the registers, each pair of adjacent columns one 4- or 8-byte store: the plain epilogue
//   (alpha, beta; store_direct) and a linear layer's with beta == 0 (act(alpha acc + bias) + R;
//   store_direct_fused, the activation compiled in);
// - staged through shared memory 32 columns at a time and written by an out-of-line routine through
//   epilogue.cuh (store_chunk): whatever the first cannot take (an odd N, rows that allow no pairs, beta with
//   flags).
// The production rung (15) adds a third, through shared memory and the copy engine (TMA stores); the steps
// before it write from registers only.
#pragma once
#include "common.cuh"
#include "epilogue.cuh"
#include "hopper.cuh"

// tanh on the multi-function unit (MUFU.TANH, sm_75 and later): one operation, absolute error about 2^-11.
__device__ __forceinline__ float tanh_mufu(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// GELU with erf for 16-bit outputs: x Phi(x), Phi(x) = (1 + erf(z)) / 2 with z = x / sqrt 2, and erf from
// Abramowitz and Stegun 7.1.28: for z >= 0, 1 - erf(z) = p(z)^-16, p(z) = 1 + a1 z + ... + a6 z^6, absolute
// error at most 3e-7. So 1 + erf(z) is 2 - r^16 for z >= 0 and r^16 for z < 0, r = 1 / p(|z|): a degree-6
// polynomial, one MUFU.RCP and four squarings, with no cancellation in the negative tail. libdevice's erff
// takes about 30 FP32 operations over two branches and an exponential; the layer with erf measured 0.953 of
// the plain product at 8192^3 against 1.021 for the tanh form (docs/journal.md). The error, 1.5e-7 |x|
// from the formula and about 2^-18 of the tail from the reciprocal, is far below a 16-bit output's rounding.
__device__ __forceinline__ float gelu_erf_16(float x) {
    const float z = fabsf(x) * 0.7071067811865476f;
    float p = fmaf(4.30638e-5f, z, 2.765672e-4f);
    p = fmaf(p, z, 1.520143e-4f);
    p = fmaf(p, z, 9.2705272e-3f);
    p = fmaf(p, z, 4.22820123e-2f);
    p = fmaf(p, z, 7.05230784e-2f);
    p = fmaf(p, z, 1.0f);
    float r = __fdividef(1.0f, p);  // MUFU.RCP; 0 once p passes 2^126 (the tail is then 0 in any case)
    r *= r;
    r *= r;
    r *= r;
    r *= r;  // r^16 = 1 - erf(|z|)
    return 0.5f * x * (x >= 0.0f ? 2.0f - r : r);
}

// The activation of the epilogues from registers (ACT a compile-time flag), by output type: the
// exponentials cost multi-function-unit operations, 16 results per SM per clock, and the timeline put the
// GELU epilogue at that bound (about 1,300 cycles a box of 64 columns, 2 operations an element).
// - bf16 out: GELU (tanh) as 0.5 x (1 + tanh u) and SiLU as 0.5 x (1 + tanh(x / 2)), one MUFU.TANH each. The
//   error, about 2^-12 |x| (tanh's 2^-11, halved), is a sixteenth of the rounding of a bf16 value of x's size
//   (up to 2^-8 |x|); where 1 + tanh is small (x < -2) it is large against the tiny result itself, and
//   below the output's resolution at the data's scale.
// - fp16 out (rounding up to 2^-11 |x|, only twice that error): GELU as x / (1 + e^z) (gelu_tanh_sigmoid) and
//   SiLU as x / (1 + e^-x), exponential and division, accurate to about 1e-5 relative everywhere.
// - 16-bit out, GELU with erf: gelu_erf_16 above.
// - fp32 out: epilogue.cuh's exact forms.
template <int C_TYPE, int ACT>
__device__ __forceinline__ float activate_direct(float v) {
    if constexpr (C_TYPE == 3 && ACT == EPI_ACT_GELU_TANH) {
        constexpr float C0 = 0.7978845608028654f, C1 = 0.7978845608028654f * 0.044715f;  // sqrt(2/pi) (1, 0.044715)
        const float h = 0.5f * v;
        return fmaf(h, tanh_mufu(v * fmaf(C1, v * v, C0)), h);
    } else if constexpr (C_TYPE == 3 && ACT == EPI_ACT_SILU) {
        const float h = 0.5f * v;
        return fmaf(h, tanh_mufu(h), h);
    } else if constexpr (C_TYPE == 2 && ACT == EPI_ACT_GELU_TANH) {
        return gelu_tanh_sigmoid(v);
    } else if constexpr (C_TYPE != 1 && ACT == EPI_ACT_GELU_ERF) {
        return gelu_erf_16(v);
    } else {
        return activate<C_TYPE != 1>(v, ACT);
    }
}

constexpr int EPI_COLS = 32;                // columns of C per epilogue chunk
constexpr int EPI_PITCH = EPI_COLS + 8;     // floats per staged row: 64-bit writes of 8 rows x 4 lanes hit
                                            // 32 distinct banks per half-warp; 16-byte row reads stay aligned

// The second half of the epilogue: ROWS x EPI_COLS staged accumulators (row pitch EPI_PITCH) to C, through
// epilogue.cuh. Each of the 128 threads takes 4 consecutive columns of a row, so a warp writes 4 rows of
// 32 contiguous outputs. Kept out of line: one copy of the epilogue code serves every chunk and tile
// (unrolled over 128 accumulators it is tens of thousands of instructions, and fetching that from L2 once
// per tile cost as much as the main loop).
template <int C_TYPE, int ROWS>
__device__ __noinline__ void store_chunk(const float* stage, int row0, int col0, int M, int N,
                                         typename Out<C_TYPE>::T* C, int ldc, float alpha, float beta,
                                         const float* bias, const typename Out<C_TYPE>::T* R, int ldr, int epilogue,
                                         bool vec_c, bool vec_r, int tid) {
    const int r_in = tid / (EPI_COLS / 4), c_in = (tid % (EPI_COLS / 4)) * 4;
    // Unrolled over the ROWS / 16 rows a thread takes, so that their loads of C, bias and residual are in
    // flight together (a rolled loop waited out one global latency per row, 8 warps per SM being too few
    // to hide it: the fused GEMM + bias + GELU ran at 0.6x of the plain GEMM).
#pragma unroll
    for (int it = 0; it < ROWS / (128 / (EPI_COLS / 4)); ++it) {
        const int r = r_in + it * (128 / (EPI_COLS / 4));
        const int row = row0 + r, col = col0 + c_in;
        if (row >= M || col >= N) continue;
        const float4 v = *reinterpret_cast<const float4*>(stage + r * EPI_PITCH + c_in);
        epilogue_pair<C_TYPE>(C, ldc, row, col, col + 1 < N, v.x, v.y, alpha, beta, bias, R, ldr, epilogue, vec_c, vec_r);
        if (col + 2 < N)
            epilogue_pair<C_TYPE>(C, ldc, row, col + 2, col + 3 < N, v.z, v.w, alpha, beta, bias, R, ldr, epilogue, vec_c,
                                  vec_r);
    }
}

// The plain epilogue (alpha * acc + beta * C, no flags) of a consumer's WG_M x BN block, straight from the
// accumulators: each register pair is two adjacent outputs, written as one 4- or 8-byte store at a
// compile-time offset from one of 2 x MT row pointers. No staging, no barriers: a few hundred
// instructions per thread instead of the staged path's thousands (which cost as much as 16 k steps of
// the main loop per tile; ncu: 45% of warp cycles at the staging barriers).
// rows_left, cols_left: rows and columns of C from (row0, col0) on (a block at the edge writes only those;
// N is even here, so a pair is inside C whenever its first column is).
template <int C_TYPE, int MT, int ACC>
__device__ __forceinline__ void store_direct(typename Out<C_TYPE>::T* __restrict__ C, int ldc, int row0, int col0,
                                             int rows_left, int cols_left, const float (&acc)[MT][ACC], float alpha,
                                             float beta, int warp, int g, int t) {
    typedef Out<C_TYPE> O;
    typedef typename O::T OutT;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = acc_row(mt, warp, g, h);
            if (r >= rows_left) continue;
            OutT* p = C + (size_t)(row0 + r) * ldc + col0 + 2 * t;
            const int cl = cols_left - 2 * t;
            if (beta == 0.0f) {  // BLAS rule: C is not read
#pragma unroll
                for (int j = 0; j < ACC / 4; ++j)
                    if (8 * j < cl)
                        O::store2(p + 8 * j, alpha * acc[mt][4 * j + 2 * h], alpha * acc[mt][4 * j + 2 * h + 1]);
            } else {
#pragma unroll
                for (int j = 0; j < ACC / 4; ++j) {
                    if (8 * j >= cl) continue;
                    const float2 old = O::load2(p + 8 * j);
                    O::store2(p + 8 * j, alpha * acc[mt][4 * j + 2 * h] + beta * old.x,
                              alpha * acc[mt][4 * j + 2 * h + 1] + beta * old.y);
                }
            }
        }
}

// The fused epilogue of a linear layer, act(alpha * acc + bias) (+ R where `R` is not null: a residual whose
// rows allow pairs, read once), also straight from the registers (beta == 0; beta with flags takes the
// staged path). ACT is a compile-time activation (one instantiation per activation, chosen by a switch on the flags), so each element costs its arithmetic and
// nothing else; a column bias is read once per column pair and m64 tile, a row bias once per row (with 128
// accumulators live, little else fits in registers).
template <int C_TYPE, int MT, int ACC, int ACT>
__device__ __forceinline__ void store_direct_fused(typename Out<C_TYPE>::T* __restrict__ C, int ldc, int row0, int col0,
                                                   int rows_left, int cols_left, const float (&acc)[MT][ACC], float alpha,
                                                   const float* __restrict__ bias, int bias_mode,
                                                   const typename Out<C_TYPE>::T* __restrict__ R, int ldr, int warp,
                                                   int g, int t) {
    typedef Out<C_TYPE> O;
    typedef typename O::T OutT;
    const int cl = cols_left - 2 * t;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int r = acc_row(mt, warp, g, 0), r0 = row0 + r;
        // No early exits below: every lane must reach the __syncwarp (lanes differ in row and column).
        const bool in0 = r < rows_left, in1 = r + 8 < rows_left;
        OutT* p0 = C + (size_t)r0 * ldc + col0 + 2 * t;
        OutT* p1 = p0 + (size_t)8 * ldc;
        const float brow0 = bias_mode == EPI_BIAS_ROW && in0 ? bias[r0] : 0.0f;
        const float brow1 = bias_mode == EPI_BIAS_ROW && in1 ? bias[r0 + 8] : 0.0f;
#pragma unroll
        for (int j = 0; j < ACC / 4; ++j) {
            const bool inc = 8 * j < cl;
            const float2 bcol = bias_mode == EPI_BIAS_COL && inc
                                    ? *reinterpret_cast<const float2*>(bias + col0 + 8 * j + 2 * t)
                                    : make_float2(0.0f, 0.0f);
            const float* a = &acc[mt][4 * j];
            const size_t roff = (size_t)r0 * ldr + col0 + 8 * j + 2 * t;
            const float2 res0 = R != nullptr && in0 && inc ? O::load2(R + roff) : make_float2(0.0f, 0.0f);
            const float2 res1 = R != nullptr && in1 && inc ? O::load2(R + roff + (size_t)8 * ldr) : make_float2(0.0f, 0.0f);
            if (in0 && inc)
                O::store2(p0 + 8 * j, activate_direct<C_TYPE, ACT>(fmaf(alpha, a[0], brow0 + bcol.x)) + res0.x,
                          activate_direct<C_TYPE, ACT>(fmaf(alpha, a[1], brow0 + bcol.y)) + res0.y);
            if (in1 && inc)
                O::store2(p1 + 8 * j, activate_direct<C_TYPE, ACT>(fmaf(alpha, a[2], brow1 + bcol.x)) + res1.x,
                          activate_direct<C_TYPE, ACT>(fmaf(alpha, a[3], brow1 + bcol.y)) + res1.y);
            // Keeps the scheduler from interleaving all 64 elements' activations (it ran out of registers and
            // spilled with GELU); 32 elements at a time hide the latencies as well. Not for ReLU, which
            // needs no temporaries (there the barrier alone cost 6-9%).
            if (ACT != 0 && ACT != EPI_ACT_RELU && j % 8 == 7) __syncwarp();
        }
    }
}

// One output through the whole epilogue (epilogue.cuh), out of line: the transposed store's path for
// flags, where per-element code inlined 128 times per thread would be fetched from L2 once per tile.
template <int C_TYPE>
__device__ __noinline__ void epilogue_one(typename Out<C_TYPE>::T* __restrict__ C, int ldc, int row, int col, float acc,
                                          float alpha, float beta, const float* __restrict__ bias,
                                          const typename Out<C_TYPE>::T* __restrict__ R, int ldr, int epilogue) {
    epilogue_pair<C_TYPE>(C, ldc, row, col, false, acc, 0.0f, alpha, beta, bias, R, ldr, epilogue, false, false);
}

// A consumer's tile (MT m64 tiles, this warpgroup's rows from row0, columns from col0) through the whole
// epilogue, from the registers where C (and R) allow pairs, else staged through `stage` (rows x EPI_PITCH
// floats of shared memory that only this warpgroup uses; `barrier` its named barrier id, 1-15).
template <int C_TYPE, int MT, int ACC>
__device__ __forceinline__ void store_registers(typename Out<C_TYPE>::T* __restrict__ C, int ldc, int M, int N, int row0,
                                                int col0, const float (&acc)[MT][ACC], float alpha, float beta,
                                                const float* __restrict__ bias,
                                                const typename Out<C_TYPE>::T* __restrict__ R, int ldr, int epilogue,
                                                float* stage, int barrier, int warp, int g, int t, int tid_wg) {
    const bool vec_c = pairs_aligned(C, opaque(ldc));
    const bool vec_r = !(epilogue & EPI_RESIDUAL) || pairs_aligned(R, opaque(ldr));
    // (Edge blocks too: N even, so every pair of columns lies inside C or outside it.)
    if (vec_c && (opaque(N) & 1) == 0) {
        const int rows_left = M - row0, cols_left = N - col0;
        if (epilogue == 0) {
            store_direct<C_TYPE, MT, ACC>(C, ldc, row0, col0, rows_left, cols_left, acc, alpha, beta, warp, g, t);
            return;
        }
        if (beta == 0.0f && vec_r) {  // (a residual whose rows allow pairs is read here too)
            const int bias_mode = epilogue & EPI_BIAS_MASK;
            const typename Out<C_TYPE>::T* res_r = (epilogue & EPI_RESIDUAL) ? R : nullptr;
#define STORE_FUSED(ACT_) \
    store_direct_fused<C_TYPE, MT, ACC, ACT_>(C, ldc, row0, col0, rows_left, cols_left, acc, alpha, bias, bias_mode, res_r, ldr, \
                                              warp, g, t)
            switch ((epilogue >> EPI_ACT_SHIFT) & EPI_ACT_MASK) {
                case EPI_ACT_RELU: STORE_FUSED(EPI_ACT_RELU); break;
                case EPI_ACT_GELU_TANH: STORE_FUSED(EPI_ACT_GELU_TANH); break;
                case EPI_ACT_GELU_ERF: STORE_FUSED(EPI_ACT_GELU_ERF); break;
                case EPI_ACT_SILU: STORE_FUSED(EPI_ACT_SILU); break;
                default: STORE_FUSED(0);
            }
#undef STORE_FUSED
            return;
        }
    }
    // Otherwise (a residual that allows no pairs, beta with flags, C with an odd N or rows that allow no
    // pairs): EPI_COLS columns at a time, the accumulators go to the staging area (unrolled: register indices
    // are compile-time), then out of line to C.
    const int srow = warp * 16 + g;
#pragma unroll
    for (int chunk = 0; chunk < ACC * 2 / EPI_COLS; ++chunk) {
        warpgroup_barrier(barrier);  // the previous chunk has been read out
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int jj = 0; jj < EPI_COLS / 8; ++jj)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int j = chunk * (EPI_COLS / 8) + jj;
                    *reinterpret_cast<float2*>(stage + (mt * 64 + srow + 8 * h) * EPI_PITCH + jj * 8 + 2 * t) =
                        make_float2(acc[mt][4 * j + 2 * h], acc[mt][4 * j + 2 * h + 1]);
                }
        warpgroup_barrier(barrier);  // the chunk is staged
        store_chunk<C_TYPE, MT * 64>(stage, row0, col0 + chunk * EPI_COLS, M, N, C, ldc, alpha, beta, bias, R, ldr,
                                     epilogue, vec_c, vec_r, tid_wg);
    }
}
