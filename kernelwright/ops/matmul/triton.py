"""matmul, Triton ladder: tiled -> grouped -> autotuned -> persistent (TMA on Hopper), and split-K for skinny M.

Every rung computes C = A @ B with A [M, K] and B [K, N] of any strides, accumulating in fp32 on tensor cores
for fp16/bf16 (``tl.dot``) and rounding once to the output dtype. fp32 inputs use exact fp32 products
(``input_precision="ieee"``) unless the caller passes ``allow_tf32=True``.

Under the CPU interpreter ``tl.dot`` on bf16 operands is wrong (Triton 3.6), so the kernels upcast bf16 tiles to
fp32 before the dot there (``UPCAST``); the GPU never does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernelwright import runtime, tune
from kernelwright.ops._triton_helpers import to_output

_TL = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}


# ---------------------------------------------------------------------------------------------------------------
# kernels


@triton.jit
def _tile_coords(tile, num_m, num_n, GROUP_M: tl.constexpr):
    """Tile index -> (row block, column block). GROUP_M = 1 walks C row by row; GROUP_M = g walks g row blocks
    column by column, so the tiles running at once share the same few A row panels and B column panels in L2."""
    width = GROUP_M * num_n
    group = tile // width
    first_m = group * GROUP_M
    rows = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (tile % width) % rows
    pid_n = (tile % width) // rows
    return pid_m, pid_n


@triton.jit
def _dot_tile(a_ptr, b_ptr, M, N, stride_am, stride_ak, stride_bk, stride_bn, pid_m, pid_n, k_lo, k_hi,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, EVEN_K: tl.constexpr, UPCAST: tl.constexpr,
              PRECISION: tl.constexpr):
    """fp32 accumulator of one BM x BN tile of C over K in [k_lo, k_hi). Rows and columns past M, N read as 0."""
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    in_m = offs_m < M
    in_n = offs_n < N
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + (k_lo + offs_k)[None, :] * stride_ak
    b_ptrs = b_ptr + (k_lo + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(k_lo, k_hi, BK):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=in_m[:, None], other=0.0)
            b = tl.load(b_ptrs, mask=in_n[None, :], other=0.0)
        else:
            in_k = (k + offs_k) < k_hi
            a = tl.load(a_ptrs, mask=in_m[:, None] & in_k[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=in_k[:, None] & in_n[None, :], other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BK * stride_ak
        b_ptrs += BK * stride_bk
    return acc


# activation codes of the fused epilogue (see :class:`Epilogue`)
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}


@triton.jit
def _activation(acc, ACT: tl.constexpr):
    if ACT == 1:
        acc = tl.maximum(acc, 0.0)
    elif ACT == 2:  # exact GELU, x * Phi(x)
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    elif ACT == 3:  # tanh GELU: 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
        u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = acc / (1.0 + tl.exp(-2.0 * u))
    elif ACT == 4:  # SiLU
        acc = acc / (1.0 + tl.exp(-acc))
    return acc


@triton.jit
def _epilogue(acc, offs_m, offs_n, M, N, bias_ptr, res_ptr, stride_rm, stride_rn, HAS_BIAS: tl.constexpr,
              ACT: tl.constexpr, HAS_RES: tl.constexpr):
    """``act(acc + bias) + residual`` on the fp32 tile before its one rounding (the output is never written
    and read back for the bias, the activation or the residual)."""
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    acc = _activation(acc, ACT)
    if HAS_RES:
        mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
        r = tl.load(res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :] * stride_rn, mask=mask, other=0.0)
        acc += r.to(tl.float32)
    return acc


@triton.jit
def _store_tile(c_ptr, acc, M, N, stride_cm, stride_cn, pid_m, pid_n, BM: tl.constexpr, BN: tl.constexpr,
                bias_ptr, res_ptr, stride_rm, stride_rn, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
                HAS_RES: tl.constexpr):
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    acc = _epilogue(acc, offs_m, offs_n, M, N, bias_ptr, res_ptr, stride_rm, stride_rn, HAS_BIAS, ACT, HAS_RES)
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, to_output(acc, c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   bias_ptr, res_ptr, stride_rm, stride_rn,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                   EVEN_K: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
                   HAS_BIAS: tl.constexpr, ACT: tl.constexpr, HAS_RES: tl.constexpr):
    """One program per C tile (the tiled, grouped and autotuned rungs differ in GROUP_M and the config)."""
    pid_m, pid_n = _tile_coords(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), GROUP_M)
    acc = _dot_tile(a_ptr, b_ptr, M, N, stride_am, stride_ak, stride_bk, stride_bn, pid_m, pid_n, 0, K,
                    BM, BN, BK, EVEN_K, UPCAST, PRECISION)
    _store_tile(c_ptr, acc, M, N, stride_cm, stride_cn, pid_m, pid_n, BM, BN, bias_ptr, res_ptr, stride_rm,
                stride_rn, HAS_BIAS, ACT, HAS_RES)


@triton.jit
def _persistent_kernel(a_ptr, b_ptr, c_ptr, a_desc, b_desc, c_desc, M, N, K,
                       stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                       bias_ptr, res_ptr, stride_rm, stride_rn,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                       NUM_PROGRAMS: tl.constexpr, USE_TMA: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr,
                       EVEN_K: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
                       HAS_BIAS: tl.constexpr, ACT: tl.constexpr, HAS_RES: tl.constexpr):
    """A fixed grid of programs (one per SM) walks the tiles in grouped order: no launch tail of half-empty
    waves, and on Hopper each tile's A and B blocks arrive by TMA (the copy engine computes addresses and
    zero-fills borders; ``A_T``/``B_T``: the operand's descriptor is over its transpose, loaded then flipped)."""
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), num_m * num_n, NUM_PROGRAMS, flatten=True):
        pid_m, pid_n = _tile_coords(tile, num_m, num_n, GROUP_M)
        if USE_TMA:
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            for k in range(0, K, BK):
                if A_T:
                    a = a_desc.load([k, pid_m * BM]).T
                else:
                    a = a_desc.load([pid_m * BM, k])
                if B_T:
                    b = b_desc.load([pid_n * BN, k]).T
                else:
                    b = b_desc.load([k, pid_n * BN])
                if UPCAST:
                    a = a.to(tl.float32)
                    b = b.to(tl.float32)
                acc = tl.dot(a, b, acc, input_precision=PRECISION)
            if HAS_BIAS or ACT != 0 or HAS_RES:
                acc = _epilogue(acc, pid_m * BM + tl.arange(0, BM), pid_n * BN + tl.arange(0, BN), M, N, bias_ptr,
                                res_ptr, stride_rm, stride_rn, HAS_BIAS, ACT, HAS_RES)
            c_desc.store([pid_m * BM, pid_n * BN], to_output(acc, c_desc.dtype))
        else:
            acc = _dot_tile(a_ptr, b_ptr, M, N, stride_am, stride_ak, stride_bk, stride_bn, pid_m, pid_n, 0, K,
                            BM, BN, BK, EVEN_K, UPCAST, PRECISION)
            _store_tile(c_ptr, acc, M, N, stride_cm, stride_cn, pid_m, pid_n, BM, BN, bias_ptr, res_ptr, stride_rm,
                        stride_rn, HAS_BIAS, ACT, HAS_RES)


@triton.jit
def _splitk_kernel(a_ptr, b_ptr, ws_ptr, M, N, K, k_per_split, stride_am, stride_ak, stride_bk, stride_bn,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                   EVEN_K: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """Program (tile, s) sums K slice s of its tile into fp32 workspace slot s; no atomics, so the result does not
    depend on which slice finishes first."""
    pid_m, pid_n = _tile_coords(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), GROUP_M)
    s = tl.program_id(1)
    k_lo = s * k_per_split
    k_hi = tl.minimum(K, k_lo + k_per_split)
    acc = _dot_tile(a_ptr, b_ptr, M, N, stride_am, stride_ak, stride_bk, stride_bn, pid_m, pid_n, k_lo, k_hi,
                    BM, BN, BK, EVEN_K, UPCAST, PRECISION)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    tl.store(ws_ptr + s * M * N + offs_m[:, None] * N + offs_n[None, :], acc, mask=mask)


@triton.jit
def _splitk_reduce(ws_ptr, c_ptr, MN, N, stride_cm, stride_cn, bias_ptr, res_ptr, stride_rm, stride_rn,
                   SPLIT: tl.constexpr, BLOCK: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
                   HAS_RES: tl.constexpr):
    """C = sum over the SPLIT slots, added in slot order (deterministic), the epilogue applied, rounded once."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.load(ws_ptr + offs, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLIT):
        acc += tl.load(ws_ptr + s * MN + offs, mask=mask, other=0.0)
    if HAS_BIAS or ACT != 0 or HAS_RES:
        rows = offs // N
        cols = offs % N
        if HAS_BIAS:
            acc += tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        acc = _activation(acc, ACT)
        if HAS_RES:
            acc += tl.load(res_ptr + rows * stride_rm + cols * stride_rn, mask=mask, other=0.0).to(tl.float32)
    tl.store(c_ptr + (offs // N) * stride_cm + (offs % N) * stride_cn, to_output(acc, c_ptr.dtype.element_ty),
             mask=mask)


# ---------------------------------------------------------------------------------------------------------------
# configs and their spaces


@dataclass(frozen=True)
class MatmulConfig:
    """One launch configuration. ``split_k`` > 1 only for the split-K rung."""

    BM: int
    BN: int
    BK: int
    GROUP_M: int = 8
    num_warps: int = 8
    num_stages: int = 3
    split_k: int = 1

    def smem_bytes(self, elt: int) -> int:
        """Shared memory the software pipeline needs: ``num_stages`` buffered A and B tiles."""
        return self.num_stages * (self.BM * self.BK + self.BK * self.BN) * elt

    def acc_per_thread(self) -> int:
        return self.BM * self.BN // (32 * self.num_warps)


def _elt(dtype: torch.dtype) -> int:
    return torch.finfo(dtype).bits // 8


def _prune(cfg: MatmulConfig, size, dtype, limits: tune.Limits) -> str | None:
    m, n, k = size
    smem = cfg.smem_bytes(_elt(dtype))
    if smem > limits.smem_per_block:
        return f"{smem // 1024} KB of shared memory > {limits.smem_per_block // 1024} KB per block"
    if cfg.acc_per_thread() > 128:
        return f"{cfg.acc_per_thread()} fp32 accumulators per thread (> 128 of 255 registers: spills)"
    if cfg.BM > max(64, tune.pow2_bucket(m)) or cfg.BN > max(64, tune.pow2_bucket(n)):
        return "tile larger than the problem"
    if cfg.split_k > 1 and k < cfg.split_k * cfg.BK:
        return f"K = {k} too short for {cfg.split_k} slices of {cfg.BK}"
    return None


def _bucket(size) -> str:
    """Powers of two at or above M, N, K, plus whether N and K are multiples of 16: Triton compiles other code for
    rows it cannot assume 16-aligned (narrow loads, no TMA), so a 1000^3 product must not reuse 1024^3's tile."""
    m, n, k = size
    aligned = "" if n % 16 == 0 and k % 16 == 0 else "-unaligned"
    return f"m{tune.pow2_bucket(m)}-n{tune.pow2_bucket(n)}-k{tune.pow2_bucket(k)}{aligned}"


_TILES = (  # (BM, BN, BK, warps, stages): shapes known to suit wgmma/mma pipelines, big to small
    (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 256, 64, 8, 4), (256, 128, 64, 8, 4),
    (128, 128, 64, 8, 4), (128, 128, 64, 4, 4), (128, 128, 128, 8, 3), (64, 256, 64, 4, 4),
    (256, 64, 64, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (64, 64, 64, 4, 4),
    (128, 128, 32, 4, 4), (64, 128, 32, 4, 5), (64, 64, 32, 4, 5), (32, 64, 32, 4, 5),
    # deeper pipelines for products too small to fill the GPU twice over (1024^3: 128 tiles of 64 x 128 on 132
    # SMs, each waiting on HBM from a cold L2): more K blocks in flight per program
    (64, 128, 64, 4, 6), (64, 128, 128, 4, 3), (128, 64, 64, 4, 6), (128, 64, 128, 4, 3),
)


def _tile_configs(dtype) -> list[MatmulConfig]:
    return [MatmulConfig(bm, bn, bk, 8, w, s) for bm, bn, bk, w, s in _TILES]


def _default(size, dtype) -> MatmulConfig:
    m, n, _ = size
    if m >= 128 and n >= 128:
        return MatmulConfig(128, 128, 64, 8, 8, 3)
    return MatmulConfig(64, 64, 64, 8, 4, 3)


AUTOTUNED = tune.Space("matmul.triton_autotuned", MatmulConfig, _tile_configs, _prune, _bucket, _default)
PERSISTENT = tune.Space("matmul.triton_persistent", MatmulConfig, _tile_configs, _prune, _bucket, _default)


def _splitk_configs(dtype) -> list[MatmulConfig]:
    return [MatmulConfig(bm, bn, bk, 8, 4, 4, s)
            for bm in (16, 64) for bn, bk in ((64, 128), (128, 64), (128, 128)) for s in (1, 2, 4, 8)]


def _splitk_default(size, dtype) -> MatmulConfig:
    m, n, k = size
    bm = min(64, max(16, tune.pow2_bucket(m)))
    tiles = math.ceil(m / bm) * math.ceil(n / 128)
    split = 1
    while split < 8 and tiles * split < 2 * 132 and k >= 2 * split * 128:
        split *= 2
    return MatmulConfig(bm, 128, 64, 8, 4, 4, split)


SPLITK = tune.Space("matmul.triton_splitk", MatmulConfig, _splitk_configs, _prune, _bucket, _splitk_default)


# ---------------------------------------------------------------------------------------------------------------
# launchers (rung functions: a [M, K], b [K, N], out [M, N] contiguous)


def _precision(dtype, allow_tf32: bool) -> str:
    """``ieee`` (exact fp32 products, FMA units) for fp32 unless TF32 is allowed; fp16/bf16 operands go to the
    tensor cores whatever this says, so they get Triton's default."""
    return "ieee" if dtype == torch.float32 and not allow_tf32 else "tf32"


def _upcast(dtype) -> bool:
    return runtime.interpreting() and dtype == torch.bfloat16


@dataclass(frozen=True)
class Epilogue:
    """What the Triton rungs apply to the fp32 tile before rounding: ``act(A @ B + bias) + residual``.

    bias : ``[N]`` of the output's dtype, or None
    activation : None, ``"relu"``, ``"gelu"`` (exact, erf), ``"gelu_tanh"`` or ``"silu"``
    residual : ``[M, N]`` (any strides) of the output's dtype, or None
    """

    bias: torch.Tensor | None = None
    activation: str | None = None
    residual: torch.Tensor | None = None

    def args(self, out: torch.Tensor) -> tuple:
        """(bias_ptr, res_ptr, stride_rm, stride_rn) for the kernels; ``out`` stands in for an absent tensor."""
        r = self.residual
        return (self.bias if self.bias is not None else out, r if r is not None else out,
                r.stride(0) if r is not None else 0, r.stride(1) if r is not None else 0)

    def flags(self) -> dict:
        return {"HAS_BIAS": self.bias is not None, "ACT": ACTIVATIONS[self.activation],
                "HAS_RES": self.residual is not None}


NO_EPILOGUE = Epilogue()


def _launch_tiles(a, b, out, cfg: MatmulConfig, allow_tf32: bool, epi: Epilogue = NO_EPILOGUE):
    m, k = a.shape
    n = b.shape[1]
    grid = (triton.cdiv(m, cfg.BM) * triton.cdiv(n, cfg.BN),)
    _matmul_kernel[grid](
        a, b, out, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        *epi.args(out), **epi.flags(),
        BM=cfg.BM, BN=cfg.BN, BK=cfg.BK, GROUP_M=cfg.GROUP_M, EVEN_K=k % cfg.BK == 0, UPCAST=_upcast(a.dtype),
        PRECISION=_precision(a.dtype, allow_tf32), num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return out


TILED = MatmulConfig(128, 128, 64, GROUP_M=1, num_warps=8, num_stages=3)
GROUPED = MatmulConfig(128, 128, 64, GROUP_M=8, num_warps=8, num_stages=3)


def _fit(cfg: MatmulConfig, m: int, n: int) -> MatmulConfig:
    """Shrink a fixed tile that is taller or wider than the problem (a 1 x 1 product needs no 128 x 128 tile;
    16 is the smallest tile ``tl.dot`` takes)."""
    bm, bn = min(cfg.BM, max(16, tune.pow2_bucket(m))), min(cfg.BN, max(16, tune.pow2_bucket(n)))
    if (bm, bn) == (cfg.BM, cfg.BN):
        return cfg
    return MatmulConfig(bm, bn, cfg.BK, cfg.GROUP_M, 4 if bm * bn <= 64 * 64 else cfg.num_warps, cfg.num_stages)


def _trivial(a, b, out) -> bool:
    """Handle the products with nothing to compute: an empty C, or K = 0 (C is an empty sum: zeros)."""
    if out.numel() == 0:
        return True
    if a.shape[1] == 0:
        out.zero_()
        return True
    return False


def triton_tiled(a, b, *, out, allow_tf32: bool = False, epilogue: Epilogue = NO_EPILOGUE):
    """One program per 128 x 128 tile of C, launched in row-major tile order."""
    if _trivial(a, b, out):
        return out
    return _launch_tiles(a, b, out, _fit(TILED, a.shape[0], b.shape[1]), allow_tf32, epilogue)


def triton_grouped(a, b, *, out, allow_tf32: bool = False, epilogue: Epilogue = NO_EPILOGUE):
    """The tiled rung with tiles visited in groups of 8 row blocks, for L2 reuse."""
    if _trivial(a, b, out):
        return out
    return _launch_tiles(a, b, out, _fit(GROUPED, a.shape[0], b.shape[1]), allow_tf32, epilogue)


def _problem(a, b) -> tuple[int, int, int]:
    return a.shape[0], b.shape[1], a.shape[1]


def triton_autotuned(a, b, *, out, allow_tf32: bool = False, config: MatmulConfig | None = None,
                     epilogue: Epilogue = NO_EPILOGUE):
    """The grouped kernel with the tile, warps and pipeline depth tuned per shape bucket (``config`` forces one;
    a fused epilogue reuses the plain product's tuned config)."""
    if _trivial(a, b, out):
        return out
    if config is None:
        config = tune.best(AUTOTUNED, _problem(a, b), a.dtype,
                           lambda cfg: lambda: _launch_tiles(a, b, out, cfg, allow_tf32))
    return _launch_tiles(a, b, out, config, allow_tf32, epilogue)


def _num_programs(tiles: int) -> int:
    sms = torch.cuda.get_device_properties(0).multi_processor_count if runtime.current_device() == "cuda" else 4
    return max(1, min(tiles, sms))


def _descriptor(t: torch.Tensor, block: list[int]):
    """A TMA descriptor over ``t`` (row-major, or its transpose when ``t`` is column-major), or ``None`` when TMA
    cannot address it (strides not 16-byte aligned, unaligned base). Returns (descriptor, transposed)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    transposed = t.stride(1) != 1 and t.stride(0) == 1
    view = t.T if transposed else t
    if view.stride(1) != 1 or (view.stride(0) * t.element_size()) % 16 or t.data_ptr() % 16:
        return None, False
    return TensorDescriptor(view, list(view.shape), list(view.stride()), block[::-1] if transposed else block), \
        transposed


def tma_possible() -> bool:
    """TMA needs Hopper (or newer); the interpreter emulates descriptors, so CPU tests run the TMA path too."""
    return runtime.interpreting() or runtime.is_hopper()


def _launch_persistent(a, b, out, cfg: MatmulConfig, allow_tf32: bool, epi: Epilogue = NO_EPILOGUE):
    m, k = a.shape
    n = b.shape[1]
    programs = _num_programs(triton.cdiv(m, cfg.BM) * triton.cdiv(n, cfg.BN))
    a_desc = b_desc = c_desc = None
    a_t = b_t = False
    if tma_possible():
        a_desc, a_t = _descriptor(a, [cfg.BM, cfg.BK])
        b_desc, b_t = _descriptor(b, [cfg.BK, cfg.BN])
        c_desc, c_t = _descriptor(out, [cfg.BM, cfg.BN])
        if a_desc is None or b_desc is None or c_desc is None or c_t:
            a_desc = b_desc = c_desc = None
    use_tma = a_desc is not None
    _persistent_kernel[(programs,)](
        a, b, out, a_desc, b_desc, c_desc, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        out.stride(0), out.stride(1), *epi.args(out), **epi.flags(),
        BM=cfg.BM, BN=cfg.BN, BK=cfg.BK, GROUP_M=cfg.GROUP_M, NUM_PROGRAMS=programs,
        USE_TMA=use_tma, A_T=a_t, B_T=b_t, EVEN_K=k % cfg.BK == 0, UPCAST=_upcast(a.dtype),
        PRECISION=_precision(a.dtype, allow_tf32), num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return out


def triton_persistent(a, b, *, out, allow_tf32: bool = False, config: MatmulConfig | None = None,
                      epilogue: Epilogue = NO_EPILOGUE):
    """One program per SM looping over tiles; TMA loads and stores on Hopper when the strides allow, pointer
    loads otherwise (other GPUs, unaligned strides)."""
    if _trivial(a, b, out):
        return out
    if config is None:
        config = tune.best(PERSISTENT, _problem(a, b), a.dtype,
                           lambda cfg: lambda: _launch_persistent(a, b, out, cfg, allow_tf32))
    return _launch_persistent(a, b, out, config, allow_tf32, epilogue)


def _launch_splitk(a, b, out, cfg: MatmulConfig, allow_tf32: bool, epi: Epilogue = NO_EPILOGUE):
    m, k = a.shape
    n = b.shape[1]
    if cfg.split_k == 1:
        return _launch_tiles(a, b, out, cfg, allow_tf32, epi)
    k_per_split = triton.cdiv(triton.cdiv(k, cfg.split_k), cfg.BK) * cfg.BK
    split = triton.cdiv(k, k_per_split)  # every slice non-empty
    ws = torch.empty((split, m, n), dtype=torch.float32, device=a.device)
    grid = (triton.cdiv(m, cfg.BM) * triton.cdiv(n, cfg.BN), split)
    _splitk_kernel[grid](
        a, b, ws, m, n, k, k_per_split, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        BM=cfg.BM, BN=cfg.BN, BK=cfg.BK, GROUP_M=cfg.GROUP_M, EVEN_K=k % cfg.BK == 0, UPCAST=_upcast(a.dtype),
        PRECISION=_precision(a.dtype, allow_tf32), num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    block = 1024
    _splitk_reduce[(triton.cdiv(m * n, block),)](ws, out, m * n, n, out.stride(0), out.stride(1), *epi.args(out),
                                                 SPLIT=split, BLOCK=block, **epi.flags())
    return out


def triton_splitk(a, b, *, out, allow_tf32: bool = False, config: MatmulConfig | None = None,
                  epilogue: Epilogue = NO_EPILOGUE):
    """Skinny products (small M, as in decoding): K is cut into slices summed by separate programs so enough
    programs exist to fill the GPU, then a second kernel adds the slices in a fixed order."""
    if _trivial(a, b, out):
        return out
    if config is None:
        config = tune.best(SPLITK, _problem(a, b), a.dtype,
                           lambda cfg: lambda: _launch_splitk(a, b, out, cfg, allow_tf32))
    return _launch_splitk(a, b, out, config, allow_tf32, epilogue)


SPACES = {"triton_autotuned": AUTOTUNED, "triton_persistent": PERSISTENT, "triton_splitk": SPLITK}
_LAUNCH = {"triton_autotuned": _launch_tiles, "triton_persistent": _launch_persistent,
           "triton_splitk": _launch_splitk}
