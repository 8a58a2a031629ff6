// Rung 5, cuda_blocktile2d: 2-D register blocking, each thread computes a TM x TN block of C.
// A [M, K], B [K, N], C [M, N], all row-major and contiguous.
// Tile sizes come from defines: BM x BN outputs per block (128 x 128), BK-wide k steps (8), TM x TN outputs
// per thread (8 x 8), so BM * BN / (TM * TN) = 256 threads.
//
// Change: in each k step a thread loads TM values of A and TN values of B from shared memory into registers
// and does their TM * TN outer product: 64 FMAs for 16 shared loads, 0.25 per FMA (cuda_blocktile1d: ~1.1).
// The 128 x 128 block tile also halves global/L2 traffic per FMA again. Removes: the shared-memory bandwidth
// bottleneck of the 1-D rung. What remains: every load is a 4-byte scalar (global and shared), so loads still
// cost many issue slots, and the B reads of a warp (16 threads TN = 8 floats apart) hit the same banks.
// Launch: block (256), grid (ceil(N / BN), ceil(M / BM)).

#if !defined(BM) || !defined(BN) || !defined(BK) || !defined(TM) || !defined(TN)
#error "compile with -DBM= -DBN= -DBK= -DTM= -DTN="
#endif
#define NT (BM * BN / (TM * TN))
static_assert(BM * BK % NT == 0 && BK * BN % NT == 0, "threads must split the tile loads evenly");

extern "C" __global__ void __launch_bounds__(NT)
cuda_blocktile2d(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                 int M, int N, int K) {
    __shared__ float As[BM][BK];  // [m, k]
    __shared__ float Bs[BK][BN];  // [k, n]
    const int t = threadIdx.x;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tm = t / (BN / TN) * TM, tn = t % (BN / TN) * TN;  // this thread's TM x TN block in the tile
    // Copies: thread t moves column t % BK of rows t / BK + i * (NT / BK) of the A tile, and column t % BN of
    // rows t / BN + i * (NT / BN) of the B tile (consecutive threads: consecutive addresses where possible).
    const int a_r = t / BK, a_c = t % BK, b_r = t / BN, b_c = t % BN;
    float acc[TM][TN] = {};
    float rm[TM], rn[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int i = 0; i < BM * BK / NT; ++i) {
            const int r = a_r + i * (NT / BK);
            As[r][a_c] = (m0 + r < M && k0 + a_c < K) ? A[(size_t)(m0 + r) * K + k0 + a_c] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < BK * BN / NT; ++i) {
            const int r = b_r + i * (NT / BN);
            Bs[r][b_c] = (k0 + r < K && n0 + b_c < N) ? B[(size_t)(k0 + r) * N + n0 + b_c] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) rm[i] = As[tm + i][k];
#pragma unroll
            for (int j = 0; j < TN; ++j) rn[j] = Bs[k][tn + j];
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += rm[i] * rn[j];
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = m0 + tm + i;
        if (row >= M) break;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            if (n0 + tn + j < N) C[(size_t)row * N + n0 + tn + j] = acc[i][j];
        }
    }
}
