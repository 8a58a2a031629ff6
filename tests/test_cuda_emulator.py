"""The CPU emulator for CUDA C kernels (kernelwright.backends.emulate): block, warp and cluster synchronisation,
distributed shared memory, cp.async landing at its wait, the number formats, and the errors it stops at. Each test
kernel is compiled for sm_90 by NVRTC too, so it is CUDA C a GPU takes, not a dialect of the emulator's own."""

from pathlib import Path

import pytest
import torch

from kernelwright.backends import emulate, nvrtc
from kernelwright.backends.emulate import EmulatorError, cuda_on_cpu
from kernelwright.errors import Unavailable

try:
    emulate.compiler()
except Unavailable as e:
    pytest.skip(str(e), allow_module_level=True)

PTX = nvrtc.read_source(Path(__file__).parents[1] / "kernelwright" / "ops" / "_cuda" / "ptx.cuh")

BLOCK_SUM = r"""
__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
extern "C" __global__ void block_sum(const float* x, float* out, int n) {
    __shared__ float part[32];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = warp_sum(i < n ? x[i] : 0.0f);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = warp_sum(threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0f);
        v = __shfl_sync(0xffffffffu, v, 0);  // every lane of warp 0 holds it; lane 5 writes
        if (threadIdx.x == 5) out[blockIdx.x] = v;
    }
}
"""

# each CTA of a cluster puts (rank, its block) in shared memory; after the barrier every CTA reads every partner's
CLUSTER_GATHER = r"""
extern "C" __global__ void KEEP gather(float* out) {
    __shared__ float2 mine;
    const unsigned rank = cluster_rank(), size = gridDim.x > 0 ? SIZE : 1;
    if (threadIdx.x == 0) mine = make_float2((float)rank, (float)blockIdx.x);
    cluster_arrive_release();
    cluster_wait();
    if (threadIdx.x < size) {
        const float2 v = load_remote(&mine, threadIdx.x);
        out[2 * (blockIdx.x * size + threadIdx.x)] = v.x;
        out[2 * (blockIdx.x * size + threadIdx.x) + 1] = v.y;
    }
#if WAIT_BEFORE_EXIT
    cluster_arrive_relaxed();  // partners' shared memory must outlive their readers
    cluster_wait();
#endif
}
"""

# cp.async into shared memory: read before the wait, after waiting for the older group only, and after both
CP_ASYNC = r"""
KW_DYNAMIC_SHARED(float4, buf);
extern "C" __global__ void copies(const float4* src, float4* out) {
    const int t = threadIdx.x;
    cp_async16(buf + 2 * t, src + 2 * t);
    cp_async_commit();
    cp_async16_or_zero((float*)(buf + 2 * t + 1), (const float*)(src + 2 * t + 1), t % 2 == 0);
    cp_async_commit();
    out[4 * t] = buf[2 * t];          // nothing waited for: the poison
    cp_async_wait<1>();
    out[4 * t + 1] = buf[2 * t];      // the older group has landed
    out[4 * t + 2] = buf[2 * t + 1];  // the newer has not
    cp_async_wait<0>();
    out[4 * t + 3] = buf[2 * t + 1];  // now it has (zeros where the source size was 0)
}
"""

CONVERT = r"""
extern "C" __global__ void convert(const float* x, unsigned short* bf, unsigned short* h, float* back, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        bf[i] = f32_to_bf16(x[i]);
        h[i] = f32_to_f16(x[i]);
        back[i] = f16_to_f32(h[i]);
    }
}
"""

DEADLOCK = r"""
extern "C" __global__ void stuck(float* out) {
    float v = threadIdx.x;
    if (threadIdx.x == 0) __syncthreads();              // lane 0 at the block barrier...
    else v = __shfl_xor_sync(0xffffffffu, v, 1);       // ...the other lanes at a shuffle that needs lane 0
    out[threadIdx.x] = v;
}
"""

# CTA b waits for CTA b + 1's flag (the last starts), then adds one to its value: a chain across the grid, against
# the emulator's scheduling order (CTA 0 first). NEVER: every CTA waits on a flag nothing sets.
CHAIN = r"""
extern "C" __global__ void chain(unsigned* flags, float* vals, int never) {
    const unsigned b = blockIdx.x, last = gridDim.x - 1;
    if (threadIdx.x == 0) {
        float v = 0.0f;
        if (never) wait_until_equal_gpu(flags + b, 7u);
        if (b < last) {
            wait_until_equal_gpu(flags + b + 1, 1u);
            v = vals[b + 1] + 1.0f;
        }
        vals[b] = v;
        store_release_gpu(flags + b, 1u);
    }
}
"""


def kernel(body: str, name: str, **defines) -> nvrtc.CudaKernel:
    opts = nvrtc.CompileOptions(defines=tuple(f"{k}={v}" for k, v in defines.items()))
    k = nvrtc.CudaKernel(PTX + body, name, opts, what=f"<test kernel {name}>")
    assert k.cubin[:4] == b"\x7fELF"  # a GPU takes it: NVRTC compiles it for sm_90
    return k


def test_block_sum_with_shuffles_and_shared_memory():
    k = kernel(BLOCK_SUM, "block_sum")
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    out = torch.full((4,), float("nan"))
    with cuda_on_cpu():
        k.launch((4,), (256,), (x, out, 1000))
    ref = torch.nn.functional.pad(x.double(), (0, 24)).view(4, 256).sum(1)
    assert torch.allclose(out.double(), ref, rtol=0, atol=1e-4), (out, ref)
    assert emulate.launched[-1] == ("block_sum", (4, 1, 1), (256, 1, 1), 0)


@pytest.mark.parametrize(("size", "compiled"), [(4, False), (2, True), (16, False)])
def test_cluster_barrier_and_distributed_shared_memory(size, compiled):
    keep = f"__cluster_dims__({size}, 1, 1)" if compiled else ""
    k = kernel(CLUSTER_GATHER, "gather", KEEP=keep or "/**/", SIZE=size, WAIT_BEFORE_EXIT=1)
    blocks = 2 * size
    out = torch.full((blocks * size * 2,), float("nan"))
    with cuda_on_cpu():
        k.launch((blocks,), (32,), (out,), cluster=0 if compiled else size)
    got = out.view(blocks, size, 2)
    for b in range(blocks):
        for r in range(size):
            assert got[b, r].tolist() == [float(r), float(b // size * size + r)], (b, r, got[b, r])


def test_reading_an_exited_partner_is_an_error():
    k = kernel(CLUSTER_GATHER, "gather", KEEP="/**/", SIZE=2, WAIT_BEFORE_EXIT=0)
    with cuda_on_cpu(), pytest.raises(EmulatorError, match="CTA 0 of the cluster has exited"):
        k.launch((2,), (32,), (torch.zeros(8),), cluster=2)


def test_cluster_sizes_are_checked():
    k = kernel(CLUSTER_GATHER, "gather", KEEP="__cluster_dims__(2, 1, 1)", SIZE=2, WAIT_BEFORE_EXIT=1)
    with cuda_on_cpu():
        with pytest.raises(EmulatorError, match="launched with clusters of 4, compiled for 2"):
            k.launch((4,), (32,), (torch.zeros(64),), cluster=4)
        with pytest.raises(EmulatorError, match="grid.x = 3 is not a multiple of the cluster size 2"):
            k.launch((3,), (32,), (torch.zeros(64),))


def test_cp_async_lands_when_its_group_is_waited_for():
    k = kernel(CP_ASYNC, "copies")
    src = torch.arange(1, 8 * 2 * 4 + 1, dtype=torch.float32).view(16, 4)
    out = torch.zeros(8 * 4, 4)
    with cuda_on_cpu():
        k.launch((1,), (8,), (src, out), shared_mem=16 * 16)
    o = out.view(8, 4, 4)
    assert torch.isnan(o[:, 0]).all(), "a read before any wait saw data"
    assert torch.equal(o[:, 1], src[0::2]), "the older group had not landed after wait_group 1"
    assert torch.isnan(o[:, 2]).all(), "the newer group landed before its wait"
    want = src[1::2].clone()
    want[1::2] = 0  # odd threads copied with source size 0: zero-filled
    assert torch.equal(o[:, 3], want)


# L1 prefetches: each thread prefetches its element, then loads it (LOAD=1), loads another one (LOAD=2: the element
# past its own), or loads first and prefetches after (LOAD=3)
PREFETCH = r"""
extern "C" __global__ void fetch(const float* x, float* out) {
    const int i = threadIdx.x;
    if (LOAD == 3) out[i] = __ldg(x + i);
    prefetch_l1(x + i);
    if (LOAD == 1) out[i] = __ldg(x + i);
    if (LOAD == 2) out[i] = __ldg(x + i + 1);
}
"""


def test_a_prefetch_must_be_followed_by_its_threads_load_of_that_address():
    x = torch.randn(33)
    with cuda_on_cpu():
        out = torch.full((32,), float("nan"))
        kernel(PREFETCH, "fetch", LOAD=1).launch((1,), (32,), (x, out))
        assert torch.equal(out, x[:32])
        for load in (2, 3):  # the wrong address; an address already loaded
            with pytest.raises(EmulatorError, match=r"1 prefetch_l1 address\(es\) never loaded afterwards"):
                kernel(PREFETCH, "fetch", LOAD=load).launch((1,), (32,), (x, out))


def test_number_formats_round_to_nearest_even():
    k = kernel(CONVERT, "convert")
    g = torch.Generator().manual_seed(1)
    x = torch.cat([torch.randn(3000, generator=g) * 10.0 ** torch.randint(-8, 6, (3000,), generator=g),
                   torch.tensor([0.0, -0.0, 1.0, 65504.0, 65520.0, 1e5, 6e-8, 3e-8, 1e-40, float("inf"), -3.4e38]),
                   1.0 + torch.arange(1, 200, dtype=torch.float32) * 2.0**-9])  # ties for bf16 and fp16
    n = x.numel()
    bf, h = torch.zeros(n, dtype=torch.int16), torch.zeros(n, dtype=torch.int16)
    back = torch.zeros(n)
    with cuda_on_cpu():
        k.launch(((n + 255) // 256,), (256,), (x, bf, h, back, n))
    assert torch.equal(bf, x.to(torch.bfloat16).view(torch.int16))
    assert torch.equal(h, x.to(torch.float16).view(torch.int16))
    assert torch.equal(back, x.to(torch.float16).float())


def test_deadlock_is_an_error_naming_where():
    k = kernel(DEADLOCK, "stuck")
    with cuda_on_cpu(), pytest.raises(EmulatorError, match=r"deadlock: 1 threads at __syncthreads, 31 at a warp"):
        k.launch((1,), (32,), (torch.zeros(32),))


def test_bad_launches_name_what_is_wrong():
    k = kernel(BLOCK_SUM, "block_sum")
    x, out = torch.randn(64), torch.zeros(1)
    with pytest.raises(ValueError, match="cuda_on_cpu"):  # CPU tensors outside the emulator
        k.launch((1,), (64,), (x, out, 64))
    with cuda_on_cpu():
        with pytest.raises(EmulatorError, match="argument kinds ppf do not match the kernel's ppi"):
            k.launch((1,), (64,), (x, out, 64.0))
        with pytest.raises(EmulatorError, match="a block of 2048 threads"):
            k.launch((1,), (2048,), (x, out, 64))
        with pytest.raises(ValueError, match="exceeds sm_90's"):
            k.launch((1,), (64,), (x, out, 64), shared_mem=300 * 1024)
        with pytest.raises(ValueError, match="resident: expected a positive int"):
            with cuda_on_cpu(resident=0):
                pass
    assert not emulate.active()


def test_compile_errors_come_back_with_the_compiler_log():
    k = nvrtc.CudaKernel(PTX + 'extern "C" __global__ void broken(float* out) { out[0] = undefined_name; }',
                         "broken", what="<broken>")
    with cuda_on_cpu(), pytest.raises(EmulatorError, match="undefined_name"):
        k.launch((1,), (32,), (torch.zeros(1),))


def test_public_ops_take_the_cuda_rungs_on_cpu_tensors_only_inside_the_emulator():
    from kernelwright import ops

    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 40000, generator=g).to(torch.bfloat16)
    w, b = torch.randn(40000, generator=g).to(torch.bfloat16), torch.randn(40000, generator=g).to(torch.bfloat16)
    with cuda_on_cpu():
        emulate.launched.clear()  # (a log of the last 1000 launches: cleared, it holds this test's alone)
        y = ops.layer_norm(x, w, b, variant="cluster")
        assert [k[0] for k in emulate.launched] == ["layer_norm_cluster"]
    ref = torch.nn.functional.layer_norm(x.double(), (40000,), w.double(), b.double())
    assert (y.double() - ref).abs().max() < 0.05  # bf16 outputs of |y| < 8: within a few ulps
    with pytest.raises(Unavailable, match="needs a CUDA GPU"):
        ops.layer_norm(x, w, b, variant="cluster")


def test_a_cooperative_launch_lets_ctas_wait_on_each_other():
    k = kernel(CHAIN, "chain")
    flags, vals = torch.zeros(6, dtype=torch.int32), torch.full((6,), float("nan"))
    with cuda_on_cpu():
        k.launch((6,), (64,), (flags, vals, 0), cooperative=True)
    assert vals.tolist() == [5.0, 4.0, 3.0, 2.0, 1.0, 0.0] and flags.tolist() == [1] * 6
    # one cluster at a time: CTA 0 spins on CTA 1, which cannot run before CTA 0 is done
    with cuda_on_cpu(), pytest.raises(EmulatorError, match="a launch that is not cooperative runs one cluster"):
        k.launch((6,), (64,), (torch.zeros(6, dtype=torch.int32), vals, 0))
    with cuda_on_cpu(), pytest.raises(EmulatorError, match="deadlock: .* 6 spinning"):  # a flag nothing sets
        k.launch((6,), (64,), (torch.zeros(6, dtype=torch.int32), vals, 1), cooperative=True)


def test_clusters_inside_a_cooperative_launch():
    k = kernel(CLUSTER_GATHER, "gather", KEEP="/**/", SIZE=4, WAIT_BEFORE_EXIT=1)
    out = torch.full((8 * 4 * 2,), float("nan"))
    with cuda_on_cpu():
        k.launch((8,), (32,), (out,), cluster=4, cooperative=True)
    got = out.view(8, 4, 2)
    for b in range(8):
        assert got[b].tolist() == [[float(r), float(b // 4 * 4 + r)] for r in range(4)]
