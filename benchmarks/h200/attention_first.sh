#!/usr/bin/env bash
# attention's first look on the H200 in one call (about 9 minutes), forward and backward, for a session with little
# device time left: GPU tests, every rung and peer at the core shapes on the default configs, the
# backward at D128 4k, the varlen experiment, then a short tune of the forward's tuned rung and a re-bench.
# attention.sh and attention_bwd.sh hold the full sweeps.
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/attention_first.sh
set -uo pipefail
OUT=${OUT:-/tmp/kwout}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KW_DEVICE=cuda KW_DB="$OUT/kernelwright.db" KW_CACHE_DIR=/tmp/kwcache
export KW_GIT_COMMIT=${KW_GIT_COMMIT:-unknown} PYTHONPATH="$PWD"
LOG="$OUT/log.txt"
CORE="4x32x32x4096x4096x128,4x32x32x4096x4096x128:causal,8x32x32x2048x2048x64,8x32x32x2048x2048x64:causal"
CORE="$CORE,4x32x8x4096x4096x128:causal,8x32x8x4096x4096x128:varlen:causal"
D128="4x32x32x4096x4096x128,4x32x32x4096x4096x128:causal"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee -a "$LOG"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$LOG"
echo "commit $KW_GIT_COMMIT" | tee -a "$LOG"
mkdir -p "$KW_CACHE_DIR"
[ -f benchmarks/results/h200/tune.tgz ] && tar -xzf benchmarks/results/h200/tune.tgz -C "$KW_CACHE_DIR"
step() { local t=$1; shift; echo "== $* (limit ${t}s)" | tee -a "$LOG"; local s=$SECONDS
         timeout "$t" "$@" >> "$LOG" 2>&1; echo "   rc=$? in $((SECONDS - s))s" | tee -a "$LOG"; }
step 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_attention.py tests/test_attention_bwd.py
grep -E "passed|failed" "$LOG" | tail -1
KW_AUTOTUNE=0 step 130 python3 -m kernelwright.cli bench attention --dtypes bf16 --sizes "$CORE" --max-seconds 0.5
KW_AUTOTUNE=0 step 80 python3 -m kernelwright.cli bench attention_bwd --dtypes bf16 --sizes "$D128" --max-seconds 0.5
step 50 python3 benchmarks/experiments/attention_varlen.py
step 90 python3 -m kernelwright.cli tune attention --variant tuned --dtypes bf16 --sizes "$D128"
KW_AUTOTUNE=0 step 40 python3 -m kernelwright.cli bench attention --dtypes bf16 --sizes "$D128" --variant tuned \
  --variant sdpa_flash --variant sdpa_cudnn --max-seconds 0.5
python3 benchmarks/attention_summary.py "$OUT/kernelwright.db" > "$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt" | head -90
grep -E "rc=|FAIL|Error|incorrect" "$LOG" | head -30
