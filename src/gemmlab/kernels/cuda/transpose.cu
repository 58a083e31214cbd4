// Helper (not a rung): out = in^T, for operands a rung must read in the other order (rung 15's TF32 path
// reads B K-major; a row-major B is transposed into a temporary first).
//
// in: rows x cols, rows `ldi` elements apart; out: cols x rows, rows `ldo` elements apart. A block moves a
// 32 x 32 tile through shared memory: 32 threads read 32 consecutive elements of an input row and, after
// the barrier, write 32 consecutive elements of an output row, so both sides are coalesced. The tile row
// pitch of 33 elements puts the 32 elements of a tile column in 32 different banks.
template <typename T>
__global__ void __launch_bounds__(256)
transpose_tiles(const T* __restrict__ in, int rows, int cols, long long ldi, T* __restrict__ out, long long ldo) {
    __shared__ T tile[32][33];
    const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    const int tx = threadIdx.x, ty = threadIdx.y;  // 32 x 8 threads, 4 rows each
#pragma unroll
    for (int i = ty; i < 32; i += 8) {
        const int r = r0 + i, c = c0 + tx;
        if (r < rows && c < cols) tile[i][tx] = in[r * ldi + c];
    }
    __syncthreads();
#pragma unroll
    for (int i = ty; i < 32; i += 8) {
        const int oc = c0 + i, orow = r0 + tx;  // out row oc (an input column), out column orow
        if (oc < cols && orow < rows) out[oc * ldo + orow] = tile[tx][i];
    }
}
