// Device code shared by the row kernels that hold a row chunk in registers as raw words (softmax and rms_norm
// `cluster` rungs): element formats and conversions, the cluster primitives, warp reductions, 16-byte loads and
// stores with optional streaming hints. Included (textually, by kernelwright.backends.nvrtc.read_source) after the
// kernel has defined DTYPE (0 fp32, 1 fp16, 2 bf16), VECTOR (1: 16-byte accesses) and optionally HINTS.
#pragma once
#if !defined(DTYPE) || !defined(VECTOR)
#error "define DTYPE and VECTOR before including rows.cuh"
#endif
#ifndef HINTS
#define HINTS 0
#endif

#if DTYPE == 0
#define EB 4                         // bytes an element
#define NEG_INF_BITS 0xff800000u     // -inf in the element format
#define NEG_INF_WORD NEG_INF_BITS    // a 32-bit word of -infs
#elif DTYPE == 1
#define EB 2
#define NEG_INF_BITS 0xfc00u
#define NEG_INF_WORD 0xfc00fc00u
#else
#define EB 2
#define NEG_INF_BITS 0xff80u
#define NEG_INF_WORD 0xff80ff80u
#endif
#define VEC (VECTOR ? 16 / EB : 1)  // elements an access
#define WORDS (VECTOR ? 4 : 1)       // 32-bit words an access holds
#define PER_WORD (VECTOR ? 4 / EB : 1)
#define NEG_INF (__int_as_float(0xff800000))

// --- element conversions (raw bits <-> fp32); a 16-bit element sits in the low half of its word when VECTOR=0 ---
__device__ __forceinline__ float from_bits(unsigned b) {
#if DTYPE == 0
    return __uint_as_float(b);
#elif DTYPE == 1
    float f;
    unsigned short h = (unsigned short)(b & 0xffffu);
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    return __uint_as_float(b << 16);
#endif
}

__device__ __forceinline__ unsigned to_bits(float f) {
#if DTYPE == 0
    return __float_as_uint(f);
#elif DTYPE == 1
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#endif
}

// element i (0 .. PER_WORD-1) of a word
__device__ __forceinline__ float elem(unsigned w, int i) {
#if EB == 2
    return from_bits(i == 0 ? (w & 0xffffu) : (w >> 16));
#else
    return from_bits(w);
#endif
}

// word k (0..3) of a 16-byte vector
__device__ __forceinline__ unsigned word(const uint4& q, int k) {
    return k == 0 ? q.x : k == 1 ? q.y : k == 2 ? q.z : q.w;
}

// --- cluster primitives (PTX ISA 7.8+, sm_90) -------------------------------------------------------------------
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_arrive_release() {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void fence_release_own_shared() {
    // orders this thread's earlier writes to its own CTA's shared memory before its next (relaxed) arrive, for
    // readers in the cluster (PTX 8.6, sm_90): a CTA-level MEMBAR, where arrive.release is a GPU-level one that
    // also waits for the thread's earlier global stores (the previous row's y, in the persistent form)
    asm volatile("fence.release.sync_restrict::shared::cta.cluster;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ float2 load_remote(const float2* local, unsigned rank) {
    // the float2 at `local`'s offset in the shared memory of the cluster's CTA `rank`
    unsigned addr = (unsigned)__cvta_generic_to_shared(local), remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
    float2 v;
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(remote) : "memory");
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// x and y are each touched once: with HINTS, keep them out of L1 and first out of L2
__device__ __forceinline__ uint4 load_vector(const uint4* p) {
#if HINTS
    uint4 q;
    asm volatile("{\n\t.reg .b64 pol;\n\tcreatepolicy.fractional.L2::evict_first.b64 pol, 1.0;\n\t"
                 "ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], pol;\n\t}"
                 : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w) : "l"(p));
    return q;
#else
    return __ldg(p);
#endif
}
__device__ __forceinline__ void store_vector(uint4* p, uint4 v) {
#if HINTS
    __stcs(p, v);
#else
    *p = v;
#endif
}


// --- a row chunk held by a CTA (needs NV, THREADS and SNV: the kernels that include this define them) ----------
#if defined(NV) && defined(THREADS) && defined(SNV)
#if SNV
// the SNV vectors a thread holds in shared memory: slot j * THREADS + tid, read back only by the thread that
// filled it (its own cp.async.wait_group is all the synchronization they need)
extern __shared__ uint4 held[];
#endif

// 1. load this thread's part of row `row`'s chunk at column `base`: access j of thread t covers columns base +
//    (j * THREADS + t) * VEC .. + VEC - 1; with SNV, accesses NV .. NV + SNV - 1 go to shared memory by cp.async
//    first (asynchronous: in flight with the register loads). Columns past n_cols read as `pad` (the bits of one
//    element, e.g. -inf for softmax, 0 for a sum of squares).
__device__ __forceinline__ void load_chunk(unsigned (&w)[NV][WORDS], const void* x_, long long row, int x_stride,
                                           int base, int n_cols, unsigned pad) {
    const int tid = threadIdx.x;
#if VECTOR
    const unsigned pw = EB == 2 ? pad | (pad << 16) : pad;  // a word of pads
    const uint4* xr = reinterpret_cast<const uint4*>(static_cast<const unsigned char*>(x_) +
                                                     (size_t)row * x_stride * EB);
#if SNV
#pragma unroll
    for (int j = 0; j < SNV; ++j) {
        const int col = base + ((NV + j) * THREADS + tid) * VEC;
        uint4* dst = held + j * THREADS + tid;
        if (col < n_cols) {
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                         ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(xr + col / VEC) : "memory");
        } else {
            *dst = make_uint4(pw, pw, pw, pw);
        }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int col = base + (j * THREADS + tid) * VEC;
        uint4 q = make_uint4(pw, pw, pw, pw);
        if (col < n_cols) q = load_vector(xr + col / VEC);  // n_cols is a multiple of VEC: the whole vector is in
        w[j][0] = q.x, w[j][1] = q.y, w[j][2] = q.z, w[j][3] = q.w;
    }
#else
#if EB == 4
    const unsigned* xr = static_cast<const unsigned*>(x_) + (size_t)row * x_stride;
#else
    const unsigned short* xr = static_cast<const unsigned short*>(x_) + (size_t)row * x_stride;
#endif
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int col = base + j * THREADS + tid;
        w[j][0] = col < n_cols ? (unsigned)__ldg(xr + col) : pad;
    }
#endif
}
#endif
