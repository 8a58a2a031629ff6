#!/usr/bin/env bash
# One device call on the H200: install carried wheels, GPU tests, `kw check`, the main job (`kw run`), and
# optionally the timer-quality runs. Everything lands under $OUT. Usage (from the repo root, on the device):
#   bash benchmarks/h200/session.sh main     # tests + check + kw run + report
#   bash benchmarks/h200/session.sh timer    # 3 repeated `kw bench softmax` + nvbench cross-check
set -uo pipefail
OUT=${OUT:-/tmp/kwout}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KW_DEVICE=cuda KW_DB="$OUT/kernelwright.db" KW_CACHE_DIR="$OUT/cache"
export KW_GIT_COMMIT=${KW_GIT_COMMIT:-unknown}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="$PWD:/tmp/site"
else
  export PYTHONPATH="$PWD"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
kw() { python3 -m kernelwright.cli "$@"; }
case "${1:-main}" in
  main)
    python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_ladders.py tests/test_ops.py \
      > "$OUT/pytest_gpu.log" 2>&1; echo "pytest rc=$?"; tail -5 "$OUT/pytest_gpu.log"
    kw check --json > "$OUT/check.json"; echo "kw check rc=$?"
    kw roofline
    kw run -o "$OUT/report.html" "${@:2}" > "$OUT/run.log" 2>&1; echo "kw run rc=$?"
    cat "$OUT/run.log"
    ;;
  split)
    python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py > "$OUT/pytest_gpu.log" 2>&1; echo "pytest rc=$?"
    tail -3 "$OUT/pytest_gpu.log"
    python3 benchmarks/experiments/softmax_split_configs.py 2>&1 | tee "$OUT/split_configs.txt" | tail -40
    python3 benchmarks/nvbench_crosscheck.py > "$OUT/nvbench.log" 2>&1; tail -5 "$OUT/nvbench.log"
    ;;
  timer)
    for i in 1 2 3; do kw bench softmax --dtypes bf16 --no-peers --json > "$OUT/repeat$i.json"; echo "repeat $i rc=$?"; done
    python3 benchmarks/repeat_agreement.py "$OUT"/repeat*.json | tee "$OUT/repeat_agreement.txt"
    python3 benchmarks/nvbench_crosscheck.py 2>&1 | tail -8
    ;;
esac
