"""attention_bwd: the backward family of flash attention (inputs q, k, v, o, lse, dO; outputs dq, dk, dv).

Sizes, their text form and packed (varlen) batches are the forward family's (``kernelwright.ops.attention.spec``):
``(B, Hq, Hkv, Sq, Skv, D, flags)`` written ``4x32x32x4096x4096x128:causal``, so one size string names the same
problem forward and backward. Each case holds what a training step's backward receives: q, k, v, the forward's
o (rounded to the dtype) and fp32 lse, and an output gradient dO; ``cu_seqlens_q/k`` and the max lengths are
keyword arguments for packed batches.
"""

from __future__ import annotations

import torch

from kernelwright import runtime
from kernelwright.errors import Unavailable
from kernelwright.harness.inputs import random_values, with_layout
from kernelwright.ops.attention import spec as fwd
from kernelwright.ops.attention.reference import attention_with_lse
from kernelwright.ops.attention_bwd.reference import attention_bwd, error_scale
from kernelwright.registry import Case, Family, Peer, Rung, Tolerance

_T = "kernelwright.ops.attention.triton_bwd"
_H = "kernelwright.ops.attention_bwd.hooks"
NAIVE_MAX_SCRATCH = 16 * 2**30
"""bytes of the naive rung's two fp32 [B, Hq, Sq, Skv] buffers it may allocate (B4 H32 up to S = 4096)"""


def naive_limit(size, kwargs) -> str | None:
    p = fwd.decode(size)
    need = 8 * p.b * p.hq * p.sq * p.skv
    if need > NAIVE_MAX_SCRATCH:
        return f"naive: P and dS would take {need / 2**30:.0f} GiB (> {NAIVE_MAX_SCRATCH // 2**30} GiB)"
    return None


RUNGS = (
    Rung(
        "naive", "triton", f"{_T}:attention_bwd_naive",
        "As eager attention's autograd: P = exp(S - lse) and dS = P * (dP - delta) written to HBM as fp32 "
        "[B, Hq, Sq, Skv] buffers (every tile, masked or not), then a dq kernel reads dS and a dk/dv kernel reads "
        "P and dS back: ~20 bytes a score element a head against a minimum that is O(S D). Predicted: bound by "
        "that traffic (~85 us a head at S = 4096 at 4 TB/s), 100-150 TFLOP/s non-causal bf16 D128, half that "
        "causal (masked tiles computed too); refuses S > 4k at B4 H32 (scratch > 16 GiB).",
        limit=naive_limit,
    ),
    Rung(
        "fa2", "triton", f"{_T}:attention_bwd_fa2",
        "The FA2 split, recomputing P from the saved lse: a dk/dv kernel (one program per 64 keys of a kv head, "
        "k and v in registers, walking the query blocks of every head of its GQA group, masking only diagonal "
        "blocks) and a dq kernel (one program per 128 query rows, walking the key blocks they see). No atomics: "
        "deterministic. 7 matmuls a score element instead of FA2's 5 (dq recomputes S and dP), in fp16/bf16 on "
        "wgmma. Fixed configs: since session 12 the tuner's most frequent H200 winners (dk/dv 64 keys on 4 warps, "
        "dq 128 rows on 8 warps, 3 stages each; before: 128 keys on 8 warps, 2 stages). Predicted: 250-330 "
        "TFLOP/s non-causal at S >= 4k (the 5-matmul convention), 0.9-1.1x SDPA flash backward; causal 10-20% "
        "lower (diagonal blocks).",
    ),
    Rung(
        "tuned", "triton", f"{_T}:attention_bwd_tuned",
        "The fa2 kernels with each kernel's block sizes, warps and stages searched per bucket (head dim, mask, GQA "
        "group, length class) by the core autotuner, each kernel timed alone and checked against the default "
        "config's output. Predicted: +5-15% over fa2 where the heuristic missed (D 64, short sequences), "
        ">= 1.0x SDPA flash backward at S >= 2k.",
        tune=f"{_H}:tune_tuned",
        artifacts=f"{_H}:artifacts_tuned",
    ),
)


# --- inputs -----------------------------------------------------------------------------------------------------------
def make_case(size, dtype, device, gen, dist="normal", layout="contiguous", scale=None, lens=None, causal=None,
              cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None) -> Case:
    """q, k, v (and the packed offsets) as the forward family draws them for ``dist`` and ``layout``; o and lse
    from the float64 forward of those rounded inputs (o rounded to the dtype, lse fp32 contiguous: what a forward
    saves); dO from ``dist``, but normal for ``heavy`` and ``large`` (v already carries those: both would take dq
    past fp16's range). ``lens`` lists (Lq, Lk) per packed sequence (fuzz cases); an earlier case's offsets
    rebuild the same batch; ``causal`` and the max lengths are read from the size."""
    del causal, max_seqlen_q, max_seqlen_k
    if lens is None and cu_seqlens_q is not None:
        lens = tuple(zip(torch.diff(cu_seqlens_q).tolist(), torch.diff(cu_seqlens_k).tolist(), strict=True))
    fc = fwd.make_case(size, dtype, device, gen, dist, layout, scale=scale, lens=lens)
    q, k, v = fc.args[:3]
    kwargs = dict(fc.kwargs)
    cu = {}
    if len(fc.args) > 3:
        cu = {"cu_seqlens_q": fc.args[3], "cu_seqlens_k": fc.args[4]}
        kwargs.update(cu)
    do = random_values(tuple(q.shape), dtype, device, gen, "normal" if dist in ("heavy", "large") else dist)
    o64, lse64 = attention_with_lse(q.double(), k.double(), v.double(), cu.get("cu_seqlens_q"),
                                    cu.get("cu_seqlens_k"), causal=kwargs["causal"], scale=scale)
    o, lse = with_layout(o64.to(dtype), layout), lse64.float().contiguous()
    return Case(tuple(size), (q, k, v, o, lse, with_layout(do, layout)), kwargs, fc.label)


def out_shape(case: Case):
    q, k, v = case.args[:3]
    return [tuple(q.shape), tuple(k.shape), tuple(v.shape)]


# --- cost -----------------------------------------------------------------------------------------------------------
def cost(size, dtype) -> tuple[float, float]:
    """FLOPs in the FA convention, 2.5x the forward's: 5 matmuls of 2 * D flops a pair (recompute S, dv, dP, dq,
    dk) over the (query, key) pairs the mask keeps, counted exactly (``fwd.pairs``); the fa2 split's 2 recomputed
    matmuls in the dq kernel earn nothing. Bytes: read q, k, v, o, dO (input dtype) and lse (fp32), write dq, dk,
    dv; packed batches count real tokens."""
    p = fwd.decode(size)
    lq, lk = fwd.seqlens(size)
    attended = sum(fwd.pairs(a, b, p.causal) for a, b in zip(lq, lk, strict=True))
    es = torch.finfo(dtype).bits // 8
    tq, tk = sum(lq), sum(lk)
    return 10.0 * p.hq * p.d * attended, float(es * p.d * (4 * tq * p.hq + 4 * tk * p.hkv) + 4 * tq * p.hq)


# --- fuzz and sweep -------------------------------------------------------------------------------------------------
def _S(b: int, hq: int, hkv: int, sq: int, skv: int, d: int, flags: dict | None = None) -> tuple[int, ...]:
    return fwd.encode(b, hq, hkv, sq, skv, d, **(flags or {}))


_CAUSAL, _VARLEN, _VARLEN_CAUSAL = {"causal": True}, {"varlen": True}, {"causal": True, "varlen": True}


def fuzz() -> list[tuple[tuple[int, ...], dict]]:
    """Small for the interpreter (~2 ms a program instance); each for a reason."""
    return [
        (_S(1, 1, 1, 1, 3, 16), {}),                    # one query, three keys (one key: tests/test_attention_bwd.py)
        (_S(2, 2, 2, 17, 17, 32, _CAUSAL), {}),         # causal square, a length under one block
        (_S(1, 4, 1, 129, 65, 64), {}),                 # GQA 4; one past a 128-row and a 64-key block
        (_S(1, 8, 1, 33, 65, 16, _CAUSAL), {}),         # GQA 8; Sq < Skv: rows see Skv - Sq extra keys
        (_S(1, 2, 2, 70, 20, 32, _CAUSAL), {}),         # Sq > Skv: 50 fully masked rows (lse -inf, zero gradients)
        (_S(2, 2, 1, 1, 100, 64, _CAUSAL), {}),         # decode-like: one query row sees every key
        (_S(1, 2, 1, 100, 3, 32), {}),                  # far more rows than keys; GQA 2
        (_S(1, 2, 2, 48, 40, 80, _CAUSAL), {}),         # head dim 80: not a power of two (masked dims)
        # packed, causal, GQA 2: a sequence with no queries between two others
        (_S(3, 4, 2, 40, 45, 32, _VARLEN_CAUSAL), {"lens": ((17, 17), (0, 5), (40, 45))}),
        # packed, no mask: Lq < Lk, Lq > Lk, and a sequence with no keys (its rows' gradients: 0)
        (_S(3, 2, 2, 33, 20, 16, _VARLEN), {"lens": ((1, 20), (33, 7), (4, 0))}),
        (_S(1, 2, 2, 20, 24, 32), {"scale": 0.3}),      # a scale other than 1/sqrt(D)
        (_S(1, 1, 1, 256, 256, 128, _CAUSAL), {}),      # head dim 128, two 128-row blocks on the diagonal
    ]


def sweep(device: str) -> list[tuple[int, ...]]:
    """The issue's grid on CUDA: B4 H32, S 1k..16k, D128 and D64, causal and not."""
    if device == "cuda":
        return [_S(4, 32, 32, s, s, d, m) for d in (128, 64) for m in ({}, _CAUSAL)
                for s in (1024, 2048, 4096, 8192, 16384)]
    return [_S(1, 4, 2, 128, 128, 64, _CAUSAL)]  # the CPU main job: one small causal GQA case


# --- peers: torch SDPA's backward kernels, the forward graph kept ---------------------------------------------------
def sdpa_grad_peer(backend: str):
    """The gradients from ``F.scaled_dot_product_attention`` restricted to one backend: the forward is run once per
    input set and its graph kept (``retain_graph``), so the timed call is the backward kernel alone (the saved o
    and lse are SDPA's own; the case's are ignored). Bottom-right causal masks with Sq != Skv go through
    ``causal_lower_right`` (SDPA's ``is_causal`` aligns top-left)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    which = getattr(SDPBackend, backend)
    cache: dict = {}

    def run(q, k, v, o, lse, do, causal=False, scale=None, cu_seqlens_q=None, **_):
        if cu_seqlens_q is not None:
            raise NotImplementedError("sdpa: no packed (varlen) sequences")
        key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), tuple(q.shape), tuple(k.shape), q.dtype, causal, scale)
        if key not in cache:
            if cache and next(iter(cache))[3:] != key[3:]:
                cache.clear()  # one shape at a time (a benchmark's rotating input sets share it)
            leaves = tuple(t.detach().requires_grad_() for t in (q, k, v))
            qq, kk, vv = leaves
            sq, sk = q.shape[2], k.shape[2]
            gqa = q.shape[1] != k.shape[1]
            kw = {"scale": scale}
            if causal and sq != sk:
                if gqa:  # a CausalBias takes no enable_gqa: expand the kv heads in the graph
                    g = q.shape[1] // k.shape[1]
                    kk, vv = kk.repeat_interleave(g, 1), vv.repeat_interleave(g, 1)
                kw["attn_mask"] = causal_lower_right(sq, sk)
            else:
                kw.update(is_causal=causal, enable_gqa=gqa)
            with torch.enable_grad(), sdpa_kernel([which]):
                out = F.scaled_dot_product_attention(qq, kk, vv, **kw)
            cache[key] = (leaves, out)
        leaves, out = cache[key]
        return torch.autograd.grad(out, leaves, do, retain_graph=True)

    return run


def _sdpa_peer(name: str, backend: str, note: str) -> Peer:
    def make():
        if runtime.current_device() != "cuda":
            raise Unavailable(f"{name}: SDPA's {backend} backend needs a CUDA GPU")
        return sdpa_grad_peer(backend)

    return Peer(name, make, note)


PEERS = (
    _sdpa_peer("sdpa_flash", "FLASH_ATTENTION", "torch SDPA flash backward (FA2: atomic dq), forward graph kept"),
    _sdpa_peer("sdpa_cudnn", "CUDNN_ATTENTION", "torch SDPA cuDNN backward, forward graph kept"),
    _sdpa_peer("sdpa_efficient", "EFFICIENT_ATTENTION", "torch SDPA memory-efficient (xformers) backward"),
)


def choose(size, kwargs, dtype=None) -> list[str]:
    return ["tuned", "fa2", "naive"]


FAMILY = Family(
    name="attention_bwd",
    summary="flash attention backward: dq, dk, dv from q, k, v, the saved o and log-sum-exp and dO (causal "
            "bottom-right, GQA, packed sequences; deterministic)",
    reference=attention_bwd,
    rungs=RUNGS,
    peers=PEERS,
    make_case=make_case,
    out_shape=out_shape,
    cost=cost,
    tolerances={
        # Against the flash formula given the saved o (see reference.py). rtol: rounding the exact result once
        # to the output dtype. acc, on error_scale's magnitudes: fp16/bf16 kernels round P and dS to the input
        # dtype before their matmuls (2^-9 relative for bf16, 2^-12 for fp16 each); fp32: P inherits the fp32
        # scores' rounding (|S| up to ~100) plus fp32 accumulation. Worst seen on the fuzz cases, every
        # distribution (the interpreter, these kernels): acc 2^-8.5 / 2^-11.6 / 2^-18.7 and relative norm
        # 3.0e-3 / 4.1e-4 / 1.5e-6 (bf16 / fp16 / fp32): the bounds leave ~2.5x (bf16, fp16) and ~7x (fp32).
        torch.float32: Tolerance(atol=1e-6, rtol=2e-5, norm=1e-5, acc=2**-16),
        torch.float16: Tolerance(atol=1e-6, rtol=2**-10, norm=2**-10, acc=2**-10),
        torch.bfloat16: Tolerance(atol=1e-6, rtol=2**-7, norm=2**-7, acc=2**-7),
    },
    sweep=sweep,
    fuzz=fuzz,
    parse_size=fwd.parse_size,
    format_size=fwd.format_size,
    dtypes=(torch.bfloat16, torch.float16),
    flop_unit="tensor",
    baseline="sdpa_flash",
    choose=choose,
    scale_axis=("sequence length (Sq)", lambda size: float(fwd.decode(size).sq)),
    multi_output=True,
    error_scale=error_scale,
)

