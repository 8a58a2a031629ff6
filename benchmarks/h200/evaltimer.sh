#!/usr/bin/env bash
# The evaluator's timer on the H200: the eval and gate GPU tests, then the reference submitted unchanged as its own
# candidate on problems from one op to a transformer block, with the host gate and with the fixed spin
# (KW_EVAL_GATE=0). Every speedup must come out ~1.0. From the repo root:
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/evaltimer.sh
set -uo pipefail
OUT=${OUT:-/tmp/kwout}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KW_DEVICE=cuda KW_CACHE_DIR=/tmp/kwcache PYTHONPATH="$PWD"
LOG="$OUT/evaltimer.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee -a "$LOG"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$LOG"
echo "commit ${KW_GIT_COMMIT:-unknown}" | tee -a "$LOG"
s=$SECONDS
timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gate.py tests/test_eval.py -rfE >> "$LOG" 2>&1
echo "pytest -m gpu tests/test_gate.py tests/test_eval.py rc=$? in $((SECONDS - s))s" | tee -a "$LOG"
grep -E "^(FAILED|ERROR)|passed|failed" "$LOG" | tail -8
P=${PROBLEMS:-"problems/level1/05_bmm_fp16.py problems/level1/09_rms_norm_bf16.py problems/level2/03_swiglu_mlp_bf16.py
   problems/level3/01_llama_block_bf16.py"}
timeout ${GATE_S:-150} python3 benchmarks/h200/evaltimer.py $P --reps 2 -o "$OUT/evaltimer_gate.json" 2>> "$LOG" \
  | tee -a "$LOG" | tail -12
KW_EVAL_GATE=0 timeout ${SPIN_S:-60} python3 benchmarks/h200/evaltimer.py problems/level1/05_bmm_fp16.py \
  problems/level3/01_llama_block_bf16.py --reps 1 -o "$OUT/evaltimer_spin.json" 2>> "$LOG" | tee -a "$LOG" | tail -6
