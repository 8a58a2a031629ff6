// Rung 7, cuda_warptile: a warp-level tile between the block tile and the thread tile, fed by asynchronous
// global -> shared copies through a multi-stage pipeline. A [M, K], B [K, N], C [M, N], row-major, contiguous.
//
// Hierarchy (sizes from defines; kernelwright/ops/matmul/cuda.py holds the chosen values and the reasons):
//   block  BM x BN of C, NT threads, K walked in BK-wide tiles through STAGES shared-memory stages;
//   warp   WM x WN of the block tile, computed as WMITER x WNITER sub-tiles of WSUBM x WSUBN;
//   thread TM x TN of each sub-tile, so (WMITER * TM) x (WNITER * TN) accumulators in registers.
// Change from cuda_vectorized:
// (1) Warp tiling. Each warp owns a compact WM x WN region, and inside a sub-tile its 32 lanes own *adjacent*
//     TM x TN blocks, so each float4 shared load of a warp reads one contiguous span of at most 128 bytes
//     (conflict-free, broadcast to the lanes that share it). The thread's outputs are WMITER x WNITER pieces
//     WSUBM / WSUBN apart instead of one contiguous 8 x 8 block; that spacing is what keeps the spans contiguous.
// (2) cp.async copies. Tiles go from global to shared memory without passing through registers (Ampere+), so
//     no registers are held for tiles in flight (the 128-register budget goes to accumulators) and STAGES - 1
//     tiles are in flight while the FMAs run on the oldest one: one barrier per tile, no exposed latency.
//     A is copied one float at a time into its transposed layout (lanes along k, 8 consecutive k of 4 rows
//     per warp: one 32-byte sector per row, and conflict-free shared stores thanks to the 4-float row pad);
//     B is copied 16 bytes at a time (4-byte copies on the scalar path). Out-of-range elements are zero-filled
//     by the copy itself (src-size 0).
// Removes: the bank conflicts of cuda_vectorized's B reads and the global-load latency and load/store
// instructions that sat between its tiles, the two things left between it and the FMA pipes.
// Two entry points, as for cuda_vectorized: cuda_warptile_vec4 (K % 4 == N % 4 == 0, 16-byte-aligned A, B, C)
// and cuda_warptile_scalar (4-byte copies and stores, any shape and alignment).
// Launch: block (NT), grid (ceil(N / BN), ceil(M / BM)), dynamic shared memory STAGES * BK * (BM + 4 + BN) floats.

#include "common.cuh"
#include "../../_cuda/ptx.cuh"  // cp.async behind named functions

#if !defined(NT) || !defined(BM) || !defined(BN) || !defined(BK) || !defined(WM) || !defined(WN) || \
    !defined(WNITER) || !defined(TM) || !defined(TN) || !defined(STAGES) || !defined(MINBLOCKS)
#error "compile with -DNT= -DBM= -DBN= -DBK= -DWM= -DWN= -DWNITER= -DTM= -DTN= -DSTAGES= -DMINBLOCKS="
#endif
constexpr int WMITER = (WM * WN) / (32 * TM * TN * WNITER);
constexpr int WSUBM = WM / WMITER, WSUBN = WN / WNITER;
constexpr int AS_LD = BM + 4;                // padded row of the transposed A tile (keeps float4 alignment)
constexpr int STAGE = BK * AS_LD + BK * BN;  // floats of one shared-memory stage: A tile, then B tile
constexpr int A_COPIES = BM * BK / NT;       // 4-byte copies of A per thread and tile
constexpr int B_COPIES = BK * BN / 4 / NT;   // 16-byte copies of B per thread and tile
static_assert((BM / WM) * (BN / WN) * 32 == NT, "the warps must tile the block tile");
static_assert(WMITER >= 1 && WMITER * TM * WNITER * TN * 32 == WM * WN, "the lanes must tile the warp tile");
static_assert((WSUBM / TM) * (WSUBN / TN) == 32, "a sub-tile is 32 lanes of TM x TN");
static_assert(A_COPIES * NT == BM * BK && B_COPIES * NT * 4 == BK * BN, "threads split the copies evenly");
static_assert(BK % 8 == 0 && (8 * BM) % NT == 0, "A copies: 8 lanes along k, NT / 8 rows of A per pass");
static_assert(TM % 4 == 0 && TN % 4 == 0, "float4 fragments");
static_assert(STAGES >= 2, "at least one tile in flight");

template <bool VEC>
__device__ __forceinline__ void warptile(const float* __restrict__ A, const float* __restrict__ B,
                                         float* __restrict__ C, int M, int N, int K) {
    KW_DYNAMIC_SHARED(float4, smem4);  // STAGES stages of STAGE floats
    float* smem = reinterpret_cast<float*>(smem4);
    const int t = threadIdx.x, warp = t / 32, lane = t % 32;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int wm = warp / (BN / WN) * WM, wn = warp % (BN / WN) * WN;        // warp tile origin in the block
    const int tm = lane / (WSUBN / TN) * TM, tn = lane % (WSUBN / TN) * TN;  // lane origin in a sub-tile
    const int a_k = t % 8, a_m = t / 8;                      // first A element this thread copies (k, m)
    const int b_r = t / (BN / 4), b_c = t % (BN / 4) * 4;    // first float4 of B (k, n)

    // Copy the tile at k0 into `stage` (asynchronously; the caller commits the group).
    auto issue = [&](int k0, float* stage) {
        float* As = stage;               // [BK][AS_LD], A transposed: [k, m]
        float* Bs = stage + BK * AS_LD;  // [BK][BN]: [k, n]
#pragma unroll
        for (int i = 0; i < A_COPIES; ++i) {
            const int kk = a_k + 8 * (i % (BK / 8)), mm = a_m + (NT / 8) * (i / (BK / 8));
            const bool ok = m0 + mm < M && k0 + kk < K;
            cp_async4_or_zero(&As[kk * AS_LD + mm], ok ? A + (size_t)(m0 + mm) * K + k0 + kk : A, ok);
        }
#pragma unroll
        for (int i = 0; i < B_COPIES; ++i) {
            const int r = b_r + i * (NT / (BN / 4));
            const bool row_ok = k0 + r < K;
            const float* src = B + (size_t)(row_ok ? k0 + r : 0) * N + n0 + b_c;
            const int left = N - n0 - b_c;  // columns of B from this float4 on
            float* dst = &Bs[r * BN + b_c];
            if (VEC) {
                cp_async16_or_zero(dst, row_ok && left > 0 ? src : B, row_ok && left > 0);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    cp_async4_or_zero(dst + j, row_ok && j < left ? src + j : B, row_ok && j < left);
            }
        }
    };

    float acc[WMITER * TM][WNITER * TN] = {};
    float rm[WMITER * TM], rn[WNITER * TN];
    const int ntiles = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ntiles) issue(s * BK, smem + s * STAGE);
        cp_async_commit();  // empty groups past the end keep "tile t is group t" true
    }
    for (int tile = 0; tile < ntiles; ++tile) {
        cp_async_wait<STAGES - 2>();  // this thread's copies of `tile` have landed...
        __syncthreads();              // ...everyone's have, and everyone is done with the stage refilled below
        const int next = tile + STAGES - 1;
        if (next < ntiles) issue(next * BK, smem + (next % STAGES) * STAGE);
        cp_async_commit();
        const float* As = smem + (tile % STAGES) * STAGE;
        const float* Bs = As + BK * AS_LD;
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int wi = 0; wi < WMITER; ++wi) {
#pragma unroll
                for (int i = 0; i < TM; i += 4) {
                    *reinterpret_cast<float4*>(&rm[wi * TM + i]) =
                        *reinterpret_cast<const float4*>(&As[k * AS_LD + wm + wi * WSUBM + tm + i]);
                }
            }
#pragma unroll
            for (int wj = 0; wj < WNITER; ++wj) {
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    *reinterpret_cast<float4*>(&rn[wj * TN + j]) =
                        *reinterpret_cast<const float4*>(&Bs[k * BN + wn + wj * WSUBN + tn + j]);
                }
            }
#pragma unroll
            for (int i = 0; i < WMITER * TM; ++i) {
#pragma unroll
                for (int j = 0; j < WNITER * TN; ++j) acc[i][j] += rm[i] * rn[j];
            }
        }
    }
#pragma unroll
    for (int wi = 0; wi < WMITER; ++wi) {
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int row = m0 + wm + wi * WSUBM + tm + i;
            float* c_row = C + (size_t)min(row, M - 1) * N;
#pragma unroll
            for (int wj = 0; wj < WNITER; ++wj) {
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const int col = n0 + wn + wj * WSUBN + tn + j;
                    const float* v = &acc[wi * TM + i][wj * TN + j];
                    store4<VEC>(c_row + col, row < M, N - col, make_float4(v[0], v[1], v[2], v[3]));
                }
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(NT, MINBLOCKS)
cuda_warptile_vec4(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                   int M, int N, int K) {
    warptile<true>(A, B, C, M, N, K);
}

extern "C" __global__ void __launch_bounds__(NT, MINBLOCKS)
cuda_warptile_scalar(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                     int M, int N, int K) {
    warptile<false>(A, B, C, M, N, K);
}
