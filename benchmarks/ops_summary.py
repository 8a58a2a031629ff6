"""The memory-bound ops' numbers the issue asks for, from a results database (rows are stored one by one, so a
sweep cut short still counts): per family, size and dtype, every rung's and peer's TB/s (by the family's minimum
byte count), the best rung against the target (forward 3.6 TB/s, backward 3.0 TB/s) and against each peer
measured in the same run, and wrong rows.

    python benchmarks/ops_summary.py kernelwright.db [FAMILY ...]
"""

import sys
from collections import defaultdict

from kernelwright.store.db import Store

FORWARD_TARGET, BACKWARD_TARGET = 3.6, 3.0
PEERS = ("torch", "torch.compile", "liger")

store = Store(sys.argv[1])
only = set(sys.argv[2:])
rows = [dict(r, run=run["id"]) for run in reversed(store.runs()) for r in store.rows(run["id"])
        if r["family"] != "matmul" and (not only or r["family"] in only)]
groups = defaultdict(list)
for r in rows:
    groups[(r["run"], r["family"], r["dtype"], r["size"])].append(r)
misses = []
for (run, family, dtype, size), rs in groups.items():
    target = BACKWARD_TARGET if family.endswith("_bwd") else FORWARD_TARGET
    print(f"\nrun {run} {family} {dtype} {size}")
    timed = {}
    for r in rs:
        if not r.get("median_ms"):
            note = r.get("note") or ""
            print(f"  {r['variant']:<16} {r['role']:<5} no time: {note[:100]}")
            continue
        timed[r["variant"]] = r
        flag = "  INEXACT" if r.get("correct") == 0 else ""
        print(f"  {r['variant']:<16} {r['role']:<5} {r['tbps']:6.2f} TB/s  {r['median_ms'] * 1e3:9.1f} us  "
              f"iqr {100 * r['iqr_ms'] / r['median_ms']:4.1f}%{flag}")
    rungs = [r for r in timed.values() if r["role"] == "rung" and r.get("correct") != 0]
    if not rungs:
        continue
    best = max(rungs, key=lambda r: r["tbps"])
    vs = "  ".join(f"{p} {timed[p]['median_ms'] / best['median_ms']:.2f}x" for p in PEERS if p in timed)
    ok = best["tbps"] >= target and all(best["median_ms"] <= timed[p]["median_ms"] for p in PEERS if p in timed)
    against = f" speedup vs {vs}" if vs else " (no peer timed)"
    print(f"  best rung: {best['variant']} {best['tbps']:.2f} TB/s (target {target}){against}"
          f"{'' if ok else '  MISSED'}")
    if not ok:
        misses.append(f"{family} {size}: {best['variant']} {best['tbps']:.2f} TB/s, {vs}")
print(f"\n{len(misses)} of {len(groups)} shapes miss a target:" if misses
      else "\nevery measured shape meets its targets")
for m in misses:
    print("  " + m)
