#!/usr/bin/env bash
# matmul on the H200, from the repo root there. Everything lands under $OUT (8 files at most come back).
#   bash benchmarks/h200/matmul.sh tune    # GPU tests, kw check matmul, kw tune, tile experiment, kw inspect
#   bash benchmarks/h200/matmul.sh bench   # the sweeps (reuses a tune cache committed under
#                                          # benchmarks/results/h200/tune/ when there is one)
set -uo pipefail
OUT=${OUT:-/tmp/kwout}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KW_DEVICE=cuda KW_DB="$OUT/kernelwright.db" KW_CACHE_DIR=/tmp/kwcache
export KW_GIT_COMMIT=${KW_GIT_COMMIT:-unknown} PYTHONPATH="$PWD"
LOG="$OUT/log.txt"
HALF="1024,2048,4096,8192,16x8192x8192,64x8192x8192,128x8192x8192,127x131x129,1000,4097x4095x4093"
DECODE="16x8192x8192,64x8192x8192,128x8192x8192"
FP32="1024,2048,4096,127x131x129,1000,4097x4095x4093"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee -a "$LOG"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$LOG"
echo "commit $KW_GIT_COMMIT" | tee -a "$LOG"
kw() { python3 -m kernelwright.cli "$@"; }
mkdir -p "$KW_CACHE_DIR/tune"
[ -f benchmarks/results/h200/tune.tgz ] && tar -xzf benchmarks/results/h200/tune.tgz -C "$KW_CACHE_DIR"
case "${1:-tune}" in
  tune)
    timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_matmul_cuda.py tests/test_matmul.py \
      "tests/test_ladders.py" -k "matmul" >> "$LOG" 2>&1
    echo "pytest (GPU, matmul) rc=$?" | tee -a "$LOG"; grep -E "passed|failed|Error" "$LOG" | tail -5
    timeout 120 python3 -m kernelwright.cli check matmul > "$OUT/check.txt" 2>&1; echo "kw check rc=$?" | tee -a "$LOG"
    tail -20 "$OUT/check.txt"
    kw roofline 2>&1 | tee -a "$LOG"
    timeout 240 python3 -m kernelwright.cli tune matmul --variant triton_autotuned --variant triton_persistent \
      --dtypes bf16,fp16 --shapes 1024,2048,4096,8192 2>&1 | tee -a "$LOG"
    timeout 120 python3 -m kernelwright.cli tune matmul --variant triton_splitk --variant triton_autotuned \
      --dtypes bf16,fp16 --shapes "$DECODE" 2>&1 | tee -a "$LOG"
    tar -czf "$OUT/tune.tgz" -C "$KW_CACHE_DIR" tune
    timeout 90 python3 benchmarks/experiments/matmul_tile_size.py 2>&1 | tee -a "$LOG"
    { for v in cuda_smem cuda_warptile triton_autotuned triton_persistent; do
        d=bf16; case $v in cuda_*) d=fp32;; esac
        python3 -m kernelwright.cli inspect matmul --variant $v --shape 4096 --dtype $d; done; } > "$OUT/inspect.txt" 2>&1
    grep -E "^matmul|registers|occupancy|HGMMA|FFMA|LDG" "$OUT/inspect.txt" | head -40
    ;;
  bench)
    timeout 330 python3 -m kernelwright.cli bench matmul --dtypes bf16,fp16 --sizes "$HALF" --json \
      > "$OUT/bench_half.json" 2>> "$LOG"; echo "bench half rc=$?" | tee -a "$LOG"
    timeout 200 python3 -m kernelwright.cli bench matmul --dtypes fp32 --sizes "$FP32" --json \
      > "$OUT/bench_fp32.json" 2>> "$LOG"; echo "bench fp32 rc=$?" | tee -a "$LOG"
    tar -czf "$OUT/tune.tgz" -C "$KW_CACHE_DIR" tune
    python3 -m kernelwright.cli report -o "$OUT/report.html" >> "$LOG" 2>&1
    python3 benchmarks/matmul_summary.py "$OUT/bench_half.json" "$OUT/bench_fp32.json" | tee "$OUT/summary.txt"
    ;;
esac
