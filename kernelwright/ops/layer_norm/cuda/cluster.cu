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
#ifndef ONE_PASS_MEAN
#define ONE_PASS_MEAN 0  // the largest magnitude and the sum in one pass (see chunk_amax_sum24; switch in ../cuda.py)
#endif

#include "../../_cuda/rows.cuh"  // element formats, cluster primitives, reductions, the chunk load, exponents

#define CHUNK (THREADS * (NV + SNV) * VEC)
static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 1024 threads");
static_assert(CLUSTER >= 1 && CLUSTER <= 16, "cluster sizes to 16 (past 8: non-portable, set at launch)");
static_assert(SNV == 0 || VECTOR, "shared-memory vectors: the 16-byte path");

__device__ __forceinline__ float4 load_remote4(const float4* local, unsigned rank) {
    unsigned addr = (unsigned)__cvta_generic_to_shared(local), remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(remote) : "memory");
    return v;
}

// columns of the row in the chunk of the CTA starting at column `base`
__device__ __forceinline__ int chunk_cols(int base, int n_cols) { return max(0, min(CHUNK, n_cols - base)); }

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
    unsigned m = 0;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; ++j)
#pragma unroll
        for (int k = 0; k < WORDS; ++k) {
            m = max_magnitude(m, w[j][k]);
#pragma unroll
            for (int i = 0; i < PER_WORD; ++i) s = fmaf(elem_again(w[j][k], i), 0x1p-24f, s);
        }
#if SNV
    asm volatile("cp.async.wait_group 0;" ::: "memory");
#pragma unroll 1
    for (int j = 0; j < SNV; ++j) {
        const uint4 q = held[j * THREADS + threadIdx.x];
#pragma unroll
        for (int k = 0; k < WORDS; ++k) {
            m = max_magnitude(m, word(q, k));
#pragma unroll
            for (int i = 0; i < PER_WORD; ++i) s = fmaf(elem_again(word(q, k), i), 0x1p-24f, s);
        }
    }
#endif
#if EB == 2 && VECTOR
    m = max(m & 0xffffu, m >> 16);
#endif
    return make_float2(from_bits(m), s);
}

#endif

// 2. (e, mean, M2, n) of this CTA's chunk, mean and M2 in the scale 2^-e (see the header)
__device__ __forceinline__ float4 block_stats(const unsigned (&w)[NV][WORDS], int base, int n_cols, float* red_a,
                                              float* red_s, float* red_m, float* red_t) {
    const int n = chunk_cols(base, n_cols), inside = accesses_inside(base, n_cols);
#if ONE_PASS_MEAN
    const float2 as = block_reduce_max_sum(chunk_amax_sum24(w), red_a, red_s);
    const float a = as.x;
#else
    (void)red_t;
    const float a = block_reduce_max(chunk_amax(w), red_a);
#endif
    const int e = a > 0.0f && a <= 3.4028235e38f ? exponent_of(a) : 0;
    const float s1 = exp2i(-(e / 2)), s2 = exp2i(-(e - e / 2));
    float mean;
#if ONE_PASS_MEAN
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

// 3. the row's (mean, rstd) from the cluster's tuples; a cluster of one has its own
__device__ __forceinline__ float2 row_stats(float4* slot, float4 t, float inv_n, float eps) {
    float E = t.x, mean = t.y, M2 = t.z;
#if CLUSTER > 1
    if (threadIdx.x == 0) {
        *slot = t;
        fence_release_own_shared();
    }
    cluster_arrive_relaxed();
    cluster_wait();
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

// 4. y = (x - mean) * rstd * w + b for one word of x, w and b
__device__ __forceinline__ unsigned affine_word(unsigned xw, unsigned ww, unsigned bw, float2 mr) {
    unsigned o = 0;
#pragma unroll
    for (int i = 0; i < PER_WORD; ++i)
        o |= to_bits(fmaf((elem_again(xw, i) - mr.x) * mr.y, elem(ww, i), elem(bw, i))) << (16 * i);
    return o;
}

extern "C" __global__ void
#if CLUSTER <= 8
__cluster_dims__(CLUSTER, 1, 1)
#endif
__launch_bounds__(THREADS, MIN_BLOCKS)
layer_norm_cluster(const void* __restrict__ x_, const void* __restrict__ w_, const void* __restrict__ b_,
                   void* __restrict__ y_, float* __restrict__ mean_, float* __restrict__ rstd_, int n_cols,
                   int x_stride, int y_stride, float eps, float inv_n) {
    __shared__ float red_a[THREADS / 32], red_s[THREADS / 32], red_m[THREADS / 32], red_t[THREADS / 32];
    __shared__ float4 part;  // this CTA's (e, mean, M2, n), read by the whole cluster
    const int tid = threadIdx.x;
    const int base = (int)cluster_rank() * CHUNK;
    const long long row = blockIdx.x / CLUSTER;
    unsigned w[NV][WORDS];
    load_chunk(w, x_, row, x_stride, base, n_cols, 0u);  // 1. (rows.cuh); zeros past the row's end
#if VECTOR
    const uint4* const wb[2] = {static_cast<const uint4*>(w_), static_cast<const uint4*>(b_)};
    const FirstGroup<2> first = WEARLY ? first_group(wb, base, n_cols) : FirstGroup<2>{};  // (rows.cuh)
#endif
    const float2 mr = row_stats(&part, block_stats(w, base, n_cols, red_a, red_s, red_m, red_t), inv_n, eps);  // 2-3.
#if SAVE_STATS
    if (base == 0 && tid == 0) mean_[row] = mr.x, rstd_[row] = mr.y;
#else
    (void)mean_, (void)rstd_;
#endif
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
