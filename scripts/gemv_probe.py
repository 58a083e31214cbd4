"""Small-M products (y = x @ W.t(), W of N x K bf16, K contiguous) with the weights loaded straight into
registers in the block-wide pattern that `stream_pattern_probe.py` measured fastest: the warps of a block
share the same 16 NT rows of W and split each block step's k between them, so that a step of the block reads
16 NT rows x (WARPS x 64 U) contiguous bytes. Each lane's two 16-byte loads (rows g and g + 8, k 8c .. 8c + 7
of a chunk of 32) are, under a permutation of k applied alike to x, its A fragments of two m16n8k16 MMAs; x's
fragment is one 16-byte load of the same k of token g. Two steps of loads are in flight per thread. Partial
sums over k: the block's warps through shared memory, slices of K over blocks by fp32 atomics (this probe
only). Timed against torch.matmul side by side, L2 flushed by a read, medians.

    PYTHONPATH=src python3 scripts/gemv_probe.py [--ms 1,8,16] [--nk 8192x8192,...] [--sets U,WARPS,NT ...]
"""

from __future__ import annotations

import argparse
import math

SRC = r"""
typedef unsigned short bits16;

__device__ __forceinline__ void mma_bf16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int U, int WARPS, int NT, int J>
__global__ void __launch_bounds__(WARPS * 32) gemv(const bits16* __restrict__ X, int M, int ldx,
                                                   const bits16* __restrict__ W, int N, int K, int ldw,
                                                   float* __restrict__ Y, int kper) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int n0 = blockIdx.x * 16 * NT;
    const int kb = blockIdx.y * kper, ke = min(K, kb + kper);
    constexpr int WK = 32 * U, BK = WARPS * WK;
    const bits16* wr[NT][2];
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) wr[i][h] = W + (size_t)min(n0 + 16 * i + g + 8 * h, N - 1) * ldw + 8 * c;
    const bits16* xr[J];
    bool xv[J];
#pragma unroll
    for (int j = 0; j < J; ++j) xr[j] = X + (size_t)min(8 * j + g, M - 1) * ldx + 8 * c, xv[j] = 8 * j + g < M;
    float acc[NT][J][4];
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int j = 0; j < J; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

    uint4 wa[U][NT][2], wb[U][NT][2], xa[U][J], xb[U][J];
    auto load = [&](uint4 (&w)[U][NT][2], uint4 (&x)[U][J], int k0) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int k = k0 + 32 * u + 8 * c;
            const bool in = k < ke;
#pragma unroll
            for (int i = 0; i < NT; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    w[u][i][h] = in ? __ldcs(reinterpret_cast<const uint4*>(wr[i][h] + (k - 8 * c))) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int j = 0; j < J; ++j)
                x[u][j] = in && xv[j] ? __ldg(reinterpret_cast<const uint4*>(xr[j] + (k - 8 * c))) : make_uint4(0, 0, 0, 0);
        }
    };
    auto compute = [&](const uint4 (&w)[U][NT][2], const uint4 (&x)[U][J]) {
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int i = 0; i < NT; ++i)
#pragma unroll
                for (int j = 0; j < J; ++j) {
                    mma_bf16(acc[i][j], w[u][i][0].x, w[u][i][1].x, w[u][i][0].y, w[u][i][1].y, x[u][j].x, x[u][j].y);
                    mma_bf16(acc[i][j], w[u][i][0].z, w[u][i][1].z, w[u][i][0].w, w[u][i][1].w, x[u][j].z, x[u][j].w);
                }
    };
    int k0 = kb + warp * WK;
    load(wa, xa, k0);
    for (; k0 < ke; k0 += 2 * BK) {
        load(wb, xb, k0 + BK);
        compute(wa, xa);
        load(wa, xa, k0 + 2 * BK);
        compute(wb, xb);
    }
    __shared__ float red[WARPS][NT * J * 4][32];
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int j = 0; j < J; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) red[warp][(i * J + j) * 4 + q][lane] = acc[i][j][q];
    __syncthreads();
    for (int e = threadIdx.x; e < NT * J * 4 * 32; e += WARPS * 32) {
        const int f = e / 32, l = e % 32, i = f / (J * 4), j = (f / 4) % J, q = f % 4;
        float s = 0.f;
        for (int w = 0; w < WARPS; ++w) s += red[w][f][l];
        const int gg = l >> 2, cc = l & 3;
        const int n = n0 + 16 * i + gg + 8 * (q >> 1), m = 8 * j + 2 * cc + (q & 1);
        if (n < N && m < M) atomicAdd(Y + (size_t)m * N + n, s);
    }
}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", default="1,8,16")
    ap.add_argument("--nk", default="4096x4096,8192x8192,14336x4096,8192x28672,28672x8192")
    ap.add_argument("--sets", nargs="*", default=["4,8,1", "2,8,1", "4,4,1", "2,16,1", "8,4,1", "2,8,2"])
    ap.add_argument("--budget-ms", type=float, default=40.0)
    args = ap.parse_args()
    import cupy as cp
    import torch

    from gemmlab.bench.timing import TimedCall, TimingOptions, time_interleaved

    sets = [tuple(int(v) for v in s.split(",")) for s in args.sets]
    names = [f"gemv<{u},{w},{nt},{j}>" for u, w, nt in sets for j in (1, 2)]
    mod = cp.RawModule(code=SRC, options=("-std=c++17", "-arch=sm_90"), name_expressions=names)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print("| M | N x K | torch µs | torch TB/s | " + " | ".join(f"U,W,NT={s}" for s in args.sets) + " |")
    print("|---" * (4 + len(sets)) + "|")
    for m in (int(v) for v in args.ms.split(",")):
        j = 1 if m <= 8 else 2
        for n, k in (tuple(int(v) for v in s.split("x")) for s in args.nk.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            ref = (x.double() @ w.double().t())
            calls = {"torch": TimedCall(lambda: torch.matmul(x, w.t()))}
            for (u, warps, nt) in sets:
                f = mod.get_function(f"gemv<{u},{warps},{nt},{j}>")
                rows = 16 * nt
                col_blocks = -(-n // rows)
                regs = f.num_regs
                per_sm = max(1, min(65536 // (max(regs, 1) * 32 * warps), 64 // warps))
                slots = per_sm * sms
                bk = warps * 32 * u
                best, best_fill = 1, 0.0
                for s in range(1, 65):
                    kper = -(-k // s)
                    kper = -(-kper // (2 * bk)) * 2 * bk
                    if kper * (s - 1) >= k:
                        break
                    blocks = col_blocks * s
                    fill = blocks / (-(-blocks // slots) * slots)
                    if fill > best_fill + 0.02:
                        best, best_fill = s, fill
                    if fill >= 0.95:
                        break
                kper = -(-(-(-k // best)) // (2 * bk)) * 2 * bk
                y = torch.zeros(m, n, device="cuda", dtype=torch.float32)
                grid = (col_blocks, -(-k // kper))

                def run(f=f, grid=grid, warps=warps, kper=kper, y=y):  # (adds into y: zeroed before the check only)
                    f(grid, (32 * warps,), (x.data_ptr(), cp.int32(m), cp.int32(k), w.data_ptr(), cp.int32(n), cp.int32(k),
                                            cp.int32(k), y.data_ptr(), cp.int32(kper)),
                      stream=cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream))

                y.zero_()
                run()
                torch.cuda.synchronize()
                err = ((y.double() - ref).norm() / ref.norm()).item()
                assert err < 1e-3, f"{(u, warps, nt)} {m}x{n}x{k}: rel. error {err:.2e}"
                calls[(u, warps, nt)] = TimedCall(run)
                print(f"  {(u, warps, nt)}: regs {regs}, {per_sm}/SM, split {grid[1]}, kper {kper}, fill {best_fill:.2f}",
                      flush=True)
            res = time_interleaved(calls, TimingOptions(budget_ms=args.budget_ms * len(calls), rounds=5))
            tt = res["torch"].median_ms
            cols = " | ".join(f"{tt / res[s].median_ms:.3f} ({2 * n * k / res[s].median_ms / 1e9:.2f})" for s in sets)
            print(f"| {m} | {n} x {k} | {tt * 1e3:.1f} | {2 * n * k / tt / 1e9:.2f} | {cols} |", flush=True)


if __name__ == "__main__":
    main()
