#!/usr/bin/env bash
# Issue 6's "on each single-op problem kw optimize finds our best rung": every rung of the family timed by kw bench at
# each level-1 problem's own shape and dtype (no peers), to compare with the best rung of the search's records
# (`python benchmarks/best_rung.py $OUT/kernelwright.db <optimize summary.json>`). About 4-5 minutes.
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/best_rung.sh
set -uo pipefail
OUT=${OUT:-/tmp/kwout}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KW_DEVICE=cuda KW_DB="$OUT/kernelwright.db" KW_CACHE_DIR=/tmp/kwcache
export KW_GIT_COMMIT=${KW_GIT_COMMIT:-unknown} PYTHONPATH="$PWD"
LOG="$OUT/log.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee -a "$LOG"
echo "commit $KW_GIT_COMMIT" | tee -a "$LOG"
mkdir -p "$KW_CACHE_DIR"
[ -f benchmarks/results/h200/tune.tgz ] && tar -xzf benchmarks/results/h200/tune.tgz -C "$KW_CACHE_DIR"
b() { local t=$1; shift; local s=$SECONDS
      timeout "$t" python3 -m kernelwright.cli bench "$@" --no-peers --max-seconds 0.3 >> "$LOG" 2>&1
      echo "bench $* rc=$? in $((SECONDS - s))s" | tee -a "$LOG"; }
# (problem: family size dtype), the fast families first, the matmuls (with their CUDA C rungs) last
b 40 attention --sizes 4x32x32x2048x2048x128:causal,4x32x8x2048x2048x128:causal --dtypes bf16   # l1/18, l1/19
b 30 attention --sizes 32x32x8x1x4096x128 --dtypes fp16                                         # l1/20
b 25 softmax --sizes 65536x512 --dtypes fp32                                                      # l1/06
b 25 softmax --sizes 4096x65536 --dtypes bf16                                                     # l1/07
b 25 rms_norm --sizes 16384x4096 --dtypes bf16                                                    # l1/09
b 25 layer_norm --sizes 16384x4096 --dtypes fp32                                                  # l1/10
b 25 rms_norm --sizes 4096x8192 --dtypes fp32                                                     # l1/11
b 25 swiglu --sizes 8192x14336 --dtypes bf16                                                      # l1/12
b 30 cross_entropy --sizes 4096x128256 --dtypes bf16                                              # l1/14
b 20 vector_add --sizes 2^27 --dtypes fp32                                                        # l1/15
b 20 activation --sizes 8192x14336 --dtypes bf16                                                  # l1/17 (silu)
b 40 matmul --sizes 16x14336x4096 --dtypes bf16                                                   # l1/03
b 50 matmul --sizes 16384x1024x4096 --dtypes fp16                                                 # l1/04
b 50 matmul --sizes 4096 --dtypes bf16,fp32                                                       # l1/02, l1/01
python3 -m kernelwright.cli results >> "$LOG" 2>&1
