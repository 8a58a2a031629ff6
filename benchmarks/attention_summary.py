"""The attention numbers the issue asks for, from a results database: per run, family (forward / backward) and
size, every rung's and peer's TFLOP/s, the best rung's ratio to SDPA's flash (FA2) and cuDNN backends measured in
the same run, and wrong or failed rows.

    python benchmarks/attention_summary.py kernelwright.db
"""

import sys
from collections import defaultdict

from kernelwright.store.db import Store

store = Store(sys.argv[1])
rows = [dict(r, run=run["id"]) for run in reversed(store.runs()) for r in store.rows(run["id"])
        if r["family"] in ("attention", "attention_bwd")]
groups = defaultdict(list)
for r in rows:
    groups[(r["run"], r["family"], r["dtype"], r["size"])].append(r)
for (run, family, dtype, size), rs in groups.items():
    print(f"\nrun {run} {family} {dtype} {size}")
    timed = {}
    for r in rs:
        if not r.get("median_ms"):
            print(f"  {r['variant']:<16} {r['role']:<5} no time: {(r.get('note') or '')[:110]}")
            continue
        timed[r["variant"]] = r
        flag = "  INEXACT" if r.get("correct") == 0 else ""
        print(f"  {r['variant']:<16} {r['role']:<5} {r['tflops']:7.1f} TFLOP/s  {r['median_ms'] * 1e3:9.1f} us  "
              f"iqr {100 * r['iqr_ms'] / r['median_ms']:4.1f}%{flag}")
    rungs = [r for r in timed.values() if r["role"] == "rung" and r.get("correct") != 0]
    if rungs:
        best = max(rungs, key=lambda r: r["tflops"])
        vs = "  ".join(f"{p} {timed[p]['median_ms'] / best['median_ms']:.2f}x"
                       for p in ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient") if p in timed)
        print(f"  best rung: {best['variant']} {best['tflops']:.1f} TFLOP/s; " + (f"speedup vs {vs}" if vs else
                                                                                 "no peer timed"))
