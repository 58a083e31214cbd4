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
