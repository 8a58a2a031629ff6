"""A short table of a `kw run --json` / `kw bench --json` file: per family, size and dtype, the best rung, its
bandwidth and % of roofline, and its speedup over torch.

    python benchmarks/summary.py run.json
"""

import json
import sys
from collections import defaultdict

with open(sys.argv[1]) as fh:
    rows = json.load(fh)["rows"]
groups = defaultdict(list)
for r in rows:
    groups[(r["family"], r["size"], r["dtype"])].append(r)
print(f"{'family':<11} {'size':<12} {'dtype':<5} {'best rung':<10} {'time':>10} {'TB/s':>6} {'%roof':>6} "
      f"{'vs torch':>8}  peers (TB/s)")
for (fam, size, dtype), rs in groups.items():
    rungs = [r for r in rs if r["role"] == "rung" and r.get("median_ms") and r["variant"] != "torch"]
    if not rungs:
        continue
    b = min(rungs, key=lambda r: r["median_ms"])
    peers = " ".join(f"{r['variant']}={r['tbps']:.2f}" for r in rs
                     if (r["role"] == "peer" or r["variant"] == "torch") and r.get("tbps"))
    print(f"{fam:<11} {size:<12} {dtype:<5} {b['variant']:<10} {b['median_ms'] * 1e3:>8.1f}us {b['tbps']:>6.2f} "
          f"{b['pct_roofline']:>5.1f}% {b['speedup_vs_baseline'] or 0:>7.2f}x  {peers}")
