// Microbenchmark - L1 hit bandwidth for global loads.
//
// Every block reads a small buffer (L1_F4 float4s = 16 KiB, shared by all blocks, so every SM's L1 holds
// a copy after the first pass) with ld.global.ca (cache in L1). The pattern is the one of the
// shared-memory benchmark: 32 lanes read 32 consecutive float4s, the index moves every iteration, U loads
// in flight per thread. After the first trip every load hits in L1.
constexpr int L1_F4 = 1024;

template <int U>
__global__ void __launch_bounds__(256)
l1_read(const float4* __restrict__ buf, int trips, float* __restrict__ sink) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    unsigned i = threadIdx.x;
    for (int t = 0; t < trips; ++t) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const float4 v = __ldca(buf + ((i + u * 32) & (L1_F4 - 1)));
            acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
        }
        i += U * 32;
    }
    const float s = (acc.x + acc.y) + (acc.z + acc.w);
    if (s == -1.0f) sink[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
