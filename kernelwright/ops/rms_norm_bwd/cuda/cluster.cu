// Norm backward rung `cluster` (Hopper, sm_90), shared by rms_norm_bwd, layer_norm_bwd and add_rms_norm_bwd: a
// persistent grid of thread-block clusters, each looping over steps of rows; a row is held by the CTAs of one
// cluster (wide rows) or by a group of a CTA's threads (narrow rows, several rows a step). With
// xhat = (x - mean) * rstd (mean = 0 for RMS), g = w' * dy (w' = w, or 1 + w with OFFSET), per row of n columns:
//
//   dx = rstd * (g - xhat * sum(xhat * g) / n - sum(g) / n)     (the last term with CENTER: layer norm)
//   dx += dh                                                   (DH: add_rms_norm's gradient of the residual)
//   dweight = sum over rows of dy * xhat,   dbias = sum over rows of dy  (CENTER)
//
// Steps, for each step of RPS rows taken by a cluster:
//   1. staging: x and dy (and dh) of the step STAGES - 1 ahead are copied by cp.async into this thread's own
//      slots of a shared-memory ring (16-byte vectors; read back only by the thread that issued them, so its own
//      cp.async.wait_group is all the synchronization they need). While a step is reduced, traded and written, the
//      next STAGES - 1 steps' bytes are in flight: 64 KB a stage for a CTA of 512 threads x 32 bf16 columns.
//   2. pass 1 over the staged vectors: the thread's partial sum(xhat * g) (and sum(g)).
//   3. the row's sums: a shuffle tree over the row's TPR lanes (TPR <= 32: no barrier), or warp sums then one
//      block barrier over a parity-double-buffered array (the next step writes the other half, so one barrier a
//      step suffices), then for clusters one cluster barrier over a parity-double-buffered DSMEM slot: lane c of
//      every warp reads CTA c's partial, the warp sums them (the same order in every CTA, so every CTA of the row
//      gets the same bits).
//   4. pass 2: dx from the staged vectors again (16-byte stores), and dweight (dbias) accumulated in fp32
//      registers for the thread's fixed columns; w' read from shared memory, where each thread copied its columns
//      once (HOLD_W: registers; read from L1 in each pass instead, run 67 lost 14-39% at 65536-262144 columns:
//      the staged x and dy leave L1 little room, and every pass waited on L2 for w).
// After the loop each CTA writes one partial row of dweight (dbias) for its columns (several rows a step: summed
// over the CTA's row groups in shared memory first, in a fixed order); a second kernel sums the partial rows in a
// fixed order (no atomics: bitwise reproducible for a given grid). 16-byte path only (widths a multiple of the
// vector, rows 16-byte aligned); the launcher takes the split rung's kernel elsewhere.
//
// GROUP > 1 (clusters of one): a row's CTAs are GROUP consecutive blocks of the grid (rank = blockIdx.x % GROUP)
// that trade their two sums through global memory instead of DSMEM, so any GROUP CTAs make a row and the grid is
// not bound to the GPCs' cluster placement (262144 bf16 columns: 8 groups of 16 on 128 SMs, against 7 clusters of
// 16 on 112). Each CTA has a 16-byte slot a parity in `xch_`: two 64-bit packets (s1, tag) and (s2, tag), the tag
// the group's step count + 1, each written by thread 0 in one relaxed store (a value and its tag arrive together,
// so no fence: a release store's fence waited for warp 0's whole queue of copies, 2.2 against 3.0 TB/s at 262144,
// run 86); warp 0's lane c spins on CTA c's packets, the warp sums the GROUP partials in rank order (the same bits
// in every CTA) and hands them to the CTA through shared memory. A slot of one parity is written again two steps
// on, after its writer has seen every partner's tag of the step between, which each partner published after
// reading this one. The last CTA to finish (a counter in word 0)
// zeroes the tags, so the next launch starts clean (a CUDA graph's replays too). Every CTA of the grid must be
// resident at once: the launcher makes it a cooperative launch, which fails rather than hangs when they are not.
//
// Defines: DTYPE (0 fp32, 1 fp16, 2 bf16), THREADS, TPR (threads a row, a power of two; = THREADS when CLUSTER >
// 1), CLUSTER (1..16; past 8 set at launch), GROUP (CTAs a row trading through global memory; 1: none), NV (16-byte
// vectors a thread a row), STAGES (>= 2), CENTER, DH, OFFSET, HINTS (streaming stores of dx), HOLD_W.

#if !defined(DTYPE) || !defined(THREADS) || !defined(TPR) || !defined(CLUSTER) || !defined(NV) || !defined(STAGES)
#error "compile with -DDTYPE= -DTHREADS= -DTPR= -DCLUSTER= -DNV= -DSTAGES="
#endif
#define VECTOR 1
#ifndef CENTER
#define CENTER 0
#endif
#ifndef DH
#define DH 0
#endif
#ifndef OFFSET
#define OFFSET 0
#endif
#ifndef HOLD_W
#define HOLD_W 0  // w' in registers, not shared memory
#endif
#ifndef GROUP
#define GROUP 1
#endif

#include "../../_cuda/rows.cuh"  // element formats, cluster primitives, warp sums, 16-byte stores

#define RPS (THREADS / TPR)      // rows a CTA takes a step
#define CHUNK (TPR * NV * VEC)   // columns of a row a CTA holds
#define NARR (DH ? 3 : 2)        // arrays staged: x, dy (and dh)
#define NWARPS (THREADS / 32)
#define WPR (TPR / 32)           // warps a row (TPR > 32)
static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 1024 threads");
static_assert((TPR & (TPR - 1)) == 0 && TPR <= THREADS && THREADS % TPR == 0, "TPR: a power of two");
static_assert(CLUSTER == 1 || TPR == THREADS, "a cluster holds one row a step");
static_assert(CLUSTER >= 1 && CLUSTER <= 16 && STAGES >= 2, "cluster sizes 1..16, two stages at least");
static_assert(GROUP == 1 || (CLUSTER == 1 && TPR == THREADS && GROUP <= 32), "GROUP: CTAs of one row, clusters of 1");
#define SPAN (CLUSTER * GROUP)   // CTAs a row

KW_DYNAMIC_SHARED(uint4, ring);  // [STAGES][NARR][NV][THREADS], then w's [NV][THREADS] (unless HOLD_W); after the
                                 // loop, the partial sums' scratch

__device__ __forceinline__ uint4* slot(int s, int a, int j) {
    return ring + ((s * NARR + a) * NV + j) * THREADS + threadIdx.x;
}
__device__ __forceinline__ uint4* wslot(int j) { return ring + (STAGES * NARR * NV + j) * THREADS + threadIdx.x; }

__device__ __forceinline__ void copy16(uint4* dst, const void* src) {
    cp_async16(dst, src);
}

struct Rows {  // the arrays a step reads, with their row strides (elements)
    const unsigned char* p[NARR];
    int stride[NARR];
};

// 1. stage step `st`'s vectors of this thread (row st * RPS + its row group) into ring stage `s`: one commit group,
//    empty or zero-filled past the rows and columns (zeros add nothing to the sums and are never stored)
__device__ __forceinline__ void fetch(int s, long long st, long long n_steps, const Rows& r, int n_rows,
                                      int n_cols, int col0) {
    const long long row = st * RPS + threadIdx.x / TPR;
    const bool live = st < n_steps && row < n_rows;
#pragma unroll
    for (int a = 0; a < NARR; ++a)
#pragma unroll
        for (int j = 0; j < NV; ++j) {
            const int col = col0 + j * TPR * VEC;
            if (live && col < n_cols)
                copy16(slot(s, a, j), r.p[a] + ((size_t)row * r.stride[a] + col) * EB);
            else if (st < n_steps)
                *slot(s, a, j) = make_uint4(0u, 0u, 0u, 0u);
        }
    cp_async_commit();
}

#if GROUP > 1
// the group's exchange slots in `xch_` (32-bit words): word 0 the finished-CTA counter, then 4 words (s1, tag, s2,
// tag: two 64-bit packets) for each (group, rank, parity)
__device__ __forceinline__ unsigned* xslot(unsigned* xch, long long group, int rank, int parity) {
    return xch + 4 + ((group * GROUP + rank) * 2 + parity) * 4;
}
struct Exchange {  // where this CTA publishes and reads (`gsum`: warp 0's totals for the CTA, [2])
    unsigned* mine;
    unsigned* row;  // rank 0's slots
    unsigned tag;
    float2* gsum;
};
#else
struct Exchange {};
#endif

// 3. the row's two sums (see the header); `red`: [2][NWARPS] (TPR > 32), `cslot`: [2] (clusters)
__device__ __forceinline__ float2 row_sums(float s1, float s2, int parity, float2* red, float2* cslot,
                                           const Exchange& ex) {
#if TPR <= 32
#pragma unroll
    for (int o = TPR / 2; o > 0; o >>= 1) {
        s1 += __shfl_xor_sync(0xffffffffu, s1, o);
        if (CENTER) s2 += __shfl_xor_sync(0xffffffffu, s2, o);
    }
    (void)parity, (void)red, (void)cslot, (void)ex;
    return make_float2(s1, s2);
#else
    s1 = warp_sum(s1);
    if (CENTER) s2 = warp_sum(s2);
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) red[parity * NWARPS + warp] = make_float2(s1, s2);
    __syncthreads();
    const int first = (warp / WPR) * WPR;
    float2 t = red[parity * NWARPS + first];
#pragma unroll
    for (int i = 1; i < WPR; ++i) {
        const float2 v = red[parity * NWARPS + first + i];
        t.x += v.x, t.y += v.y;
    }
#if CLUSTER > 1
    if (threadIdx.x == 0) {
        cslot[parity] = t;
        fence_release_own_shared();
    }
    cluster_arrive_relaxed();
    cluster_wait();
    // the partners' slots of this parity are written again two steps on, after the next step's barrier, which no
    // CTA passes before every CTA has consumed these loads (their values feed this step's stores, issued before it)
    const unsigned lane = threadIdx.x & 31;
    const float2 p = lane < CLUSTER ? load_remote(cslot + parity, lane) : make_float2(0.0f, 0.0f);
    t.x = warp_sum(p.x);
    if (CENTER) t.y = warp_sum(p.y);
#elif GROUP > 1
    (void)cslot;
    if (threadIdx.x == 0) {
        unsigned long long* m = reinterpret_cast<unsigned long long*>(ex.mine + parity * 4);
        publish_tagged_gpu(m, t.x, ex.tag);
        if (CENTER) publish_tagged_gpu(m + 1, t.y, ex.tag);
    }
    if (threadIdx.x < 32) {
        const unsigned lane = threadIdx.x;
        float2 p = make_float2(0.0f, 0.0f);
        if (lane < GROUP) {
            const unsigned long long* o =
                reinterpret_cast<const unsigned long long*>(ex.row + (lane * 2 + parity) * 4);
            p.x = wait_tagged_gpu(o, ex.tag);
            if (CENTER) p.y = wait_tagged_gpu(o + 1, ex.tag);
        }
        p.x = warp_sum(p.x);
        if (CENTER) p.y = warp_sum(p.y);
        if (lane == 0) ex.gsum[parity] = p;
    }
    // gsum[parity] is written again two steps on, after the next step's barriers, which every thread passes after
    // reading it here
    __syncthreads();
    t = ex.gsum[parity];
#else
    (void)cslot, (void)ex;
#endif
    return t;
#endif
}

__device__ __forceinline__ float weight_of(unsigned ww, int i) { return OFFSET ? 1.0f + elem(ww, i) : elem(ww, i); }

extern "C" __global__ void
#if CLUSTER > 1 && CLUSTER <= 8
__cluster_dims__(CLUSTER, 1, 1)
#endif
__launch_bounds__(THREADS, 1)
norm_bwd_cluster(const void* __restrict__ x_, const void* __restrict__ w_, const void* __restrict__ dy_,
                 const void* __restrict__ dh_, const float* __restrict__ mean_, const float* __restrict__ rstd_,
                 void* __restrict__ dx_, float* __restrict__ pw_, float* __restrict__ pb_, int n_rows, int n_cols,
                 int x_stride, int dy_stride, int dh_stride, int dx_stride, float inv_n
#if GROUP > 1
                 , unsigned* xch_
#endif
) {
    __shared__ float2 red[2 * NWARPS];
    __shared__ float2 cslot[2];
    const int tid = threadIdx.x, tr = tid % TPR;
    const int rank = CLUSTER > 1 ? (int)cluster_rank() : GROUP > 1 ? (int)(blockIdx.x % GROUP) : 0;
    const int base = rank * CHUNK;
    const int col0 = base + tr * VEC;  // column of access 0; access j adds j * TPR * VEC
    const long long cid = blockIdx.x / SPAN, ncl = gridDim.x / SPAN;  // this CTA's row group; groups
#if GROUP > 1
    __shared__ float2 gsum[2];
    Exchange ex{xslot(xch_, cid, rank, 0), xslot(xch_, cid, 0, 0), 0u, gsum};
#else
    const Exchange ex{};
#endif
    const long long n_steps = (n_rows + RPS - 1) / RPS;
    Rows r;
    r.p[0] = static_cast<const unsigned char*>(x_), r.stride[0] = x_stride;
    r.p[1] = static_cast<const unsigned char*>(dy_), r.stride[1] = dy_stride;
#if DH
    r.p[2] = static_cast<const unsigned char*>(dh_), r.stride[2] = dh_stride;
#else
    (void)dh_, (void)dh_stride;
#endif
    // w' of this thread's columns: copied once into this thread's own shared-memory slots (a commit group ahead of
    // the ring's, so the first step's wait covers it), or held in registers (HOLD_W)
    const uint4* wp = static_cast<const uint4*>(w_);
#if HOLD_W
    unsigned wv[NV][WORDS];
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int col = col0 + j * TPR * VEC;
        const uint4 q = col < n_cols ? __ldg(wp + col / VEC) : make_uint4(0u, 0u, 0u, 0u);
        wv[j][0] = q.x, wv[j][1] = q.y, wv[j][2] = q.z, wv[j][3] = q.w;
    }
#define W_WORD(j, k) wv[j][k]
#else
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int col = col0 + j * TPR * VEC;
        if (col < n_cols)
            copy16(wslot(j), wp + col / VEC);
        else
            *wslot(j) = make_uint4(0u, 0u, 0u, 0u);
    }
    cp_async_commit();
#define W_WORD(j, k) word(wq, k)
#endif
    float dw[NV][WORDS][PER_WORD], db[NV][WORDS][PER_WORD];
#pragma unroll
    for (int j = 0; j < NV; ++j)
#pragma unroll
        for (int k = 0; k < WORDS; ++k)
#pragma unroll
            for (int i = 0; i < PER_WORD; ++i) dw[j][k][i] = 0.0f, db[j][k][i] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) fetch(s, cid + s * ncl, n_steps, r, n_rows, n_cols, col0);
    // the row statistics one step ahead (rows past the end: 0, so xhat = 0)
    auto stat = [&](const float* p, long long st) {
        const long long row = st * RPS + tid / TPR;
        return st < n_steps && row < n_rows ? __ldg(p + row) : 0.0f;
    };
    float rstd_next = stat(rstd_, cid), mean_next = CENTER ? stat(mean_, cid) : 0.0f;
    int s = 0, parity = 0;
    for (long long st = cid; st < n_steps; st += ncl) {
        fetch((s + STAGES - 1) % STAGES, st + (STAGES - 1) * ncl, n_steps, r, n_rows, n_cols, col0);
        const float rstd = rstd_next, mean = mean_next;
        rstd_next = stat(rstd_, st + ncl);
        if (CENTER) mean_next = stat(mean_, st + ncl);
        cp_async_wait<STAGES - 1>();  // this step's group has landed
        // 2. pass 1
        float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int j = 0; j < NV; ++j) {
            const uint4 xq = *slot(s, 0, j), gq = *slot(s, 1, j);
#if !HOLD_W
            const uint4 wq = *wslot(j);
#endif
#pragma unroll
            for (int k = 0; k < WORDS; ++k)
#pragma unroll
                for (int i = 0; i < PER_WORD; ++i) {
                    const float xh = (elem(word(xq, k), i) - mean) * rstd;
                    const float g = weight_of(W_WORD(j, k), i) * elem(word(gq, k), i);
                    s1 = fmaf(xh, g, s1);
                    if (CENTER) s2 += g;
                }
        }
        // 3.
#if GROUP > 1
        ++ex.tag;  // this step's: 1, 2, ... (the slots hold 0 between launches)
#endif
        const float2 t = row_sums(s1, s2, parity, red, cslot, ex);
        const float c1 = t.x * inv_n, c2 = CENTER ? t.y * inv_n : 0.0f;
        // 4. pass 2
        const long long row = st * RPS + tid / TPR;
        const bool live = row < n_rows;
        uint4* dxr = reinterpret_cast<uint4*>(static_cast<unsigned char*>(dx_) + (size_t)row * dx_stride * EB);
#pragma unroll
        for (int j = 0; j < NV; ++j) {
            const uint4 xq = *slot(s, 0, j), gq = *slot(s, 1, j);
#if DH
            const uint4 hq = *slot(s, 2, j);
#endif
#if !HOLD_W
            const uint4 wq = *wslot(j);
#endif
            unsigned o[WORDS];
#pragma unroll
            for (int k = 0; k < WORDS; ++k) {
                o[k] = 0u;
#pragma unroll
                for (int i = 0; i < PER_WORD; ++i) {
                    const float xh = (elem_again(word(xq, k), i) - mean) * rstd;
                    const float dyv = elem_again(word(gq, k), i);
                    const float g = weight_of(W_WORD(j, k), i) * dyv;
                    float d = (g - fmaf(xh, c1, c2)) * rstd;
#if DH
                    d += elem(word(hq, k), i);
#endif
                    o[k] |= to_bits(d) << (16 * i);
                    dw[j][k][i] = fmaf(dyv, xh, dw[j][k][i]);
                    if (CENTER) db[j][k][i] += dyv;
                }
            }
            const int col = col0 + j * TPR * VEC;
            if (live && col < n_cols) store_vector(dxr + col / VEC, make_uint4(o[0], o[1], o[2], o[3]));
        }
        s = s + 1 == STAGES ? 0 : s + 1;
        parity ^= 1;
    }
    cp_async_wait<0>();  // (the trailing groups: empty or zero-filled)
#if CLUSTER > 1
    cluster_arrive_relaxed();  // partners may still be reading this CTA's slot
    cluster_wait();
#elif GROUP > 1
    __syncthreads();  // warp 0's reads of the slots are done
    if (tid == 0) {
        __threadfence();
        if (atomicAdd(xch_, 1u) == gridDim.x - 1) {  // the last CTA out: every slot has been read
            for (long long i = 0; i < ncl * GROUP * 2; ++i) xch_[4 + i * 4 + 1] = 0u, xch_[4 + i * 4 + 3] = 0u;
            xch_[0] = 0u;
        }
    }
#endif
    // the partial rows: this CTA's columns, summed over its row groups in a fixed order
    float* pr[2] = {pw_ + cid * n_cols, pb_ + cid * n_cols};
#pragma unroll
    for (int q = 0; q < (CENTER ? 2 : 1); ++q) {
#if RPS == 1
#pragma unroll
        for (int j = 0; j < NV; ++j) {
            const int col = col0 + j * TPR * VEC;
            if (col < n_cols)
#pragma unroll
                for (int k = 0; k < WORDS; ++k)
#pragma unroll
                    for (int i = 0; i < PER_WORD; ++i)
                        pr[q][col + k * PER_WORD + i] = q == 0 ? dw[j][k][i] : db[j][k][i];
        }
#else
        float* scratch = reinterpret_cast<float*>(ring);  // [RPS][CHUNK]
        __syncthreads();  // every thread is done with the ring (and with the previous partial)
#pragma unroll
        for (int j = 0; j < NV; ++j)
#pragma unroll
            for (int k = 0; k < WORDS; ++k)
#pragma unroll
                for (int i = 0; i < PER_WORD; ++i)
                    scratch[(tid / TPR) * CHUNK + j * TPR * VEC + tr * VEC + k * PER_WORD + i] =
                        q == 0 ? dw[j][k][i] : db[j][k][i];
        __syncthreads();
        for (int c = tid; c < n_cols; c += THREADS) {
            float v = 0.0f;
#pragma unroll 4
            for (int g = 0; g < RPS; ++g) v += scratch[g * CHUNK + c];
            pr[q][c] = v;
        }
#endif
    }
#if !CENTER
    (void)pb_, (void)db;
#endif
}
