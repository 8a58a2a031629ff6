// rms_norm rung `cluster` (Hopper, sm_90): a row over the CTAs of a thread-block cluster, each holding its chunk
// as raw input words (registers, and for wide 16-bit rows shared memory too) between its single read of x and its
// single write of y; the partial sums of squares are traded through distributed shared memory. The softmax
// cluster rung's scheme (softmax/cuda/cluster.cu, one-row form) with RMSNorm's statistic:
//
//   y[r, :] = x[r, :] * rstd * w'      rstd = 1 / sqrt(mean(x^2) + eps),  w' = w, or 1 + w with OFFSET (Gemma)
//
// Steps, for the CTA of rank c owning columns [c * CHUNK, (c + 1) * CHUNK):
//   1. load: SNV 16-byte vectors a thread into shared memory by cp.async (in flight with what follows), then NV
//      into registers; columns past n_cols read as 0 (nothing to the sums, never stored).
//   2. the chunk's largest magnitude a, reduced over the CTA; its binary exponent e (a = f 2^e, f in [0.5, 1)),
//      then the sum of squares of x 2^-e (each term < 1: no overflow for any finite input, no underflow that
//      matters), reduced over the CTA.
//   3. (e, s) put in shared memory, the cluster meets at a barrier, every CTA reads every partner's pair (DSMEM)
//      and merges them in the largest exponent E: S = sum s_c 4^(e_c - E), mean(x^2) = S 4^E / n. rstd is
//      formed as 2^-E / sqrt(S / n + eps 4^-E), or 1 / sqrt(eps) where mean(x^2) is below eps's rounding, so no
//      intermediate leaves fp32's range unless rstd itself does (eps = 0 and every |x| below ~2^-127). With
//      SAVE_STATS the CTA of rank 0 stores rstd (fp32) for the backward.
//   4. y = x * rstd * w' from the held words; w' read as 16-byte vectors (L2: every row reads the same w).
// A cluster of one CTA trades nothing and meets at no barrier. Defines: DTYPE, VECTOR, NV, THREADS, CLUSTER
// (1..16; past 8 set at launch), MIN_BLOCKS, SNV (16-byte path only), OFFSET, SAVE_STATS, FAST (switch: step 2 in
// one pass where the chunk's range allows, see block_stats). Arithmetic in fp32, sqrt
// by MUFU.RSQ with a Newton step.

#if !defined(DTYPE) || !defined(VECTOR) || !defined(NV) || !defined(THREADS) || !defined(CLUSTER)
#error "compile with -DDTYPE= -DVECTOR= -DNV= -DTHREADS= -DCLUSTER="
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#ifndef SNV
#define SNV 0
#endif
#ifndef OFFSET
#define OFFSET 0
#endif
#ifndef SAVE_STATS
#define SAVE_STATS 0
#endif
#ifndef PAIR
#define PAIR 0  // two rows a cluster (rms_norm_cluster_pair; switch PAIR_ROWS in ../cuda.py)
#endif
#ifndef FAST
#define FAST 0  // step 2 in one pass where the chunk's range allows (see block_stats; ../cuda.py turns it on)
#endif
#ifndef TC_STATS
#define TC_STATS 0  // FAST's sum of squares on the tensor cores (rows.cuh chunk_amax_sums_tc; switch in ../cuda.py)
#endif

#include "../../_cuda/rows.cuh"  // element formats, cluster primitives, warp reductions, vector loads and stores

#define NWARPS (THREADS / 32)
#define CHUNK (THREADS * (NV + SNV) * VEC)
static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 1024 threads");
static_assert(CLUSTER >= 1 && CLUSTER <= 16, "cluster sizes to 16 (past 8: non-portable, set at launch)");
static_assert(SNV == 0 || VECTOR, "shared-memory vectors: the 16-byte path");

// 2. (e, sum of (x 2^-e)^2) of the CTA's chunk. 2^-e as two factors, each a normal float for any exponent of a
//    finite input (e in [-148, 128]); a chunk of zeros (past the row's end, or zero inputs) reports NO_EXPONENT
//    and sum 0; an Inf or NaN makes the sum Inf or NaN, as the reference's (fmaxf skips NaN: the sum does not)
//    FAST: the largest magnitude and the unscaled sum of squares in one pass and one block reduction; where the
//    chunk's largest magnitude a lies in [2^-40, 2^40] (every square below 2^80, a sum of at most 2^18 of them below
//    2^98; squares that underflow are below 2^-126 against a sum of at least a^2 >= 2^-80), the sum is brought to the
//    scale 4^-e by one exact power of two: the same bits as the scaled pass (scaling by 2^-e is exact, so every
//    product and partial sum rounds alike) unless some square underflows. Other chunks (and Inf / NaN) sum in the
//    scale 2^-e from x read again from global memory (L2): summing the held words again kept the first pass's
//    unpacked values alive across the reduction (32-88 bytes of spills a thread, sm_90; a volatile copy of each word
//    did not help), and such rows are rare.
#if FAST
__device__ __forceinline__ float sum_squares_again(const void* x_, long long row, int x_stride, int base,
                                                   int n_cols, float s1, float s2) {
    const int tid = threadIdx.x;
    float s = 0.0f;
#if VECTOR
    const uint4* xr = reinterpret_cast<const uint4*>(static_cast<const unsigned char*>(x_) +
                                                     (size_t)row * x_stride * EB);
#pragma unroll 1
    for (int j = 0; j < NV + SNV; ++j) {  // the held order: registers, then shared memory
        const int col = base + (j * THREADS + tid) * VEC;
        if (col >= n_cols) break;  // the rest lie past the row's end too (held as zeros: nothing to the sum)
        const uint4 q = __ldg(xr + col / VEC);
#pragma unroll
        for (int k = 0; k < WORDS; ++k)
#pragma unroll
            for (int i = 0; i < PER_WORD; ++i) {
                const float v = elem(word(q, k), i) * s1 * s2;
                s = fmaf(v, v, s);
            }
    }
#else
#if EB == 4
    const unsigned* xr = static_cast<const unsigned*>(x_) + (size_t)row * x_stride;
#else
    const unsigned short* xr = static_cast<const unsigned short*>(x_) + (size_t)row * x_stride;
#endif
#pragma unroll 1
    for (int j = 0; j < NV; ++j) {
        const int col = base + j * THREADS + tid;
        if (col >= n_cols) break;
        const float v = elem((unsigned)__ldg(xr + col), 0) * s1 * s2;
        s = fmaf(v, v, s);
    }
#endif
    return s;
}
#endif

__device__ __forceinline__ float2 block_stats(const unsigned (&w)[NV][WORDS], float* red_a, float* red_s,
                                              const void* x_, long long row, int x_stride, int base, int n_cols) {
#if FAST
    float amax;
#if TC_STATS
    const float q = chunk_amax_sums_tc<false>(w, amax).y;  // this lane's share, on the tensor cores (rows.cuh)
#else
    const float q = chunk_amax_fold(w, amax, 0.0f, [](float q, unsigned word, int i) {  // (rows.cuh)
        const float v = elem(word, i);
        return fmaf(v, v, q);
    });
#endif
    const float2 aq = block_reduce_max_sum(make_float2(amax, q), red_a, red_s);
    const float a = aq.x;
    const int e = a > 0.0f && a <= 3.4028235e38f ? exponent_of(a) : 0;
    if (a >= 0x1p-40f && a <= 0x1p40f) return make_float2((float)e, aq.y * exp2i(-2 * e));
    const float s = sum_squares_again(x_, row, x_stride, base, n_cols, exp2i(-(e / 2)), exp2i(-(e - e / 2)));
    (void)w;
#else
    (void)x_, (void)row, (void)x_stride, (void)base, (void)n_cols;
    const float a = block_reduce_max(chunk_amax(w), red_a);
    const int e = a > 0.0f && a <= 3.4028235e38f ? exponent_of(a) : 0;
    const float s1 = exp2i(-(e / 2)), s2 = exp2i(-(e - e / 2));
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; ++j)
#pragma unroll
        for (int k = 0; k < WORDS; ++k)
#pragma unroll
            for (int i = 0; i < PER_WORD; ++i) {
                const float v = elem(w[j][k], i) * s1 * s2;
                s = fmaf(v, v, s);
            }
#if SNV
#pragma unroll 1
    for (int j = 0; j < SNV; ++j) {
        const uint4 q = held[j * THREADS + threadIdx.x];
#pragma unroll
        for (int k = 0; k < WORDS; ++k)
#pragma unroll
            for (int i = 0; i < PER_WORD; ++i) {
                const float v = elem(word(q, k), i) * s1 * s2;
                s = fmaf(v, v, s);
            }
    }
#endif
#endif
    return make_float2(a > 0.0f ? (float)e : (float)NO_EXPONENT, block_reduce_sum(s, red_s));
}

// 3. the row's rstd from the cluster's (e, s) pairs (see the header); a cluster of one has its own pair
__device__ __forceinline__ float row_rstd(float2* slot, float2 es, float inv_n, float eps) {
    float E = es.x, S = es.y;
#if CLUSTER > 1
    if (threadIdx.x == 0) {
        *slot = es;
        fence_release_own_shared();
    }
    cluster_arrive_relaxed();
    cluster_wait();
#if CLUSTER <= 8  // every thread reads every slot (a warp's 32 identical reads are one access)
    float2 p[CLUSTER];
    E = (float)NO_EXPONENT;
#pragma unroll
    for (int c = 0; c < CLUSTER; ++c) {
        p[c] = load_remote(slot, c);
        E = fmaxf(E, p[c].x);
    }
    S = 0.0f;
#pragma unroll
    for (int c = 0; c < CLUSTER; ++c) S += p[c].y * exp2i(2 * ((int)p[c].x - (int)E));
#else  // lane c of every warp reads CTA c's slot, the warp merges them
    const unsigned lane = threadIdx.x & 31;
    const float2 p = lane < CLUSTER ? load_remote(slot, lane) : make_float2((float)NO_EXPONENT, 0.0f);
    E = warp_max(p.x);
    S = warp_sum(p.y * exp2i(2 * ((int)p.x - (int)E)));
#endif
#else
    (void)slot;
#endif
    // mean(x^2) 4^-k lies in [1 / (4n), 1] (S >= 1/4: the largest chunk's largest term), or is 0 for a row of
    // zeros (k = NO_EXPONENT); a factor 4^d below 2^-126 in S drops only terms far below the result's rounding
    return rstd_scaled((int)E, S * inv_n, eps);
}

// 4. y = x * rstd * w' for one 16-byte vector (or one element) at column col
__device__ __forceinline__ unsigned scale_word(unsigned xw, unsigned ww, float rstd) {
    unsigned o = 0;
#pragma unroll
    for (int i = 0; i < PER_WORD; ++i) {
        const float wv = OFFSET ? 1.0f + elem(ww, i) : elem(ww, i);
        o |= to_bits(elem_again(xw, i) * rstd * wv) << (16 * i);
    }
    return o;
}

#if PAIR
// --- PAIR (switch PAIR_ROWS in ../cuda.py): two rows a cluster -----------------------------------------------------
// Rows 2p and 2p + 1 share a cluster, each CTA holding the same CHUNK2 columns of both (the first row's NV vectors a
// thread in registers, the second's NV in shared memory: rows.cuh load_pair), so every 16-byte vector of w is read
// from L2 once for two rows (the layer_norm rung's PAIR, with w alone). Step 2 is FAST's one pass for both rows (one
// block reduction of both rows' largest magnitudes and sums of squares, one barrier); a row whose chunk lies outside
// [2^-40, 2^40] sums again in its own scale from x in L2 (one more block reduction, taken by the whole CTA or none:
// the range is the CTA's).
static_assert(VECTOR && SNV == NV, "PAIR: the 16-byte path, the second row's vectors in shared memory");
#ifndef PG
#define PG 2  // accesses whose w vectors are loaded before their stores (switch PAIR_GROUP in ../cuda.py)
#endif
#define CHUNK2 (THREADS * NV * VEC)

// one row's sum of (x 2^-e)^2 over this thread's accesses, from global memory (the range's fallback)
__device__ __forceinline__ float pair_squares_again(const uint4* xr, int vi, int n_vec, float s1, float s2) {
    float s = 0.0f;
#pragma unroll 1
    for (int j = 0; j < NV; ++j) {
        if (vi + j * THREADS >= n_vec) break;
        const uint4 q = __ldg(xr + vi + j * THREADS);
#pragma unroll
        for (int k = 0; k < WORDS; ++k)
#pragma unroll
            for (int i = 0; i < PER_WORD; ++i) {
                const float v = elem(word(q, k), i) * s1 * s2;
                s = fmaf(v, v, s);
            }
    }
    return s;
}

// 2. both rows' (e, sum of (x 2^-e)^2) of this CTA's chunk
__device__ __forceinline__ void pair_stats(float2 (&es)[2], const unsigned (&w)[NV][WORDS], const uint4* xr,
                                           const uint4* xs, int vi, int n_vec, float4* red_aq, float* red_t0,
                                           float* red_t1) {
    const float4 aq = block_reduce_max2_sum2(pair_amax_fold(w, [](float q, unsigned word, int i) {  // (rows.cuh)
        const float v = elem(word, i);
        return fmaf(v, v, q);  // FAST's unscaled sum of squares
    }), red_aq);
    const float av[2] = {aq.x, aq.y}, qv[2] = {aq.z, aq.w};
    float* const red_t[2] = {red_t0, red_t1};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int e = av[r] > 0.0f && av[r] <= 3.4028235e38f ? exponent_of(av[r]) : 0;
        float s;
        if (av[r] >= 0x1p-40f && av[r] <= 0x1p40f) {
            s = qv[r] * exp2i(-2 * e);
        } else if (av[r] == 0.0f) {  // zeros (and the absent second row of an odd last pair: never read)
            s = 0.0f;
        } else {  // the CTA's range, so every thread of it takes this branch or none
            s = block_reduce_sum(pair_squares_again(r == 0 ? xr : xs, vi, n_vec, exp2i(-(e / 2)),
                                                    exp2i(-(e - e / 2))), red_t[r]);
        }
        es[r] = make_float2(av[r] > 0.0f ? (float)e : (float)NO_EXPONENT, s);
    }
}

// 3. both rows' rstd: half-warp r merges row r's (e, s), lane c reading CTA c's slot (every CTA in the same order)
__device__ __forceinline__ void rstd_pair(float& rs0, float& rs1, float2 (&slots)[2], const float2 (&es)[2],
                                          float inv_n, float eps) {
#if CLUSTER > 1
    static_assert(CLUSTER <= 16, "a half-warp a row");
    if (threadIdx.x == 0) {
        slots[0] = es[0], slots[1] = es[1];
        fence_release_own_shared();
    }
    cluster_arrive_relaxed();
    cluster_wait();
    const unsigned lane = threadIdx.x & 31, c = lane & 15;
    const float2 p = c < CLUSTER ? load_remote(&slots[lane >> 4], c) : make_float2((float)NO_EXPONENT, 0.0f);
    const float E = half_max(p.x);
    const float S = half_sum(p.y * exp2i(2 * ((int)p.x - (int)E)));
    const float rstd = rstd_scaled((int)E, S * inv_n, eps);
    rs0 = __shfl_sync(0xffffffffu, rstd, 0), rs1 = __shfl_sync(0xffffffffu, rstd, 16);
#else
    (void)slots;
    rs0 = rstd_scaled((int)es[0].x, es[0].y * inv_n, eps), rs1 = rstd_scaled((int)es[1].x, es[1].y * inv_n, eps);
#endif
}

__device__ __forceinline__ uint4 scale4(uint4 q, uint4 wq, float rstd) {
    return make_uint4(scale_word(q.x, wq.x, rstd), scale_word(q.y, wq.y, rstd), scale_word(q.z, wq.z, rstd),
                      scale_word(q.w, wq.w, rstd));
}

extern "C" __global__ void
#if CLUSTER <= 8
__cluster_dims__(CLUSTER, 1, 1)
#endif
__launch_bounds__(THREADS, MIN_BLOCKS)
rms_norm_cluster_pair(const void* __restrict__ x_, const void* __restrict__ w_, void* __restrict__ y_,
                      float* __restrict__ rstd_, int n_rows, int n_cols, int x_stride, int y_stride, float eps,
                      float inv_n) {
    __shared__ float4 red_aq[NWARPS];
    __shared__ float red_t0[NWARPS], red_t1[NWARPS];
    __shared__ float2 part[2];  // this CTA's (e, s) of each row, read by the whole cluster
    const int tid = threadIdx.x;
    const int base = (int)cluster_rank() * CHUNK2, vi = base / VEC + tid, n_vec = n_cols / VEC;
    const long long r0 = 2 * (long long)(blockIdx.x / CLUSTER);
    const bool has1 = r0 + 1 < n_rows;
    const uint4* const xr = reinterpret_cast<const uint4*>(static_cast<const unsigned char*>(x_) +
                                                           (size_t)r0 * x_stride * EB);
    const uint4* const xs = xr + x_stride / VEC;  // read only when has1 (row strides: multiples of VEC here)
    unsigned w[NV][WORDS];
    load_pair(w, xr, xs, has1, vi, n_vec);  // 1. (rows.cuh)
    float2 es[2];
    pair_stats(es, w, xr, xs, vi, n_vec, red_aq, red_t0, red_t1);  // 2.
    float rs0, rs1;
    rstd_pair(rs0, rs1, part, es, inv_n, eps);  // 3.
#if SAVE_STATS
    if (base == 0 && tid == 0) {
        rstd_[r0] = rs0;
        if (has1) rstd_[r0 + 1] = rs1;
    }
#else
    (void)rstd_;
#endif
#if CLUSTER > 1
    cluster_arrive_release();  // done with the partners' shared memory
#endif
    // 4. store both rows, each access's w loaded once (PG accesses' in flight together)
    const uint4* const p[1] = {static_cast<const uint4*>(w_) + vi};
    uint4* const yr = reinterpret_cast<uint4*>(static_cast<unsigned char*>(y_) + (size_t)r0 * y_stride * EB) + vi;
    store_pair<1, PG>(w, yr, yr + y_stride / VEC, has1, p, vi, n_vec, [=](uint4 q, const uint4 (&wq)[1], int r) {
        return scale4(q, wq[0], r ? rs1 : rs0);  // (rows.cuh); row r0 + 1 written only when has1
    });
#if CLUSTER > 1
    cluster_wait();  // partners may still be reading `part`
#endif
}

#else  // one row a cluster

extern "C" __global__ void
#if CLUSTER <= 8
__cluster_dims__(CLUSTER, 1, 1)
#endif
__launch_bounds__(THREADS, MIN_BLOCKS)
rms_norm_cluster(const void* __restrict__ x_, const void* __restrict__ w_, void* __restrict__ y_,
                 float* __restrict__ rstd_, int n_cols, int x_stride, int y_stride, float eps,
                 float inv_n TIMELINE_PARAM) {
    __shared__ float red_a[NWARPS], red_s[NWARPS];
    TIMELINE_BEGIN();
    __shared__ float2 part;  // this CTA's (e, s), read by the whole cluster
    const int tid = threadIdx.x;
    const int base = (int)cluster_rank() * CHUNK;
    const long long row = blockIdx.x / CLUSTER;
    unsigned w[NV][WORDS];
    STAGGER(row);
    load_chunk(w, x_, row, x_stride, base, n_cols, 0u);  // 1. (rows.cuh); zeros past the row's end
    TIMELINE_LOADED(w);
#if VECTOR
    const uint4* const wr[1] = {static_cast<const uint4*>(w_)};
    const FirstGroup<1> first = WEARLY ? first_group(wr, base, n_cols) : FirstGroup<1>{};  // (rows.cuh)
    if (WPF) prefetch_accesses(wr, base, n_cols, 0, WPF);  // (rows.cuh)
#endif
    // 2-3.
    const float rstd = row_rstd(&part, block_stats(w, red_a, red_s, x_, row, x_stride, base, n_cols), inv_n, eps);
    TIMELINE_MARK(2);
#if SAVE_STATS
    if (base == 0 && tid == 0) rstd_[row] = rstd;
#else
    (void)rstd_;
#endif
#if CLUSTER > 1
    cluster_arrive_release();  // done with the partners' shared memory (release: after this CTA's DSMEM loads)
#endif
    // 4. store
#if VECTOR
    uint4* yr = reinterpret_cast<uint4*>(static_cast<unsigned char*>(y_) + (size_t)row * y_stride * EB);
    store_chunk(w, yr, wr, base, n_cols, first, [=](uint4 q, const uint4 (&wq)[1]) {  // (rows.cuh)
        return make_uint4(scale_word(q.x, wq[0].x, rstd), scale_word(q.y, wq[0].y, rstd),
                          scale_word(q.z, wq[0].z, rstd), scale_word(q.w, wq[0].w, rstd));
    });
    TIMELINE_END();
#else
#if EB == 4
    unsigned* yr = static_cast<unsigned*>(y_) + (size_t)row * y_stride;
    const unsigned* wr = static_cast<const unsigned*>(w_);
#else
    unsigned short* yr = static_cast<unsigned short*>(y_) + (size_t)row * y_stride;
    const unsigned short* wr = static_cast<const unsigned short*>(w_);
#endif
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int col = base + j * THREADS + tid;
        if (col < n_cols) yr[col] = scale_word(w[j][0], (unsigned)__ldg(wr + col), rstd);
    }
#endif
#if CLUSTER > 1
    cluster_wait();  // partners may still be reading `part`
#endif
}
#endif  // PAIR
