"""Experiment: the Triton kernels torch.compile (Inductor) generates for the norm shapes where it leads ours, saved
for reading (issue 4 asks the journal to say why a peer wins). For each (family, rows x columns), bf16: the peer's
own eager function (`_norm_common.eager_*`) compiled as the bench compiles it (dynamic=False), run once on random
inputs, its generated source saved to $OUT/inductor_<family>_<size>.py; printed: each kernel's name, its reduction
loads / `tl.sum`/`tl.reduce` count, and the launch configs its heuristics list. GPU only:
    KW_DEVICE=cuda python benchmarks/experiments/inductor_norm_code.py
"""

import os
import re

import torch
from torch._inductor.utils import run_and_get_code

import kernelwright
from kernelwright.ops import _norm_common as nc

assert kernelwright.runtime.current_device() == "cuda", "GPU only (KW_DEVICE=cuda)"


def loaded_modules() -> list:
    try:
        from torch._inductor.codecache import PyCodeCache
    except ImportError:  # another Inductor: the configs are not printed, the saved source stays
        return []
    return list(getattr(PyCodeCache, "modules", []))


def chosen_configs(skip: set[int]) -> list[str]:
    """The launch config each Inductor kernel loaded since ``skip`` (ids of modules) settled on (its autotuner's
    launchers after the first run)."""
    out = []
    for mod in loaded_modules():
        if id(mod) in skip:
            continue
        for name, obj in vars(mod).items():
            if name.startswith("triton_") and getattr(obj, "launchers", None):
                out += [f"{name}: {launcher.config}" for launcher in obj.launchers]
    return out or ["(no launcher found)"]


CASES = [("layer_norm", nc.eager_layer_norm, 65536, 1024), ("layer_norm", nc.eager_layer_norm, 16384, 4096),
         ("rms_norm", nc.eager_rms_norm, 16384, 8192), ("layer_norm", nc.eager_layer_norm, 16384, 16384)]
out_dir = os.environ.get("OUT", "/tmp")
torch._dynamo.config.recompile_limit = 1024
for fam, eager, r, c in CASES:
    x = torch.randn(r, c, device="cuda").to(torch.bfloat16)
    w = torch.randn(c, device="cuda").to(torch.bfloat16)
    args = (x, w, torch.randn(c, device="cuda").to(torch.bfloat16)) if fam == "layer_norm" else (x, w)
    torch._dynamo.reset()
    before = {id(m) for m in loaded_modules()}
    _, codes = run_and_get_code(torch.compile(eager, dynamic=False), *args)
    src = "\n\n# ---- next module ----\n\n".join(codes)
    path = os.path.join(out_dir, f"inductor_{fam}_{r}x{c}.py")
    with open(path, "w") as fh:
        fh.write(src)
    kernels = re.findall(r"def (triton_\w+)\(", src)
    print(f"{fam} {r}x{c}: {len(src)} chars, kernels {kernels}")
    print(f"  reductions: tl.sum {src.count('tl.sum(')}, reduce {src.count('tl.reduce(')}, "
          f"welford {src.count('welford')}, loads {src.count('tl.load(')}, stores {src.count('tl.store(')}")
    for m in re.finditer(r"@triton_heuristics\.(\w+)\((.*?)\n@triton\.jit", src, re.S):
        print(f"  heuristics {m.group(1)}: {' '.join(m.group(2).split())[:300]}")
    print(f"  chosen: {chosen_configs(before)}")
