// Device code shared by the row kernels that hold a row chunk in registers as raw words (softmax and rms_norm
// `cluster` rungs): element formats and conversions, the cluster primitives, warp reductions, 16-byte loads and
// stores with optional streaming hints. Included (textually, by kernelwright.backends.nvrtc.read_source) after the
// kernel has defined DTYPE (0 fp32, 1 fp16, 2 bf16), VECTOR (1: 16-byte accesses) and optionally HINTS.
#pragma once
#include "ptx.cuh"  // the PTX behind named functions (and the CPU emulator's stand-ins)
#if !defined(DTYPE) || !defined(VECTOR)
#error "define DTYPE and VECTOR before including rows.cuh"
#endif
#ifndef HINTS
#define HINTS 0
#endif
#ifndef HINT_LOADS  // x's register loads: 0 __ldg; 1 not kept in L1, first out of L2; 2 not kept in L1 only
#define HINT_LOADS HINTS
#endif
#ifndef HINT_STORES  // y's stores: 0 plain; 1 streaming (.cs)
#define HINT_STORES HINTS
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
    return f16_to_f32((unsigned short)(b & 0xffffu));
#else
    return __uint_as_float(b << 16);
#endif
}

__device__ __forceinline__ unsigned to_bits(float f) {
#if DTYPE == 0
    return __float_as_uint(f);
#elif DTYPE == 1
    return f32_to_f16(f);
#else
    return f32_to_bf16(f);
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

// a reduction over groups of 2 * FIRST lanes (butterfly from offset FIRST): 16, the warp; 8, each half-warp
template <int FIRST>
__device__ __forceinline__ float lanes_max(float v) {
#pragma unroll
    for (int o = FIRST; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
template <int FIRST>
__device__ __forceinline__ float lanes_sum(float v) {
#pragma unroll
    for (int o = FIRST; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) { return lanes_max<16>(v); }
__device__ __forceinline__ float warp_sum(float v) { return lanes_sum<16>(v); }

// x and y are each touched once: with HINTS (or HINT_LOADS / HINT_STORES apart), keep them out of L1 and first out
// of L2
__device__ __forceinline__ uint4 load_vector(const uint4* p) {
#if HINT_LOADS == 1
    return load_evict_first(p);
#elif HINT_LOADS == 2
    return load_no_l1(p);
#else
    return __ldg(p);
#endif
}
__device__ __forceinline__ void store_vector(uint4* p, uint4 v) {
#if HINT_STORES
    __stcs(p, v);
#else
    *p = v;
#endif
}


// --- row statistics in fp32 without library calls -----------------------------------------------------------
// Exponent arithmetic without library calls (frexpf, ldexpf, IEEE sqrt and division are calls on sm_90, and
// around them bf16's configurations spilled 24-56 bytes a thread):
__device__ __forceinline__ float exp2i(int n) {  // 2^n, exactly, for n in [-126, 127]; 0 below, +inf above
    return n < -126 ? 0.0f : n > 127 ? __int_as_float(0x7f800000) : __int_as_float((n + 127) << 23);
}
__device__ __forceinline__ int exponent_of(float a) {  // e with a = f 2^e, f in [0.5, 1), for finite a > 0
    const unsigned b = __float_as_uint(a);
    if (b >= 0x00800000u) return (int)(b >> 23) - 126;
    return (int)(__float_as_uint(a * 16777216.0f) >> 23) - 150;  // subnormal: scaled by 2^24 first
}
__device__ __forceinline__ float rsqrt_accurate(float v) {  // 1 / sqrt(v): MUFU.RSQ and one Newton step
    const float r = rsqrtf(v);
    return v > 0.0f && v < __int_as_float(0x7f800000) ? r * fmaf(-0.5f * v * r, r, 1.5f) : r;
}


// rstd = 1 / sqrt(v 4^k + eps) from a variance (or mean square) v given in the scale 4^-k: 2^-k / sqrt(v + eps 4^-k),
// or 1 / sqrt(eps) where v 4^k is below eps's rounding, so no intermediate leaves fp32's range unless rstd itself
// does (eps = 0 and every |x| below ~2^-127); 2^-k applied as two factors (each normal for |k| <= 252)
__device__ __forceinline__ float rstd_scaled(int k, float v, float eps) {
    const float e4 = eps > 0.0f ? eps * exp2i(-2 * k) : 0.0f;  // eps 4^-k, +inf past fp32's range
    if (e4 > 1.8446744e19f * v) return rsqrt_accurate(eps);
    return rsqrt_accurate(v + e4) * exp2i(-(k / 2)) * exp2i(-(k - k / 2));
}

// x is unpacked again for the output by byte permutes, not the shifts the sum of squares used: with the same
// shifts ptxas keeps the values unpacked for the sum alive until the store, twice the registers of the words (16-bit
// types spilled 24-104 bytes a thread, sm_90)
__device__ __forceinline__ float elem_again(unsigned w, int i) {
#if DTYPE == 2
    return __uint_as_float(__byte_perm(w, 0u, i == 0 ? 0x1044u : 0x3244u));
#elif DTYPE == 1
    return from_bits(__byte_perm(w, 0u, i == 0 ? 0x4410u : 0x4432u));
#else
    return __uint_as_float(__byte_perm(w, 0u, 0x3210u));  // the identity, as ptxas cannot see
#endif
}


// --- a row chunk held by a CTA (needs NV, THREADS and SNV: the kernels that include this define them) ----------
#if defined(NV) && defined(THREADS) && defined(SNV)
#if SNV
// the SNV vectors a thread holds in shared memory: slot j * THREADS + tid, read back only by the thread that
// filled it (its own cp.async.wait_group is all the synchronization they need)
KW_DYNAMIC_SHARED(uint4, held);
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
            cp_async16(dst, xr + col / VEC);
        } else {
            *dst = make_uint4(pw, pw, pw, pw);
        }
    }
    cp_async_commit();
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

#if SNV
// PAIR kernels (two rows a cluster), 1.: row r0's part in registers and, when has1, row r0 + 1's in this thread's
// shared-memory slots (cp.async, in flight with the register loads); access j covers the 16-byte vector
// vi + j * THREADS of both rows, vi = base / VEC + tid (vector indices, not columns: from signed columns the compiler
// divides again at every access, and kept those offsets in registers to the store; 56-88 bytes of spills, sm_90)
__device__ __forceinline__ void load_pair(unsigned (&w)[NV][WORDS], const uint4* xr, const uint4* xs, bool has1,
                                          int vi, int n_vec) {
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        uint4* dst = held + j * THREADS + threadIdx.x;
        if (has1 && vi + j * THREADS < n_vec) {
            cp_async16(dst, xs + vi + j * THREADS);
        } else {
            *dst = make_uint4(0u, 0u, 0u, 0u);
        }
    }
    cp_async_commit();
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        uint4 q = make_uint4(0u, 0u, 0u, 0u);
        if (vi + j * THREADS < n_vec) q = load_vector(xr + vi + j * THREADS);
        w[j][0] = q.x, w[j][1] = q.y, w[j][2] = q.z, w[j][3] = q.w;
    }
}
#endif

// --- statistics of the held chunk ----------------------------------------------------------------------------
// the largest |x| of this thread's words (registers, then shared memory once its copies have landed), found on the
// raw bits: a magnitude's bits order as its value (NaN above Inf), so two 16-bit magnitudes a word take one packed
// integer max and nothing is unpacked here (unpacked, the values stayed live into the sum and bf16 spilled)
#if EB == 4
#define ABS_MASK 0x7fffffffu
#elif VECTOR
#define ABS_MASK 0x7fff7fffu
#else
#define ABS_MASK 0x7fffu
#endif
__device__ __forceinline__ unsigned max_magnitude(unsigned m, unsigned w) {
#if EB == 2 && VECTOR
    return __vmaxu2(m, w & ABS_MASK);
#else
    return max(m, w & ABS_MASK);
#endif
}
__device__ __forceinline__ float chunk_amax(const unsigned (&w)[NV][WORDS]) {
    unsigned m = 0;
#pragma unroll
    for (int j = 0; j < NV; ++j)
#pragma unroll
        for (int k = 0; k < WORDS; ++k) m = max_magnitude(m, w[j][k]);
#if SNV
    cp_async_wait<0>();
#pragma unroll
    for (int j = 0; j < SNV; ++j) {
        const uint4 q = held[j * THREADS + threadIdx.x];
#pragma unroll
        for (int k = 0; k < WORDS; ++k) m = max_magnitude(m, word(q, k));
    }
#endif
#if EB == 2 && VECTOR
    m = max(m & 0xffffu, m >> 16);
#endif
    return from_bits(m);
}

// one-pass statistics (rms_norm's FAST, layer_norm's ONE_PASS_MEAN and FAST_STATS, the PAIR kernels): the largest
// |x| of held words as raw bits (max_magnitude) into m and, in the same pass, every element folded into an
// accumulator by acc = f(acc, word, element index) (f unpacks the element as it needs). fold_registers: this
// thread's words in registers; fold_shared: its first N shared-memory vectors, once its copies have landed
template <typename A, typename F>
__device__ __forceinline__ void fold_registers(const unsigned (&w)[NV][WORDS], unsigned& m, A& acc, F f) {
#pragma unroll
    for (int j = 0; j < NV; ++j)
#pragma unroll
        for (int k = 0; k < WORDS; ++k) {
            m = max_magnitude(m, w[j][k]);
#pragma unroll
            for (int i = 0; i < PER_WORD; ++i) acc = f(acc, w[j][k], i);
        }
}
#if SNV
template <int N, typename A, typename F>
__device__ __forceinline__ void fold_shared(unsigned& m, A& acc, F f) {
    cp_async_wait<0>();
#pragma unroll 1
    for (int j = 0; j < N; ++j) {
        const uint4 h = held[j * THREADS + threadIdx.x];
#pragma unroll
        for (int k = 0; k < WORDS; ++k) {
            m = max_magnitude(m, word(h, k));
#pragma unroll
            for (int i = 0; i < PER_WORD; ++i) acc = f(acc, word(h, k), i);
        }
    }
}
#endif
// the 16-bit magnitudes of a word's two halves merged (raw bits to the float they are)
__device__ __forceinline__ float amax_of(unsigned m) {
#if EB == 2 && VECTOR
    m = max(m & 0xffffu, m >> 16);
#endif
    return from_bits(m);
}

// the thread's held chunk (registers, then shared memory): its largest |x| into `amax`, the fold returned
template <typename A, typename F>
__device__ __forceinline__ A chunk_amax_fold(const unsigned (&w)[NV][WORDS], float& amax, A acc, F f) {
    unsigned m = 0;
    fold_registers(w, m, acc, f);
#if SNV
    fold_shared<SNV>(m, acc, f);
#endif
    amax = amax_of(m);
    return acc;
}

#if VECTOR && EB == 2
// TC_STATS (the norm cluster rungs' switch, session 25): a chunk's unscaled sum of squares Q (and with SUM its sum S)
// by mma.sync (ptx.cuh mma_16816), its largest |x| as chunk_amax_fold. A lane's 16-byte vector is one A fragment of a
// 16 x 16 tile (which value sits where does not matter to a sum): D += A A^T, B taken from the same registers (b0, b1
// = a[0], a[2]: A's rows 0-7; a[1], a[3]: rows 8-15), has each row's sum of squares on its diagonal, and D += A ones
// every row's sum in each of D's 8 columns (the warp's D elements add up to 8 S). Two or three tensor-core
// instructions a vector where the fold issues 16 or 24 (byte permutes, adds, FMAs). Products of 16-bit values are
// exact in fp32; the accumulation rounds as the tensor cores do. Returns this lane's shares (x: S, y: Q), which the
// block reduction's warp sums complete.
template <bool SUM>
__device__ __forceinline__ void tc_fold(const unsigned (&a)[4], float (&s)[4], float (&q0)[4], float (&q1)[4]) {
    constexpr unsigned ONE = DTYPE == 1 ? 0x3c003c00u : 0x3f803f80u;  // a pair of 1.0s
    if (SUM) mma_16816<DTYPE == 1>(s, a, ONE, ONE);
    mma_16816<DTYPE == 1>(q0, a, a[0], a[2]);
    mma_16816<DTYPE == 1>(q1, a, a[1], a[3]);
}
template <bool SUM>
__device__ __forceinline__ float2 chunk_amax_sums_tc(const unsigned (&w)[NV][WORDS], float& amax) {
    unsigned m = 0;
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f}, q0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, q1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < NV; ++j) {
#pragma unroll
        for (int k = 0; k < WORDS; ++k) m = max_magnitude(m, w[j][k]);
        tc_fold<SUM>(w[j], s, q0, q1);
    }
#if SNV
    cp_async_wait<0>();
#pragma unroll 1
    for (int j = 0; j < SNV; ++j) {
        const uint4 h = held[j * THREADS + threadIdx.x];
        const unsigned a[4] = {h.x, h.y, h.z, h.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) m = max_magnitude(m, a[k]);
        tc_fold<SUM>(a, s, q0, q1);
    }
#endif
    amax = amax_of(m);
    const int g = (threadIdx.x & 31) >> 2, t2 = (threadIdx.x & 3) * 2;  // this lane's D rows g, g + 8; columns t2, +1
    const float q = (g == t2 ? q0[0] + q1[2] : 0.0f) + (g == t2 + 1 ? q0[1] + q1[3] : 0.0f);
    return make_float2(SUM ? (s[0] + s[1] + s[2] + s[3]) * 0.125f : 0.0f, q);
}
#endif

#if SNV
// PAIR kernels, 2.: both rows' largest magnitudes (x, y) and folds (z, w): row r0's in registers, row r0 + 1's in
// the shared-memory slots (SNV == NV)
template <typename F>
__device__ __forceinline__ float4 pair_amax_fold(const unsigned (&w)[NV][WORDS], F f) {
    unsigned m0 = 0, m1 = 0;
    float s0 = 0.0f, s1 = 0.0f;
    fold_registers(w, m0, s0, f);
    fold_shared<NV>(m1, s1, f);
    return make_float4(amax_of(m0), amax_of(m1), s0, s1);  // (the pair kernels' rows are 16-bit, 16-byte path)
}
#endif

__device__ __forceinline__ float block_reduce_max(float v, float* red) {
    v = warp_max(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = red[0];
#pragma unroll
    for (int i = 1; i < THREADS / 32; ++i) v = fmaxf(v, red[i]);
    return v;
}

__device__ __forceinline__ float block_reduce_sum(float v, float* red) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = red[0];
#pragma unroll
    for (int i = 1; i < THREADS / 32; ++i) v += red[i];
    return v;
}

// the block's largest magnitude (x) and sum (y), one barrier (the sum in block_reduce_sum's order)
__device__ __forceinline__ float2 block_reduce_max_sum(float2 v, float* red_a, float* red_s) {
    v.x = warp_max(v.x), v.y = warp_sum(v.y);
    if ((threadIdx.x & 31) == 0) red_a[threadIdx.x >> 5] = v.x, red_s[threadIdx.x >> 5] = v.y;
    __syncthreads();
    v = make_float2(red_a[0], red_s[0]);
#pragma unroll
    for (int i = 1; i < THREADS / 32; ++i) v.x = fmaxf(v.x, red_a[i]), v.y += red_s[i];
    return v;
}

// --- two rows a cluster (the norms' PAIR kernels): both rows' reductions at once ----------------------------------
// both rows' (or any two values') block reduction, one barrier: warp partials, then lane i of every warp takes warp
// i's and the warp reduces them (the same tree in every warp; reading all warps' partials in each thread took 32
// registers at 512 threads, and spilled)
template <bool MAX>
__device__ __forceinline__ float2 block_reduce2(float2 v, float2* red) {
    v = MAX ? make_float2(warp_max(v.x), warp_max(v.y)) : make_float2(warp_sum(v.x), warp_sum(v.y));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    const unsigned lane = threadIdx.x & 31;
    v = lane < THREADS / 32 ? red[lane] : make_float2(0.0f, 0.0f);  // 0: below every magnitude, nothing to a sum
    return MAX ? make_float2(warp_max(v.x), warp_max(v.y)) : make_float2(warp_sum(v.x), warp_sum(v.y));
}

// two rows' largest magnitudes (x, y) and sums (z, w) in one barrier, as block_reduce2
__device__ __forceinline__ float4 block_reduce_max2_sum2(float4 v, float4* red) {
    v = make_float4(warp_max(v.x), warp_max(v.y), warp_sum(v.z), warp_sum(v.w));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    const unsigned lane = threadIdx.x & 31;
    v = lane < THREADS / 32 ? red[lane] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    return make_float4(warp_max(v.x), warp_max(v.y), warp_sum(v.z), warp_sum(v.w));
}

// a half-warp's reduction (lanes 0-15 and 16-31 apart)
__device__ __forceinline__ float half_max(float v) { return lanes_max<8>(v); }
__device__ __forceinline__ float half_sum(float v) { return lanes_sum<8>(v); }

#define NO_EXPONENT (-100000)  // a chunk of zeros: below every real exponent, so it never sets the row's scale

// --- the norms' store (16-byte path): y from the held chunk and per-column vectors (w; w and b) --------------------
#ifndef WG
#define WG 4  // per-column 16-byte loads a thread has in flight before its stores (see store_chunk)
#endif
#ifndef WGS
#define WGS WG  // the same for the accesses held in shared memory (x's registers are free by then)
#endif
#ifndef WEARLY
#define WEARLY 0  // the first store group's per-column vectors loaded before the statistics (see first_group)
#endif
#ifndef WPF
#define WPF 0  // accesses whose per-column vectors are prefetched into L1 ahead of their loads (see prefetch_accesses)
#endif
static_assert(WPF >= 0, "WPF: a distance in accesses, 0 (off) or more");
#if VECTOR
// 4. y's vector at access j = out(the held x vector, its NP per-column vectors); the per-column vectors of G =
//    WG / NP accesses are loaded before their stores, so their L2 round trips overlap (loaded one at a time, every
//    store waited for its own: rms_norm 3.66 / 3.16 TB/s at 4096x65536 / 1024x262144 bf16; G 4: 3.89 / 3.40, run
//    60). At 64 registers G 4 with w and b (layer norm) spilled ~100 bytes: WG counts vectors, not accesses.
//    (w copied to shared memory by cp.async while x loaded, read there by the store: slower everywhere, rms
//    3.91 -> 3.34 and 3.40 -> 2.37 TB/s at the wide shapes, run 61; removed.)
template <int NP>
struct FirstGroup {
    uint4 q[WG / NP > 0 ? WG / NP : 1][NP];
};

// WEARLY: the first store group's per-column vectors, loaded right after the chunk, so their L2 round trip runs
// behind the statistics and the cluster's exchange instead of in front of the first store
template <int NP>
__device__ __forceinline__ FirstGroup<NP> first_group(const uint4* const (&p)[NP], int base, int n_cols) {
    constexpr int G = WG / NP > 0 ? WG / NP : 1;
    FirstGroup<NP> f;
#pragma unroll
    for (int j = 0; j < G; ++j) {
        const int col = base + (j * THREADS + (int)threadIdx.x) * VEC;
#pragma unroll
        for (int v = 0; v < NP; ++v)
            f.q[j][v] = j < NV && col < n_cols ? __ldg(p[v] + col / VEC) : make_uint4(0u, 0u, 0u, 0u);
    }
    return f;
}

// WPF: the per-column vectors of accesses [from, to) (0 .. NV + SNV - 1 in the store's order, those past the chunk
// or the row left out) prefetched into L1, holding no register: the kernel prefetches [0, WPF) right after the
// chunk's loads (their L2 round trips behind the statistics, as WEARLY's but without its registers), store_chunk
// each group's accesses WPF ahead as the group before them is loaded, so that a group's loads find their lines in
// L1 instead of waiting on L2. Layer norm's store waits for 8 groups' round trips against rms_norm's 4 (w and b), 1.5
// us of a CTA's life under the H200's bandwidth (H100 run 99).
template <int NP>
__device__ __forceinline__ void prefetch_accesses(const uint4* const (&p)[NP], int base, int n_cols, int from, int to) {
    constexpr int LOADED = WEARLY ? (WG / NP > 0 ? WG / NP : 1) : 0;  // WEARLY's first group: loaded, not prefetched
#pragma unroll
    for (int a = from; a < to; ++a) {
        const int col = base + (a * THREADS + (int)threadIdx.x) * VEC;
        if (a >= LOADED && a < NV + SNV && col < n_cols) {
#pragma unroll
            for (int v = 0; v < NP; ++v) prefetch_l1(p[v] + col / VEC);
        }
    }
}

template <int NP, typename F>
__device__ __forceinline__ void store_chunk(const unsigned (&w)[NV][WORDS], uint4* yr, const uint4* const (&p)[NP],
                                            int base, int n_cols, const FirstGroup<NP>& first, F out) {
    constexpr int G = WG / NP > 0 ? WG / NP : 1;
    const int tid = threadIdx.x;
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int g = 0; g < NV; g += G) {
        if (WPF) prefetch_accesses(p, base, n_cols, g + WPF, (g + G < NV ? g + G : NV) + WPF);
        uint4 q[G][NP];
#pragma unroll
        for (int j = g; j < g + G && j < NV; ++j) {
            const int col = base + (j * THREADS + tid) * VEC;
#pragma unroll
            for (int v = 0; v < NP; ++v)
                q[j - g][v] = WEARLY && g == 0 ? first.q[j][v] : col < n_cols ? __ldg(p[v] + col / VEC) : zero;
        }
#pragma unroll
        for (int j = g; j < g + G && j < NV; ++j) {
            const int col = base + (j * THREADS + tid) * VEC;
            if (col < n_cols)
                store_vector(yr + col / VEC, out(make_uint4(w[j][0], w[j][1], w[j][2], w[j][3]), q[j - g]));
        }
    }
#if SNV
    constexpr int GS = WGS / NP > 0 ? WGS / NP : 1;
#pragma unroll 1
    for (int g = 0; g < SNV; g += GS) {
        if (WPF) prefetch_accesses(p, base, n_cols, NV + g + WPF, NV + (g + GS < SNV ? g + GS : SNV) + WPF);
        uint4 q[GS][NP];
#pragma unroll
        for (int j = 0; j < GS; ++j) {
            const int col = base + ((NV + g + j) * THREADS + tid) * VEC;
#pragma unroll
            for (int v = 0; v < NP; ++v)
                q[j][v] = g + j < SNV && col < n_cols ? __ldg(p[v] + col / VEC) : zero;
        }
#pragma unroll
        for (int j = 0; j < GS; ++j) {
            const int col = base + ((NV + g + j) * THREADS + tid) * VEC;
            if (g + j < SNV && col < n_cols) store_vector(yr + col / VEC, out(held[(g + j) * THREADS + tid], q[j]));
        }
    }
#endif
}
#endif  // VECTOR

#if SNV
// PAIR kernels, 4.: both rows' y from the held words (row r0's in registers, r0 + 1's in shared memory), each access's
// NP per-column vectors (p: already at this thread's first vector) loaded once for both rows, G accesses' in flight
// together; out(x vector, its per-column vectors, row 0 or 1)
template <int NP, int G, typename F>
__device__ __forceinline__ void store_pair(const unsigned (&w)[NV][WORDS], uint4* yr, uint4* ys, bool has1,
                                           const uint4* const (&p)[NP], int vi, int n_vec, F out) {
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int g = 0; g < NV; g += G) {
        uint4 q[G][NP];
#pragma unroll
        for (int j = g; j < g + G && j < NV; ++j) {
            const bool in = vi + j * THREADS < n_vec;
#pragma unroll
            for (int v = 0; v < NP; ++v) q[j - g][v] = in ? __ldg(p[v] + j * THREADS) : zero;
        }
#pragma unroll
        for (int j = g; j < g + G && j < NV; ++j) {
            if (vi + j * THREADS < n_vec) {
                store_vector(yr + j * THREADS, out(make_uint4(w[j][0], w[j][1], w[j][2], w[j][3]), q[j - g], 0));
                if (has1) store_vector(ys + j * THREADS, out(held[j * THREADS + threadIdx.x], q[j - g], 1));
            }
        }
    }
}
#endif

// --- TIMELINE: an experiment's instrument (benchmarks/experiments/norm_timeline.py; 0 in the library, where it
// compiles to nothing). The kernel takes one more argument, 8 words a CTA that thread 0 fills: the SM it ran on,
// the SM's clock (clock64) when the CTA began, when its chunk had landed (timeline_loaded: every thread's registers
// and shared-memory copies, then a block barrier, which the kernel without the instrument does not wait for in one
// place), when its row's statistics were known, when its last store was issued, and the global timer (ns) at the
// beginning and the end (to turn cycles into time). ---
#ifndef TIMELINE
#define TIMELINE 0
#endif
#if TIMELINE && !defined(KW_EMULATE)
#define TIMELINE_PARAM , long long* __restrict__ tl_
__device__ __forceinline__ long long timeline_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return (long long)t;
}
__device__ __forceinline__ long long timeline_sm() {
    unsigned r;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
    return (long long)r;
}
#define TIMELINE_BEGIN()                                                                      \
    do {                                                                                      \
        if (threadIdx.x == 0) {                                                               \
            long long* t_ = tl_ + (size_t)blockIdx.x * 8;                                     \
            t_[0] = timeline_sm(), t_[6] = timeline_ns(), t_[1] = clock64();                  \
        }                                                                                     \
    } while (0)
#define TIMELINE_MARK(i)                                                                      \
    do {                                                                                      \
        if (threadIdx.x == 0) tl_[(size_t)blockIdx.x * 8 + 1 + (i)] = clock64();              \
    } while (0)
#define TIMELINE_END()                                                                        \
    do {                                                                                      \
        if (threadIdx.x == 0) {                                                               \
            long long* t_ = tl_ + (size_t)blockIdx.x * 8;                                     \
            t_[4] = clock64(), t_[7] = timeline_ns();                                         \
        }                                                                                     \
    } while (0)
// every thread's chunk in (a use of each register word, the shared-memory copies waited for), then the CTA's
__device__ __forceinline__ void timeline_loaded(const unsigned (&w)[NV][WORDS], long long* tl) {
    unsigned acc = 0;
#pragma unroll
    for (int j = 0; j < NV; ++j)
#pragma unroll
        for (int k = 0; k < WORDS; ++k) acc ^= w[j][k];
#if SNV
    cp_async_wait<0>();
#endif
    if (acc == 0x9e3779b9u && threadIdx.x == THREADS) tl[0] = -1;  // never true: keeps the use
    __syncthreads();
    if (threadIdx.x == 0) tl[(size_t)blockIdx.x * 8 + 2] = clock64();
}
#define TIMELINE_LOADED(w) timeline_loaded(w, tl_)
#else
#define TIMELINE_PARAM
#define TIMELINE_BEGIN() ((void)0)
#define TIMELINE_MARK(i) ((void)0)
#define TIMELINE_END() ((void)0)
#define TIMELINE_LOADED(w) ((void)0)
#endif
// STAGGER_NS (the same experiment's other instrument; 0 in the library): the rows [STAGGER_FROM, 2 STAGGER_FROM)
// (the first wave's second CTA on each SM, when the block scheduler fills the SMs round robin) sleep STAGGER_NS
// before they load, so that the two CTAs of an SM start half a life apart rather than together.
#ifndef STAGGER_NS
#define STAGGER_NS 0
#endif
#ifndef STAGGER_FROM
#define STAGGER_FROM 0  // (with STAGGER_NS, the experiment sets it: its SMs over the cluster size)
#endif
#if STAGGER_NS && !defined(KW_EMULATE)
#define STAGGER(row)                                                                          \
    do {                                                                                      \
        if ((row) >= STAGGER_FROM && (row) < 2 * STAGGER_FROM) __nanosleep(STAGGER_NS);       \
    } while (0)
#else
#define STAGGER(row) ((void)0)
#endif
#endif
