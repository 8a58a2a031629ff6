// Rung 3, cuda_smem: shared-memory tiling, one thread per element of C.
// A [M, K], B [K, N], C [M, N], all row-major and contiguous. TILE (8, 16 or 32) comes from -DTILE.
//
// Change: the block's TILE x TILE threads cooperatively copy a TILE x TILE tile of A and one of B into shared
// memory (one coalesced element each), synchronise, and run TILE steps of the k loop out of shared memory.
// Removes: the per-FMA trips to L1/L2; each global element is now read by a block once instead of TILE times,
// cutting global/L2 traffic by TILE. What remains: two shared-memory loads per FMA (the B read is a
// conflict-free row, the A read a broadcast), so the kernel is bound by shared-memory bandwidth and latency,
// and each thread has only one accumulator to hide it with.
// Borders: elements outside A or B are stored as 0 in the tiles, so any M, N, K works.
// Launch: block (TILE, TILE), grid (ceil(N / TILE), ceil(M / TILE)).

#ifndef TILE
#error "compile with -DTILE=8|16|32"
#endif

extern "C" __global__ void __launch_bounds__(TILE * TILE)
cuda_smem(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];  // [m, k] of the current A tile
    __shared__ float Bs[TILE][TILE];  // [k, n] of the current B tile
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();  // the next iteration overwrites the tiles
    }
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
}
