"""matmul's hooks for ``kw tune`` (search a rung's config space on a case) and ``kw inspect`` (compile a rung's
kernels for a case, exactly as they would launch, without running them)."""

from __future__ import annotations

import functools

import torch

from kernelwright import tune
from kernelwright.harness.inputs import poisoned_like
from kernelwright.harness.timing import rotation_sets


# --- tune --------------------------------------------------------------------------------------------------------
def _tune(rung: str, case, dtype, force: bool = False, on_step=None) -> tune.TuneResult:
    from kernelwright.harness.verify import compare, error_scale, reference64
    from kernelwright.ops.matmul import triton as T
    from kernelwright.registry import get_family

    fam = get_family("matmul")
    space = T.SPACES[rung]
    a, b = case.args
    size = (a.shape[0], b.shape[1], a.shape[1])
    if not force:
        cached = tune.lookup(space, size, dtype)
        if cached is not None:
            return tune.TuneResult(space.name, tune.cache_key(space, size, dtype), cached, None, "cache")
    ref, scale = reference64(fam, case), error_scale(fam, case)
    launch = T._LAUNCH[rung]

    def make_call(cfg):
        out = poisoned_like((size[0], size[1]), dtype, a.device)  # fresh poison: a config must write every element
        return lambda: launch(a, b, out, cfg, False)

    # other operand sets (copies of a and b: the values do not change a matmul's time), enough to overflow the L2
    n_sets = rotation_sets((a.numel() + b.numel() + size[0] * size[1]) * a.element_size(), cap=64) - 1
    others = [(a.clone(), b.clone(), torch.empty((size[0], size[1]), dtype=dtype, device=a.device))
              for _ in range(n_sets)]

    def rotate(cfg):
        return [make_call(cfg)] + [functools.partial(launch, ai, bi, oi, cfg, False) for ai, bi, oi in others]

    return tune.tune(space, size, dtype, make_call, on_step=on_step, rotate=rotate if others else None,
                     check=lambda out: compare(out, ref, fam.tolerances[dtype], scale).ok)


tune_autotuned = functools.partial(_tune, "triton_autotuned")
tune_persistent = functools.partial(_tune, "triton_persistent")
tune_splitk = functools.partial(_tune, "triton_splitk")


# --- inspect: CUDA C rungs -----------------------------------------------------------------------------------------
def _cuda_artifacts(rung: str, size, dtype) -> list:
    from kernelwright.harness.inspect import Artifact
    from kernelwright.ops.matmul import cuda

    m, n, k = size
    info = cuda.artifact(rung, m, n, k)
    return [Artifact(kernel=info["kernel"], cubin=info["cubin"], threads_per_block=info["threads_per_block"],
                     dynamic_smem=info["dynamic_smem"], grid=tuple(info["grid"]), source=str(cuda.SOURCES[rung]),
                     note="NVRTC, sm_90")]


cuda_artifacts_cuda_naive = functools.partial(_cuda_artifacts, "cuda_naive")
cuda_artifacts_cuda_coalesced = functools.partial(_cuda_artifacts, "cuda_coalesced")
cuda_artifacts_cuda_smem = functools.partial(_cuda_artifacts, "cuda_smem")
cuda_artifacts_cuda_blocktile1d = functools.partial(_cuda_artifacts, "cuda_blocktile1d")
cuda_artifacts_cuda_blocktile2d = functools.partial(_cuda_artifacts, "cuda_blocktile2d")
cuda_artifacts_cuda_vectorized = functools.partial(_cuda_artifacts, "cuda_vectorized")
cuda_artifacts_cuda_warptile = functools.partial(_cuda_artifacts, "cuda_warptile")


# --- inspect: Triton rungs -----------------------------------------------------------------------------------------
_PTR = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16"}


def _config_for(rung: str, size, dtype):
    from kernelwright.ops.matmul import triton as T

    m, n, _ = size
    if rung == "triton_tiled":
        return T._fit(T.TILED, m, n)
    if rung == "triton_grouped":
        return T._fit(T.GROUPED, m, n)
    space = T.SPACES[rung]
    return tune.lookup(space, size, dtype) or space.default(tuple(size), dtype)


def _specialize(sig: dict[str, str], ints: dict[str, int], consts: dict) -> tuple[dict, dict, list[str]]:
    """Mirror Triton's launch-time specialisation for these integer values: an argument equal to 1 becomes a
    constant, one divisible by 16 is marked aligned (so the compiled code is the code that would run)."""
    sig, consts = dict(sig), dict(consts)
    aligned = [n for n, t in sig.items() if t.startswith("*")]
    for name, v in ints.items():
        if v == 1:
            del sig[name]
            consts[name] = 1
        elif v % 16 == 0:
            aligned.append(name)
    return sig, consts, aligned


def _triton_artifacts(rung: str, size, dtype) -> list:
    """The kernel the rung launches for ``size`` (row-major inputs) on an sm_90 GPU: the cached tuned config if
    there is one, else its default."""
    import dataclasses

    import triton

    from kernelwright.harness.inspect import compile_triton
    from kernelwright.ops.matmul import triton as T

    m, n, k = size
    cfg = _config_for(rung, size, dtype)
    ptr = _PTR[dtype]
    common = {"BM": cfg.BM, "BN": cfg.BN, "BK": cfg.BK, "GROUP_M": cfg.GROUP_M, "EVEN_K": k % cfg.BK == 0,
              "UPCAST": False, "PRECISION": T._precision(dtype, False)}
    ints = {"M": m, "N": n, "K": k, "stride_am": k, "stride_ak": 1, "stride_bk": n, "stride_bn": 1}
    tiles = triton.cdiv(m, cfg.BM) * triton.cdiv(n, cfg.BN)
    note = f"config {cfg}"
    if rung == "triton_persistent":
        fn, grid = T._persistent_kernel, (min(tiles, 132),)
        sig = {"a_ptr": ptr, "b_ptr": ptr, "c_ptr": ptr, "bias_ptr": ptr, "res_ptr": ptr}
        ints.update(stride_cm=n, stride_cn=1, stride_rm=0, stride_rn=0)
        common.update(T.NO_EPILOGUE.flags())
        elt = T._elt(dtype)
        tma = (k * elt) % 16 == 0 and (n * elt) % 16 == 0  # row strides TMA can address (as _descriptor checks)
        common.update(NUM_PROGRAMS=grid[0], USE_TMA=tma, A_T=False, B_T=False)
        if tma:
            t = ptr[1:]
            sig.update(a_desc=f"tensordesc<{t}[{cfg.BM}, {cfg.BK}]>", b_desc=f"tensordesc<{t}[{cfg.BK}, {cfg.BN}]>",
                       c_desc=f"tensordesc<{t}[{cfg.BM}, {cfg.BN}]>")
            note += "; TMA path (Hopper)"
        else:
            common.update(a_desc=None, b_desc=None, c_desc=None)
            note += "; pointer-load path (row strides not 16-byte multiples)"
    elif rung == "triton_splitk" and cfg.split_k > 1:
        fn, grid = T._splitk_kernel, (tiles, cfg.split_k)
        sig = {"a_ptr": ptr, "b_ptr": ptr, "ws_ptr": "*fp32"}
        ints["k_per_split"] = triton.cdiv(triton.cdiv(k, cfg.split_k), cfg.BK) * cfg.BK
        note += "; the slice-sum kernel that follows is not shown"
    else:
        fn, grid = T._matmul_kernel, (tiles,)
        sig = {"a_ptr": ptr, "b_ptr": ptr, "c_ptr": ptr, "bias_ptr": ptr, "res_ptr": ptr}
        ints.update(stride_cm=n, stride_cn=1, stride_rm=0, stride_rn=0)
        common.update(T.NO_EPILOGUE.flags())
    sig.update({name: "i32" for name in ints})
    sig, consts, aligned = _specialize(sig, ints, common)
    art = compile_triton(fn, sig, consts, num_warps=cfg.num_warps, num_stages=cfg.num_stages, grid=grid,
                         aligned=aligned)
    return [dataclasses.replace(art, note=note)]


triton_artifacts_tiled = functools.partial(_triton_artifacts, "triton_tiled")
triton_artifacts_grouped = functools.partial(_triton_artifacts, "triton_grouped")
triton_artifacts_autotuned = functools.partial(_triton_artifacts, "triton_autotuned")
triton_artifacts_persistent = functools.partial(_triton_artifacts, "triton_persistent")
triton_artifacts_splitk = functools.partial(_triton_artifacts, "triton_splitk")
