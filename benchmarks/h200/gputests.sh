#!/usr/bin/env bash
# The GPU-marked tests of the big families in pieces that fit a device call (run 46 ran norms + attention together
# and was cut at 540 s after 57 tests). From the repo root on the H200; the log and pytest's slowest-test list land in
# $OUT. The tests tune with their own cache: a test-sized problem must not set a real bucket's config.
#   bash benchmarks/h200/gputests.sh bwd         # tests/test_attention_bwd.py (the backward's new default configs)
#   bash benchmarks/h200/gputests.sh attention   # tests/test_attention.py
#   bash benchmarks/h200/gputests.sh norms       # tests/test_norms.py
#   bash benchmarks/h200/gputests.sh ops         # the other families' GPU tests and the ladders' fuzz on the GPU
# LIMIT (seconds, default 500) bounds the pytest run; what finished is in the log either way. KEXPR selects tests
# (pytest -k), e.g. the six session 15 did not reach:
#   KEXPR="split_kv-fp or longest or tma_config or tuned-fp32" bash benchmarks/h200/gputests.sh attention
set -uo pipefail
OUT=${OUT:-/tmp/kwout}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KW_DEVICE=cuda KW_CACHE_DIR=/tmp/kwtestcache PYTHONPATH="$PWD"
LOG="$OUT/gputests_${1:-bwd}.txt"
MARK="-m gpu"
case "${1:-bwd}" in
  bwd) FILES="tests/test_attention_bwd.py" ;;
  attention) FILES="tests/test_attention.py" ;;
  norms) FILES="tests/test_norms.py" ;;
  # the ladders' fuzz is not gpu-marked: it runs every rung on the device it is given
  ops) MARK=""; FILES="tests/test_gpu.py tests/test_ladders.py tests/test_ops.py tests/test_softmax_cluster.py" ;;
  *) echo "usage: $0 bwd|attention|norms|ops" >&2; exit 2 ;;
esac
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv | tee "$LOG"
s=$SECONDS
# -v: one line a test, so a run cut by LIMIT still says which tests passed
SELECT=(); [ -n "${KEXPR:-}" ] && SELECT=(-k "$KEXPR")
timeout "${LIMIT:-500}" python3 -m pytest -v -p no:cacheprovider -rfE --durations 15 $MARK "${SELECT[@]}" $FILES \
  >> "$LOG" 2>&1
echo "pytest $MARK ${SELECT[*]} $FILES rc=$? in $((SECONDS - s))s" | tee -a "$LOG"
grep -cE " PASSED" "$LOG" | sed 's/^/passed: /'
grep -E " FAILED|^FAILED|^ERROR" "$LOG" | head -20
tail -20 "$LOG" | grep -E "passed|failed|s call" | head -20
