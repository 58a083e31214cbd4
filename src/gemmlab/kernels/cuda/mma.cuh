// mma.cuh: the warp-level tensor-core instruction the mma.sync rungs share (11, 13, 14).
#pragma once

// D += A (16x16, row) * B (16x8, col), fp32 accumulators; A_TYPE 1: fp16, 2: bf16. Fragments as PTX lays
// them out for lane (g = lane / 4, c = lane % 4): a[0] row g, k 2c..2c+1; a[1] row g + 8, the same k; a[2]
// row g, k 2c+8..2c+9; a[3] row g + 8, those k; b0 k 2c..2c+1 of column g, b1 k 2c+8..2c+9; d[0..1] row g,
// columns 2c, 2c + 1, d[2..3] row g + 8.
template <int A_TYPE>
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    if constexpr (A_TYPE == 1) {
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
