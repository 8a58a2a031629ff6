// layer_norm rung `cluster` (Hopper, sm_90): the rms_norm cluster rung (rms_norm/cuda/cluster.cu) with LayerNorm's
// statistics: y[r, :] = (x - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps).
//
// A CTA of rank c holds columns [c * CHUNK, (c + 1) * CHUNK) of its row (n_c of them inside the row) as raw words
// in registers and, with SNV, shared memory. In the scale 2^-e of its largest magnitude it finds its mean m_c and
// its sum of squared deviations M2_c (three block reductions: max, sum, M2; columns past the row's end left out
// of M2). The cluster trades (e_c, m_c, M2_c, n_c) through distributed shared memory and merges them in the
// largest exponent E with Chan's formula: mean = sum n_c m_c' / n, M2 = sum M2_c' + n_c (m_c' - mean)^2, where
// m_c' = m_c 2^(e_c - E), M2_c' = M2_c 4^(e_c - E). rstd from M2 / n in that scale (rows.cuh's rstd_scaled), the
// mean brought back by 2^E; with SAVE_STATS the CTA of rank 0 stores both (fp32) for the backward. The output
// reads w and b as 16-byte vectors (L2; rows.cuh's store_chunk). Defines: DTYPE, VECTOR, NV, THREADS, CLUSTER
// (1..16; past 8 set at launch), MIN_BLOCKS, SNV (16-byte path only), SAVE_STATS, ONE_PASS_MEAN (switch), and the
// store's WG / WGS / WEARLY (rows.cuh). H200 runs 60-62 (bf16): 3.97 / 4.07 TB/s at 8192 / 16384 columns, 3.07 /
// 2.64 at 65536 / 262144 (split 3.34 / 2.96); journal norms.md, session 15.

#if !defined(DTYPE) || !defined(VECTOR) || !defined(NV) || !defined(THREADS) || !defined(CLUSTER)
#error "compile with -DDTYPE= -DVECTOR= -DNV= -DTHREADS= -DCLUSTER="
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#ifndef SNV
#define SNV 0
#endif
#ifndef SAVE_STATS
#define SAVE_STATS 0
#endif
#ifndef PAIR
#define PAIR 0  // two rows a cluster (layer_norm_cluster_pair; switch PAIR_ROWS in ../cuda.py)
#endif
#ifndef ONE_PASS_MEAN
#define ONE_PASS_MEAN 0  // the largest magnitude and the sum in one pass (see chunk_amax_sum24; switch in ../cuda.py)
#endif
#ifndef FAST_STATS
#define FAST_STATS 0  // the largest magnitude, sum and sum of squares in one pass (see block_stats; switch in ../cuda.py)
#endif
#ifndef STORE_FMA
#define STORE_FMA 0  // y = (x rstd - mean rstd) w + b as two FMAs (affine_word; switch in ../cuda.py)
#endif
#ifndef TC_STATS
#define TC_STATS 0  // FAST_STATS' two sums on the tensor cores (chunk_amax_sum_sq; switch in ../cuda.py)
#endif
static_assert(!(FAST_STATS && ONE_PASS_MEAN), "FAST_STATS replaces ONE_PASS_MEAN's first pass");

#include "../../_cuda/rows.cuh"  // element formats, cluster primitives, reductions, the chunk load, exponents

#define CHUNK (THREADS * (NV + SNV) * VEC)
static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 1024 threads");
static_assert(CLUSTER >= 1 && CLUSTER <= 16, "cluster sizes to 16 (past 8: non-portable, set at launch)");
static_assert(SNV == 0 || VECTOR, "shared-memory vectors: the 16-byte path");

// columns of the row in the chunk of the CTA starting at column `base` (chunk_cols2: PAIR's chunk)
__device__ __forceinline__ int chunk_cols(int base, int n_cols) { return max(0, min(CHUNK, n_cols - base)); }
#if PAIR
__device__ __forceinline__ int chunk_cols2(int base, int n_cols) {
    return max(0, min(THREADS * NV * VEC, n_cols - base));
}
#endif

// how many of this thread's accesses (0 .. NV + SNV - 1, in order) lie inside the row: access j covers columns
// from base + (j * THREADS + tid) * VEC, so it is inside iff j < accesses_inside (one count, not a column per
// access: with columns per access the one-element path spilled up to 248 bytes)
__device__ __forceinline__ int accesses_inside(int base, int n_cols) {
    const int first = base + (int)threadIdx.x * VEC, step = THREADS * VEC;
    return n_cols > first ? (n_cols - first + step - 1) / step : 0;
}

// sum over this thread's held values inside the row of f(x)
template <typename F>
__device__ __forceinline__ float chunk_sum(const unsigned (&w)[NV][WORDS], int inside, F f) {
    const int tid = threadIdx.x;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        if (j < inside) {
#pragma unroll
            for (int k = 0; k < WORDS; ++k)
#pragma unroll
                for (int i = 0; i < PER_WORD; ++i) s += f(elem(w[j][k], i));
        }
    }
#if SNV
#pragma unroll 1
    for (int j = 0; j < SNV; ++j) {
        if (NV + j < inside) {
            const uint4 q = held[j * THREADS + tid];
#pragma unroll
            for (int k = 0; k < WORDS; ++k)
#pragma unroll
                for (int i = 0; i < PER_WORD; ++i) s += f(elem(word(q, k), i));
        }
    }
#endif
    (void)tid;
    return s;
}

#if ONE_PASS_MEAN
// ONE_PASS_MEAN: this thread's largest magnitude (raw bits, as chunk_amax) and its sum of x 2^-24 in one pass (one
// read of the shared-memory vectors, one block reduction of both). 2^-24: a chunk of at most 2^16 values below 2^128
// sums below 2^120 (no overflow); values below 2^-125 lose bits, which matters only in chunks whose largest
// magnitude is tiny (block_stats sums those again in their own scale). Columns past the row's end hold 0. Unpacked
// by byte permutes: with the M2 pass's shifts ptxas kept the values alive across the reduction (192-216 bytes of
// spills at 65536 / 262144 columns, 16-bit). Only for chunks with shared-memory vectors (SNV: ../cuda.py): without,
// the permutes merge with the store's and 4096 / 8192 columns spill 176 bytes.
__device__ __forceinline__ float2 chunk_amax_sum24(const unsigned (&w)[NV][WORDS]) {
    float amax;
    const float s = chunk_amax_fold(w, amax, 0.0f, [](float s, unsigned word, int i) {  // (rows.cuh)
        return fmaf(elem_again(word, i), 0x1p-24f, s);
    });
    return make_float2(amax, s);
}

#endif

#if FAST_STATS && TC_STATS
static_assert(VECTOR && EB == 2, "TC_STATS: 16-bit values, 16-byte vectors (one A fragment each)");
// TC_STATS: FAST_STATS' sum and sum of squares on the tensor cores (rows.cuh chunk_amax_sums_tc), this lane's shares
__device__ __forceinline__ float3 chunk_amax_sum_sq(const unsigned (&w)[NV][WORDS]) {
    float amax;
    const float2 sq = chunk_amax_sums_tc<true>(w, amax);
    return make_float3(amax, sq.x, sq.y);
}
#elif FAST_STATS
// FAST_STATS: this thread's largest magnitude (raw bits, as chunk_amax), unscaled sum and unscaled sum of squares in
// one pass over the held chunk (columns past the row's end hold 0 and add nothing). Unpacked by byte permutes, as
// chunk_amax_sum24: with the centred pass's shifts ptxas kept the values alive across the reduction (188-216 bytes
// of spills a thread at 40000-262144 16-bit columns, sm_90)
__device__ __forceinline__ float3 chunk_amax_sum_sq(const unsigned (&w)[NV][WORDS]) {
    float amax;
    const float2 sq = chunk_amax_fold(w, amax, make_float2(0.0f, 0.0f), [](float2 t, unsigned word, int i) {
        const float v = elem_again(word, i);
        return make_float2(t.x + v, fmaf(v, v, t.y));
    });
    return make_float3(amax, sq.x, sq.y);
}
#endif

#if FAST_STATS
// the block's largest magnitude (x) and two sums (y, z), one barrier (the sums in block_reduce_sum's order)
__device__ __forceinline__ float3 block_reduce_max_sum_sum(float3 v, float* red_a, float* red_s, float* red_q) {
    v.x = warp_max(v.x), v.y = warp_sum(v.y), v.z = warp_sum(v.z);
    if ((threadIdx.x & 31) == 0) {
        const int i = threadIdx.x >> 5;
        red_a[i] = v.x, red_s[i] = v.y, red_q[i] = v.z;
    }
    __syncthreads();
    v = make_float3(red_a[0], red_s[0], red_q[0]);
#pragma unroll
    for (int i = 1; i < THREADS / 32; ++i) v.x = fmaxf(v.x, red_a[i]), v.y += red_s[i], v.z += red_q[i];
    return v;
}
#endif

// 2. (e, mean, M2, n) of this CTA's chunk, mean and M2 in the scale 2^-e (see the header). FAST_STATS: one pass and
//    one barrier for the largest magnitude a, the sum S and the sum of squares Q, unscaled; where a lies in
//    [2^-40, 2^40] (no square overflows, none that matters underflows: Q >= a^2 >= 2^-80) the mean is S / n, the
//    very value the scaled sum gives (scaling by 2^-e is exact), and M2 = Q - S mean where that keeps at least
//    Q / 16 (at most 4 of fp32's 24 bits cancelled: |mean| under ~4 standard deviations; the sums' rounding, ~137
//    ulps of Q at 128 values a thread, is then at most ~0.03% of M2). Otherwise (a large mean against a small
//    spread, tiny or huge chunks, Inf, NaN) M2 comes from the centred pass as without the switch; a row's CTAs may
//    take different paths, since each hands the merge its own (e, mean, M2, n).
__device__ __forceinline__ float4 block_stats(const unsigned (&w)[NV][WORDS], int base, int n_cols, float* red_a,
                                              float* red_s, float* red_m, float* red_t) {
    const int n = chunk_cols(base, n_cols), inside = accesses_inside(base, n_cols);
#if FAST_STATS
    const float3 r = block_reduce_max_sum_sum(chunk_amax_sum_sq(w), red_a, red_s, red_t);
    const float a = r.x;
#elif ONE_PASS_MEAN
    const float2 as = block_reduce_max_sum(chunk_amax_sum24(w), red_a, red_s);
    const float a = as.x;
#else
    (void)red_t;
    const float a = block_reduce_max(chunk_amax(w), red_a);
#endif
    const int e = a > 0.0f && a <= 3.4028235e38f ? exponent_of(a) : 0;
    const float s1 = exp2i(-(e / 2)), s2 = exp2i(-(e - e / 2));
    float mean;
#if FAST_STATS
    if (a >= 0x1p-40f && a <= 0x1p40f) {  // (so n > 0)
        const float mu = __fdividef(r.y, (float)n), m2 = fmaf(-r.y, mu, r.z);
        if (m2 >= r.z * 0x1p-4f) return make_float4((float)e, mu * exp2i(-e), m2 * exp2i(-2 * e), (float)n);
        mean = mu * exp2i(-e);  // cancelled: the centred pass below, about this mean (its partials in red_m)
    } else {
        __syncthreads();  // every thread has read the first reduction's partials: red_s may be written again
        const float sum = block_reduce_sum(chunk_sum(w, inside, [=](float x) { return x * s1 * s2; }), red_s);
        mean = n > 0 ? __fdividef(sum, (float)n) : 0.0f;
    }
#elif ONE_PASS_MEAN
    if (a >= 0x1p-40f || a == 0.0f) {  // e >= -39 (or zeros: e = 0, sum 0): the mean in the scale 2^-e is
        mean = n > 0 ? __fdividef(as.y, (float)n) * exp2i(24 - e) : 0.0f;  // (sum 2^-24 / n) 2^(24 - e), <= 2^63
    } else {  // a tiny chunk, or NaN: the sum again in the chunk's own scale, as without the switch
        const float sum = block_reduce_sum(chunk_sum(w, inside, [=](float x) { return x * s1 * s2; }), red_t);
        mean = n > 0 ? __fdividef(sum, (float)n) : 0.0f;
    }
#else
    const float sum = block_reduce_sum(chunk_sum(w, inside, [=](float x) { return x * s1 * s2; }), red_s);
    mean = n > 0 ? __fdividef(sum, (float)n) : 0.0f;
#endif
    const float m2 = block_reduce_sum(chunk_sum(w, inside, [=](float x) {
        const float d = fmaf(x * s1, s2, -mean);
        return d * d;
    }), red_m);
    return make_float4(a > 0.0f ? (float)e : (float)NO_EXPONENT, mean, m2, (float)n);
}

// 3. the row's (mean, rstd) from the cluster's tuples; a cluster of one has its own. publish: this CTA's tuples
//    (one a row it holds) into its slots, then the cluster barrier; merge: one row's from the partners' slots
template <int N>
__device__ __forceinline__ void publish(float4 (&slots)[N], const float4 (&t)[N]) {
#if CLUSTER > 1
    if (threadIdx.x == 0) {
#pragma unroll
        for (int i = 0; i < N; ++i) slots[i] = t[i];
        fence_release_own_shared();
    }
    cluster_arrive_relaxed();
    cluster_wait();
#else
    (void)slots, (void)t;
#endif
}

__device__ __forceinline__ float2 merge(const float4* slot, float4 t, float inv_n, float eps) {
    float E = t.x, mean = t.y, M2 = t.z;
#if CLUSTER > 1
#if CLUSTER <= 8  // every thread reads every slot, three times (a warp's 32 identical reads are one access)
    E = (float)NO_EXPONENT;
#pragma unroll
    for (int c = 0; c < CLUSTER; ++c) E = fmaxf(E, load_remote4(slot, c).x);
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < CLUSTER; ++c) {
        const float4 p = load_remote4(slot, c);
        s += p.w * p.y * exp2i((int)p.x - (int)E);
    }
    mean = s * inv_n;
    M2 = 0.0f;
#pragma unroll
    for (int c = 0; c < CLUSTER; ++c) {
        const float4 p = load_remote4(slot, c);
        const float f = exp2i((int)p.x - (int)E), d = p.y * f - mean;
        M2 += p.z * f * f + p.w * d * d;
    }
#else  // lane c of every warp reads CTA c's slot, the warp merges them
    const unsigned lane = threadIdx.x & 31;
    const float4 p = lane < CLUSTER ? load_remote4(slot, lane) : make_float4((float)NO_EXPONENT, 0.0f, 0.0f, 0.0f);
    E = warp_max(p.x);
    const float f = exp2i((int)p.x - (int)E);
    mean = warp_sum(p.w * p.y * f) * inv_n;
    const float d = p.y * f - mean;
    M2 = warp_sum(p.z * f * f + p.w * d * d);
#endif
#else
    (void)slot;
#endif
    const int k = (int)E;
    const float rstd = rstd_scaled(k, M2 * inv_n, eps);
    return make_float2(mean == 0.0f ? 0.0f : mean * exp2i(k / 2) * exp2i(k - k / 2), rstd);
}

__device__ __forceinline__ float2 row_stats(float4* slot, float4 t, float inv_n, float eps) {
    float4 (&slots)[1] = *reinterpret_cast<float4 (*)[1]>(slot);
    const float4 ts[1] = {t};
    publish(slots, ts);
    return merge(slot, t, inv_n, eps);
}

// 4. y = (x - mean) * rstd * w + b for one word of x, w and b. STORE_FMA: (x rstd + c) w + b with c = -mean rstd
//    (mr.x then holds c: row_stats), two FMAs where the plain form takes an add, a multiply and an FMA; the extra
//    rounding is that of c, |mean| rstd 2^-24, the size of the fp32 mean's own (counted in the family's error scale)
__device__ __forceinline__ unsigned affine_word(unsigned xw, unsigned ww, unsigned bw, float2 mr) {
    unsigned o = 0;
#pragma unroll
    for (int i = 0; i < PER_WORD; ++i)
#if STORE_FMA
        o |= to_bits(fmaf(fmaf(elem_again(xw, i), mr.y, mr.x), elem(ww, i), elem(bw, i))) << (16 * i);
#else
        o |= to_bits(fmaf((elem_again(xw, i) - mr.x) * mr.y, elem(ww, i), elem(bw, i))) << (16 * i);
#endif
    return o;
}

#if PAIR
// --- PAIR (switch PAIR_ROWS in ../cuda.py): two rows a cluster -----------------------------------------------------
// Rows 2p and 2p + 1 share a cluster, each CTA holding the same CHUNK2 columns of both: the first row's as NV
// vectors a thread in registers, the second's as NV vectors a thread in shared memory (SNV == NV, the slots load_chunk
// fills with the second half of one row). So every 16-byte vector of w and b is read once for two rows: at 65536
// columns the one-row kernel reads w and b from L2 (256 KB a row: more than L1 keeps beside 2 x 64 KB of held
// rows) for every 128 KB of x read from HBM, twice x's bytes. The two rows' statistics take the same three block
// reductions (float2: one barrier each for both rows) and one cluster barrier. Row 2p + 1 past the last row: its
// slots hold zeros, nothing of it is stored. With ONE_PASS_MEAN (switch PAIR_ONE_PASS) two barriers, not three.
static_assert(VECTOR && SNV == NV, "PAIR: the 16-byte path, the second row's vectors in shared memory");
#ifndef PG
#define PG 1  // accesses whose w and b are loaded before their stores (switch PAIR_GROUP in ../cuda.py)
#endif
#define CHUNK2 (THREADS * NV * VEC)

// the largest magnitude of each row's held words (x: registers, y: shared memory), on the raw bits as chunk_amax
__device__ __forceinline__ float2 pair_amax(const unsigned (&w)[NV][WORDS]) {
    unsigned m0 = 0, m1 = 0;
#pragma unroll
    for (int j = 0; j < NV; ++j)
#pragma unroll
        for (int k = 0; k < WORDS; ++k) m0 = max_magnitude(m0, w[j][k]);
    cp_async_wait<0>();
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const uint4 q = held[j * THREADS + threadIdx.x];
#pragma unroll
        for (int k = 0; k < WORDS; ++k) m1 = max_magnitude(m1, word(q, k));
    }
#if EB == 2
    m0 = max(m0 & 0xffffu, m0 >> 16), m1 = max(m1 & 0xffffu, m1 >> 16);
#endif
    return make_float2(from_bits(m0), from_bits(m1));
}

// each row's sum over this thread's held values inside the row of f0(x) (registers) and f1(x) (shared memory)
template <typename F0, typename F1>
__device__ __forceinline__ float2 pair_sum(const unsigned (&w)[NV][WORDS], int inside, F0 f0, F1 f1) {
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        if (j < inside) {
#pragma unroll
            for (int k = 0; k < WORDS; ++k)
#pragma unroll
                for (int i = 0; i < PER_WORD; ++i) s0 += f0(elem(w[j][k], i));
        }
    }
#pragma unroll 1
    for (int j = 0; j < NV; ++j) {
        if (j < inside) {
            const uint4 q = held[j * THREADS + threadIdx.x];
#pragma unroll
            for (int k = 0; k < WORDS; ++k)
#pragma unroll
                for (int i = 0; i < PER_WORD; ++i) s1 += f1(elem(word(q, k), i));
        }
    }
    return make_float2(s0, s1);
}


// 2. (e, mean, M2, n) of this CTA's chunk of each row (block_stats' arithmetic, both rows in each reduction; with
//    ONE_PASS_MEAN the largest magnitudes and the sums in one pass and one barrier, as block_stats there)
__device__ __forceinline__ void pair_stats(float4 (&t)[2], const unsigned (&w)[NV][WORDS], int base, int n_cols,
                                           float2* red_a, float2* red_s, float2* red_m, float4* red_as,
                                           float* red_t0, float* red_t1) {
    const int n = chunk_cols2(base, n_cols), inside = accesses_inside(base, n_cols);
#if ONE_PASS_MEAN
    (void)red_a, (void)red_s;
    const float4 as = block_reduce_max2_sum2(pair_amax_fold(w, [](float s, unsigned word, int i) {  // (rows.cuh)
        return fmaf(elem_again(word, i), 0x1p-24f, s);  // chunk_amax_sum24's sum of x 2^-24
    }), red_as);
    const float2 a = make_float2(as.x, as.y);
#else
    (void)red_as, (void)red_t0, (void)red_t1;
    const float2 a = block_reduce2<true>(pair_amax(w), red_a);
#endif
    const int e0 = a.x > 0.0f && a.x <= 3.4028235e38f ? exponent_of(a.x) : 0;
    const int e1 = a.y > 0.0f && a.y <= 3.4028235e38f ? exponent_of(a.y) : 0;
    const float p0 = exp2i(-(e0 / 2)), q0 = exp2i(-(e0 - e0 / 2)), p1 = exp2i(-(e1 / 2)), q1 = exp2i(-(e1 - e1 / 2));
#if ONE_PASS_MEAN
    float m0, m1;  // each row's: from the one-pass sum where its largest magnitude allows (block_stats), else again
    if (a.x >= 0x1p-40f || a.x == 0.0f) {
        m0 = n > 0 ? __fdividef(as.z, (float)n) * exp2i(24 - e0) : 0.0f;
    } else {
        const float s = block_reduce_sum(pair_sum(w, inside, [=](float x) { return x * p0 * q0; },
                                                  [](float) { return 0.0f; }).x, red_t0);
        m0 = n > 0 ? __fdividef(s, (float)n) : 0.0f;
    }
    if (a.y >= 0x1p-40f || a.y == 0.0f) {
        m1 = n > 0 ? __fdividef(as.w, (float)n) * exp2i(24 - e1) : 0.0f;
    } else {
        const float s = block_reduce_sum(pair_sum(w, inside, [](float) { return 0.0f; },
                                                  [=](float x) { return x * p1 * q1; }).y, red_t1);
        m1 = n > 0 ? __fdividef(s, (float)n) : 0.0f;
    }
#else
    const float2 sum = block_reduce2<false>(pair_sum(w, inside, [=](float x) { return x * p0 * q0; },
                                                     [=](float x) { return x * p1 * q1; }), red_s);
    const float m0 = n > 0 ? __fdividef(sum.x, (float)n) : 0.0f, m1 = n > 0 ? __fdividef(sum.y, (float)n) : 0.0f;
#endif
    const float2 m2 = block_reduce2<false>(pair_sum(w, inside, [=](float x) {
        const float d = fmaf(x * p0, q0, -m0);
        return d * d;
    }, [=](float x) {
        const float d = fmaf(x * p1, q1, -m1);
        return d * d;
    }), red_m);
    t[0] = make_float4(a.x > 0.0f ? (float)e0 : (float)NO_EXPONENT, m0, m2.x, (float)n);
    t[1] = make_float4(a.y > 0.0f ? (float)e1 : (float)NO_EXPONENT, m1, m2.y, (float)n);
}

// 3. both rows' (mean, rstd) from the cluster's slots: half-warp r merges row r's, lane c reading CTA c's slot
//    (every CTA in the same order, so all get the same bits); merge's unrolled loads of every slot, twice, spilled
//    up to 260 bytes at clusters of 8
__device__ __forceinline__ void merge_pair(float2& mr0, float2& mr1, float4 (&slots)[2], const float4 (&t)[2],
                                           float inv_n, float eps) {
#if CLUSTER > 1
    static_assert(CLUSTER <= 16, "a half-warp a row");
    const unsigned lane = threadIdx.x & 31, c = lane & 15;
    const float4 p = c < CLUSTER ? load_remote4(&slots[lane >> 4], c)
                                 : make_float4((float)NO_EXPONENT, 0.0f, 0.0f, 0.0f);
    const float E = half_max(p.x), f = exp2i((int)p.x - (int)E);
    const float mean = half_sum(p.w * p.y * f) * inv_n, d = p.y * f - mean;
    const float M2 = half_sum(p.z * f * f + p.w * d * d);
    const int k = (int)E;
    const float rstd = rstd_scaled(k, M2 * inv_n, eps);
    const float m = mean == 0.0f ? 0.0f : mean * exp2i(k / 2) * exp2i(k - k / 2);
    mr0 = make_float2(__shfl_sync(0xffffffffu, m, 0), __shfl_sync(0xffffffffu, rstd, 0));
    mr1 = make_float2(__shfl_sync(0xffffffffu, m, 16), __shfl_sync(0xffffffffu, rstd, 16));
#else
    mr0 = merge(&slots[0], t[0], inv_n, eps), mr1 = merge(&slots[1], t[1], inv_n, eps);
#endif
}

__device__ __forceinline__ uint4 affine4(uint4 q, const uint4 (&p)[2], float2 mr) {
    return make_uint4(affine_word(q.x, p[0].x, p[1].x, mr), affine_word(q.y, p[0].y, p[1].y, mr),
                      affine_word(q.z, p[0].z, p[1].z, mr), affine_word(q.w, p[0].w, p[1].w, mr));
}

extern "C" __global__ void
#if CLUSTER <= 8
__cluster_dims__(CLUSTER, 1, 1)
#endif
__launch_bounds__(THREADS, MIN_BLOCKS)
layer_norm_cluster_pair(const void* __restrict__ x_, const void* __restrict__ w_, const void* __restrict__ b_,
                        void* __restrict__ y_, float* __restrict__ mean_, float* __restrict__ rstd_, int n_rows,
                        int n_cols, int x_stride, int y_stride, float eps, float inv_n) {
    __shared__ float2 red_a[THREADS / 32], red_s[THREADS / 32], red_m[THREADS / 32];
    __shared__ float4 red_as[THREADS / 32];
    __shared__ float red_t0[THREADS / 32], red_t1[THREADS / 32];
    __shared__ float4 part[2];  // this CTA's (e, mean, M2, n) of each row, read by the whole cluster
    const int tid = threadIdx.x;
    const int base = (int)cluster_rank() * CHUNK2, vi = base / VEC + tid, n_vec = n_cols / VEC;
    const long long r0 = 2 * (long long)(blockIdx.x / CLUSTER);
    const bool has1 = r0 + 1 < n_rows;
    const uint4* const xr = reinterpret_cast<const uint4*>(static_cast<const unsigned char*>(x_) +
                                                           (size_t)r0 * x_stride * EB);
    unsigned w[NV][WORDS];
    load_pair(w, xr, xr + x_stride / VEC, has1, vi, n_vec);  // 1. (row strides: multiples of VEC on this path)
    float4 t[2];
    pair_stats(t, w, base, n_cols, red_a, red_s, red_m, red_as, red_t0, red_t1);  // 2.
    publish(part, t);  // 3.
    float2 mr0, mr1;
    merge_pair(mr0, mr1, part, t, inv_n, eps);
#if SAVE_STATS
    if (base == 0 && tid == 0) {
        mean_[r0] = mr0.x, rstd_[r0] = mr0.y;
        if (has1) mean_[r0 + 1] = mr1.x, rstd_[r0 + 1] = mr1.y;
    }
#else
    (void)mean_, (void)rstd_;
#endif
#if CLUSTER > 1
    cluster_arrive_release();  // done with the partners' shared memory
#endif
    // 4. store both rows, each access's w and b loaded once (PG accesses' in flight together: 2 spilled 16-36 bytes)
    const uint4* const p[2] = {static_cast<const uint4*>(w_) + vi, static_cast<const uint4*>(b_) + vi};
    uint4* const yr = reinterpret_cast<uint4*>(static_cast<unsigned char*>(y_) + (size_t)r0 * y_stride * EB) + vi;
    store_pair<2, PG>(w, yr, yr + y_stride / VEC, has1, p, vi, n_vec, [=](uint4 q, const uint4 (&wb)[2], int r) {
        return affine4(q, wb, r ? mr1 : mr0);  // (rows.cuh); row r0 + 1 written only when has1
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
layer_norm_cluster(const void* __restrict__ x_, const void* __restrict__ w_, const void* __restrict__ b_,
                   void* __restrict__ y_, float* __restrict__ mean_, float* __restrict__ rstd_, int n_cols,
                   int x_stride, int y_stride, float eps, float inv_n TIMELINE_PARAM) {
    __shared__ float red_a[THREADS / 32], red_s[THREADS / 32], red_m[THREADS / 32], red_t[THREADS / 32];
    __shared__ float4 part;  // this CTA's (e, mean, M2, n), read by the whole cluster
    TIMELINE_BEGIN();
    const int tid = threadIdx.x;
    const int base = (int)cluster_rank() * CHUNK;
    const long long row = blockIdx.x / CLUSTER;
    unsigned w[NV][WORDS];
    STAGGER(row);
    load_chunk(w, x_, row, x_stride, base, n_cols, 0u);  // 1. (rows.cuh); zeros past the row's end
    TIMELINE_LOADED(w);
#if VECTOR
    const uint4* const wb[2] = {static_cast<const uint4*>(w_), static_cast<const uint4*>(b_)};
    const FirstGroup<2> first = WEARLY ? first_group(wb, base, n_cols) : FirstGroup<2>{};  // (rows.cuh)
    if (WPF) prefetch_accesses(wb, base, n_cols, 0, WPF);  // (rows.cuh)
#endif
    const float2 ms = row_stats(&part, block_stats(w, base, n_cols, red_a, red_s, red_m, red_t), inv_n, eps);  // 2-3.
    TIMELINE_MARK(2);
#if SAVE_STATS
    if (base == 0 && tid == 0) mean_[row] = ms.x, rstd_[row] = ms.y;
#else
    (void)mean_, (void)rstd_;
#endif
    const float2 mr = STORE_FMA ? make_float2(-ms.x * ms.y, ms.y) : ms;  // (affine_word's constants)
#if CLUSTER > 1
    cluster_arrive_release();  // done with the partners' shared memory (release: after this CTA's DSMEM loads)
#endif
    // 4. store
#if VECTOR
    uint4* yr = reinterpret_cast<uint4*>(static_cast<unsigned char*>(y_) + (size_t)row * y_stride * EB);
    store_chunk(w, yr, wb, base, n_cols, first, [=](uint4 q, const uint4 (&p)[2]) {  // (rows.cuh)
        return make_uint4(affine_word(q.x, p[0].x, p[1].x, mr), affine_word(q.y, p[0].y, p[1].y, mr),
                          affine_word(q.z, p[0].z, p[1].z, mr), affine_word(q.w, p[0].w, p[1].w, mr));
    });
    TIMELINE_END();
#else
#if EB == 4
    unsigned* yr = static_cast<unsigned*>(y_) + (size_t)row * y_stride;
    const unsigned* wr = static_cast<const unsigned*>(w_);
    const unsigned* br = static_cast<const unsigned*>(b_);
#else
    unsigned short* yr = static_cast<unsigned short*>(y_) + (size_t)row * y_stride;
    const unsigned short* wr = static_cast<const unsigned short*>(w_);
    const unsigned short* br = static_cast<const unsigned short*>(b_);
#endif
    const int inside = accesses_inside(base, n_cols);
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int col = base + j * THREADS + tid;
        if (j < inside) yr[col] = affine_word(w[j][0], (unsigned)__ldg(wr + col), (unsigned)__ldg(br + col), mr);
    }
#endif
#if CLUSTER > 1
    cluster_wait();  // partners may still be reading `part`
#endif
}
#endif  // PAIR
