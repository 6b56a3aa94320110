// gemm on the GPU, bf16 in and out with float accumulation: C[m, n] = A[m, k] @ B[k, n], all
// row-major.
// A plain first version, as a textbook writes it: one TILE x TILE block of threads per TILE x TILE
// tile of C, one output per thread; A and B pass through shared memory one TILE-wide slice of k
// at a time (converted to float on the way in), every thread accumulating its dot product in
// float. No tensor cores, no register blocking, no tuning beyond the tile size.
#include <cuda_bf16.h>

#ifndef TILE
#define TILE 16  // tile edge: a block is TILE x TILE threads; the launcher reads the same knob
#endif
static_assert(TILE >= 1 && TILE * TILE <= 1024, "TILE * TILE threads must fit one block");

extern "C" __global__ void __launch_bounds__(TILE * TILE)
gemm_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b, long long m,
          long long n, long long k) {
    __shared__ float a_tile[TILE][TILE];  // a_tile[row in tile][k in slice]
    __shared__ float b_tile[TILE][TILE];  // b_tile[k in slice][column in tile]
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long row = (long long)blockIdx.y * TILE + ty;
    const long long col = (long long)blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (long long k0 = 0; k0 < k; k0 += TILE) {
        // Past the edges of A and B the tiles hold zeros, which add nothing to the dot products:
        // m, n and k need not be multiples of TILE.
        const long long a_k = k0 + tx, b_k = k0 + ty;
        a_tile[ty][tx] = row < m && a_k < k ? __bfloat162float(a[row * k + a_k]) : 0.0f;
        b_tile[ty][tx] = b_k < k && col < n ? __bfloat162float(b[b_k * n + col]) : 0.0f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) acc += a_tile[ty][kk] * b_tile[kk][tx];
        __syncthreads();  // the tiles are overwritten next slice only once every thread is done
    }
    if (row < m && col < n) c[row * n + col] = __float2bfloat16(acc);
}
