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
