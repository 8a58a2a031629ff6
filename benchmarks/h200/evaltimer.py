"""Does the evaluator time the reference, submitted unchanged as the candidate, like eager? (It must: speedup 1.)

For each problem: the reference's own source plus ``class ModelNew(Model): pass``, evaluated ``--reps`` times;
prints eager and candidate medians (sample, stream, device, host launch), the speedup, the gate used, and writes
every verdict as JSON. Run it once with the host gate (default) and once with ``KW_EVAL_GATE=0`` (fixed spin).
    python benchmarks/h200/evaltimer.py problems/level1/05_bmm_fp16.py ... --reps 2 -o OUT.json
"""

import argparse
import json
import os
import pathlib
import statistics
import sys

from kernelwright.eval.evaluate import evaluate


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("problems", nargs="+")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    mode = "spin" if os.environ.get("KW_EVAL_GATE", "1") == "0" else "gate"
    rows, full = [], []
    for path in a.problems:
        src = pathlib.Path(path).read_text() + "\n\nclass ModelNew(Model):\n    pass\n"
        for rep in range(a.reps):
            v = evaluate(path, src, device=a.device, name=f"identical-{rep}", compile_baseline=False)
            d = v.to_dict() if hasattr(v, "to_dict") else v.__dict__
            full.append({"problem": path, "rep": rep, "mode": mode, "verdict": d})
            e, c = v.times.get("eager") or {}, v.times.get("candidate") or {}
            rows.append((pathlib.Path(path).stem[:26], rep, v.correct, v.speedup_eager, e, c, v.overhead_s))
    pathlib.Path(a.out).write_text(json.dumps(full, indent=1, default=str))
    print(f"\nidentical candidate vs eager, timer {mode} (ms: sample median / stream / device / host launch)")
    print(f"{'problem':26} rep ok   speedup  {'eager':>30}  {'candidate':>30}  gate  overhead_s")

    def q(t):
        return " ".join(f"{t.get(k, float('nan')):.4f}" for k in ("median_ms", "stream_median_ms",
                                                                   "device_median_ms", "host_median_ms"))
    sp = []
    for name, rep, ok, s, e, c, ov in rows:
        sp += [s] if s else []
        print(f"{name:26} {rep:3} {str(ok):5} {s or float('nan'):7.3f}  {q(e):>30}  {q(c):>30}  "
              f"{c.get('gate', '-'):5} {ov or float('nan'):.1f}")
    if sp:
        print(f"speedup over {len(sp)} verdicts: median {statistics.median(sp):.3f}, min {min(sp):.3f}, "
              f"max {max(sp):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
