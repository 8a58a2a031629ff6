"""The matmul numbers the issue asks for, from a results database (rows are stored one by one, so a sweep cut
short still counts): per run, size and dtype, every rung's TFLOP/s and its ratio to torch.matmul (cuBLAS)
measured in the same run, the best Triton rung, and wrong rows.

    python benchmarks/matmul_summary.py kernelwright.db
"""

import sys
from collections import defaultdict

from kernelwright.store.db import Store

store = Store(sys.argv[1])
rows = [dict(r, run=run["id"]) for run in reversed(store.runs()) for r in store.rows(run["id"], family="matmul")]
groups = defaultdict(list)
for r in rows:
    groups[(r["run"], r["dtype"], r["size"])].append(r)
for (run, dtype, size), rs in groups.items():
    torch_row = next((r for r in rs if r["variant"] == "torch" and r.get("median_ms")), None)
    base = torch_row["median_ms"] if torch_row else None
    print(f"\nrun {run} {dtype} {size}: torch.matmul "
          + (f"{torch_row['tflops']:.1f} TFLOP/s ({base * 1e3:.1f} us)" if torch_row else "missing"))
    best = None
    for r in rs:
        if r["variant"] == "torch":
            continue
        if not r.get("median_ms"):
            note = r.get("note") or ""
            if r.get("correct") is False or "incorrect" in note or "failed" in note:
                print(f"  {r['variant']:<18} WRONG/FAILED: {note[:100]}")
            continue
        ratio = base / r["median_ms"] if base else float("nan")
        print(f"  {r['variant']:<18} {r['tflops']:8.1f} TFLOP/s  {r['median_ms'] * 1e3:9.1f} us  {ratio:5.2f}x cuBLAS"
              f"  iqr {100 * r['iqr_ms'] / r['median_ms']:.1f}%")
        if r["variant"].startswith("triton") and (best is None or r["median_ms"] < best["median_ms"]):
            best = r
    if best and base:
        print(f"  best Triton: {best['variant']} {base / best['median_ms']:.3f}x cuBLAS")
