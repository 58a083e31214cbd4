// Microbenchmark - DRAM streaming bandwidth: read, write and copy of buffers many times the L2's size.
//
// 16-byte accesses; each thread handles U float4s spaced one block apart, so a warp's access is 512
// contiguous bytes and every thread has U independent loads in flight (DRAM latency is ~600-800 ns: at
// 3 TB/s about 2 MB must be in flight, i.e. ~16 KB per SM; 2048 threads x 4 x 16 B = 128 KB per SM).
// The grid covers the buffer once: bytes moved = buffer size (read, write) or twice it (copy).
constexpr int STREAM_U = 4;

__global__ void __launch_bounds__(256)
stream_read(const float4* __restrict__ src, long long n4, float* __restrict__ sink) {
    const long long base = (long long)blockIdx.x * blockDim.x * STREAM_U + threadIdx.x;
    float4 v[STREAM_U];
#pragma unroll
    for (int u = 0; u < STREAM_U; ++u) {
        const long long i = base + (long long)u * blockDim.x;
        v[u] = i < n4 ? src[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float s = 0.0f;
#pragma unroll
    for (int u = 0; u < STREAM_U; ++u) s += (v[u].x + v[u].y) + (v[u].z + v[u].w);
    if (s == -1.0f) sink[0] = s;  // never true for the non-negative data the runner writes
}

__global__ void __launch_bounds__(256)
stream_write(float4* __restrict__ dst, long long n4, float value) {
    const long long base = (long long)blockIdx.x * blockDim.x * STREAM_U + threadIdx.x;
    const float4 v = make_float4(value, value, value, value);
#pragma unroll
    for (int u = 0; u < STREAM_U; ++u) {
        const long long i = base + (long long)u * blockDim.x;
        if (i < n4) dst[i] = v;
    }
}

__global__ void __launch_bounds__(256)
stream_copy(const float4* __restrict__ src, float4* __restrict__ dst, long long n4) {
    const long long base = (long long)blockIdx.x * blockDim.x * STREAM_U + threadIdx.x;
    float4 v[STREAM_U];
#pragma unroll
    for (int u = 0; u < STREAM_U; ++u) {
        const long long i = base + (long long)u * blockDim.x;
        if (i < n4) v[u] = src[i];
    }
#pragma unroll
    for (int u = 0; u < STREAM_U; ++u) {
        const long long i = base + (long long)u * blockDim.x;
        if (i < n4) dst[i] = v[u];
    }
}
