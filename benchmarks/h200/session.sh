#!/usr/bin/env bash
# The device calls on the H200, from the repo root there. Everything lands under $OUT (8 files at most come back).
#   bash benchmarks/h200/session.sh split   # GPU tests + the split-softmax config sweep
#   bash benchmarks/h200/session.sh final   # GPU tests, kw check, kw run (main job + report), 3 repeated
#                                           # `kw bench softmax`, nvbench cross-check
#   bash benchmarks/h200/session.sh all     # both
#   bash benchmarks/h200/session.sh timer   # the timer's issue-2 checks alone (3 repeats, nvbench cross-check);
#                                           # needs the cuda-bench wheel in .whl/ (carried); about 3 minutes
set -uo pipefail
OUT=${OUT:-/tmp/kwout}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KW_DEVICE=cuda KW_DB="$OUT/kernelwright.db" KW_CACHE_DIR=/tmp/kwcache
export KW_GIT_COMMIT=${KW_GIT_COMMIT:-unknown}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="$PWD:/tmp/site"
else
  export PYTHONPATH="$PWD"
fi
LOG="$OUT/log.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$LOG"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$LOG"
echo "commit $KW_GIT_COMMIT" | tee -a "$LOG"
kw() { python3 -m kernelwright.cli "$@"; }
# step timeouts: a kernel that hangs (a cross-program wait gone wrong) costs minutes, not the whole call
if [ "${1:-final}" != timer ]; then
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_ladders.py tests/test_ops.py >> "$LOG" 2>&1
  echo "pytest (GPU) rc=$?"; tail -3 "$LOG"
fi
case "${1:-final}" in
  timer)
    # session 10's plan: the timer's agreement checks again since every sample waits behind the host gate
    timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gate.py >> "$LOG" 2>&1
    echo "pytest -m gpu tests/test_gate.py rc=$?" | tee -a "$LOG"
    for i in 1 2 3; do
      timeout 90 python3 -m kernelwright.cli bench softmax --dtypes bf16 --no-peers --json > "/tmp/repeat$i.json"
      echo "repeat $i rc=$?" | tee -a "$LOG"
    done
    python3 benchmarks/repeat_agreement.py /tmp/repeat*.json 2>&1 | tee -a "$LOG"
    mkdir -p /tmp/nv; OUT=/tmp/nv timeout 120 python3 benchmarks/nvbench_crosscheck.py >> "$LOG" 2>&1
    echo "nvbench_crosscheck rc=$?" | tee -a "$LOG"; tail -6 "$LOG"
    cp /tmp/nv/timer_crosscheck.json "$OUT/" 2>/dev/null
    python3 -m kernelwright.cli results | tee -a "$LOG"
    ;;
  split|all)
    timeout 150 python3 benchmarks/experiments/softmax_split_configs.py 2>&1 | tee -a "$LOG" | tail -45
    ;;&
  final|all)
    kw check --json > "$OUT/check.json"; echo "kw check rc=$?" | tee -a "$LOG"
    kw roofline 2>&1 | tee -a "$LOG"
    timeout 240 python3 -m kernelwright.cli run --json -o "$OUT/report.html" > "$OUT/run.json" 2>> "$LOG"
    echo "kw run rc=$?" | tee -a "$LOG"
    for i in 1 2 3; do
      kw bench softmax --dtypes bf16 --no-peers --json > "/tmp/repeat$i.json"; echo "repeat $i rc=$?" | tee -a "$LOG"
    done
    python3 benchmarks/repeat_agreement.py /tmp/repeat*.json 2>&1 | tee -a "$LOG"
    mkdir -p /tmp/nv; OUT=/tmp/nv python3 benchmarks/nvbench_crosscheck.py >> "$LOG" 2>&1; tail -4 "$LOG"
    cp /tmp/nv/timer_crosscheck.json "$OUT/"
    python3 -m kernelwright.cli results | tee -a "$LOG"
    python3 benchmarks/summary.py "$OUT/run.json" | tee -a "$LOG"
    ;;
esac
