#!/usr/bin/env bash
# Session 8's last device call (about 9 minutes), from the repo root there; everything under $OUT:
#   1. softmax's fused rung on narrow rows (65536 x 512, kw optimize's l1/06) at 1, 2 and 4 warps a program
#      (the FUSED_NARROW_WARPS switch) against torch, fp32 and bf16: softmax_narrow.txt and kernelwright.db
#   2. `attention.sh buckets`: the tune buckets the committed cache lacks, then their rows (tune.tgz)
#   3. kw optimize again on the two level-3 blocks, after the attention-under-compile fix (optimized.tgz)
#   4. the norms' GPU tests, as far as 90 s go (norm_tests.txt)
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/session8.sh
set -uo pipefail
OUT=${OUT:-/tmp/kwout}; mkdir -p "$OUT"
export OUT KW_GIT_COMMIT=${KW_GIT_COMMIT:-unknown} PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
s=$SECONDS
for w in None 1 2; do
  KW_DEVICE=cuda KW_DB="$OUT/kernelwright.db" timeout 60 python3 benchmarks/experiments/switch_bench.py \
    "kernelwright.ops.softmax.triton.FUSED_NARROW_WARPS=$w" -- bench softmax --variant fused --variant torch \
    --dtypes fp32,bf16 --sizes 65536x512 --max-seconds 0.5 >> "$OUT/softmax_narrow.txt" 2>&1
  echo "softmax narrow, warps $w: rc=$?" | tee -a "$OUT/softmax_narrow.txt"
done
echo "softmax narrow: $((SECONDS - s)) s"
bash benchmarks/h200/attention.sh buckets | tail -8
PREV=benchmarks/results/h200/2026-12-03_run30_527325f DEADLINE=${DEADLINE:-200} PER_PROBLEM=95 \
  REDO="level3/01_llama_block_bf16 level3/02_gpt2_block_fp32" bash benchmarks/h200/optimize.sh | tail -4
s=$SECONDS
KW_DEVICE=cuda timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_norms.py > "$OUT/norm_tests.txt" 2>&1
echo "norm GPU tests rc=$? in $((SECONDS - s)) s: $(tail -1 "$OUT/norm_tests.txt")"
grep -E "^switch|65536x512" "$OUT/softmax_narrow.txt" | cut -c1-130
