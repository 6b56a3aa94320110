// gemm in CuTe: C[m, n] = A[m, k] @ B[k, n], bf16 in and out, float accumulation, row-major.
//
// gemm_bf16 (n and k multiples of 8, so that every 16-byte vector of a row is whole): a CTA
// computes a BM x BN tile of C on tensor cores (mma.sync m16n8k16 on 2 x 2 warps, repeated over
// the tile), walking k in BK-wide slices through a STAGES-deep ring of shared
// memory filled by cp.async (16-byte copies, issued STAGES - 1 slices ahead of the math).
// Shared-memory tiles are swizzled (Swizzle<3, 3, 3>) so that both the cp.async stores and the
// ldmatrix loads that feed the MMAs are free of bank conflicts; B is stored n-contiguous as it is
// in memory and transposed by ldmatrix.trans on its way to registers. Vectors past the edges of
// A and B are zero-filled in shared memory instead of read, and C is written where it exists, so
// m, n and k need not be multiples of the tile.
//
// gemm_bf16_any (every other size): the same tile walk with plain element copies, for rows that
// are not 16-byte aligned.
//
// Knobs: BM and BN (the CTA tile), STAGES (slices in flight); the launcher reads BM, BN and
// STAGES for the grid and the shared memory (STAGES * (BM + BN) * BK * 2 bytes).
#include <cute/tensor.hpp>
#include <cuda_bf16.h>

#ifndef BM
#define BM 128  // rows of C per CTA: 64 or 128
#endif
#ifndef BN
#define BN 128  // columns of C per CTA: 64 or 128
#endif
#ifndef STAGES
#define STAGES 3  // k slices in flight: shared memory holds this many (BM + BN) x BK tiles
#endif
#define BK 64  // the k slice: one 128-byte swizzled row of A per row of the tile

static_assert((BM == 64 || BM == 128) && (BN == 64 || BN == 128), "BM, BN: 64 or 128");
static_assert(STAGES >= 2 && STAGES <= 6, "STAGES: 2 to 6");

using namespace cute;
using T = bfloat16_t;
constexpr int kThreads = 128;  // four warps, 2 x 2 over the tile

// Shared-memory layouts: A (BM, BK, STAGES) with k contiguous, B (BN, BK, STAGES) with n
// contiguous, each built from an 8 x 64 swizzled atom (a 128-byte row per 16-byte vector lane).
using SmemAtomA = decltype(composition(Swizzle<3, 3, 3>{},
                                       Layout<Shape<_8, Int<BK>>, Stride<Int<BK>, _1>>{}));
using SmemAtomB = decltype(composition(Swizzle<3, 3, 3>{},
                                       Layout<Shape<_64, _8>, Stride<_1, _64>>{}));
using SmemLayoutA = decltype(tile_to_shape(SmemAtomA{},
                                           make_shape(Int<BM>{}, Int<BK>{}, Int<STAGES>{})));
using SmemLayoutB = decltype(tile_to_shape(SmemAtomB{},
                                           make_shape(Int<BN>{}, Int<BK>{}, Int<STAGES>{})));

// Global -> shared: 16-byte cp.async per thread; A's threads walk k fastest, B's walk n fastest.
using CopyAtom = Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, T>;
using TiledCopyA = decltype(make_tiled_copy(
    CopyAtom{}, Layout<Shape<_16, _8>, Stride<_8, _1>>{}, Layout<Shape<_1, _8>>{}));
// B: BN / 8 threads along n (a whole row of the tile), the rest of the 128 along k.
using TiledCopyB = decltype(make_tiled_copy(
    CopyAtom{}, Layout<Shape<Int<BN / 8>, Int<128 / (BN / 8)>>, Stride<_1, Int<BN / 8>>>{},
    Layout<Shape<_8, _1>>{}));

// The MMA: m16n8k16 bf16 -> f32 atoms on 2 x 2 warps, repeated over the CTA tile.
using TiledMma = TiledMMA<MMA_Atom<SM80_16x8x16_F32BF16BF16F32_TN>, Layout<Shape<_2, _2, _1>>,
                          Tile<_32, _32, _16>>;
// Shared -> registers: ldmatrix for A (k-contiguous), ldmatrix.trans for B (n-contiguous).
using SmemCopyA = Copy_Atom<SM75_U32x4_LDSM_N, T>;
using SmemCopyB = Copy_Atom<SM75_U16x8_LDSM_T, T>;

extern "C" __global__ void __launch_bounds__(kThreads)
gemm_bf16(__nv_bfloat16* c_ptr, const __nv_bfloat16* a_ptr, const __nv_bfloat16* b_ptr,
          long long m, long long n, long long k) {
    extern __shared__ __align__(128) unsigned char smem[];
    Tensor mA = make_tensor(make_gmem_ptr(reinterpret_cast<const T*>(a_ptr)), make_shape(m, k),
                            make_stride(k, _1{}));
    Tensor mB = make_tensor(make_gmem_ptr(reinterpret_cast<const T*>(b_ptr)), make_shape(n, k),
                            make_stride(_1{}, n));  // B viewed (n, k): n contiguous
    Tensor mC = make_tensor(make_gmem_ptr(reinterpret_cast<T*>(c_ptr)), make_shape(m, n),
                            make_stride(n, _1{}));
    // Coordinates of every element, tiled as the data is, for the edge predicates.
    Tensor cA = make_identity_tensor(shape(mA));
    Tensor cB = make_identity_tensor(shape(mB));
    Tensor cC = make_identity_tensor(shape(mC));

    const int tile_m = blockIdx.y, tile_n = blockIdx.x;
    auto tiler_a = make_shape(Int<BM>{}, Int<BK>{});
    auto tiler_b = make_shape(Int<BN>{}, Int<BK>{});
    Tensor gA = local_tile(mA, tiler_a, make_coord(tile_m, _));  // (BM, BK, k tiles)
    Tensor gB = local_tile(mB, tiler_b, make_coord(tile_n, _));  // (BN, BK, k tiles)
    Tensor gC = local_tile(mC, make_shape(Int<BM>{}, Int<BN>{}), make_coord(tile_m, tile_n));
    Tensor idA = local_tile(cA, tiler_a, make_coord(tile_m, _));
    Tensor idB = local_tile(cB, tiler_b, make_coord(tile_n, _));
    Tensor idC = local_tile(cC, make_shape(Int<BM>{}, Int<BN>{}), make_coord(tile_m, tile_n));

    Tensor sA = make_tensor(make_smem_ptr(reinterpret_cast<T*>(smem)), SmemLayoutA{});
    Tensor sB = make_tensor(make_smem_ptr(reinterpret_cast<T*>(smem) + cosize(SmemLayoutA{})),
                            SmemLayoutB{});

    TiledCopyA copy_a;
    TiledCopyB copy_b;
    auto thr_copy_a = copy_a.get_slice(threadIdx.x);
    auto thr_copy_b = copy_b.get_slice(threadIdx.x);
    Tensor tAgA = thr_copy_a.partition_S(gA);  // (CPY, CPY_M, CPY_K, k tiles)
    Tensor tAsA = thr_copy_a.partition_D(sA);  // (CPY, CPY_M, CPY_K, STAGES)
    Tensor tAcA = thr_copy_a.partition_S(idA);
    Tensor tBgB = thr_copy_b.partition_S(gB);
    Tensor tBsB = thr_copy_b.partition_D(sB);
    Tensor tBcB = thr_copy_b.partition_S(idB);

    // One k slice into one stage: whole vectors inside the matrix are copied, the rest zeroed
    // (n and k are multiples of 8, so a vector is wholly in or wholly out).
    auto load = [&](int slice, int stage) {
        CUTE_UNROLL
        for (int i = 0; i < size<1>(tAsA); ++i)
            CUTE_UNROLL
            for (int j = 0; j < size<2>(tAsA); ++j) {
                auto at = tAcA(0, i, j, slice);
                if (get<0>(at) < m && get<1>(at) < k)
                    copy(copy_a, tAgA(_, i, j, slice), tAsA(_, i, j, stage));
                else
                    clear(tAsA(_, i, j, stage));
            }
        CUTE_UNROLL
        for (int i = 0; i < size<1>(tBsB); ++i)
            CUTE_UNROLL
            for (int j = 0; j < size<2>(tBsB); ++j) {
                auto at = tBcB(0, i, j, slice);
                if (get<0>(at) < n && get<1>(at) < k)
                    copy(copy_b, tBgB(_, i, j, slice), tBsB(_, i, j, stage));
                else
                    clear(tBsB(_, i, j, stage));
            }
    };

    TiledMma mma;
    auto thr_mma = mma.get_slice(threadIdx.x);
    Tensor tCrA = thr_mma.partition_fragment_A(sA(_, _, 0));  // (MMA, MMA_M, MMA_K)
    Tensor tCrB = thr_mma.partition_fragment_B(sB(_, _, 0));  // (MMA, MMA_N, MMA_K)
    Tensor tCgC = thr_mma.partition_C(gC);
    Tensor tCcC = thr_mma.partition_C(idC);
    Tensor acc = partition_fragment_C(mma, make_shape(Int<BM>{}, Int<BN>{}));
    clear(acc);

    auto smem_copy_a = make_tiled_copy_A(SmemCopyA{}, mma);
    auto smem_copy_b = make_tiled_copy_B(SmemCopyB{}, mma);
    auto smem_thr_a = smem_copy_a.get_slice(threadIdx.x);
    auto smem_thr_b = smem_copy_b.get_slice(threadIdx.x);
    Tensor tXsA = smem_thr_a.partition_S(sA);  // (CPY, CPY_M, CPY_K, STAGES)
    Tensor tXrA = smem_thr_a.retile_D(tCrA);
    Tensor tXsB = smem_thr_b.partition_S(sB);
    Tensor tXrB = smem_thr_b.retile_D(tCrB);

    const int slices = int((k + BK - 1) / BK);
    CUTE_UNROLL
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < slices) load(s, s);
        cp_async_fence();
    }
    for (int slice = 0; slice < slices; ++slice) {
        cp_async_wait<STAGES - 2>();  // this slice's copies have landed ...
        __syncthreads();  // ... for every thread, and the stage read last has been consumed
        const int next = slice + STAGES - 1;
        if (next < slices) load(next, next % STAGES);
        cp_async_fence();
        const int stage = slice % STAGES;
        CUTE_UNROLL
        for (int kk = 0; kk < size<2>(tCrA); ++kk) {
            copy(smem_copy_a, tXsA(_, _, kk, stage), tXrA(_, _, kk));
            copy(smem_copy_b, tXsB(_, _, kk, stage), tXrB(_, _, kk));
            gemm(mma, tCrA(_, _, kk), tCrB(_, _, kk), acc);
        }
    }

    CUTE_UNROLL
    for (int i = 0; i < size(acc); ++i) {
        auto at = tCcC(i);
        if (get<0>(at) < m && get<1>(at) < n) tCgC(i) = T(acc(i));
    }
}

// Any size: one thread per element of a 16 x 16 tile of C, A and B staged through shared memory
// one 16-wide k slice at a time, zeros past the edges.
extern "C" __global__ void __launch_bounds__(256)
gemm_bf16_any(__nv_bfloat16* c_ptr, const __nv_bfloat16* a_ptr, const __nv_bfloat16* b_ptr,
              long long m, long long n, long long k) {
    __shared__ float a_tile[16][16];
    __shared__ float b_tile[16][16];
    Tensor A = make_tensor(make_gmem_ptr(reinterpret_cast<const T*>(a_ptr)), make_shape(m, k),
                           make_stride(k, _1{}));
    Tensor B = make_tensor(make_gmem_ptr(reinterpret_cast<const T*>(b_ptr)), make_shape(k, n),
                           make_stride(n, _1{}));
    Tensor C = make_tensor(make_gmem_ptr(reinterpret_cast<T*>(c_ptr)), make_shape(m, n),
                           make_stride(n, _1{}));
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const long long row = (long long)blockIdx.y * 16 + ty, col = (long long)blockIdx.x * 16 + tx;
    float sum = 0.0f;
    for (long long k0 = 0; k0 < k; k0 += 16) {
        a_tile[ty][tx] = row < m && k0 + tx < k ? float(A(row, k0 + tx)) : 0.0f;
        b_tile[ty][tx] = k0 + ty < k && col < n ? float(B(k0 + ty, col)) : 0.0f;
        __syncthreads();
        CUTE_UNROLL
        for (int kk = 0; kk < 16; ++kk) sum += a_tile[ty][kk] * b_tile[kk][tx];
        __syncthreads();
    }
    if (row < m && col < n) C(row, col) = T(sum);
}
