"""Experiment: columns per program (CHUNK) and warps for the split softmax rung, on the issue's four bf16 shapes.

Checks each config against the float64 reference before timing it. ``--hints`` also times every config with
streaming cache hints (loads of x evict-first, stores of y ``.cs``; ``_split(hints=)``); ``--wide`` keeps
the 64k- and 256k-column shapes only. GPU only:
    KW_DEVICE=cuda python benchmarks/experiments/softmax_split_configs.py [--hints] [--wide]  # $OUT/split_configs.json
"""

import argparse
import json
import os

import torch

import kernelwright
from kernelwright.harness.inputs import generator, poisoned_like
from kernelwright.harness.timing import time_fn
from kernelwright.harness.verify import compare, reference64
from kernelwright.ops.softmax import triton as sm
from kernelwright.registry import get_family

ap = argparse.ArgumentParser()
ap.add_argument("--hints", action="store_true")
ap.add_argument("--wide", action="store_true")
opts = ap.parse_args()
assert kernelwright.runtime.current_device() == "cuda"
fam = get_family("softmax")
rows = []
hint_sets = [("", ""), ("evict_first", ".cs")] if opts.hints else [("", "")]
for size in fam.sweep("cuda"):
    if opts.wide and size[1] < 65536:
        continue
    gen, _ = generator("cuda")
    case = fam.make_case(size, torch.bfloat16, "cuda", gen)
    ref = reference64(fam, case)
    x2 = case.args[0]
    nbytes = fam.cost(size, torch.bfloat16)[1]
    for chunk, warps, hints in [(c, w, h) for c in (4096, 8192, 16384, 32768) for w in (4, 8, 16) for h in hint_sets]:
        if chunk // (32 * warps) < 4 or chunk // (32 * warps) > 64:
            continue
        out = poisoned_like(size, torch.bfloat16, "cuda")
        try:
            sm._split(x2, out, chunk=chunk, num_warps=warps, hints=hints)
        except Exception as e:  # noqa: BLE001 - record and go on
            rows.append({"size": size, "chunk": chunk, "warps": warps, "hints": list(hints), "error": str(e)[:200]})
            continue
        ok = compare(out, ref, fam.tolerances[torch.bfloat16]).ok
        t = time_fn(lambda c=chunk, w=warps, o=out, x=x2, h=hints: sm._split(x, o, chunk=c, num_warps=w, hints=h)) \
            if ok else None
        key = [k for k in sm._split_resident if k[3] == min(chunk, size[1]) and k[5] == warps]
        rows.append({"size": size, "chunk": chunk, "warps": warps, "hints": list(hints), "ok": ok,
                     "resident": sm._split_resident.get(key[-1]) if key else None,
                     "median_us": t.median_ms * 1e3 if t else None,
                     "tbps": nbytes / (t.median_ms * 1e-3) / 1e12 if t else None})
        r = rows[-1]
        print(f"{'x'.join(map(str, size)):<12} chunk {chunk:>6} warps {warps:>2} hints {hints} ok {ok} resident "
              f"{r['resident']} {r['median_us'] or float('nan'):9.1f} us {r['tbps'] or 0:6.3f} TB/s", flush=True)
    del case, ref
with open(os.path.join(os.environ.get("OUT", "/tmp"), "split_configs.json"), "w") as fh:
    json.dump(rows, fh, indent=2)
best = {}
for r in rows:
    if r.get("tbps") and r["tbps"] > best.get(tuple(r["size"]), {}).get("tbps", 0):
        best[tuple(r["size"])] = r
for size, r in best.items():
    print(f"best {'x'.join(map(str, size))}: chunk {r['chunk']} warps {r['warps']} hints {r.get('hints')} "
          f"{r['tbps']:.3f} TB/s")
