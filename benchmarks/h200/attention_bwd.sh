#!/usr/bin/env bash
# attention backward on the H200, from the repo root there; the most wanted numbers first, each call under 10 minutes.
# Everything lands under $OUT. Bench rows are stored one by one in $OUT/kernelwright.db, so a step cut short by its
# timeout keeps what it finished.
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/attention_bwd.sh one   # GPU tests, kw tune on 4 buckets, the core sizes
#                                                                   # with every rung and peer
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/attention_bwd.sh two   # the sweep (B4 H32 S 1k..16k, D128 and
#                                                                   # D64, causal and not): fa2, tuned, FA2, cuDNN
# A tune cache committed as benchmarks/results/h200/tune.tgz is unpacked first (reused, not re-timed).
set -uo pipefail
OUT=${OUT:-/tmp/kwout}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KW_DEVICE=cuda KW_DB="$OUT/kernelwright.db" KW_CACHE_DIR=/tmp/kwcache
export KW_GIT_COMMIT=${KW_GIT_COMMIT:-unknown} PYTHONPATH="$PWD"
LOG="$OUT/log.txt"
# the shapes at 4k: D128 and D64, causal and not (one tuned config a bucket: head dim x mask x length class)
CORE="4x32x32x4096x4096x128,4x32x32x4096x4096x128:causal,4x32x32x4096x4096x64,4x32x32x4096x4096x64:causal"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee -a "$LOG"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$LOG"
echo "commit $KW_GIT_COMMIT" | tee -a "$LOG"
mkdir -p "$KW_CACHE_DIR"
[ -f benchmarks/results/h200/tune.tgz ] && tar -xzf benchmarks/results/h200/tune.tgz -C "$KW_CACHE_DIR"
step() { local t=$1; shift; echo "== $* (limit ${t}s)" | tee -a "$LOG"; local s=$SECONDS
         timeout "$t" "$@" >> "$LOG" 2>&1; echo "   rc=$? in $((SECONDS - s))s" | tee -a "$LOG"; }
case "${1:-one}" in
  one)
    # every rung at real sizes and head dims 64/128/256 in bf16 and fp16 against float64, and two backward passes
    # bitwise equal: compile errors, wrong results and races show here first
    step 120 python3 -m pytest -q -p no:cacheprovider -x -m gpu tests/test_attention_bwd.py
    grep -E "passed|failed" "$LOG" | tail -1
    # each kernel's config space, each kernel timed alone (about a minute a bucket: compiles dominate)
    step 270 python3 -m kernelwright.cli tune attention_bwd --variant tuned --dtypes bf16 --sizes "$CORE"
    tar -czf "$OUT/tune.tgz" -C "$KW_CACHE_DIR" tune
    # every rung and peer (SDPA flash = FA2, cuDNN, memory-efficient: their backward alone, forward graph kept)
    KW_AUTOTUNE=0 step 150 python3 -m kernelwright.cli bench attention_bwd --dtypes bf16 --sizes "$CORE" \
      --max-seconds 1
    ;;
  two)
    # buckets not tuned in call one run on the default configs (KW_AUTOTUNE=0): the fa2 rung's heuristic
    KW_AUTOTUNE=0 step 420 python3 -m kernelwright.cli bench attention_bwd --dtypes bf16 --variant fa2 \
      --variant tuned --variant sdpa_flash --variant sdpa_cudnn --max-seconds 1
    step 60 python3 -m kernelwright.cli check attention_bwd
    python3 -m kernelwright.cli report -o "$OUT/report.html" >> "$LOG" 2>&1
    ;;
esac
python3 -m kernelwright.cli results >> "$LOG" 2>&1
grep -E "rc=|FAIL|Error|incorrect" "$LOG" | head -30
