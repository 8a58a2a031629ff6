// Rung 2, cuda_coalesced: same work as cuda_naive (one thread per element of C), threads remapped.
// A [M, K], B [K, N], C [M, N], all row-major and contiguous.
//
// Change: threadIdx.x now walks N. The 32 threads of a warp own 32 *consecutive columns* of one row of C, so
// each step of the k loop reads 128 contiguous bytes of B (one transaction instead of 32), A's element is one
// address broadcast to the warp, and the store of C is one contiguous 128-byte write.
// Removes: the uncoalesced traffic. What remains: every operand still comes from L1/L2 once per FMA (2 loads
// per FMA, no reuse in registers or shared memory), so the kernel is bound by load bandwidth of the caches.
// Launch: block (32, 32), grid (ceil(N / 32), ceil(M / 32)).

extern "C" __global__ void __launch_bounds__(1024)
cuda_coalesced(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;  // consecutive threads: consecutive columns
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    const float* a = A + (size_t)row * K;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += a[k] * B[(size_t)k * N + col];
    C[(size_t)row * N + col] = acc;
}
