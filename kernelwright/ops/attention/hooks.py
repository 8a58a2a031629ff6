"""attention's hook for ``kw tune``: search the tuned rung's config space on a case and cache the winner."""

from __future__ import annotations

import functools

import torch

from kernelwright import tune
from kernelwright.harness.inputs import poisoned_like


def _tune(rung: str, case, dtype, force: bool = False, on_step=None) -> tune.TuneResult:
    import math

    from kernelwright.harness.verify import compare, error_scale, reference64
    from kernelwright.ops.attention import triton as T
    from kernelwright.registry import get_family

    fam = get_family("attention")
    space = T.SPACES[rung]
    q, k, v, *cu = case.args
    kw = case.kwargs
    lse = T._scratch_lse(q, bool(cu), None)
    p = T._problem(q, k, v, *(cu or (None, None)), kw.get("max_seqlen_q"), kw.get("max_seqlen_k"), q, lse)
    size = T.tuned_size(p, kw["causal"])
    if not force:
        cached = tune.lookup(space, size, dtype)
        if cached is not None:
            return tune.TuneResult(space.name, tune.cache_key(space, size, dtype), cached, None, "cache")
    ref, scale_err = reference64(fam, case), error_scale(fam, case)
    scale = kw.get("scale") or 1.0 / math.sqrt(p.d)

    def make_call(cfg):
        out = poisoned_like(tuple(q.shape), dtype, q.device)  # fresh poison: a config must write every element
        return lambda: T.launch_tuned(q, k, v, out, lse, p, kw["causal"], scale, cfg)

    return tune.tune(space, size, dtype, make_call, on_step=on_step,
                     check=lambda out: compare(out, ref, fam.tolerances[dtype], scale_err).ok)


tune_tuned = functools.partial(_tune, "tuned")


# --- inspect: compile a rung's kernels for sm_90 as they would launch, without a GPU ---------------------------------
_PTR = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16"}


def _layout_ints(size) -> dict[str, int]:
    """Strides of contiguous inputs of a size (padded [B, H, S, D], varlen [total, H, D]) and the lse's."""
    from kernelwright.ops.attention.spec import decode, seqlens

    p = decode(size)
    if p.varlen:
        total_q = sum(seqlens(size)[0])
        q, kv = (0, p.d, p.hq * p.d, 1), (0, p.d, p.hkv * p.d, 1)
        lse, lens = (0, total_q, 1), (0, 0)
    else:
        q, kv = (p.hq * p.sq * p.d, p.sq * p.d, p.d, 1), (p.hkv * p.skv * p.d, p.skv * p.d, p.d, 1)
        lse, lens = (p.hq * p.sq, p.sq, 1), (p.sq, p.skv)
    ints = dict(zip(("seqlen_q", "seqlen_k"), lens, strict=True))
    for prefix, strides in (("sq", q), ("sk", kv), ("sv", kv), ("so", q)):
        ints.update(zip((prefix + "b", prefix + "h", prefix + "s", prefix + "d"), strides, strict=True))
    ints.update(zip(("slb", "slh", "sls"), lse, strict=True))
    ints.update(n_heads=p.hq, group=p.hq // p.hkv)
    return ints


def flash_config(rung: str, size, dtype):
    """The config a flash rung launches with for a size: the fixed one, or for ``tuned`` the cached winner (else
    its default)."""
    from kernelwright.ops.attention import triton as T
    from kernelwright.ops.attention.spec import decode

    p = decode(size)
    if rung == "tuned":
        return T.fit(tune.lookup(T.TUNED, size, dtype) or T.TUNED.default(tuple(size), dtype), p.sq, p.skv)
    return T.fit(T.pipelined_config(p.d) if rung == "pipelined" else T.default_config(p.d), p.sq, p.skv)


# (SKIP, EXP2, LAZY, LONGEST_FIRST) of each rung; the tuned rung's LAZY comes from its config
_SWITCHES = {"flash": (False, False, False, False), "causal_skip": (True, False, False, False),
             "exp2": (True, True, False, False), "exp2_lazy": (True, True, True, False),
             "pipelined": (True, True, True, False), "tuned": (True, True, None, True)}


def flash_artifact(rung: str, size, dtype, config=None):
    """The flash kernel of ``rung`` for a size (contiguous inputs) compiled for sm_90; ``config`` overrides."""
    import dataclasses

    import triton

    from kernelwright.harness.inspect import compile_triton
    from kernelwright.ops.attention import triton as T
    from kernelwright.ops.attention.spec import decode
    from kernelwright.ops.matmul.hooks import _specialize

    p = decode(size)
    cfg = config or flash_config(rung, size, dtype)
    skip, exp2, lazy, longest = _SWITCHES[rung]
    lazy = cfg.lazy if lazy is None else lazy
    ptr = _PTR[dtype]
    sig = {n: ptr for n in ("q_ptr", "k_ptr", "v_ptr", "o_ptr")} | {"lse_ptr": "*fp32", "qk_scale": "fp32"}
    bd = T.block_d(p.d)
    consts = {"HEAD_DIM": p.d, "BLOCK_D": bd, "BLOCK_M": cfg.BLOCK_M, "BLOCK_N": cfg.BLOCK_N, "CAUSAL": p.causal,
              "VARLEN": p.varlen, "SKIP": skip, "EXP2": exp2, "LAZY": lazy, "LONGEST_FIRST": longest and p.causal,
              "UPCAST": False, "PRECISION": T._precision(dtype), "WARP_SPEC": cfg.warp_specialize,
              "USE_TMA": cfg.tma, "PIPE": cfg.pipeline}
    if p.varlen:
        sig.update(cu_q_ptr="*i32", cu_k_ptr="*i32")
    else:
        consts.update(cu_q_ptr=None, cu_k_ptr=None)
    if cfg.tma:
        t = ptr[1:]
        box = f"[{cfg.BLOCK_N}, 1, {bd}]" if p.varlen else f"[1, 1, {cfg.BLOCK_N}, {bd}]"
        sig.update(k_desc=f"tensordesc<{t}{box}>", v_desc=f"tensordesc<{t}{box}>")
    else:
        consts.update(k_desc=None, v_desc=None)
    ints = _layout_ints(size)
    sig.update({name: "i32" for name in ints})
    sig, consts, aligned = _specialize(sig, ints, consts)
    grid = (triton.cdiv(p.sq, cfg.BLOCK_M), p.b * p.hq)
    art = compile_triton(T._flash_fwd_kernel, sig, consts, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                         grid=grid, aligned=aligned)
    return dataclasses.replace(art, note=f"{rung}: config {cfg}")


def _artifacts(rung: str, size, dtype) -> list:
    return [flash_artifact(rung, size, dtype)]


artifacts_flash = functools.partial(_artifacts, "flash")
artifacts_causal_skip = functools.partial(_artifacts, "causal_skip")
artifacts_exp2 = functools.partial(_artifacts, "exp2")
artifacts_exp2_lazy = functools.partial(_artifacts, "exp2_lazy")
artifacts_pipelined = functools.partial(_artifacts, "pipelined")
artifacts_tuned = functools.partial(_artifacts, "tuned")


def split_kv_artifacts(size, dtype) -> list:
    """The split_kv rung's two kernels for a size (contiguous inputs) compiled for sm_90, with the split count it
    would pick on an H200 (132 SMs)."""
    import dataclasses

    import triton

    from kernelwright.harness.inspect import compile_triton
    from kernelwright.ops.attention import decode as D
    from kernelwright.ops.attention import triton as T
    from kernelwright.ops.attention.spec import decode
    from kernelwright.ops.matmul.hooks import _specialize

    p = decode(size)
    ptr = _PTR[dtype]
    group = p.hq // p.hkv
    bd = T.block_d(p.d)
    cfg = D.decode_config(p.d, group * p.sq, dtype)
    m_tiles = triton.cdiv(group * p.sq, cfg.BLOCK_M)
    rows_pad = m_tiles * cfg.BLOCK_M
    keys_per_split, splits = D.key_ranges(p.skv, D.split_count(p.b * p.hkv, m_tiles, p.skv, cfg.BLOCK_N, sms=132),
                                          cfg.BLOCK_N)
    ints = _layout_ints(size)
    part = {"spb": splits * rows_pad * bd, "sps": rows_pad * bd, "spm": bd, "plb": splits * rows_pad,
            "pls": rows_pad}
    common = {"HEAD_DIM": p.d, "BLOCK_D": bd, "VARLEN": p.varlen}
    lens = {} if p.varlen else {"cu_q_ptr": None, "cu_k_ptr": None}
    out = []
    # the partial kernel
    names = ["seqlen_q", "seqlen_k"] + [f"{t}{x}" for t in ("sq", "sk", "sv") for x in "bhsd"]
    pints = {n: ints[n] for n in names} | {"n_kv_heads": p.hkv, "group": group, "keys_per_split": keys_per_split} | part
    sig = {n: ptr for n in ("q_ptr", "k_ptr", "v_ptr")} | {"po_ptr": "*fp32", "pl_ptr": "*fp32", "qk_scale": "fp32"}
    consts = dict(common, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, CAUSAL=p.causal, UPCAST=False,
                  PRECISION=T._precision(dtype)) | lens
    if p.varlen:
        sig.update(cu_q_ptr="*i32", cu_k_ptr="*i32")
    sig.update({n: "i32" for n in pints})
    sig, consts, aligned = _specialize(sig, pints, consts)
    art = compile_triton(D._split_partial_kernel, sig, consts, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                         grid=(p.b * p.hkv, splits, m_tiles), aligned=aligned)
    out.append(dataclasses.replace(art, note=f"split_kv partials: {cfg}, {splits} key ranges"))
    # the merge
    block_r = D.merge_rows(p.d, group * p.sq)
    names = ["seqlen_q"] + [f"so{x}" for x in "bhsd"] + ["slb", "slh", "sls"]
    cints = {n: ints[n] for n in names} | {"n_kv_heads": p.hkv, "group": group, "n_splits": splits} | part
    sig = {"po_ptr": "*fp32", "pl_ptr": "*fp32", "o_ptr": ptr, "lse_ptr": "*fp32"}
    consts = dict(common, BLOCK_R=block_r) | ({} if p.varlen else {"cu_q_ptr": None})
    if p.varlen:
        sig.update(cu_q_ptr="*i32")
    sig.update({n: "i32" for n in cints})
    sig, consts, aligned = _specialize(sig, cints, consts)
    art = compile_triton(D._split_combine_kernel, sig, consts, num_warps=4, num_stages=1,
                         grid=(p.b * p.hkv, triton.cdiv(rows_pad, block_r)), aligned=aligned)
    out.append(dataclasses.replace(art, note=f"split_kv merge of {splits} ranges"))
    return out


artifacts_split_kv = split_kv_artifacts
