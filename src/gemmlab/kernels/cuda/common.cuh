// common.cuh: what every rung shares.
//
// All rungs compute C = alpha * A @ B + beta * C on row-major fp32 matrices with leading dimensions
// (A is M x K with row stride lda, B is K x N with ldb, C is M x N with ldc) and take the same argument
// list, in this order: M, N, K, alpha, A, lda, B, ldb, beta, C, ldc.
#pragma once

// v, through a move the compiler cannot look through or move: what is computed from it is computed where it
// stands (a volatile asm keeps its place among the others, e.g. setmaxnreg) and again at each use, instead
// of being hoisted or kept in a register (or spilled) across a main loop.
__device__ __forceinline__ int opaque(int v) {
    int r;
    asm volatile("mov.b32 %0, %1;\n" : "=r"(r) : "r"(v));
    return r;
}

// 16 bytes to, and 4 bytes from, shared memory at a 32-bit shared-window address (no 64-bit generic pointer
// to keep in registers).
__device__ __forceinline__ void st_shared4(unsigned addr, float4 v) {
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                 : "memory");
}
__device__ __forceinline__ float ld_shared1(unsigned addr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
    return v;
}

// BLAS rule: with beta == 0 the old C is never read, so NaN or garbage in C cannot leak into the result.
__device__ __forceinline__ void store_c(float* C, size_t idx, float acc, float alpha, float beta) {
    if (beta == 0.0f) {
        C[idx] = alpha * acc;
    } else {
        C[idx] = alpha * acc + beta * C[idx];
    }
}

// Copy a ROWS x COLS tile of a row-major matrix (row stride ld) into shared memory, row-major, with the
// NT threads of the block striding over its elements so that consecutive threads read consecutive
// addresses. Elements past rows_left / cols_left (the edge of the matrix) are written as 0, which is
// what makes tiles that overhang M, N or K contribute nothing.
template <int ROWS, int COLS, int NT>
__device__ __forceinline__ void load_tile_zero_padded(float* __restrict__ dst, const float* __restrict__ src,
                                                      int ld, int rows_left, int cols_left, int tid) {
    static_assert((ROWS * COLS) % NT == 0, "tile elements must split evenly over the block's threads");
#pragma unroll
    for (int i = 0; i < (ROWS * COLS) / NT; ++i) {
        const int e = tid + i * NT;
        const int r = e / COLS, c = e % COLS;
        dst[e] = (r < rows_left && c < cols_left) ? src[(size_t)r * ld + c] : 0.0f;
    }
}

// The tile (row, column of tiles) of tile number `id` when tiles are taken in groups of `group` tile rows:
// ids (row-major over the 2-D grid) run down `group` tile rows before moving one tile column
// right, so the blocks resident at once read a few row stripes of A and a few column stripes of B
// instead of one row stripe and every column stripe. group = 1 is the plain row-major order.
__device__ __forceinline__ void grouped_tile_of(int id, int tiles_m, int tiles_n, int group, int& tile_row,
                                                int& tile_col) {
    group = max(1, min(group, tiles_m));  // (taller groups order the same; group x tiles_n then fits 32 bits)
    const int per_group = group * tiles_n;
    const int first = (id / per_group) * group;
    const int rows = min(tiles_m - first, group);
    tile_row = first + (id % per_group) % rows;
    tile_col = (id % per_group) / rows;
}

// The same for the block itself: its id is its row-major position in the 2-D grid.
__device__ __forceinline__ void grouped_tile(int group, int& tile_row, int& tile_col) {
    grouped_tile_of(blockIdx.y * gridDim.x + blockIdx.x, gridDim.y, gridDim.x, group, tile_row, tile_col);
}
