// Every piece of inline PTX the library's CUDA C kernels use, each behind one named function, so that a kernel
// source holds no `asm` of its own. Compiled by NVRTC for the GPU, these are the PTX instructions; compiled as C++
// by the CPU emulator (kernelwright.backends.emulate, which defines KW_EMULATE) they are its stand-ins, with the
// same meaning: cp.async copies land when the thread waits for their group (not before), cluster barriers and
// distributed shared memory work across the CTAs of a cluster.
//
// Dynamic shared memory is declared through KW_DYNAMIC_SHARED(type, name) for the same reason (`extern __shared__`
// has no C++ spelling).
#pragma once

#ifndef KW_EMULATE
#define KW_DYNAMIC_SHARED(T, name) extern __shared__ T name[]

// --- conversions ------------------------------------------------------------------------------------------------
__device__ __forceinline__ float f16_to_f32(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ unsigned short f32_to_f16(float f) {  // round to nearest even
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ unsigned short f32_to_bf16(float f) {  // round to nearest even
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ float ex2_approx(float x) {  // 2^x by MUFU.EX2, subnormals flushed; ex2(-inf) = +0
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// --- thread-block clusters (PTX ISA 7.8+, sm_90) ----------------------------------------------------------------
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
// the value at `local`'s offset in the shared memory of the cluster's CTA `rank` (distributed shared memory)
__device__ __forceinline__ float2 load_remote(const float2* local, unsigned rank) {
    unsigned addr = (unsigned)__cvta_generic_to_shared(local), remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
    float2 v;
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(remote) : "memory");
    return v;
}
__device__ __forceinline__ float4 load_remote4(const float4* local, unsigned rank) {
    unsigned addr = (unsigned)__cvta_generic_to_shared(local), remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(remote) : "memory");
    return v;
}

// --- global loads with cache hints ------------------------------------------------------------------------------
// 16 bytes through the non-coherent path, not kept in L1 and first out of L2
__device__ __forceinline__ uint4 load_evict_first(const uint4* p) {
    uint4 q;
    asm volatile("{\n\t.reg .b64 pol;\n\tcreatepolicy.fractional.L2::evict_first.b64 pol, 1.0;\n\t"
                 "ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], pol;\n\t}"
                 : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w) : "l"(p));
    return q;
}

// 16 bytes through the non-coherent path, not kept in L1 (L2's policy left as it is)
__device__ __forceinline__ uint4 load_no_l1(const uint4* p) {
    uint4 q;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w) : "l"(p));
    return q;
}

// a hint: the 128-byte line at p brought into L1 (no register written, nothing waited for; sm_90 SASS CCTL.E.PF1)
__device__ __forceinline__ void prefetch_l1(const void* p) { asm volatile("prefetch.global.L1 [%0];" ::"l"(p)); }

// --- cp.async: global -> shared copies in flight until the issuing thread waits for their group -----------------
// 16 bytes, L2 only. A macro, not a function: through a call, NVVM placed the copies of the rows kernels' unrolled
// loads differently (their sm_90 SASS changed, session 20); written out in place, the code is what was measured.
#define cp_async16(dst, src)                                                                   \
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"                                   \
                 ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src) : "memory")
// with src-size: copies `ok ? size : 0` bytes and zero-fills the rest of the `size`-byte destination
__device__ __forceinline__ void cp_async16_or_zero(float* dst, const float* src, bool ok) {  // L2 only
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void cp_async4_or_zero(float* dst, const float* src, bool ok) {  // through L1
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(ok ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// until at most the newest PENDING committed groups of this thread are in flight
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory"); }

// a compiler barrier that also keeps `v` computed before it (no instruction)
__device__ __forceinline__ void computed_before(float v) { asm volatile("" ::"f"(v) : "memory"); }

// --- flags between the CTAs of a grid (they must be co-resident: a cooperative launch) ---------------------------
__device__ __forceinline__ void store_release_gpu(unsigned* p, unsigned v) {  // earlier writes visible first
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned load_acquire_gpu(const unsigned* p) {  // later reads see what came before
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
// spin until *p == v (acquire); a kernel waits on another CTA only through this (the emulator yields here)
__device__ __forceinline__ void wait_until_equal_gpu(const unsigned* p, unsigned v) {
    while (load_acquire_gpu(p) != v) {
    }
}
// a float and a 32-bit tag in one 64-bit relaxed access (single-copy atomic: the value travels with its tag, so
// neither side needs a fence; a release store's fence would wait for the writer's whole queue of copies and stores)
__device__ __forceinline__ void publish_tagged_gpu(unsigned long long* p, float v, unsigned tag) {
    const unsigned long long q = ((unsigned long long)tag << 32) | __float_as_uint(v);
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(q) : "memory");
}
// spin until *p carries `tag`; its float
__device__ __forceinline__ float wait_tagged_gpu(const unsigned long long* p, unsigned tag) {
    unsigned long long q;
    do {
        asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(q) : "l"(p) : "memory");
    } while ((unsigned)(q >> 32) != tag);
    return __uint_as_float((unsigned)q);
}


// --- tensor cores: one warp's mma.sync.m16n8k16 with 16-bit inputs (F16: fp16, else bf16) and fp32 accumulators,
// d += A B. Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"; g = lane / 4, t = lane % 4, the lower half of
// a word the even index): a[0] A[g][2t, 2t+1], a[1] A[g+8][2t, 2t+1], a[2] A[g][2t+8, 2t+9], a[3] A[g+8][2t+8,
// 2t+9]; b0 B[2t, 2t+1][g], b1 B[2t+8, 2t+9][g]; d[0], d[1] D[g][2t, 2t+1], d[2], d[3] D[g+8][2t, 2t+1]. Every lane
// of the warp takes part.
#define KW_MMA_16816(T)                                                                                        \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "    \
                 "{%0,%1,%2,%3};"                                                                                 \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                 \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
template <bool F16>
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    if (F16)
        KW_MMA_16816("f16");
    else
        KW_MMA_16816("bf16");
}
#undef KW_MMA_16816

#else  // KW_EMULATE: the CPU emulator's stand-ins (kernelwright/backends/emulate/cuda_emu.h)
#define KW_DYNAMIC_SHARED(T, name) static T*& name = reinterpret_cast<T*&>(kw_emu::dynamic_shared)

inline float f16_to_f32(unsigned short h) { return kw_emu::f16_to_f32(h); }
inline unsigned short f32_to_f16(float f) { return kw_emu::f32_to_f16(f); }
inline unsigned short f32_to_bf16(float f) { return kw_emu::f32_to_bf16(f); }
inline float ex2_approx(float x) { return kw_emu::ex2_ftz(x); }
inline unsigned cluster_rank() { return kw_emu::cluster_rank(); }
inline void cluster_arrive_release() { kw_emu::cluster_arrive(); }
inline void cluster_arrive_relaxed() { kw_emu::cluster_arrive(); }
inline void fence_release_own_shared() {}
inline void cluster_wait() { kw_emu::cluster_wait(); }
inline float2 load_remote(const float2* local, unsigned rank) { return kw_emu::load_remote(local, rank); }
inline float4 load_remote4(const float4* local, unsigned rank) { return kw_emu::load_remote(local, rank); }
inline uint4 load_evict_first(const uint4* p) { return *p; }
inline uint4 load_no_l1(const uint4* p) { return *p; }
inline void prefetch_l1(const void* p) { kw_emu::prefetch(p); }  // (checked against the thread's later loads)
inline void cp_async16(void* dst, const void* src) { kw_emu::cp_async(dst, src, 16, 16); }
inline void cp_async16_or_zero(float* dst, const float* src, bool ok) { kw_emu::cp_async(dst, src, 16, ok ? 16 : 0); }
inline void cp_async4_or_zero(float* dst, const float* src, bool ok) { kw_emu::cp_async(dst, src, 4, ok ? 4 : 0); }
inline void cp_async_commit() { kw_emu::cp_async_commit(); }
template <int PENDING>
inline void cp_async_wait() { kw_emu::cp_async_wait(PENDING); }
inline void computed_before(float) {}
inline void store_release_gpu(unsigned* p, unsigned v) { *static_cast<volatile unsigned*>(p) = v; }
inline unsigned load_acquire_gpu(const unsigned* p) { return *static_cast<const volatile unsigned*>(p); }
inline void wait_until_equal_gpu(const unsigned* p, unsigned v) {
    while (load_acquire_gpu(p) != v) kw_emu::spin();
}
inline void publish_tagged_gpu(unsigned long long* p, float v, unsigned tag) {
    *static_cast<volatile unsigned long long*>(p) = ((unsigned long long)tag << 32) | __float_as_uint(v);
}
inline float wait_tagged_gpu(const unsigned long long* p, unsigned tag) {
    unsigned long long q;
    while (((q = *static_cast<const volatile unsigned long long*>(p)) >> 32) != tag) kw_emu::spin();
    return __uint_as_float((unsigned)q);
}
// the warp's fragments gathered (three exchanges of the lanes' words), then this lane's four D elements summed over
// k in order in fp32 (the tensor cores' own order and rounding inside one instruction differ; products of 16-bit
// values are exact in fp32 either way)
template <bool F16>
inline void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    unsigned long long pa[32], pb[32], pc[32];
    kw_emu::gather(0xffffffffu, ((unsigned long long)a[1] << 32) | a[0], pa);
    kw_emu::gather(0xffffffffu, ((unsigned long long)a[3] << 32) | a[2], pb);
    kw_emu::gather(0xffffffffu, ((unsigned long long)b1 << 32) | b0, pc);
    auto half = [](unsigned long long w, int i) {  // the i-th 16-bit value of a pair of words
        const unsigned short h = (unsigned short)(w >> (16 * i));
        return F16 ? kw_emu::f16_to_f32(h) : __uint_as_float((unsigned)h << 16);
    };
    auto A = [&](int m, int k) {  // A[m][k]: lane (m % 8) * 4 + (k % 8) / 2; a[0] / a[1] in pa, a[2] / a[3] in pb
        const unsigned long long w = (k < 8 ? pa : pb)[(m % 8) * 4 + (k % 8) / 2];
        return half(w, (m >= 8 ? 2 : 0) + k % 2);
    };
    auto B = [&](int k, int n) { return half(pc[n * 4 + (k % 8) / 2], (k >= 8 ? 2 : 0) + k % 2); };
    const int lane = (int)(kw_emu::g->cur->tid % 32), g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; ++e) {
        const int m = g + (e >= 2 ? 8 : 0), n = 2 * t + e % 2;
        float s = d[e];
        for (int k = 0; k < 16; ++k) s = fmaf(A(m, k), B(k, n), s);
        d[e] = s;
    }
}
#endif
