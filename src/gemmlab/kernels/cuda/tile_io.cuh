// tile_io.cuh: 16-byte global loads and stores with zero padding at the matrix edges, shared by the
// vectorised rungs (06 onwards).
#pragma once
#include "common.cuh"

// True when every row of a row-major matrix starts on a 16-byte boundary: the base pointer is 16-byte
// aligned and the leading dimension is a multiple of 4 floats. Only then may rows be read as float4.
__device__ __forceinline__ bool rows_are_16B_aligned(const float* p, int ld) {
    return ((reinterpret_cast<size_t>(p) & 15) == 0) && ((ld & 3) == 0);
}

// Four consecutive floats of one row starting at p, of which `left` lie inside the matrix (left <= 0:
// none); the others read as 0. One 16-byte load when `vec` (p is 16-byte aligned) and all four are in.
__device__ __forceinline__ float4 load4_zero_padded(const float* __restrict__ p, int left, bool vec) {
    if (vec && left >= 4) return __ldg(reinterpret_cast<const float4*>(p));
    float4 v;
    v.x = left > 0 ? __ldg(p + 0) : 0.0f;
    v.y = left > 1 ? __ldg(p + 1) : 0.0f;
    v.z = left > 2 ? __ldg(p + 2) : 0.0f;
    v.w = left > 3 ? __ldg(p + 3) : 0.0f;
    return v;
}

// C[p .. p+3] = alpha * acc + beta * C (C not read when beta == 0), for the `left` of them inside C.
__device__ __forceinline__ void store4_c(float* __restrict__ p, float4 acc, int left, bool vec, float alpha, float beta) {
    if (vec && left >= 4) {
        float4 out = make_float4(alpha * acc.x, alpha * acc.y, alpha * acc.z, alpha * acc.w);
        if (beta != 0.0f) {
            const float4 old = *reinterpret_cast<const float4*>(p);
            out.x += beta * old.x; out.y += beta * old.y; out.z += beta * old.z; out.w += beta * old.w;
        }
        *reinterpret_cast<float4*>(p) = out;
        return;
    }
    const float a[4] = {acc.x, acc.y, acc.z, acc.w};
#pragma unroll
    for (int j = 0; j < 4; ++j)
        if (j < left) store_c(p, j, a[j], alpha, beta);
}

// One step's tiles of the single-buffered vectorised rungs (06-08): the BM x BK tile of A, read as float4
// along K and stored transposed (As[k * BMP + m], BMP = BM plus any padding), and the BK x BN tile of B,
// stored as it lies (Bs[k * BN + n]). The block's NT threads stride over the float4s; whatever lies past
// M, N or K is stored as 0.
template <int BM, int BN, int BK, int NT, int BMP>
__device__ __forceinline__ void load_step_tiles(float* __restrict__ As, float* __restrict__ Bs,
                                                const float* __restrict__ A, int lda, const float* __restrict__ B,
                                                int ldb, int row0, int col0, int k0, int M, int N, int K,
                                                bool vec_a, bool vec_b, int tid) {
    static_assert((BM * BK / 4) % NT == 0 && (BK * BN / 4) % NT == 0, "tiles must split evenly into float4s per thread");
#pragma unroll
    for (int i = 0; i < BM * BK / 4 / NT; ++i) {
        const int e = tid + i * NT, r = e / (BK / 4), kq = (e % (BK / 4)) * 4;
        const int row = row0 + r;
        const float4 v = load4_zero_padded(A + (size_t)row * lda + k0 + kq, row < M ? K - k0 - kq : 0, vec_a);
        As[(kq + 0) * BMP + r] = v.x;
        As[(kq + 1) * BMP + r] = v.y;
        As[(kq + 2) * BMP + r] = v.z;
        As[(kq + 3) * BMP + r] = v.w;
    }
#pragma unroll
    for (int i = 0; i < BK * BN / 4 / NT; ++i) {
        const int e = tid + i * NT, r = e / (BN / 4), c = (e % (BN / 4)) * 4;
        const int krow = k0 + r;
        *reinterpret_cast<float4*>(&Bs[r * BN + c]) =
            load4_zero_padded(B + (size_t)krow * ldb + col0 + c, krow < K ? N - col0 - c : 0, vec_b);
    }
}

// Store a thread's TM x TN results held as 4 x 4 groups (rungs 07-10): result (i, j) goes to row
// row0 + (i / 4) * ROW_STEP + i % 4 and column col0 + (j / 4) * COL_STEP + j % 4 of a matrix with row
// stride ld, as C = alpha * acc + beta * C (C not read when beta == 0), 16 bytes at a time where `vec`.
template <int TM, int TN, int ROW_STEP, int COL_STEP>
__device__ __forceinline__ void store_grouped_tile(float* __restrict__ C, int ld, int row0, int col0, int M, int N,
                                                   const float (&acc)[TM][TN], bool vec, float alpha, float beta) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + (i / 4) * ROW_STEP + i % 4;
#pragma unroll
        for (int g = 0; g < TN / 4; ++g) {
            const int col = col0 + g * COL_STEP;
            store4_c(C + (size_t)row * ld + col,
                     make_float4(acc[i][4 * g], acc[i][4 * g + 1], acc[i][4 * g + 2], acc[i][4 * g + 3]),
                     row < M ? N - col : 0, vec, alpha, beta);
        }
    }
}

// Store a thread's TM x TN results whose rows come in groups of ROW_GROUP adjacent rows, ROW_STEP apart, and
// whose columns come in groups of 4, COL_STEP apart (rung 10): result (i, j) goes to row
// row0 + (i / ROW_GROUP) * ROW_STEP + i % ROW_GROUP and column col0 + (j / 4) * COL_STEP + j % 4 of a
// matrix with row stride ld, as C = alpha * acc + beta * C (C not read when beta == 0). A thread whose
// results all lie inside C, with 16-byte aligned rows (`vec`), stores 16 bytes at a time; the others
// store element by element. Written so that the compiler emits two short paths per case, not one path
// per combination of edge tests.
template <int TM, int TN, int ROW_GROUP, int ROW_STEP, int COL_STEP>
__device__ __forceinline__ void store_strided_tile(float* __restrict__ C, int ld, int row0, int col0, int M, int N,
                                                   const float (&acc)[TM][TN], bool vec, float alpha, float beta) {
    static_assert(TM % ROW_GROUP == 0, "TM must be whole row groups");
    // Addresses are a row pointer plus compile-time offsets, so no per-element address is ever computed
    // (or kept in a register).
    const int n_left = N - col0;  // columns of C from col0 on
    const int last_row = row0 + (TM / ROW_GROUP - 1) * ROW_STEP + ROW_GROUP - 1;
    const bool whole = vec && last_row < M && (TN / 4 - 1) * COL_STEP + 4 <= n_left;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + (i / ROW_GROUP) * ROW_STEP + i % ROW_GROUP;
        float* rp = C + (size_t)row * ld + col0;
        if (whole) {
#pragma unroll
            for (int g = 0; g < TN / 4; ++g) {
                float4 out = make_float4(alpha * acc[i][4 * g], alpha * acc[i][4 * g + 1], alpha * acc[i][4 * g + 2],
                                         alpha * acc[i][4 * g + 3]);
                if (beta != 0.0f) {
                    const float4 old = *reinterpret_cast<const float4*>(rp + g * COL_STEP);
                    out.x += beta * old.x; out.y += beta * old.y; out.z += beta * old.z; out.w += beta * old.w;
                }
                *reinterpret_cast<float4*>(rp + g * COL_STEP) = out;
            }
        } else if (row < M) {
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int off = (j / 4) * COL_STEP + j % 4;
                if (off < n_left) {
                    float out = alpha * acc[i][j];
                    if (beta != 0.0f) out += beta * rp[off];
                    rp[off] = out;
                }
            }
        }
    }
}

// p + rows * ld floats (rows * ld below 2^31) as one wide multiply-add: the compiler would otherwise
// widen the offset to 64 bits once, keep it in two registers and spend two adds on every use.
__device__ __forceinline__ const float* advance_rows(const float* p, int rows, int ld) {
    const float* r;
    asm("mad.wide.s32 %0, %1, %2, %3;" : "=l"(r) : "r"(ld), "r"(4 * rows), "l"(p));
    return r;
}

// ---- Asynchronous global -> shared copies (cp.async, sm_80 onwards; a plain load and store before).
// Shared-memory destinations are 32-bit shared-window addresses (shared_addr). A copy group is committed
// with async_commit; async_wait<N> returns when at most N of this thread's groups are still in flight.
// The copies of other threads are visible only after a barrier that follows the wait.

__device__ __forceinline__ unsigned shared_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// 16 bytes from a 16-byte aligned global address.
__device__ __forceinline__ void async_copy16(unsigned dst, const float* src) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
#else
    float4 v = __ldg(reinterpret_cast<const float4*>(src));
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w));
#endif
}

// 16 bytes of which the first `bytes` (0, 4, 8, 12 or 16) are read from a 16-byte aligned global address
// and the rest written as zero. With bytes == 0 nothing is read (src must still be a valid address).
__device__ __forceinline__ void async_copy16_zfill(unsigned dst, const float* src, int bytes) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
#else
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = 4 * j < bytes ? __ldg(src + j) : 0.0f;
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]));
#endif
}

// One float (4 bytes, any float address). Goes through L1 (.ca): the neighbours a warp's other copies
// read from the same 32-byte sector are served there.
__device__ __forceinline__ void async_copy4(unsigned dst, const float* src) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
#else
    const float v = __ldg(src);
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(dst), "f"(v));
#endif
}

// One float (4 bytes, any float address), or a zero when !inside (then src is not read).
__device__ __forceinline__ void async_copy4_zfill(unsigned dst, const float* src, bool inside) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(inside ? 4 : 0));
#else
    const float v = inside ? __ldg(src) : 0.0f;
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(dst), "f"(v));
#endif
}

// 16 bytes from shared memory at a 32-bit shared-window address.
__device__ __forceinline__ float4 lds128(unsigned addr) {
    float4 v;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr));
    return v;
}

__device__ __forceinline__ void async_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N>
__device__ __forceinline__ void async_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
