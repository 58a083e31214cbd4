// Rung 14 - persistent: rung 13's warpgroups on a persistent grid that walks the tiles in an L2-friendly
// order, in clusters of two blocks that share B by multicast. (fp16 / bf16 in, fp32 accumulate, fused
// epilogue; sm_90a.)
//
// Idea: rung 13's block lives for one tile. Between two tiles on an SM there is a block's exit and the next
// one's start, its barriers, the latency of its first copies, and the epilogue, during which the tensor cores
// wait. Keep the blocks instead:
// - A persistent grid: as many blocks as can be resident (one per SM), each walking tiles i = its cluster,
//   + the clusters, + twice that, ... The ring runs on across tiles (slot and phase carried over): the
//   producer starts the next tile's copies as soon as slots free up, so while the consumers write a tile's
//   epilogue the next tile's first k steps are already landing.
// - The walk is in groups of GROUP_M tile rows (rung 10's grouped order, now over time instead of over the
//   blocks of a launch): the tiles in flight at once share panels of A and B, which L2 then serves.
// - Clusters (CLUSTER 2): the two blocks of a cluster take two vertically adjacent tiles, which need the same
//   B tile. Each copies half of it, and the copy engine writes that half into both blocks' shared memory
//   (TMA multicast): B is read from L2 once per cluster. A slot is then free only when the consumers of both
//   blocks are done with it (each warp arrives on both blocks' `empty` barriers), and no block exits while the
//   other may still write into it (a cluster barrier at the end). With an odd number of tile rows the last
//   clusters have a block below the matrix: it computes on a repeated A and stores nothing.
// - Epilogue from the registers, as rung 13.
// What it leaves on the table (the next rung): the epilogue's stores are still issued by the consumers'
// threads while their tensor cores wait; rung 15 hands them to the copy engine, under the next tile's wgmmas.
// Changed from rung 13: a persistent grid walking grouped tiles, the ring carried across tiles, clusters.
// Traffic: per tile BM x K of A from L2; K x BN of B once per cluster of CLUSTER tiles; C once.
// Predicted: 1.05-1.15 x rung 13 at 4096^3 (512 tiles of 128 x 256: four tile starts and epilogues per SM
// hidden under the next tile's copies). Measured: 1.02 x at 4096^3, 1.03 x at 8192^3, a miss: staying resident
// hides a tile's start (barriers, the first copies: about 1 us of a 52 us tile), not its epilogue, which the
// consumers still write while they issue no wgmma (docs/journal.md, "the Hopper ladder").
#include "common.cuh"
#include "epilogue.cuh"
#include "hopper.cuh"
#include "wgmma_store.cuh"

// BM, BN, STAGES, A_TYPE, C_TYPE, B_LAYOUT as rung 13; GROUP_M: tile rows per group of the walk; CLUSTER: 1
// or 2 blocks sharing B. Tensor maps as rung 13, except B's box: with CLUSTER 2 each block copies its share,
// BN / 2 rows of B^T (B_LAYOUT 2) or half of the tile's 64-column boxes (B_LAYOUT 1).
template <int BM, int BN, int STAGES, int GROUP_M, int A_TYPE, int C_TYPE, int B_LAYOUT, int CLUSTER>
__device__ __forceinline__ void persistent_body(int M, int N, int K, float alpha, float beta,
                                                typename Out<C_TYPE>::T* __restrict__ C, int ldc,
                                                const float* __restrict__ bias,
                                                const typename Out<C_TYPE>::T* __restrict__ R, int ldr, int epilogue,
                                                const TensorMap& tmap_a, const TensorMap& tmap_b) {
    constexpr int BK = 64;
    constexpr int CONSUMERS = 2, WG_M = BM / CONSUMERS;
    constexpr int MT = WG_M / 64, ACC = BN / 2;
    constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128, STAGE_BYTES = A_BYTES + B_BYTES;
    constexpr int B_CHUNK = BK * 128;
    constexpr bool B_KMAJOR = B_LAYOUT == 2;
    static_assert(WG_M == 64 || WG_M == 128, "BM: 128 or 256 (64 or 128 rows per consumer)");
    static_assert(BN == 128 || BN == 256, "BN: 128 or 256 columns (the wgmma N)");
    static_assert(MT * ACC <= 128, "at most 128 accumulators per consumer thread (BM x BN <= 128 x 256)");
    static_assert(STAGES >= 2, "the ring needs at least two slots");
    static_assert(A_TYPE == 1 || A_TYPE == 2, "A_TYPE: 1 fp16, 2 bf16");
    static_assert(B_LAYOUT == 1 || B_LAYOUT == 2, "B_LAYOUT: 1 row-major B, 2 B^T given");
    static_assert(CLUSTER == 1 || CLUSTER == 2, "CLUSTER: 1 or 2 blocks");
    static_assert(B_KMAJOR ? (BN / CLUSTER) % 8 == 0 : (BN / 64) % CLUSTER == 0, "B must split evenly over the cluster");

    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long full_bar[STAGES], empty_bar[STAGES];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0), tid_wg = threadIdx.x % 128;

    if (threadIdx.x == 0) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(smem_u32(&full_bar[s]), 1);
            // one arrive per consuming warp of every block of the cluster (all of them read this slot's B)
            mbar_init(smem_u32(&empty_bar[s]), CONSUMERS * 4 * CLUSTER);
        }
        fence_mbar_init();
    }
    if constexpr (CLUSTER > 1)
        cluster_sync();  // the other block's barriers exist before anything is copied or arrived on there
    else
        __syncthreads();

    // The walk over cluster tiles (CLUSTER vertically adjacent tiles each), computed after setmaxnreg.
#define PERSISTENT_WALK                                                                                 \
    const int tiles_m = (opaque(M) + BM - 1) / BM, tiles_n = (opaque(N) + BN - 1) / BN;                \
    const int ctiles_m = (tiles_m + CLUSTER - 1) / CLUSTER, tiles = ctiles_m * tiles_n;               \
    const int group = GROUP_M / CLUSTER > 0 ? GROUP_M / CLUSTER : 1;                                   \
    const int k_tiles = (opaque(K) + BK - 1) / BK;                                                     \
    const int rank = CLUSTER > 1 ? (int)cluster_rank() : 0;                                            \
    const int cluster_id = opaque(blockIdx.x) / CLUSTER, clusters = opaque(gridDim.x) / CLUSTER;

    if (wg == 0) {
        // ---------------------------------------------------------------- producer
        setmaxnreg_dec<40>();
        PERSISTENT_WALK
        if (tid_wg == 0) {
            int s = 0;
            unsigned phase = 0;
            for (int tile = cluster_id; tile < tiles; tile += clusters) {
                int tile_row, tile_col;
                grouped_tile_of(tile, ctiles_m, tiles_n, group, tile_row, tile_col);
                const int m0 = min(tile_row * CLUSTER + rank, tiles_m - 1) * BM;  // below the matrix: A repeated
                const int n0 = tile_col * BN;
                for (int kt = 0; kt < k_tiles; ++kt) {
                    mbar_wait(smem_u32(&empty_bar[s]), phase ^ 1);
                    const unsigned full = smem_u32(&full_bar[s]);
                    mbar_arrive_expect_tx(full, STAGE_BYTES);  // this block's A and every block's share of B
                    const unsigned a_dst = base + s * STAGE_BYTES, b_dst = a_dst + A_BYTES;
                    tma_load_2d(a_dst, &tmap_a, kt * BK, m0, full);
                    if constexpr (CLUSTER == 1) {
                        if constexpr (B_KMAJOR) {
                            tma_load_2d(b_dst, &tmap_b, kt * BK, n0, full);
                        } else {
#pragma unroll
                            for (int c = 0; c < BN / 64; ++c)
                                tma_load_2d(b_dst + c * B_CHUNK, &tmap_b, n0 + c * 64, kt * BK, full);
                        }
                    } else {
                        constexpr unsigned short ALL = (1u << CLUSTER) - 1;
                        if constexpr (B_KMAJOR) {
                            constexpr int ROWS = BN / CLUSTER;  // rows of B^T per share (the map's box)
                            tma_load_2d_multicast(b_dst + rank * ROWS * 128, &tmap_b, kt * BK, n0 + rank * ROWS, full, ALL);
                        } else {
                            constexpr int SHARE = BN / 64 / CLUSTER;  // 64-column boxes per share
#pragma unroll
                            for (int c = rank * SHARE; c < (rank + 1) * SHARE; ++c)
                                tma_load_2d_multicast(b_dst + c * B_CHUNK, &tmap_b, n0 + c * 64, kt * BK, full, ALL);
                        }
                    }
                    if (++s == STAGES) {
                        s = 0;
                        phase ^= 1;
                    }
                }
            }
        }
    } else {
        // ---------------------------------------------------------------- consumers
        setmaxnreg_inc<232>();
        const int cw = wg - 1, warp = tid_wg / 32, lane = tid_wg % 32, g = lane / 4, t = lane % 4;
        int s = 0;
        unsigned phase = 0;
        float acc[MT][ACC];
        for (int i = 0;; ++i) {
            PERSISTENT_WALK  // per tile: nothing of it stays live across the epilogue
            const int tile = cluster_id + i * clusters;
            if (tile >= tiles) break;
            int tile_row, tile_col;
            grouped_tile_of(tile, ctiles_m, tiles_n, group, tile_row, tile_col);
            tile_row = tile_row * CLUSTER + rank;  // may be tiles_m (below the matrix): nothing is stored
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int r = 0; r < ACC; ++r) acc[mt][r] = 0.0f;
            const unsigned long long desc_a0 = smem_desc(base + cw * WG_M * 128, 16, 1024);
            const unsigned long long desc_b0 = smem_desc(base + A_BYTES, B_KMAJOR ? 16 : B_CHUNK, 1024);
            for (int kt = 0; kt < k_tiles; ++kt) {
                mbar_wait(smem_u32(&full_bar[s]), phase);
                wgmma_k_tile<MT, BN, A_TYPE, B_KMAJOR>(acc, desc_add(desc_a0, s * STAGE_BYTES),
                                                       desc_add(desc_b0, s * STAGE_BYTES));
                wgmma_retire(acc);
                if (lane == 0) {  // the slot back to the producers of every block of the cluster
                    if constexpr (CLUSTER == 1) {
                        mbar_arrive(smem_u32(&empty_bar[s]));
                    } else {
#pragma unroll
                        for (int r = 0; r < CLUSTER; ++r) mbar_arrive_cluster(smem_u32(&empty_bar[s]), r);
                    }
                }
                if (++s == STAGES) {
                    s = 0;
                    phase ^= 1;
                }
            }
            // The epilogue, while the producer already fills slots with the next tile's k steps.
            float* stage = reinterpret_cast<float*>(smem_raw + (base - smem_u32(smem_raw)) + STAGES * STAGE_BYTES) +
                           cw * WG_M * EPI_PITCH;
            store_registers<C_TYPE, MT, ACC>(C, ldc, M, N, tile_row * BM + cw * WG_M, tile_col * BN, acc, alpha, beta,
                                             bias, R, ldr, epilogue, stage, 1 + cw, warp, g, t, tid_wg);
        }
    }
    // No block may leave while the other can still copy into its shared memory or arrive on its barriers.
    if constexpr (CLUSTER > 1) cluster_sync();
#undef PERSISTENT_WALK
}

// The kernel, twice: without a cluster (an ordinary launch) and with CLUSTER blocks per cluster (declared at
// compile time, so an ordinary launch call starts clusters).
template <bool COND>
struct EnableIf {};
template <>
struct EnableIf<true> {
    typedef void type;
};

#define PERSISTENT_PARAMS                                                                                          \
    int M, int N, int K, float alpha, const void* __restrict__ A, int lda, const void* __restrict__ B, int ldb,     \
        float beta, typename Out<C_TYPE>::T* __restrict__ C, int ldc, const float* __restrict__ bias,                \
        const typename Out<C_TYPE>::T* __restrict__ R, int ldr, int epilogue, const __grid_constant__ TensorMap tmap_a, \
        const __grid_constant__ TensorMap tmap_b
#define PERSISTENT_BODY                                                                                          \
    persistent_body<BM, BN, STAGES, GROUP_M, A_TYPE, C_TYPE, B_LAYOUT, CLUSTER>(M, N, K, alpha, beta, C, ldc, bias, R, \
                                                                                ldr, epilogue, tmap_a, tmap_b)

template <int BM, int BN, int STAGES, int GROUP_M, int A_TYPE, int C_TYPE, int B_LAYOUT, int CLUSTER>
__global__ typename EnableIf<CLUSTER == 1>::type __launch_bounds__(384, 1) persistent_gemm(PERSISTENT_PARAMS) {
    PERSISTENT_BODY;
}

template <int BM, int BN, int STAGES, int GROUP_M, int A_TYPE, int C_TYPE, int B_LAYOUT, int CLUSTER>
__global__ typename EnableIf<CLUSTER != 1>::type __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(384, 1)
    persistent_gemm(PERSISTENT_PARAMS) {
    PERSISTENT_BODY;
}
