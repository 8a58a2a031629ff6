// kernelwright's CPU emulator for the library's CUDA C kernels: the CUDA C dialect they are written in, as C++.
//
// A kernel source is compiled by the host compiler after this header (kernelwright.backends.emulate does that,
// with KW_EMULATE defined, so ops/_cuda/ptx.cuh gives its CPU stand-ins). Every CUDA thread of a cluster runs as
// a fiber on one OS thread; a fiber runs until it reaches a synchronisation point (__syncthreads, a
// warp shuffle, a cluster barrier's wait), and the scheduler resumes it once every thread the point names has
// reached it. Clusters run one after another; a cooperative launch schedules every CTA of the grid together, so a
// CTA may wait on a flag another CTA sets (wait_until_equal_gpu in ptx.cuh). What the emulator gives:
//   - block, warp and cluster synchronisation with CUDA's meaning (exited threads count as arrived);
//   - per-CTA shared memory: static `__shared__` variables live in their own section, swapped in and out when the
//     scheduler moves between the CTAs of a cluster; dynamic shared memory is one buffer a CTA; both are filled
//     with 0xff bytes (NaN as floats) at launch, so a read of a slot nobody wrote shows up;
//   - distributed shared memory (load_remote): the partner CTA's copy, and an error if that CTA has exited;
//   - cp.async: a copy lands when its thread waits for its group (cp.async.wait_group), not before, so a read
//     that skips the wait sees the poison, not the data;
//   - an L1 prefetch (prefetch_l1) that its thread does not follow with an __ldg of that very address is an error;
//   - a spin on a flag that nothing can set any more (every thread spinning, waiting or exited) is an error, as is
//     a spin in a launch that is not cooperative once the other CTAs it may wait for cannot run;
//   - errors (deadlock, a bad remote rank or address, a cluster wait without an arrive) stop the launch and come
//     back as a message, naming the block and thread.
// What it does not give: timing, memory-model races beyond the above (a fiber sees every write that happened
// before it was resumed), or bounds checks on global memory (an out-of-range access is the host process's).
// Arithmetic is the host's IEEE fp32: results agree with the GPU's within rounding, not bit for bit (the GPU's
// approximate MUFU functions are exact here).
#pragma once
#include <sys/mman.h>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// --- the dialect ------------------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static __attribute__((section("kw_shared")))
#define KW_STR2(x) #x
#define KW_STR(x) KW_STR2(x)
// a kernel with compile-time cluster dimensions goes to section kw_cluster_<x>: the launcher finds its size there
#define __cluster_dims__(x, y, z) __attribute__((section("kw_cluster_" KW_STR(x))))

struct uint3 { unsigned x, y, z; };
struct dim3 { unsigned x, y, z; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(8) int2 { int x, y; };
struct alignas(8) float2 { float x, y; };
struct float3 { float x, y, z; };  // (CUDA's: 4-byte aligned, 12 bytes)
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float3 make_float3(float x, float y, float z) { return {x, y, z}; }

template <class To, class From>
inline To kw_bits(From f) {
    static_assert(sizeof(To) == sizeof(From), "same size");
    To t;
    std::memcpy(&t, &f, sizeof t);
    return t;
}
inline float __int_as_float(int i) { return kw_bits<float>(i); }
inline float __uint_as_float(unsigned i) { return kw_bits<float>(i); }
inline int __float_as_int(float f) { return kw_bits<int>(f); }
inline unsigned __float_as_uint(float f) { return kw_bits<unsigned>(f); }
namespace kw_emu {
inline void loaded(const void* p);  // (the machine, below: a prefetch this load answers)
}
template <class T>
inline T __ldg(const T* p) {
    kw_emu::loaded(p);
    return *p;
}
template <class T>
inline void __stcs(T* p, T v) { *p = v; }
// every fiber runs on one OS thread: atomics are plain read-modify-writes, fences order nothing more
template <class T>
inline T atomicAdd(T* p, T v) {
    const T old = *p;
    *p = old + v;
    return old;
}
inline void __threadfence() {}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __frsqrt_rn(float x) { return 1.0f / std::sqrt(x); }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = (unsigned long long)y << 32 | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) {
        const unsigned n = (s >> (4 * i)) & 0xfu;
        unsigned b = (unsigned)(v >> (8 * (n & 7u))) & 0xffu;
        if (n & 8u) b = (b & 0x80u) ? 0xffu : 0u;
        r |= b << (8 * i);
    }
    return r;
}
inline unsigned __vmaxu2(unsigned a, unsigned b) {
    const unsigned lo = std::max(a & 0xffffu, b & 0xffffu), hi = std::max(a >> 16, b >> 16);
    return hi << 16 | lo;
}
// CUDA's integer min / max overloads (mixed signedness: unsigned, as in CUDA's headers)
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }

static uint3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;

extern "C" char __start_kw_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_kw_shared[] __attribute__((weak, visibility("hidden")));

namespace kw_emu {
// --- fibers: a context switch saves the callee-saved registers on the stack being left (x86-64: a few
// instructions; elsewhere ucontext, whose signal-mask system calls make a switch ~0.5 us) -------------------------
#if defined(__x86_64__)
extern "C" void kw_emu_switch(void** save_sp, void* load_sp);
asm(R"(
    .text
    .p2align 4
    .hidden kw_emu_switch
    .type kw_emu_switch, @function
kw_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size kw_emu_switch, .-kw_emu_switch
)");
struct Context { void* sp = nullptr; };
inline void context_switch(Context& from, Context& to) { kw_emu_switch(&from.sp, to.sp); }
// a context that starts `entry` (which must never return) on the stack [stack, stack + size)
inline void context_make(Context& c, char* stack, size_t size, void (*entry)()) {
    uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + size) & ~uintptr_t(15);
    void** sp = reinterpret_cast<void**>(top);
    *--sp = nullptr;                              // entry's return address slot: never used (keeps the alignment)
    *--sp = reinterpret_cast<void*>(entry);       // where kw_emu_switch's ret goes
    for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp, rbx, r12 .. r15
    unsigned csr[2] = {0, 0};
    asm volatile("stmxcsr %0" : "=m"(csr[0]));
    asm volatile("fnstcw %0" : "=m"(csr[1]));
    --sp;
    std::memcpy(sp, csr, 4);
    std::memcpy(reinterpret_cast<char*>(sp) + 4, &csr[1], 2);
    c.sp = sp;
}
#else
struct Context { ucontext_t uc; };
inline void context_switch(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
inline void context_make(Context& c, char* stack, size_t size, void (*entry)()) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, entry, 0);
}
#endif

// --- number formats ---------------------------------------------------------------------------------------------
inline float f16_to_f32(unsigned short h) { return (float)kw_bits<_Float16>(h); }
inline unsigned short f32_to_f16(float f) { return kw_bits<unsigned short>((_Float16)f); }  // round to nearest even
inline unsigned short f32_to_bf16(float f) {                                                // round to nearest even
    const unsigned u = kw_bits<unsigned>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;  // NaN: PTX's canonical one
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float ftz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
inline float ex2_ftz(float x) { return ftz(std::exp2(ftz(x))); }

// --- the machine ------------------------------------------------------------------------------------------------
enum State { READY, AT_BLOCK, AT_WARP, AT_CLUSTER, DONE };
struct Copy { void* dst; const void* src; int size, src_size; };
struct Fiber {
    Context ctx;
    int cta = 0, tid = 0;  // CTA rank in the cluster, linear thread index in the CTA
    uint3 idx{};
    State state = READY;
    unsigned shfl_mask = 0;
    long long shuffles = 0, arrives = 0, waits = 0, wait_for = 0;
    bool spun = false;  // yielded from a spin-wait: not progress
    std::vector<Copy> open;                  // cp.async copies not yet committed
    std::vector<std::vector<Copy>> groups;   // committed groups, oldest first
    std::vector<const void*> prefetched;     // prefetch_l1 addresses this thread has not loaded (__ldg) since
};
struct Warp {
    unsigned long long buf[2][32];
    int waiting = 0;
    unsigned mask = 0;
};
struct Cta {
    uint3 idx{};
    std::vector<unsigned char> statics;  // the static shared section while swapped out
    unsigned char* dyn = nullptr;        // dynamic shared memory
    std::vector<Warp> warps;
    int at_block = 0, live = 0;
    bool exited = false;
};
struct Launch {
    std::function<void()> body;
    unsigned nthreads = 0, smem = 0, cluster = 1, group = 1;  // group: CTAs scheduled together
    std::vector<Fiber> fibers;  // CTA-major
    std::vector<Cta> ctas;
    std::vector<unsigned char> dyn_all;
    char* stacks = nullptr;  // one STACK a fiber, mapped for the launch (pages committed as touched)
    Context sched;
    Fiber* cur = nullptr;
    int cur_cta = -1;
    bool spins = false;  // some thread spun this round
    std::string error;
};
inline Launch* g = nullptr;
inline void* dynamic_shared = nullptr;
constexpr size_t STACK = 64 * 1024;

inline size_t statics_size() { return __start_kw_shared ? (size_t)(__stop_kw_shared - __start_kw_shared) : 0; }

inline void yield() { context_switch(g->cur->ctx, g->sched); }
[[noreturn]] inline void fail(const std::string& what) {
    if (g->error.empty()) {
        const Fiber& f = *g->cur;
        char where[160];
        std::snprintf(where, sizeof where, " (block (%u, %u, %u), thread (%u, %u, %u))", blockIdx.x, blockIdx.y,
                      blockIdx.z, f.idx.x, f.idx.y, f.idx.z);
        g->error = what + where;
    }
    g->cur->state = DONE;
    context_switch(g->cur->ctx, g->sched);
    __builtin_unreachable();
}

// --- synchronisation --------------------------------------------------------------------------------------------
inline void syncthreads() {
    g->cur->state = AT_BLOCK;
    ++g->ctas[g->cur->cta].at_block;
    yield();
}
inline void warp_barrier(unsigned mask) {
    Fiber& f = *g->cur;
    Warp& w = g->ctas[f.cta].warps[f.tid / 32];
    if (w.waiting && w.mask != mask) fail("warp lanes meet with different masks");
    w.mask = mask;
    f.state = AT_WARP;
    ++w.waiting;
    yield();
}
template <class T>
inline T shuffle(unsigned mask, T v, int src) {
    static_assert(sizeof(T) <= 8, "shuffles of up to 8 bytes");
    Fiber& f = *g->cur;
    Warp& w = g->ctas[f.cta].warps[f.tid / 32];
    const int lane = f.tid % 32, slot = f.shuffles++ & 1;
    if (!(mask >> lane & 1u)) fail("a shuffle by a lane outside its mask");
    std::memcpy(&w.buf[slot][lane], &v, sizeof(T));
    warp_barrier(mask);
    if (src < 0 || src > 31 || !(mask >> src & 1u)) return v;  // outside the mask: CUDA leaves it undefined
    T r;
    std::memcpy(&r, &w.buf[slot][src], sizeof(T));
    return r;
}
// every lane of `mask` hands in v; all receives the 32 lanes' values (a warp-collective such as mma.sync, whose
// fragments span the warp; lanes outside the mask leave their slots as they were)
inline void gather(unsigned mask, unsigned long long v, unsigned long long (&all)[32]) {
    Fiber& f = *g->cur;
    Warp& w = g->ctas[f.cta].warps[f.tid / 32];
    const int lane = f.tid % 32, slot = f.shuffles++ & 1;
    if (!(mask >> lane & 1u)) fail("a warp-collective by a lane outside its mask");
    w.buf[slot][lane] = v;
    warp_barrier(mask);
    std::memcpy(all, w.buf[slot], sizeof all);
}
inline unsigned cluster_rank() { return g->ctas[g->cur->cta].idx.x % g->cluster; }
inline void spin() {
    g->cur->spun = true;
    yield();
}
inline void cluster_arrive() { ++g->cur->arrives; }
inline void cluster_wait() {
    Fiber& f = *g->cur;
    if (f.waits >= f.arrives) fail("barrier.cluster.wait without an arrive first");
    f.wait_for = f.waits++;
    f.state = AT_CLUSTER;
    yield();
}
template <class T>
inline T load_remote(const T* local, unsigned rank) {
    if (rank >= g->cluster) fail("load_remote: rank " + std::to_string(rank) + " outside the cluster");
    const int me = g->cur->cta, at = me - (int)cluster_rank() + (int)rank;
    const Cta& other = g->ctas[at];
    if (other.exited) fail("load_remote: CTA " + std::to_string(rank) + " of the cluster has exited");
    const unsigned char* p = reinterpret_cast<const unsigned char*>(local);
    const unsigned char* s0 = reinterpret_cast<const unsigned char*>(__start_kw_shared);
    const unsigned char* d0 = g->ctas[g->cur->cta].dyn;
    T v;
    if (s0 && p >= s0 && p + sizeof(T) <= s0 + statics_size()) {
        std::memcpy(&v, at == g->cur_cta ? p : other.statics.data() + (p - s0), sizeof(T));
    } else if (p >= d0 && p + sizeof(T) <= d0 + g->smem) {
        std::memcpy(&v, other.dyn + (p - d0), sizeof(T));
    } else {
        fail("load_remote: not an address in this CTA's shared memory");
    }
    return v;
}
inline bool in_shared(const void* dst, int n) {
    const unsigned char* p = static_cast<const unsigned char*>(dst);
    const unsigned char* s0 = reinterpret_cast<const unsigned char*>(__start_kw_shared);
    const unsigned char* d0 = g->ctas[g->cur->cta].dyn;
    return (s0 && p >= s0 && p + n <= s0 + statics_size()) || (p >= d0 && p + n <= d0 + g->smem);
}
inline void cp_async(void* dst, const void* src, int size, int src_size) {
    if (!in_shared(dst, size)) fail("cp.async: the destination is not in this CTA's shared memory");
    if (reinterpret_cast<uintptr_t>(dst) % size || (src_size && reinterpret_cast<uintptr_t>(src) % size))
        fail("cp.async: a misaligned address");
    g->cur->open.push_back({dst, src, size, src_size});
}
inline void cp_async_commit() {
    Fiber& f = *g->cur;
    f.groups.push_back(std::move(f.open));
    f.open.clear();
}
inline void cp_async_wait(int pending) {
    Fiber& f = *g->cur;
    const size_t keep = pending < 0 ? 0 : (size_t)pending;
    if (f.groups.size() <= keep) return;
    const size_t land = f.groups.size() - keep;
    for (size_t i = 0; i < land; ++i)
        for (const Copy& c : f.groups[i]) {
            std::memcpy(c.dst, c.src, c.src_size);
            std::memset(static_cast<unsigned char*>(c.dst) + c.src_size, 0, c.size - c.src_size);
        }
    f.groups.erase(f.groups.begin(), f.groups.begin() + land);
}

// --- L1 prefetches (ptx.cuh prefetch_l1): a hint with no effect on values, so the emulator checks what a prefetch
// is for instead: each must be followed by the same thread's __ldg of that very address (a prefetch of the wrong
// address, or of one already loaded, is an error at the thread's exit). The prefetch reads its byte, as a load would.
inline void prefetch(const void* p) {
    (void)*static_cast<const volatile unsigned char*>(p);
    g->cur->prefetched.push_back(p);
}
inline void loaded(const void* p) {
    if (!g || !g->cur) return;
    std::vector<const void*>& v = g->cur->prefetched;
    for (size_t i = 0; i < v.size(); ++i)
        if (v[i] == p) {
            v[i] = v.back();
            v.pop_back();
            return;
        }
}

// --- the scheduler ----------------------------------------------------------------------------------------------
inline void fiber_main() {
    g->body();
    if (!g->cur->prefetched.empty()) {
        char what[160];
        std::snprintf(what, sizeof what, "%zu prefetch_l1 address(es) never loaded afterwards by the thread (first %p)",
                      g->cur->prefetched.size(), g->cur->prefetched.front());
        fail(what);
    }
    g->cur->state = DONE;
    context_switch(g->cur->ctx, g->sched);  // never resumed
    __builtin_unreachable();
}

inline void swap_in(int c) {
    Cta& t = g->ctas[c];
    if (statics_size()) std::memcpy(__start_kw_shared, t.statics.data(), statics_size());
    dynamic_shared = t.dyn;
    blockIdx = t.idx;
    g->cur_cta = c;
}
inline void swap_out(int c) {
    if (statics_size()) std::memcpy(g->ctas[c].statics.data(), __start_kw_shared, statics_size());
    g->cur_cta = -1;
}

// run one CTA's ready fibers, and release its block and warp barriers, until none can move; true if any ran
inline bool run_cta(int c) {
    Cta& t = g->ctas[c];
    const unsigned n = g->nthreads;
    bool any = false;
    for (;;) {
        bool moved = false;
        for (unsigned i = 0; i < n; ++i) {
            Fiber& f = g->fibers[(size_t)c * n + i];
            if (f.state != READY) continue;
            g->cur = &f;
            threadIdx = f.idx;
            context_switch(g->sched, f.ctx);
            if (!g->error.empty()) return true;
            if (f.spun) {  // it will run again next pass; a spin is not progress
                f.spun = false;
                g->spins = true;
                continue;
            }
            moved = any = true;
            if (f.state == DONE && --t.live == 0) t.exited = true;
        }
        if (t.at_block && t.at_block == t.live) {  // every live thread is at __syncthreads
            for (unsigned i = 0; i < n; ++i)
                if (g->fibers[(size_t)c * n + i].state == AT_BLOCK) g->fibers[(size_t)c * n + i].state = READY;
            t.at_block = 0;
            moved = true;
        }
        for (size_t w = 0; w < t.warps.size(); ++w) {
            Warp& wp = t.warps[w];
            if (!wp.waiting) continue;
            int need = 0;
            for (unsigned l = 0; l < 32 && w * 32 + l < n; ++l)
                if ((wp.mask >> l & 1u) && g->fibers[(size_t)c * n + w * 32 + l].state != DONE) ++need;
            if (wp.waiting == need) {
                for (unsigned l = 0; l < 32 && w * 32 + l < n; ++l) {
                    Fiber& f = g->fibers[(size_t)c * n + w * 32 + l];
                    if (f.state == AT_WARP) f.state = READY;
                }
                wp.waiting = 0;
                moved = true;
            }
        }
        if (!moved) return any;
    }
}

// release the cluster barrier's waiters whose phase every live thread of the cluster has arrived at
inline bool release_clusters() {
    const size_t per = (size_t)g->cluster * g->nthreads;
    bool moved = false;
    for (size_t first = 0; first < g->fibers.size(); first += per) {
        long long least = -1;
        for (size_t i = first; i < first + per; ++i) {
            const Fiber& f = g->fibers[i];
            if (f.state != DONE && (least < 0 || f.arrives < least)) least = f.arrives;
        }
        for (size_t i = first; i < first + per; ++i) {
            Fiber& f = g->fibers[i];
            if (f.state == AT_CLUSTER && f.wait_for < least) f.state = READY, moved = true;
        }
    }
    return moved;
}

inline std::string describe_deadlock() {
    int counts[5] = {0, 0, 0, 0, 0};
    for (const Fiber& f : g->fibers) ++counts[f.state];
    char s[200];
    std::snprintf(s, sizeof s, "deadlock: %d threads at __syncthreads, %d at a warp shuffle, %d at a cluster wait, "
                  "%d exited, %d spinning", counts[AT_BLOCK], counts[AT_WARP], counts[AT_CLUSTER], counts[DONE],
                  counts[READY]);
    return s;
}

// one scheduling group: the CTAs of linear block indices first .. first + group - 1 (x fastest): a cluster, or
// for a cooperative launch the whole grid
inline void run_group(unsigned first, dim3 block) {
    const unsigned n = g->nthreads, C = g->group;
    const size_t ss = statics_size();
    for (unsigned c = 0; c < C; ++c) {
        Cta& t = g->ctas[c];
        t = Cta{};
        const unsigned b = first + c;
        t.idx = {b % gridDim.x, b / gridDim.x % gridDim.y, b / (gridDim.x * gridDim.y)};
        t.statics.assign(ss, 0xff);
        t.dyn = g->dyn_all.data() + (size_t)c * ((g->smem + 127) / 128 * 128);
        std::memset(t.dyn, 0xff, g->smem);
        t.warps.assign((n + 31) / 32, Warp{});
        t.live = (int)n;
        for (unsigned i = 0; i < n; ++i) {
            Fiber& f = g->fibers[(size_t)c * n + i];
            f.~Fiber();
            new (&f) Fiber();
            f.cta = (int)c, f.tid = (int)i;
            f.idx = {i % block.x, i / block.x % block.y, i / (block.x * block.y)};
            context_make(f.ctx, g->stacks + ((size_t)c * n + i) * STACK, STACK, fiber_main);
        }
    }
    for (;;) {
        bool moved = false;
        g->spins = false;
        for (unsigned c = 0; c < C; ++c) {
            if (g->ctas[c].exited) continue;
            swap_in((int)c);
            moved |= run_cta((int)c);
            swap_out((int)c);
            if (!g->error.empty()) return;
        }
        moved |= release_clusters();
        bool all_done = true;
        for (unsigned c = 0; c < C; ++c) all_done &= g->ctas[c].exited;
        if (all_done) return;
        if (!moved) {  // nothing but spins (or nothing at all) this round: nothing can change any more
            g->error = describe_deadlock();
            char where[160];
            std::snprintf(where, sizeof where, " among the %u CTAs from block (%u, %u, %u)%s", C,
                          g->ctas[0].idx.x, g->ctas[0].idx.y, g->ctas[0].idx.z,
                          g->spins && C < gridDim.x * gridDim.y * gridDim.z
                              ? " (threads spin on a flag: a launch that is not cooperative runs one cluster at a time)"
                              : "");
            g->error += where;
            return;
        }
    }
}

// the cluster size compiled into a kernel by __cluster_dims__ (0: none)
#define KW_CLUSTER_SECTION(n)                                                                             \
    extern "C" char __start_kw_cluster_##n[] __attribute__((weak, visibility("hidden")));                \
    extern "C" char __stop_kw_cluster_##n[] __attribute__((weak, visibility("hidden")));
KW_CLUSTER_SECTION(1) KW_CLUSTER_SECTION(2) KW_CLUSTER_SECTION(3) KW_CLUSTER_SECTION(4)
KW_CLUSTER_SECTION(5) KW_CLUSTER_SECTION(6) KW_CLUSTER_SECTION(7) KW_CLUSTER_SECTION(8)
KW_CLUSTER_SECTION(9) KW_CLUSTER_SECTION(10) KW_CLUSTER_SECTION(11) KW_CLUSTER_SECTION(12)
KW_CLUSTER_SECTION(13) KW_CLUSTER_SECTION(14) KW_CLUSTER_SECTION(15) KW_CLUSTER_SECTION(16)
inline unsigned compiled_cluster(const void* fn) {
    const char* p = reinterpret_cast<const char*>(fn);
    const char* starts[] = {__start_kw_cluster_1, __start_kw_cluster_2, __start_kw_cluster_3, __start_kw_cluster_4,
                            __start_kw_cluster_5, __start_kw_cluster_6, __start_kw_cluster_7, __start_kw_cluster_8,
                            __start_kw_cluster_9, __start_kw_cluster_10, __start_kw_cluster_11, __start_kw_cluster_12,
                            __start_kw_cluster_13, __start_kw_cluster_14, __start_kw_cluster_15,
                            __start_kw_cluster_16};
    const char* stops[] = {__stop_kw_cluster_1, __stop_kw_cluster_2, __stop_kw_cluster_3, __stop_kw_cluster_4,
                           __stop_kw_cluster_5, __stop_kw_cluster_6, __stop_kw_cluster_7, __stop_kw_cluster_8,
                           __stop_kw_cluster_9, __stop_kw_cluster_10, __stop_kw_cluster_11, __stop_kw_cluster_12,
                           __stop_kw_cluster_13, __stop_kw_cluster_14, __stop_kw_cluster_15, __stop_kw_cluster_16};
    for (unsigned i = 0; i < 16; ++i)
        if (starts[i] && p >= starts[i] && p < stops[i]) return i + 1;
    return 0;
}

// the argument kinds the Python side passes: 'p' pointer, 'i' 32-bit int, 'f' 32-bit float
template <class A>
constexpr char kind() {
    return std::is_pointer<A>::value ? 'p' : std::is_same<A, float>::value ? 'f' : std::is_same<A, int>::value ? 'i'
                                                                                                               : '?';
}
template <class... A, size_t... I>
inline void call(void (*k)(A...), void** args, std::index_sequence<I...>) {
    k(*static_cast<std::remove_cv_t<A>*>(args[I])...);
}

// launch kernel k over grid x block (cluster: CTAs a cluster along x, 0 for the compiled size or none); the
// argument kinds must match `kinds`; returns 0, or 1 with the message in *error (valid until the next launch)
template <class... A>
int launch(void (*k)(A...), const char* kinds, const unsigned* grid3, const unsigned* block3, unsigned cluster,
           unsigned smem, unsigned cooperative, void** args, const char** error) {
    static Launch state;
    static std::string message;
    const char expected[] = {kind<A>()..., 0};
    if (std::strcmp(expected, kinds) != 0) {
        message = std::string("argument kinds ") + kinds + " do not match the kernel's " + expected;
        *error = message.c_str();
        return 1;
    }
    const unsigned compiled = compiled_cluster(reinterpret_cast<const void*>(k));
    if (cluster && compiled && cluster != compiled) {
        message = "launched with clusters of " + std::to_string(cluster) + ", compiled for " +
                  std::to_string(compiled);
        *error = message.c_str();
        return 1;
    }
    const unsigned C = cluster ? cluster : compiled ? compiled : 1;
    const dim3 grid{grid3[0], grid3[1], grid3[2]}, block{block3[0], block3[1], block3[2]};
    const unsigned n = block.x * block.y * block.z;
    if (n == 0 || n > 1024 || grid.x % C) {
        message = n == 0 || n > 1024 ? "a block of " + std::to_string(n) + " threads (1 to 1024)"
                                     : "grid.x = " + std::to_string(grid.x) + " is not a multiple of the cluster size "
                                     + std::to_string(C);
        *error = message.c_str();
        return 1;
    }
    Launch& L = state;
    L.body = [k, args] { call(k, args, std::index_sequence_for<A...>{}); };
    const unsigned blocks = grid.x * grid.y * grid.z, G = cooperative ? blocks : C;
    L.nthreads = n, L.smem = smem, L.cluster = C, L.group = G;
    L.fibers.resize((size_t)n * G);
    L.ctas.assign(G, Cta{});
    L.dyn_all.assign((size_t)G * ((smem + 127) / 128 * 128) + 128, 0);
    const size_t stack_bytes = (size_t)n * G * STACK;
    void* stacks = mmap(nullptr, stack_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                        -1, 0);
    if (stacks == MAP_FAILED) {
        message = "could not map " + std::to_string(stack_bytes >> 20) + " MiB of fiber stacks";
        *error = message.c_str();
        return 1;
    }
    L.stacks = static_cast<char*>(stacks);
    L.error.clear();
    g = &L;
    blockDim = block, gridDim = grid;
    for (unsigned b = 0; b < blocks && L.error.empty(); b += G) run_group(b, block);
    g = nullptr;
    munmap(stacks, stack_bytes);  // nothing of a launch stays resident between launches
    L.stacks = nullptr;
    std::vector<Fiber>().swap(L.fibers);
    std::vector<unsigned char>().swap(L.dyn_all);
    L.ctas.clear();
    if (!L.error.empty()) {
        message = L.error;
        *error = message.c_str();
        return 1;
    }
    return 0;
}
}  // namespace kw_emu

inline void __syncthreads() { kw_emu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { kw_emu::warp_barrier(mask); }
template <class T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    const int lane = (int)(kw_emu::g->cur->tid % 32);
    return kw_emu::shuffle(mask, v, (lane & ~(width - 1)) + (src & (width - 1)));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    const int lane = (int)(kw_emu::g->cur->tid % 32), src = lane ^ lane_mask;
    return kw_emu::shuffle(mask, v, (src & ~(width - 1)) == (lane & ~(width - 1)) ? src : lane);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    const int lane = (int)(kw_emu::g->cur->tid % 32), src = lane + (int)delta;
    return kw_emu::shuffle(mask, v, (src & ~(width - 1)) == (lane & ~(width - 1)) ? src : lane);
}

// export a kernel: kw_launch_<name>(kinds, grid, block, cluster, smem, cooperative, args, error)
#define KW_EMU_EXPORT(name)                                                                                   \
    extern "C" __attribute__((visibility("default"))) int kw_launch_##name(                                 \
        const char* kinds, const unsigned* grid, const unsigned* block, unsigned cluster, unsigned smem,        \
        unsigned cooperative, void** args, const char** error) {                                               \
        return kw_emu::launch(&name, kinds, grid, block, cluster, smem, cooperative, args, error);              \
    }
