// Rung 1, cuda_naive: C = A @ B, one thread per element of C, fp32 throughout.
// A [M, K], B [K, N], C [M, N], all row-major and contiguous.
//
// The starting point. threadIdx.x walks M, so the 32 threads of a warp own 32 *different rows* of C at one
// column: every step of the k loop reads 32 floats of A that sit K floats apart (32 memory transactions for
// 128 useful bytes) and the final store writes 32 floats N apart. B's load is one address for the whole warp.
// Bottleneck: uncoalesced global traffic (the caches absorb some of it because the next 7 values of each
// row arrive with the first), far below both the FMA rate and the bandwidth.
// Launch: block (32, 32), grid (ceil(M / 32), ceil(N / 32)).

extern "C" __global__ void __launch_bounds__(1024)
cuda_naive(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;  // consecutive threads: consecutive rows
    const int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    const float* a = A + (size_t)row * K;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += a[k] * B[(size_t)k * N + col];
    C[(size_t)row * N + col] = acc;
}
