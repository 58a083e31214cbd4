// Microbenchmark - shared-memory read bandwidth.
//
// Each block fills SMEM_F4 float4s (32 KiB) of shared memory, then every thread reads float4s in a
// conflict-free pattern: the 32 lanes of a warp read 32 consecutive float4s (512 bytes = 4 wavefronts of
// 128 bytes, the most the shared-memory pipe delivers per cycle). The index moves every iteration, so no
// load can be hoisted out of the loop; U loads per trip keep the pipe busy, and the few integer and FADD
// instructions per load fit easily in the 16 issue slots an SM has per 4-cycle LDS.128.
constexpr int SMEM_F4 = 2048;

template <int U>
__global__ void __launch_bounds__(256)
smem_read(int trips, float* __restrict__ sink) {
    __shared__ float4 s[SMEM_F4];
    for (int j = threadIdx.x; j < SMEM_F4; j += blockDim.x) s[j] = make_float4(j, j + 1, j + 2, j + 3);
    __syncthreads();
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    unsigned i = threadIdx.x;
    for (int t = 0; t < trips; ++t) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const float4 v = s[(i + u * 32) & (SMEM_F4 - 1)];
            acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
        }
        i += U * 32;  // the next trip reads the next U x 512 bytes of this warp's stripe
    }
    const float total = (acc.x + acc.y) + (acc.z + acc.w);
    if (total == -1.0f) sink[blockIdx.x * blockDim.x + threadIdx.x] = total;
}
