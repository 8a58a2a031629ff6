// Rung 4, cuda_blocktile1d: 1-D register blocking, each thread computes TM elements of one column of C.
// A [M, K], B [K, N], C [M, N], all row-major and contiguous.
// Tile sizes come from defines: BM x BN outputs per block, BK-wide k steps, TM outputs per thread;
// BM * BN / TM threads (64 * 64 / 8 = 512), each of which loads one element of each tile.
//
// Change: a thread keeps TM accumulators for rows r..r+TM-1 of one column. In each k step it reads one value
// of B from shared memory into a register and reuses it for TM FMAs (the TM values of A are broadcast reads,
// the same for the whole warp). Removes: part of the shared-memory bottleneck of cuda_smem: shared loads per
// FMA drop from 2 to (1 + TM) / TM ~ 1.1, and a block now covers 64 x 64 outputs per tile load instead of
// 32 x 32, halving global/L2 traffic per FMA again. What remains: A's values are still one shared load per FMA.
// Launch: block (BM * BN / TM), grid (ceil(N / BN), ceil(M / BM)).

#if !defined(BM) || !defined(BN) || !defined(BK) || !defined(TM)
#error "compile with -DBM= -DBN= -DBK= -DTM="
#endif
#define NT (BM * BN / TM)
static_assert(BM * BK == NT && BK * BN == NT, "each thread loads exactly one element of each tile");
static_assert(BM % TM == 0, "TM must divide BM");

extern "C" __global__ void __launch_bounds__(NT)
cuda_blocktile1d(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                 int M, int N, int K) {
    __shared__ float As[BM][BK];  // [m, k]
    __shared__ float Bs[BK][BN];  // [k, n]
    const int t = threadIdx.x;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tcol = t % BN;        // this thread's column of C in the block tile
    const int trow = t / BN * TM;   // and its first row; a warp (32 < BN threads) shares trow: broadcast reads
    const int a_r = t / BK, a_c = t % BK;  // the element of the A tile this thread copies
    const int b_r = t / BN, b_c = t % BN;  // and of the B tile
    float acc[TM] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        As[a_r][a_c] = (m0 + a_r < M && k0 + a_c < K) ? A[(size_t)(m0 + a_r) * K + k0 + a_c] : 0.0f;
        Bs[b_r][b_c] = (k0 + b_r < K && n0 + b_c < N) ? B[(size_t)(k0 + b_r) * N + n0 + b_c] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float b = Bs[k][tcol];
#pragma unroll
            for (int i = 0; i < TM; ++i) acc[i] += As[trow + i][k] * b;
        }
        __syncthreads();
    }
    const int col = n0 + tcol;
    if (col >= N) return;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = m0 + trow + i;
        if (row < M) C[(size_t)row * N + col] = acc[i];
    }
}
