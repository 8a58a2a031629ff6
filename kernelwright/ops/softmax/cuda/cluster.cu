// softmax rung `cluster` (Hopper, sm_90): a row split over the CTAs of one thread-block cluster, each holding its
// chunk of the row in registers, the partial (max, sum) traded through distributed shared memory.
//
// y[r, :] = softmax(x[r, :]) over rows of n_cols columns; x and y have unit column stride and row strides
// x_stride, y_stride (elements).
//
// CLUSTER CTAs take a row (a cluster is CLUSTER consecutive blockIdx.x; a non-portable size past 8 is set by the
// launcher). The CTA of rank c owns columns [c * CHUNK, (c + 1) * CHUNK), CHUNK = THREADS * (NV + SNV) * VEC, and
// keeps them as raw input words in registers (and with SNV, shared memory) between its single read of x and its
// single write of y:
//   1. load: NV vectors of VEC elements a thread (16 bytes each when VECTOR=1), coalesced across the CTA;
//      columns past n_cols read as -inf (they add 0 to the sum and are not stored).
//   2. the chunk's max m_c and sum s_c = sum exp(x - m_c): warp shuffles, then one word a warp through shared
//      memory (two block barriers for the two reductions).
//   3. thread 0 puts (m_c, s_c) in shared memory and fences it (a release restricted to its own shared memory);
//      barrier.cluster (arrive / wait.acquire) makes the CLUSTER words visible cluster-wide; they are read through
//      DSMEM (mapa + ld.shared::cluster; see trade()) and merged: M = max m_c, S = sum s_c exp(m_c - M).
//   4. y = exp(x - M) / S from the registers.
// Two forms (PERSISTENT):
//   0: one row a cluster, grid rows x CLUSTER. After step 3 a CTA arrives (release) on a second cluster barrier and
//      waits on it after step 4, so no CTA exits (and frees its shared memory) while a partner may still read it.
//      Instead of the Triton split rung's global-memory words and spinning loads, the partners meet at a hardware
//      barrier; a cluster's CTAs are co-scheduled (one GPC), so no grid has to be sized to keep them resident.
//   1: the clusters the GPU holds at once loop over rows, the next STAGES rows' chunks staged in shared memory by
//      cp.async while the current one goes through steps 2-4 (16-byte path only); one keep-alive barrier at the end.
//
// Defines: DTYPE (0 fp32, 1 fp16, 2 bf16), VECTOR (1: 16-byte accesses, needs n_cols a multiple of VEC and
// 16-byte-aligned rows; 0: one element an access), NV (accesses a thread), THREADS, CLUSTER (1..16), MIN_BLOCKS
// (__launch_bounds__'s blocks an SM, i.e. a register budget), PERSISTENT, STAGES, HINTS (1: the one-row form's
// 16-byte loads skip L1 and are first out of L2, its stores are streaming, .cs), SNV (the one-row form's 16-byte
// path: SNV more vectors a thread held in dynamic shared memory, filled by cp.async, after the NV in registers,
// so a CTA holds more of the row at the same registers). All arithmetic in fp32;
// exp(x - m) as ex2((x - m) * log2 e), what Triton's tl.exp compiles to (the difference first: x * log2 e -
// m * log2 e would carry an error proportional to |x|, 1e-3 relative at |x| ~ 1e4).

#if !defined(DTYPE) || !defined(VECTOR) || !defined(NV) || !defined(THREADS) || !defined(CLUSTER)
#error "compile with -DDTYPE= -DVECTOR= -DNV= -DTHREADS= -DCLUSTER="
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#ifndef PERSISTENT
#define PERSISTENT 0
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef SNV
#define SNV 0
#endif

#include "../../_cuda/rows.cuh"  // element formats, cluster primitives, warp reductions, vector loads and stores

#define NWARPS (THREADS / 32)
#define NVT (NV + SNV)               // accesses a thread: NV in registers, then SNV in shared memory
#define CHUNK (THREADS * NVT * VEC)
static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 1024 threads");
static_assert(CLUSTER >= 1 && CLUSTER <= 16, "cluster sizes to 16 (past 8: non-portable, set at launch)");
static_assert(SNV == 0 || (VECTOR && !PERSISTENT), "shared-memory vectors: the one-row form's 16-byte path");

#define LOG2E 1.4426950408889634f

__device__ __forceinline__ float ex2(float x) {  // 2^x; ex2(-inf) = +0
    return ex2_approx(x);
}


// --- the four steps, shared by both launch forms ------------------------------------------------------------
// 2. the chunk's max, then its sum of exp(x - max), each reduced over the CTA (warp shuffles, one word a warp
//    through shared memory, one block barrier)
__device__ __forceinline__ float chunk_max(const unsigned (&w)[NV][WORDS]) {
    float m = NEG_INF;
#pragma unroll
    for (int j = 0; j < NV; ++j)
#pragma unroll
        for (int k = 0; k < WORDS; ++k)
#pragma unroll
            for (int i = 0; i < PER_WORD; ++i) m = fmaxf(m, elem(w[j][k], i));
#if SNV
    cp_async_wait<0>();
#pragma unroll
    for (int j = 0; j < SNV; ++j) {
        const uint4 q = held[j * THREADS + threadIdx.x];
#pragma unroll
        for (int k = 0; k < WORDS; ++k)
#pragma unroll
            for (int i = 0; i < PER_WORD; ++i) m = fmaxf(m, elem(word(q, k), i));
    }
#endif
    return m;
}

__device__ __forceinline__ float2 block_stats(const unsigned (&w)[NV][WORDS], float m, float* red_max,
                                              float* red_sum) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    m = warp_max(m);
    if (lane == 0) red_max[warp] = m;
    __syncthreads();
    m = red_max[0];
#pragma unroll
    for (int i = 1; i < NWARPS; ++i) m = fmaxf(m, red_max[i]);
    // a chunk of nothing but -inf (past the row's end, or -inf inputs) has sum 0, not exp(-inf + inf) = NaN
    const float m0 = m == NEG_INF ? 0.0f : m;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; ++j)
#pragma unroll
        for (int k = 0; k < WORDS; ++k)
#pragma unroll
            for (int i = 0; i < PER_WORD; ++i) s += ex2((elem(w[j][k], i) - m0) * LOG2E);
#if SNV
#pragma unroll
    for (int j = 0; j < SNV; ++j) {
        const uint4 q = held[j * THREADS + threadIdx.x];
#pragma unroll
        for (int k = 0; k < WORDS; ++k)
#pragma unroll
            for (int i = 0; i < PER_WORD; ++i) s += ex2((elem(word(q, k), i) - m0) * LOG2E);
    }
#endif
    s = warp_sum(s);
    if (lane == 0) red_sum[warp] = s;
    __syncthreads();
    s = red_sum[0];
#pragma unroll
    for (int i = 1; i < NWARPS; ++i) s += red_sum[i];
    return make_float2(m, s);
}

// 3. publish this CTA's (max, sum) in `slot`, meet the cluster at a barrier, read every CTA's slot: (M, 1 / S).
//    To 8 CTAs every thread reads all the slots (a warp's 32 identical reads are one access); past 8, lane c of
//    every warp reads CTA c's and the warp merges them with shuffles, so the registers stay those of 8 (the
//    shuffles cost the persistent form, at its 64-register budget, a 24-byte spill: hence not everywhere; and with
//    SNV, clusters of 2 CTAs of 512 reading lane-parallel raised "illegal instruction" on the H200, run 57, not
//    understood yet).
__device__ __forceinline__ float2 trade(float2* slot, float2 ms) {
#if CLUSTER == 1
    (void)slot;
    return make_float2(ms.x, 1.0f / ms.y);  // the CTA is the row: nothing to trade, no barrier
#else
    if (threadIdx.x == 0) {
        *slot = ms;
        fence_release_own_shared();
    }
    cluster_arrive_relaxed();
    cluster_wait();
#if CLUSTER <= 8
    float2 p[CLUSTER];
    float M = NEG_INF;
#pragma unroll
    for (int c = 0; c < CLUSTER; ++c) {
        p[c] = load_remote(slot, c);
        M = fmaxf(M, p[c].x);
    }
    float S = 0.0f;
#pragma unroll
    for (int c = 0; c < CLUSTER; ++c)
        if (p[c].x != NEG_INF) S += p[c].y * ex2((p[c].x - M) * LOG2E);
#else
    const unsigned lane = threadIdx.x & 31;
    const float2 p = lane < CLUSTER ? load_remote(slot, lane) : make_float2(NEG_INF, 0.0f);
    const float M = warp_max(p.x);
    // a CTA wholly past the row's end (or of -inf inputs) has (-inf, 0): it adds 0, not 0 * exp(NaN)
    const float S = warp_sum(p.x != NEG_INF ? p.y * ex2((p.x - M) * LOG2E) : 0.0f);
#endif
    return make_float2(M, 1.0f / S);  // M = -inf (a row of -inf) gives NaN below, as the reference does
#endif
}

// 4. y = exp(x - M) / S from the registers
__device__ __forceinline__ void store_chunk(const unsigned (&w)[NV][WORDS], float2 MS, void* y_, long long row,
                                            int y_stride, int base, int n_cols) {
    const int tid = threadIdx.x;
#if VECTOR
    uint4* yr = reinterpret_cast<uint4*>(static_cast<unsigned char*>(y_) + (size_t)row * y_stride * EB);
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int col = base + (j * THREADS + tid) * VEC;
        unsigned o[WORDS];
#pragma unroll
        for (int k = 0; k < WORDS; ++k) {
            o[k] = 0;
#pragma unroll
            for (int i = 0; i < PER_WORD; ++i)
                o[k] |= to_bits(ex2((elem(w[j][k], i) - MS.x) * LOG2E) * MS.y) << (16 * i);
        }
        if (col < n_cols) store_vector(yr + col / VEC, make_uint4(o[0], o[1], o[2], o[3]));
    }
#if SNV
#pragma unroll 1  // one vector at a time: unrolled, fp16's conversions spill (sm_90)
    for (int j = 0; j < SNV; ++j) {
        const int col = base + ((NV + j) * THREADS + tid) * VEC;
        const uint4 q = held[j * THREADS + tid];
        unsigned o[WORDS];
#pragma unroll
        for (int k = 0; k < WORDS; ++k) {
            o[k] = 0;
#pragma unroll
            for (int i = 0; i < PER_WORD; ++i)
                o[k] |= to_bits(ex2((elem(word(q, k), i) - MS.x) * LOG2E) * MS.y) << (16 * i);
        }
        if (col < n_cols) store_vector(yr + col / VEC, make_uint4(o[0], o[1], o[2], o[3]));
    }
#endif
#else
#if EB == 4
    unsigned* yr = static_cast<unsigned*>(y_) + (size_t)row * y_stride;
#else
    unsigned short* yr = static_cast<unsigned short*>(y_) + (size_t)row * y_stride;
#endif
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int col = base + j * THREADS + tid;
        if (col < n_cols) yr[col] = to_bits(ex2((elem(w[j][0], 0) - MS.x) * LOG2E) * MS.y);
    }
#endif
}

#if PERSISTENT
static_assert(VECTOR, "the persistent form stages 16-byte vectors with cp.async");
__device__ __forceinline__ void stage_row(uint4* stage, const void* x_, long long row, long long n_rows,
                                          int x_stride, int base, int n_cols) {
    // cp.async (16 bytes, L2 only) of this thread's vectors of `row` into its own slots of `stage`, then one
    // commit (an empty group when row >= n_rows)
    const unsigned char* xr = static_cast<const unsigned char*>(x_) + (size_t)row * x_stride * EB;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int col = base + (j * THREADS + threadIdx.x) * VEC;
        if (row < n_rows && col < n_cols) {
            cp_async16(stage + j * THREADS + threadIdx.x, xr + (size_t)col * EB);
        }
    }
    cp_async_commit();
}
#endif

#if CLUSTER <= 8
#define CLUSTER_DIMS __cluster_dims__(CLUSTER, 1, 1)
#else  // a non-portable size: the launcher sets it (cuLaunchKernelEx) after allowing it on the function
#define CLUSTER_DIMS
#endif
extern "C" __global__ void CLUSTER_DIMS __launch_bounds__(THREADS, MIN_BLOCKS)
softmax_cluster(const void* __restrict__ x_, void* __restrict__ y_, int n_cols, int x_stride, int y_stride,
                int n_rows) {
    __shared__ float red_max[NWARPS], red_sum[NWARPS];
    const int tid = threadIdx.x;
    const int base = (int)cluster_rank() * CHUNK;
    unsigned w[NV][WORDS];
#if !PERSISTENT
    // one row a cluster: load, reduce, trade, store, exit
    __shared__ float2 part;  // this CTA's (max, sum), read by the whole cluster
    const long long row = blockIdx.x / CLUSTER;
    load_chunk(w, x_, row, x_stride, base, n_cols, NEG_INF_BITS);  // 1. (rows.cuh); -inf past the row's end
    const float2 MS = trade(&part, block_stats(w, chunk_max(w), red_max, red_sum));
    // done with the partners' shared memory. Release, not relaxed: a relaxed arrive does not wait for the DSMEM
    // loads in trade(), so a partner could pass the final wait and exit while a load of its `part` is in flight
    // (on the H200 that was an "unspecified launch failure" at clusters of 4-8 CTAs of 128-256 threads; run 51).
#if CLUSTER > 1
    cluster_arrive_release();
#endif
    store_chunk(w, MS, y_, row, y_stride, base, n_cols);
#if CLUSTER > 1
    cluster_wait();  // partners may still be reading `part`
#endif
#else
    // persistent: cluster k takes rows k, k + G, k + 2G, ... (G clusters in the grid). The next row's chunk is
    // staged in shared memory by cp.async while this one is reduced, traded and written, so a CTA has loads in
    // flight through its barriers. Each thread reads back only the vectors it staged itself: waiting for its
    // own copies (cp.async.wait_group) is all the synchronization the stage needs.
    // STAGES buffers of NV * THREADS vectors; row k + s G goes to buffer s mod STAGES. One cp.async group is
    // committed per row (empty past the last row), so "all but the newest STAGES - 1 groups done" means this
    // row's copies are done.
    KW_DYNAMIC_SHARED(uint4, stage);
    __shared__ float2 part[2];  // (max, sum) by row parity: a slot is rewritten two rows later, after every
                                // partner has passed the barrier of the row between (so read this one)
    const int clusters = gridDim.x / CLUSTER;
    long long row = blockIdx.x / CLUSTER;
#pragma unroll
    for (int s = 0; s < STAGES; ++s) stage_row(stage + s * NV * THREADS, x_, row + (long long)s * clusters,
                                               n_rows, x_stride, base, n_cols);
    for (int it = 0; row < n_rows; row += clusters, ++it) {
        uint4* buf = stage + (it % STAGES) * NV * THREADS;
        cp_async_wait<STAGES - 1>();
#pragma unroll
        for (int j = 0; j < NV; ++j) {
            const int col = base + (j * THREADS + tid) * VEC;
            uint4 q = make_uint4(NEG_INF_WORD, NEG_INF_WORD, NEG_INF_WORD, NEG_INF_WORD);
            if (col < n_cols) q = buf[j * THREADS + tid];
            w[j][0] = q.x, w[j][1] = q.y, w[j][2] = q.z, w[j][3] = q.w;
        }
        const float m = chunk_max(w);
        // m depends on every staged value this thread read: the copies issued next into the same buffer cannot
        // overwrite a slot before its read
        computed_before(m);
        stage_row(buf, x_, row + (long long)STAGES * clusters, n_rows, x_stride, base, n_cols);
        const float2 MS = trade(&part[it & 1], block_stats(w, m, red_max, red_sum));
        store_chunk(w, MS, y_, row, y_stride, base, n_cols);
    }
    cp_async_wait<0>();  // (only empty groups can be left)
#if CLUSTER > 1
    cluster_arrive_release();  // keep this CTA's `part` alive until every partner has read it
    cluster_wait();
#endif
#endif
}
