// Rung 6, cuda_vectorized: 2-D register blocking with 128-bit loads and stores.
// A [M, K], B [K, N], C [M, N], all row-major and contiguous.
// Tile sizes come from defines, as for cuda_blocktile2d: BM x BN = 128 x 128 per block, BK = 8, TM x TN =
// 8 x 8 per thread, 256 threads.
//
// Change from cuda_blocktile2d: (1) global loads of A and B and the stores of C move 4 floats per instruction
// (each thread copies one float4 of each tile instead of 4 scalars); (2) the A tile is stored *transposed* in
// shared memory (As[k][m]), so the TM values of A that a thread needs in a k step are contiguous and come in
// with float4 shared loads, like the TN values of B: 4 shared-load instructions per 64 FMAs instead of 16.
// Removes: the load-instruction overhead (issue slots and LSU pressure) that capped the scalar rung.
// What remains: one tile in flight per block (load, sync, compute, sync: global latency is hidden only by the
// other resident blocks), and the float4 B reads of a warp's 16 threads sit 32 bytes apart (2-way conflicts).
// Two entry points: cuda_vectorized_vec4 needs K % 4 == N % 4 == 0 and 16-byte-aligned A, B, C; the host picks
// cuda_vectorized_scalar (the same kernel with predicated scalar global accesses) otherwise.
// Launch: block (256), grid (ceil(N / BN), ceil(M / BM)).

#include "common.cuh"

#if !defined(BM) || !defined(BN) || !defined(BK) || !defined(TM) || !defined(TN)
#error "compile with -DBM= -DBN= -DBK= -DTM= -DTN="
#endif
#define NT (BM * BN / (TM * TN))
static_assert(BM * BK / 4 == NT && BK * BN / 4 == NT, "each thread copies one float4 of each tile");
static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "float4 granularity");

template <bool VEC>
__device__ __forceinline__ void vectorized(const float* __restrict__ A, const float* __restrict__ B,
                                           float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(16) float As[BK][BM];  // A tile transposed: [k, m]
    __shared__ __align__(16) float Bs[BK][BN];  // [k, n]
    const int t = threadIdx.x;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tm = t / (BN / TN) * TM, tn = t % (BN / TN) * TN;  // this thread's TM x TN block in the tile
    const int a_r = t / (BK / 4), a_c = t % (BK / 4) * 4;        // its float4 of the A tile (along k)
    const int b_r = t / (BN / 4), b_c = t % (BN / 4) * 4;        // and of the B tile (along n)
    const float* a_src = A + (size_t)min(m0 + a_r, M - 1) * K + a_c;  // row clamped: never read past A
    const float* b_src = B + (size_t)b_r * N + min(n0 + b_c, N - 1);
    float acc[TM][TN] = {};
    float rm[TM], rn[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        const float4 a = load4<VEC>(a_src + k0, m0 + a_r < M, K - k0 - a_c);
        As[a_c + 0][a_r] = a.x;
        As[a_c + 1][a_r] = a.y;
        As[a_c + 2][a_r] = a.z;
        As[a_c + 3][a_r] = a.w;
        *reinterpret_cast<float4*>(&Bs[b_r][b_c]) = load4<VEC>(b_src + (size_t)k0 * N, k0 + b_r < K, N - n0 - b_c);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                *reinterpret_cast<float4*>(&rm[i]) = *reinterpret_cast<const float4*>(&As[k][tm + i]);
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                *reinterpret_cast<float4*>(&rn[j]) = *reinterpret_cast<const float4*>(&Bs[k][tn + j]);
            }
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
        float* c = C + (size_t)min(row, M - 1) * N + n0 + tn;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            const float* v = &acc[i][j];
            store4<VEC>(c + j, row < M, N - n0 - tn - j, make_float4(v[0], v[1], v[2], v[3]));
        }
    }
}

extern "C" __global__ void __launch_bounds__(NT)
cuda_vectorized_vec4(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                     int M, int N, int K) {
    vectorized<true>(A, B, C, M, N, K);
}

extern "C" __global__ void __launch_bounds__(NT)
cuda_vectorized_scalar(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                       int M, int N, int K) {
    vectorized<false>(A, B, C, M, N, K);
}
