#!/usr/bin/env bash
# `kw optimize` over the repo's problem set (problems/level1..3) on the H200, from the repo root there; time-boxed
# so that the set is done over several device calls: each call resumes from the search records committed under
# $PREV (a results folder holding optimized/), searches the problems not done yet until its deadline, and packs
# everything (records, best candidates, the archive, the log) into $OUT/optimized.tgz.
#   KW_GIT_COMMIT=<sha> PREV=benchmarks/results/h200/<run> DEADLINE=440 [REDO="level2/05_..."] \
#     bash benchmarks/h200/optimize.sh [tests]
# `tests` first runs the GPU tests of the evaluator, its timer gate and the search (overhead, side streams, timer
# patches, the cublaslt epilogue) and the attention test at scores of ~1e12.
set -uo pipefail
OUT=${OUT:-/tmp/kwout}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KW_DEVICE=cuda KW_CACHE_DIR=/tmp/kwcache KW_ARCHIVE=/tmp/opt/archive.db
export KW_GIT_COMMIT=${KW_GIT_COMMIT:-unknown} PYTHONPATH="$PWD"
LOG="$OUT/log.txt"
DEADLINE=${DEADLINE:-440}; BUDGET=${BUDGET:-10}; PER_PROBLEM=${PER_PROBLEM:-45}
# EXTRA: more kw optimize options (e.g. --no-compile-baseline: no torch.compile of each reference)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee -a "$LOG"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$LOG"
echo "commit $KW_GIT_COMMIT; budget $BUDGET, $PER_PROBLEM s per problem, deadline $DEADLINE s" | tee -a "$LOG"
mkdir -p "$KW_CACHE_DIR" /tmp/opt
[ -f benchmarks/results/h200/tune.tgz ] && tar -xzf benchmarks/results/h200/tune.tgz -C "$KW_CACHE_DIR"
if [ -n "${PREV:-}" ] && [ -f "$PREV/optimized.tgz" ]; then tar -xzf "$PREV/optimized.tgz" -C /tmp; fi
# REDO="level1/20_decode_attention_fp16 level2/11_rope_gqa_attention_bf16": search these again (their records and
# best candidates are dropped, so --resume does not skip them)
for p in ${REDO:-}; do rm -f "/tmp/opt/$p.search.json" "/tmp/opt/$(dirname "$p")/candidates/$(basename "$p")".*; done
# the previous calls' tune cache merged in entry by entry (the newer tuning of a key wins): unpacking it over the
# committed one would put back configs the committed cache has since re-tuned (session 9's attention buckets)
if [ -f /tmp/opt/tune.tgz ]; then
  rm -rf /tmp/prevtune && mkdir -p /tmp/prevtune && tar -xzf /tmp/opt/tune.tgz -C /tmp/prevtune
  python3 benchmarks/merge_tune.py /tmp/prevtune "$KW_CACHE_DIR" | tee -a "$LOG"
fi
# a snapshot of the results every 30 s: a call cut short by its time limit still brings back what was done
( while sleep 30; do tar -czf "$OUT/optimized.part.tgz" -C /tmp opt 2>/dev/null && mv "$OUT/optimized.part.tgz" "$OUT/optimized.tgz"; done ) &
SNAP=$!
if [ "${1:-}" = tests ]; then
  s=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_eval.py tests/test_gate.py \
    tests/test_search.py >> "$LOG" 2>&1
  echo "pytest -m gpu tests/test_{eval,gate,search}.py rc=$? in $((SECONDS - s))s"
  s=$SECONDS; timeout 60 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_attention.py -k huge_scores >> "$LOG" 2>&1
  echo "pytest tests/test_attention.py -k huge_scores rc=$? in $((SECONDS - s))s"; grep -E "^FAILED|passed|failed" "$LOG" | tail -6
fi
s=$SECONDS
timeout -s INT $((DEADLINE + 60)) python3 -m kernelwright.cli optimize problems/level1 problems/level2 problems/level3 \
  --budget "$BUDGET" --compile-modes default --problem-seconds "$PER_PROBLEM" --deadline "$DEADLINE" --resume \
  --timeout 120 -o /tmp/opt ${EXTRA:-} --json > "$OUT/summary.json" 2>> "$LOG"
echo "kw optimize rc=$? in $((SECONDS - s))s" | tee -a "$LOG"
kill $SNAP 2>/dev/null
tar -czf /tmp/opt/tune.tgz -C "$KW_CACHE_DIR" tune 2>/dev/null
tar -czf "$OUT/optimized.tgz" -C /tmp opt
grep -A60 "^problem " "$LOG" | tail -45
