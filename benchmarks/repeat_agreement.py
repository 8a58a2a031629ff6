"""Do repeated `kw bench ... --json` runs agree? Prints, per row, the spread of medians across the runs
((max - min) / min) and the worst of them.

    python benchmarks/repeat_agreement.py run1.json run2.json run3.json
"""

import json
import sys
from collections import defaultdict

medians = defaultdict(list)
for path in sys.argv[1:]:
    with open(path) as fh:
        for r in json.load(fh)["rows"]:
            if r.get("median_ms"):
                medians[(r["variant"], r["size"], r["dtype"])].append(r["median_ms"])
worst = 0.0
print(f"{'variant':<12} {'size':<14} {'dtype':<5} medians (ms)                     spread")
for key, ms in medians.items():
    spread = (max(ms) - min(ms)) / min(ms)
    worst = max(worst, spread)
    print(f"{key[0]:<12} {key[1]:<14} {key[2]:<5} {' '.join(f'{m:.4f}' for m in ms):<32} {100 * spread:.2f}%")
print(f"worst spread across {len(sys.argv) - 1} runs: {100 * worst:.2f}%")
