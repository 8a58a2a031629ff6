"""attention_bwd's hooks for ``kw tune`` (search the tuned rung's two config spaces on a case) and ``kw inspect``
(compile the fa2 kernels for a case on sm_90, exactly as they would launch, without a GPU)."""

from __future__ import annotations

import torch

from kernelwright import tune


def _problem(case):
    from kernelwright.ops.attention import triton_bwd as T

    return T.make_problem(*case.args, **case.kwargs)


def tune_tuned(case, dtype, force: bool = False, on_step=None) -> tune.TuneResult:
    """Both kernels' spaces searched on ``case``; one result whose ``best`` holds both winners."""
    from kernelwright.ops.attention import triton_bwd as T

    pb = _problem(case)
    dkdv, dq = T.tune_problem(pb, force=force, on_step=on_step)
    source = "cache" if dkdv.source == dq.source == "cache" else "tuned"
    ms = None if dkdv.median_ms is None or dq.median_ms is None else dkdv.median_ms + dq.median_ms
    return tune.TuneResult("attention_bwd.tuned", dkdv.key, T.BwdConfig(dkdv.best, dq.best), ms, source,
                           dkdv.trials + dq.trials)


_PTR = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16"}


def artifacts_tuned(size, dtype) -> list:
    """The dk/dv and dq kernels for a padded, contiguous case of ``size`` with the cached tuned configs (else the
    defaults)."""
    from kernelwright.ops.attention import triton_bwd as T

    cfg = T.BwdConfig(tune.lookup(T.DKDV_SPACE, size, dtype) or T.DKDV_SPACE.default(size, dtype),
                      tune.lookup(T.DQ_SPACE, size, dtype) or T.DQ_SPACE.default(size, dtype))
    return artifacts(size, dtype, cfg)


def artifacts(size, dtype, cfg) -> list:
    """The dk/dv and dq kernels compiled for sm_90 with ``cfg`` (a ``BwdConfig``), as they would launch on a
    padded, contiguous case of ``size`` (the attention family's size tuple; masks and varlen from its flags)."""
    import dataclasses

    import triton

    from kernelwright.harness.inspect import compile_triton
    from kernelwright.ops.attention import triton_bwd as T
    from kernelwright.ops.matmul.hooks import _specialize

    b, hq, hkv, sq, sk, d, mask = size
    ptr = _PTR[dtype]
    qs = {"b": hq * sq * d, "h": sq * d, "s": d, "d": 1}
    ks = {"b": hkv * sk * d, "h": sk * d, "s": d, "d": 1}

    def strides(prefix, st):
        return {f"s_{prefix}{k}": v for k, v in st.items()}

    consts = {"GROUP": hq // hkv, "HEAD_DIM": d, "BLOCK_D": T.block_d(d), "CAUSAL": bool((mask - 1) & 1),
              "VARLEN": False,
              "UPCAST": False, "PRECISION": T._precision(dtype)}
    out = []
    for name, fn, kc, grid, tensors, ints in (
        ("dkdv", T._bwd_dkdv_kernel, T._fit(cfg.dkdv, sq, sk), None,
         {"Q": ptr, "K": ptr, "V": ptr, "DO": ptr, "DK": ptr, "DV": ptr},
         {**strides("q", qs), **strides("k", ks), **strides("v", ks), **strides("do", qs), **strides("dk", ks),
          **strides("dv", ks), "s_tb": hq * sq, "s_th": sq, "n_heads_kv": hkv, "seqlen_q": sq, "seqlen_k": sk}),
        ("dq", T._bwd_dq_kernel, T._fit(cfg.dq, sq, sk), None,
         {"Q": ptr, "K": ptr, "V": ptr, "DO": ptr, "DQ": ptr},
         {**strides("q", qs), **strides("k", ks), **strides("v", ks), **strides("do", qs), **strides("dq", qs),
          "s_tb": hq * sq, "s_th": sq, "n_heads": hq, "seqlen_q": sq, "seqlen_k": sk}),
    ):
        rows = sk if name == "dkdv" else sq
        block = kc.BLOCK_N if name == "dkdv" else kc.BLOCK_M
        grid = (triton.cdiv(rows, block), b * (hkv if name == "dkdv" else hq))
        sig = {**tensors, "LSE2": "*fp32", "DELTA": "*fp32", "CU_Q": "*fp32", "CU_K": "*fp32",
               "qk_scale2": "fp32", "sm_scale": "fp32", **{k: "i32" for k in ints}}
        extra = {"BLOCK_M": kc.BLOCK_M, "BLOCK_N": kc.BLOCK_N}
        if name == "dkdv":
            extra["EVEN_N"] = sk % kc.BLOCK_N == 0
        sig, cx, aligned = _specialize(sig, ints, {**consts, **extra})
        art = compile_triton(fn, sig, cx, num_warps=kc.num_warps, num_stages=kc.num_stages, grid=grid,
                             aligned=aligned)
        out.append(dataclasses.replace(art, note=f"{name} kernel, {kc}"))
    return out
