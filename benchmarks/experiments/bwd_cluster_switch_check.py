"""Experiment: the norm backward cluster rung under switch settings (``module.NAME=VALUE`` of
``kernelwright.ops.rms_norm_bwd.cuda``, e.g. ``NV=2 STAGES=4``), checked against float64 on the GPU before timing:
the three families, bf16 and fp32, widths 8 to 262144 and row counts around a step. Prints one line a family and
dtype: trials, failures (the first few); then each width's launch shape and the clusters the driver grants.

    KW_DEVICE=cuda python benchmarks/experiments/bwd_cluster_switch_check.py NV=2 STAGES=4
"""

from __future__ import annotations

import ast
import sys

import torch

from kernelwright.harness.verify import verify
from kernelwright.ops.rms_norm_bwd import cuda as bc
from kernelwright.registry import get_family


def main(argv: list[str]) -> int:
    for a in argv:
        name, _, value = a.partition("=")
        if not hasattr(bc, name):
            raise SystemExit(f"{a}: kernelwright.ops.rms_norm_bwd.cuda has no {name}")
        setattr(bc, name, ast.literal_eval(value))
    widths = (8, 1000, 1024, 2048, 4096, 8192, 16384, 65536, 131072, 262144)
    shapes = [((r, n), {}) for n in widths for r in (3, 300) if r * n <= 1 << 24]
    bad_total = 0
    for fam_name in ("rms_norm_bwd", "layer_norm_bwd", "add_rms_norm_bwd"):
        fam = get_family(fam_name)
        for dtype in (torch.bfloat16, torch.float32):
            res = verify(fam, [fam.rung("cluster")], [dtype], device="cuda", shapes=shapes, layouts=("contiguous",))
            bad = [r for r in res if not r.ok]
            bad_total += len(bad)
            print(f"{fam_name} {dtype}: {len(res)} trials, {len(bad)} failed", *(f"{r.shape}: {r.reason}"
                                                                              for r in bad[:3]), flush=True)
    device = torch.cuda.current_device()
    for center in (False, True):
        for n in widths:  # the launch shape and how many clusters of it the driver lets the GPU hold at once
            cfg = bc.bwd_config(n, 2, center=center)
            held = bc.resident(bc.kernel(cfg, torch.bfloat16, center), device, cfg, False) if cfg else 0
            print(f"bf16 {n}{' layer norm' if center else ''}: {cfg}, {held} clusters resident", flush=True)
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
