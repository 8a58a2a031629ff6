"""Issue 6's check "on each single-op problem kw optimize finds our best rung": for each level-1 problem that
``benchmarks/h200/best_rung.sh`` timed, the rung the search kept (``best_rung`` in the optimize summary) next to the
fastest rung kw bench timed at the problem's shape and dtype, and how much faster that one is.

    python benchmarks/best_rung.py BENCH_DB OPTIMIZE_SUMMARY_JSON
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys

# level-1 problem -> (family, size, dtype) as best_rung.sh benches it
PROBLEMS = {
    "01_matmul_square_fp32": ("matmul", "4096x4096x4096", "fp32"),
    "02_matmul_square_bf16": ("matmul", "4096x4096x4096", "bf16"),
    "03_matmul_decode_bf16": ("matmul", "16x14336x4096", "bf16"),
    "04_matmul_tall_fp16": ("matmul", "16384x1024x4096", "fp16"),
    "06_softmax_narrow_fp32": ("softmax", "65536x512", "fp32"),
    "07_softmax_wide_bf16": ("softmax", "4096x65536", "bf16"),
    "09_rms_norm_bf16": ("rms_norm", "16384x4096", "bf16"),
    "10_layer_norm_fp32": ("layer_norm", "16384x4096", "fp32"),
    "11_rms_norm_wide_fp32": ("rms_norm", "4096x8192", "fp32"),
    "12_swiglu_bf16": ("swiglu", "8192x14336", "bf16"),
    "14_cross_entropy_bf16": ("cross_entropy", "4096x128256", "bf16"),
    "15_vector_add_fp32": ("vector_add", "2^27", "fp32"),
    "17_silu_bf16": ("activation", "8192x14336", "bf16"),
    "18_causal_attention_bf16": ("attention", "4x32x32x2048x2048x128:causal", "bf16"),
    "19_gqa_attention_bf16": ("attention", "4x32x8x2048x2048x128:causal", "bf16"),
    "20_decode_attention_fp16": ("attention", "32x32x8x1x4096x128", "fp16"),
}


def main(db_path: str, summary_path: str) -> None:
    db = sqlite3.connect(db_path)
    rows = {(p["problem"]): p for p in json.load(open(summary_path))["rows"] if p["group"] == "level1"}
    print(f"{'problem':28s} {'search kept':24s} {'bench fastest':18s} {'its us':>8s} {'kept us':>8s} {'gap':>6s}")
    for prob, (fam, size, dtype) in PROBLEMS.items():
        timed = db.execute("select variant, min(median_ms) from rows where family=? and size=? and dtype=? and "
                           "correct=1 and median_ms is not null group by variant order by 2",
                           (fam, size, dtype)).fetchall()
        if not timed or prob not in rows:
            print(f"{prob:28s} (not timed)")
            continue
        kept = rows[prob].get("best_rung") or "-"
        name = re.sub(r"^auto \((.*)\)$", r"\1", kept)
        times = dict(timed)
        fastest, t_fast = timed[0]
        t_kept = times.get(name)
        gap = f"{t_kept / t_fast - 1:+.1%}" if t_kept else "-"
        print(f"{prob:28s} {kept:24s} {fastest:18s} {t_fast * 1e3:8.1f} {(t_kept or 0) * 1e3:8.1f} {gap:>6s}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
