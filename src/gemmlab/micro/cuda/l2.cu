// Microbenchmark - L2 read bandwidth: the whole grid reads a buffer that fits in L2 (the runner loads it
// once before timing), many times over, with ld.global.cg (cache in L2, not in L1), so every request is
// served by L2 and none by DRAM or L1.
//
// The buffer holds mask + 1 float4s (a power of two). Thread g of G reads float4 (g + j * G) & mask for
// j = 0 .. trips * U - 1: a warp reads 512 contiguous bytes per load, U loads are in flight per thread,
// and successive loads of one SM walk the whole buffer (so all L2 slices serve every SM).
template <int U>
__global__ void __launch_bounds__(256)
l2_read(const float4* __restrict__ buf, unsigned mask, int trips, float* __restrict__ sink) {
    const unsigned G = gridDim.x * blockDim.x;
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int t = 0; t < trips; ++t) {
        float4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = __ldcg(buf + ((i + u * G) & mask));
#pragma unroll
        for (int u = 0; u < U; ++u) {
            acc.x += v[u].x; acc.y += v[u].y; acc.z += v[u].z; acc.w += v[u].w;
        }
        i += U * G;
    }
    const float s = (acc.x + acc.y) + (acc.z + acc.w);
    if (s == -1.0f) sink[0] = s;
}
