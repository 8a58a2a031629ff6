#!/usr/bin/env bash
# The memory-bound LLM ops (issue 4) on the H200, from the repo root there, in one call of at most 10 minutes; the
# most wanted numbers first. Liger travels as a wheel in .whl (carry it). Everything lands under $OUT (8 files at
# most come back); bench rows are stored one by one in $OUT/kernelwright.db, so a step cut short keeps its rows.
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh fwd   # GPU tests, forward sweeps (rms_norm, layer_norm,
#                                                         # add_rms_norm, swiglu), cross-entropy memory, Llama
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh bwd   # backward sweeps, rope, cross_entropy, softmax_bwd
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh recheck  # GPU tests, fused vs split backward, CE memory
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh configs  # norm launch configs where issue 4 is missed (split
#                                                            # at 64k/256k, fused at 1024, streaming hints), the
#                                                            # softmax split with hints, the activation family
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh next     # GPU tests, the split rungs' defaults next to one
#                                                            # change each, kw bench of the norm families
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh followup # see the case below (session 7)
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh narrowbwd  # the fused backward's switches at 1024 columns
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh paired     # layer norm backward: PAIRED_SUMS off / on
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh faststats  # the split forward: FAST_STATS off / on
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh ncu        # why rms at 65536 loses with FAST_STATS: counters
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh cluster    # softmax's CUDA C cluster rung (session 12), both
#                                                              # forms, stages and cluster sizes
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh cluster2   # session 13: CTAs of 256, clusters of 16, the
#                                                              # persistent form with the driver's residency
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh cluster3   # session 14: cache hints, 16 vectors a thread
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh cluster4   # session 14: the new defaults, issue 2's run
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh cluster5   # session 14: vectors held in shared memory
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh cluster6   # session 14: those as defaults, issue 2's run
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh rmscluster # session 14: the rms_norm cluster rung, then the
#                                                              # attention backward's GPU tests with what is left
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh rmswg      # the rms cluster rung's W_GROUP 1 / 2 / 4
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh wstage       # run 61: both norm cluster rungs' tests, fp16/32
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh normshape    # the norms' GPU tests, the cluster rungs' shapes
#                                                                # at wide rows, both sweeps (carry .whl)
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh bwdcluster   # the norm backward's cluster rung: tests, bench
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh bwdsweep     # its tests, resident clusters, the public ops, the
#                                                                # sweep with peers (the next session's first call)
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh fwdsweep     # the four forward families with peers, the patched
#                                                                # Llama's step
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh lnwide       # the norm cluster rungs' switches W_GROUP_SMEM,
#                                                                # W_EARLY, ONE_PASS_MEAN (tests first)
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh fusedwide    # the fused forward's tile at 4096 / 8192 /
#                                                                # 65536 x 1024 (norm_configs.py --fused-wide)
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh fusedtile    # layer norm's fused tiles: check, tests, sweep
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh fwdsweep2    # the norm forwards with Liger, Inductor's code
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh looped       # chunked as a looped reduction; Inductor's configs
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh rmsfast      # rms cluster FAST_STATS: tests, off / on
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh normpair     # the norm rungs' PAIR_ROWS: tests, the L2 probe,
#                                                                # off / on, ncu (session 19, not yet run)
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh narrowtile   # the fused tile at 65536 x 1024 to one warp a row
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh sumfirst     # the fused forward's FUSED_SUM_FIRST: tests, off /
#                                                                # on, peers (session 19, not yet run; carry .whl)
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh gx           # the norm backward's global exchange
#                                                                # (GLOBAL_FROM, session 21): tests, off / on
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh spare        # the 262144 backward's idle SMs given groups
#                                                                # (SPARE_WEIGHT, session 22): tests, weights
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh warpstate    # ncu stall reasons: layer norm's wide forward
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh lnfast       # layer norm cluster FAST_STATS / STORE_FMA,
#                                                                # split SPLIT_ONE_PASS
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh ln1024       # layer norm at 1024 columns with peers
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh catchup      # one call for sessions 22-23's switches: spare,
#                                                                # lnfast, reload and tail, each cut to its core
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh confirm      # session 24: layer norm's new FAST_STATS default
#                                                                # against the old, SPARE_WEIGHT's sweep
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh standing     # session 25: where issue 4 stands with session
#                                                                # 24's defaults: layer norm cluster vs split, the
#                                                                # CUDA graph test, both sweeps with peers, Llama
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh proxy        # session 25: an H200 stand-in on an H100 (SMs
#                                                                # held by an occupier kernel; sm_proxy.py); on an
#                                                                # H200 also the CTAs' timelines
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh proxyrep     # the stand-in's spread: both occupier shapes
#                                                                # twice, alternating, SM clocks read
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh either       # session 25's last call: on an H200 the
#                                                                # standing rows and timelines; on an H100 layer
#                                                                # norm's cluster switches under the stand-in
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh last25       # session 25's last call (~2 minutes): on an
#                                                                # H200 the wide rows' deciding rows (the next H200
#                                                                # session's first call; ~4 min); on an H100 two
#                                                                # store switches under the stand-in, twice
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh tcstats      # session 25: the norm cluster rungs' statistics
#                                                                # on the tensor cores (TC_STATS): GPU tests, off /
#                                                                # on / on with W_EARLY / on with W_GROUP_SMEM=8,
#                                                                # twice (the stand-in on an H100), ~3 minutes
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh next26       # session 26: the next call on either card (H200:
#                                                                # last25's rows first), TC_STATS and W_PREFETCH
#                                                                # (GPU tests, off / on, twice); ~7 min
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh next27       # session 27: next26 with HINTS split into loads /
#                                                                # stores (H200: last25's rows first); ~7 min
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh next28       # session 29: next27 on an H200; on an H100 the
#                                                                # stand-in with rms's two better halves together
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh hints        # session 33: softmax.cuda.HINTS off / on for
#                                                                # softmax's and layer norm's cluster rungs beside
#                                                                # layer norm's split (stand-in on an H100), 3 times
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh hints54      # session 33: the same for H200 run 54's softmax
#                                                                # cluster shape under the stand-in
#   KW_GPU_FROM=tests/test_x.py bash benchmarks/h200/ops.sh gpusuite  # the GPU tests (-m gpu) file by file from
#                                                                # KW_GPU_FROM (less its first KW_GPU_SKIP tests),
#                                                                # until KW_GPU_BUDGET s (540) are spent; prints
#                                                                # where the next slice starts; KW_GPU_TO=<file>
#                                                                # stops after that file
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh reload       # rms's fused forward as torch.compile's kernel
#                                                                # (x read again from L2), peers beside it
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh tail         # the forward at 262144 columns: whole waves of
#                                                                # clusters against a half-empty last one
#   KW_GIT_COMMIT=<sha> bash benchmarks/h200/ops.sh normcluster  # that, the layer_norm cluster rung's tests, and
#                                                                # layer_norm's sweep (carry .whl: Liger)
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
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee -a "$LOG"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$LOG"
python3 -c "import liger_kernel; print('liger-kernel', __import__('importlib.metadata').metadata.version('liger_kernel'))" \
  2>&1 | tail -1 | tee -a "$LOG"
echo "commit $KW_GIT_COMMIT" | tee -a "$LOG"
step() { local t=$1; shift; echo "== $* (limit ${t}s)" | tee -a "$LOG"; local s=$SECONDS
         timeout "$t" "$@" >> "$LOG" 2>&1; echo "   rc=$? in $((SECONDS - s))s" | tee -a "$LOG"; }
# each setting (NAME=VALUE[,NAME=VALUE] of rms_norm_bwd.cuda's switches) in its own process: the three norm backward
# families' cluster rung at the sizes $1 (bf16), then their rows
bwd_switch_runs() { local sizes=$1 sw a args; shift
  for sw in "$@"; do
    args=""; for a in ${sw//,/ }; do args="$args kernelwright.ops.rms_norm_bwd.cuda.$a"; done
    step 60 python3 benchmarks/experiments/switch_bench.py $args -- bench rms_norm_bwd layer_norm_bwd \
      add_rms_norm_bwd --dtypes bf16 --sizes "$sizes" --variant cluster --no-peers --max-seconds 0.3
    echo "   ($sw)" | tee -a "$LOG"
  done
  grep -E "│ (rms|layer|add_rms)_norm_bwd|^   \(" "$LOG" | cut -c1-100; }
# issue 4's standing rows (session 25): layer norm's cluster and split rungs at the wide rows twice, the spare-SM
# backward's GPU tests (the CUDA graph test among them), then the backward and forward sweeps at the issue's sizes
# with every rung and peer (carry .whl for Liger)
standing_rows() { local i
  for i in 1 2; do
    step 60 python3 -m kernelwright.cli bench layer_norm --dtypes bf16 --sizes 4096x65536,1024x262144 \
      --variant cluster --variant split --no-peers --max-seconds 0.3
    echo "   (layer norm wide, run $i)" | tee -a "$LOG"
  done
  step 150 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_norm_bwd_cluster.py -k "spare or graph"
  grep -E "passed|failed" "$LOG" | tail -1
  step 200 python3 -m kernelwright.cli bench rms_norm_bwd layer_norm_bwd add_rms_norm_bwd --dtypes bf16 \
    --sizes "16384x1024,65536x1024,16384x4096,16384x8192,16384x16384,4096x65536,1024x262144" --max-seconds 0.3
  step 150 python3 -m kernelwright.cli bench rms_norm layer_norm add_rms_norm swiglu --dtypes bf16 \
    --sizes "65536x1024,16384x4096,16384x8192,16384x16384,4096x65536,1024x262144" --max-seconds 0.3; }
# the norm cluster rungs with library switches, each setting (SPACE-separated module.NAME=VALUE, "-" for the
# defaults) in its own process, in the order given (list them twice to alternate): kw bench of cluster beside split
# at 16384 x 8192 / 4096 x 65536 / 1024 x 262144 on an H200; on an H100 sm_proxy.py's H200 stand-in (48 SMs held as
# whole GPCs) at the two wide sizes, each case's JSON in /tmp/sm_proxy_$1_<i>.json, tarred into $OUT/sm_proxy_$1.tgz.
# Set for one call (VAR=... cluster_switch_rows ...): ONLY (the stand-in's --only, default "rms cluster,layer
# cluster"), FAMILIES (kw bench's, default "layer_norm rms_norm"), SIZES (both branches' sizes), BASE (settings put
# before each case's) and NOTE (a word before each case's label)
cluster_switch_rows() { local tag=$1 i=0 setting sets t args; shift
  local only="${ONLY:-rms cluster,layer cluster}" fams="${FAMILIES:-layer_norm rms_norm}" base="${BASE:-}"
  local sizes="${SIZES:-16384x8192,4096x65536,1024x262144}" proxy_sizes="${SIZES:-4096x65536,1024x262144}"
  for setting in "$@"; do
    i=$((i + 1)); sets=$setting; [ "$setting" = - ] && sets=""
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
      step 60 python3 benchmarks/experiments/switch_bench.py $base $sets -- bench $fams --dtypes bf16 \
        --sizes "$sizes" --variant cluster --variant split --no-peers --max-seconds 0.3
    else
      args=""; for t in $base $sets; do args="$args --set $t"; done
      step 60 python3 benchmarks/experiments/sm_proxy.py $args --cluster 16 --blocked 0,48 \
        --sizes "$proxy_sizes" --only "$only" --json "/tmp/sm_proxy_${tag}_$i.json"
    fi
    t=${sets//kernelwright.ops./}; echo "   (${NOTE:+$NOTE }${t:-defaults})" | tee -a "$LOG"
  done
  tar -czf "$OUT/sm_proxy_$tag.tgz" -C /tmp $(cd /tmp && ls sm_proxy_${tag}_*.json 2>/dev/null) 2>/dev/null; }
# the rows an H200 session should take first since session 25 (about 4 minutes): the GPU tests of session 25's
# defaults (rms's early w loads at 262144, variant=None's rms cluster to 262144 in bf16), layer norm cluster vs split
# and rms at the wide rows twice, the backward's cluster rung at the wide rows (SPARE_WEIGHT 0.35: does 262144 pass
# 3.0?), the stand-in on the H200 itself (16 SMs held) and the CTAs' timelines
h200_wide_rows() { local i
  step 120 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_rms_norm_cluster.py tests/test_norms.py \
    -k "public_ops_through or 262144 or zero_rows or early"
  grep -E "passed|failed" "$LOG" | tail -1
  for i in 1 2; do
    step 60 python3 -m kernelwright.cli bench layer_norm rms_norm --dtypes bf16 --sizes 4096x65536,1024x262144 \
      --variant cluster --variant split --no-peers --max-seconds 0.3
    echo "   (wide rows, run $i)" | tee -a "$LOG"
  done
  step 90 python3 -m kernelwright.cli bench rms_norm_bwd layer_norm_bwd add_rms_norm_bwd --dtypes bf16 \
    --sizes 4096x65536,1024x262144 --variant cluster --variant split --no-peers --max-seconds 0.3
  step 60 python3 benchmarks/experiments/sm_proxy.py --cluster 16 --blocked 0,16 --sizes 4096x65536,1024x262144 \
    --json "$OUT/sm_proxy_h200.json"
  step 60 python3 benchmarks/experiments/norm_timeline.py --no-stagger
  cp /tmp/norm_timeline.json "$OUT/" 2>/dev/null; }
python3 -m kernelwright.cli roofline >> "$LOG" 2>&1
case "${1:-fwd}" in
  cluster)
    # session 12: the softmax cluster rung's GPU tests (both forms, then the family fuzz), issue 2's four sizes
    # against split, fused and torch, then the persistent form (PERSISTENT, its STAGES) and forced cluster sizes at
    # the two wide sizes. Run 51 ran the first version (one row a cluster; its barrier bug since fixed).
    step 150 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_softmax_cluster.py
    step 60 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_ladders.py -k "softmax and cluster"
    grep -E "passed|failed" "$LOG" | tail -2
    SM="32768x4096,16384x8192,4096x65536,1024x262144"
    step 100 python3 -m kernelwright.cli bench softmax --dtypes bf16 --sizes "$SM" --variant cluster \
      --variant split --variant fused --variant torch --max-seconds 0.5
    for sw in "PERSISTENT=True" "PERSISTENT=True STAGES=1" "PERSISTENT=True STAGES=3" \
              "PERSISTENT=True CLUSTER_SIZE=4" "CLUSTER_SIZE=4" "CLUSTER_SIZE=8"; do
      args=""; for a in $sw; do args="$args kernelwright.ops.softmax.cuda.$a"; done
      step 40 python3 benchmarks/experiments/switch_bench.py $args -- bench softmax --dtypes bf16 \
        --sizes 4096x65536,1024x262144 --variant cluster --no-peers --max-seconds 0.3
      echo "   ($sw)" | tee -a "$LOG"
    done
    grep -E "│ softmax|^   \(" "$LOG" | cut -c1-150
    ;;
  cluster2)
    # session 13, after run 52: the GPU tests of three forms (row a cluster, persistent, CTAs of 256 in clusters to
    # 16 set at launch); the wide sizes under one switch set each; then issue 2's four sizes side by side (torch,
    # fused, split, cluster) under the candidate defaults, each set in its own process
    step 150 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_softmax_cluster.py
    grep -E "passed|failed" "$LOG" | tail -1
    for sw in "MAX_THREADS_SPLIT=512" "MAX_THREADS_SPLIT=256" "MAX_THREADS_SPLIT=256 NONPORTABLE=True" \
              "MAX_THREADS_SPLIT=128" "PERSISTENT=True"; do
      args=""; for a in $sw; do args="$args kernelwright.ops.softmax.cuda.$a"; done
      step 40 python3 benchmarks/experiments/switch_bench.py $args -- bench softmax --dtypes bf16 \
        --sizes 4096x65536,1024x262144 --variant cluster --no-peers --max-seconds 0.3
      echo "   ($sw)" | tee -a "$LOG"
    done
    SM="32768x4096,16384x8192,4096x65536,1024x262144"
    for sw in "MAX_THREADS_SPLIT=256 NONPORTABLE=True" "PERSISTENT=True"; do
      args=""; for a in $sw; do args="$args kernelwright.ops.softmax.cuda.$a"; done
      step 100 python3 benchmarks/experiments/switch_bench.py $args -- bench softmax --dtypes bf16 --sizes "$SM" \
        --variant cluster --variant split --variant fused --variant torch --max-seconds 0.5
      echo "   ($sw)" | tee -a "$LOG"
    done
    grep -E "│ softmax|^   \(" "$LOG" | cut -c1-150
    ;;
  cluster3)
    # session 14, after run 53 (16 x 256 at 262144: 3.52): GPU tests of five forms; streaming cache hints (HINTS)
    # and 16 vectors a thread at 128 registers (VECTORS_A_THREAD=16 SM_THREADS=512) at the wide sizes, one switch
    # set a process; then issue 2's four sizes side by side under the three likeliest sets
    step 200 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_softmax_cluster.py
    grep -E "passed|failed" "$LOG" | tail -1
    B="MAX_THREADS_SPLIT=256 NONPORTABLE=True"; V="VECTORS_A_THREAD=16 SM_THREADS=512"
    for sw in "$B" "$B HINTS=True" "$V MAX_THREADS_SPLIT=256" "$V MAX_THREADS_SPLIT=256 HINTS=True" \
              "$V MAX_THREADS_SPLIT=128 NONPORTABLE=True" "$V MAX_THREADS_SPLIT=128 NONPORTABLE=True HINTS=True"; do
      args=""; for a in $sw; do args="$args kernelwright.ops.softmax.cuda.$a"; done
      step 40 python3 benchmarks/experiments/switch_bench.py $args -- bench softmax --dtypes bf16 \
        --sizes 4096x65536,1024x262144 --variant cluster --no-peers --max-seconds 0.3
      echo "   ($sw)" | tee -a "$LOG"
    done
    SM="32768x4096,16384x8192,4096x65536,1024x262144"
    for sw in "$B HINTS=True" "$V MAX_THREADS_SPLIT=256 HINTS=True" "$V MAX_THREADS_SPLIT=128 NONPORTABLE=True HINTS=True"; do
      args=""; for a in $sw; do args="$args kernelwright.ops.softmax.cuda.$a"; done
      step 100 python3 benchmarks/experiments/switch_bench.py $args -- bench softmax --dtypes bf16 --sizes "$SM" \
        --variant cluster --variant split --variant fused --variant torch --max-seconds 0.5
      echo "   ($sw)" | tee -a "$LOG"
    done
    grep -E "│ softmax|^   \(" "$LOG" | cut -c1-150
    ;;
  cluster4)
    # session 14, after run 54: the cluster rung's new defaults (CTAs of 256, clusters to 16; auto picks it for wide
    # rows): GPU tests of every form and of the softmax files, issue 2's four sizes with every rung and peer in one
    # run, then fp16 / fp32 at the wide sizes (auto takes cluster for them too)
    step 200 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_softmax_cluster.py \
      tests/test_softmax_split.py
    step 90 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_ladders.py -k "softmax"
    grep -E "passed|failed" "$LOG" | tail -2
    step 200 python3 -m kernelwright.cli bench softmax --dtypes bf16 --max-seconds 0.5
    step 100 python3 -m kernelwright.cli bench softmax --dtypes fp16,fp32 --sizes 4096x65536,1024x262144 \
      --variant cluster --variant split --variant torch --max-seconds 0.4
    # 5 CTAs of 256 an SM at 48 registers (12-20 bytes of spills, sm_90 SASS)
    step 40 python3 benchmarks/experiments/switch_bench.py kernelwright.ops.softmax.cuda.SM_THREADS=1280 -- bench \
      softmax --dtypes bf16 --sizes 4096x65536,1024x262144 --variant cluster --no-peers --max-seconds 0.3
    grep -E "│ softmax" "$LOG" | cut -c1-150
    ;;
  cluster5)
    # session 14, after run 55 (3.53 at 1024x262144 with 16 x 256): half of a thread's vectors in shared memory
    # (SMEM_VECTORS, cp.async), so CTAs of 256 hold 64 KB and 262144 takes clusters of 8 at 4 CTAs an SM
    step 120 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_softmax_cluster.py -k "smem8 or row-a"
    grep -E "passed|failed" "$LOG" | tail -1
    for sw in "SMEM_VECTORS=0" "SMEM_VECTORS=8" "SMEM_VECTORS=8 MAX_THREADS_SPLIT=128" "SMEM_VECTORS=4" \
              "SMEM_VECTORS=8 MAX_THREADS_SPLIT=512"; do
      args=""; for a in $sw; do args="$args kernelwright.ops.softmax.cuda.$a"; done
      step 40 python3 benchmarks/experiments/switch_bench.py $args -- bench softmax --dtypes bf16 \
        --sizes 4096x65536,1024x262144 --variant cluster --no-peers --max-seconds 0.3
      echo "   ($sw)" | tee -a "$LOG"
    done
    SM="32768x4096,16384x8192,4096x65536,1024x262144"
    step 100 python3 benchmarks/experiments/switch_bench.py kernelwright.ops.softmax.cuda.SMEM_VECTORS=8 -- bench \
      softmax --dtypes bf16 --sizes "$SM" --variant cluster --variant split --variant fused --variant torch \
      --max-seconds 0.5
    grep -E "│ softmax|^   \(" "$LOG" | cut -c1-150
    ;;
  cluster6)
    # session 14, after run 56: the defaults are CTAs of 512 with half of a wide 16-bit row in shared memory. GPU
    # tests of every form, the split file and the family fuzz; issue 2's four sizes with every rung and peer in one
    # run; fp16 / fp32 at the wide sizes; a second process at the wide sizes (spread); two neighbours of the default
    step 200 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_softmax_cluster.py \
      tests/test_softmax_split.py
    step 90 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_ladders.py -k "softmax"
    grep -E "passed|failed" "$LOG" | tail -2
    step 200 python3 -m kernelwright.cli bench softmax --dtypes bf16 --max-seconds 0.5
    step 100 python3 -m kernelwright.cli bench softmax --dtypes fp16,fp32 --sizes 4096x65536,1024x262144 \
      --variant cluster --variant split --variant torch --max-seconds 0.4
    step 60 python3 -m kernelwright.cli bench softmax --dtypes bf16 --sizes 4096x65536,1024x262144 \
      --variant cluster --variant split --variant torch --max-seconds 0.4
    for sw in "MAX_THREADS_SPLIT=1024" "MAX_THREADS_SPLIT=256"; do
      step 40 python3 benchmarks/experiments/switch_bench.py kernelwright.ops.softmax.cuda.$sw -- bench softmax \
        --dtypes bf16 --sizes 4096x65536,1024x262144 --variant cluster --no-peers --max-seconds 0.3
      echo "   ($sw)" | tee -a "$LOG"
    done
    grep -E "│ softmax|^   \(" "$LOG" | cut -c1-150
    ;;
  rmscluster)
    # session 14: the rms_norm cluster rung (new, CPU-verified only): its GPU tests and the family fuzz, the softmax
    # cluster's GPU tests again (shared header, the driver check moved), rms_norm's sweep with every rung and peer;
    # then tests/test_attention_bwd.py -m gpu (issue 5's backward defaults, never run whole) until LIMIT
    step 150 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_rms_norm_cluster.py
    step 60 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_ladders.py -k "rms_norm and cluster"
    step 60 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_softmax_cluster.py -k "row-a or portable"
    grep -E "passed|failed" "$LOG" | tail -3
    step 150 python3 -m kernelwright.cli bench rms_norm --dtypes bf16 --max-seconds 0.4
    grep -E "│ rms_norm" "$LOG" | cut -c1-150
    OUT="$OUT" LIMIT=${LIMIT:-200} step 230 bash benchmarks/h200/gputests.sh bwd
    ;;
  rmswg|normcluster)
    # session 14, after run 59 (rms cluster 3.65 / 3.19 at 4096x65536 / 1024x262144, each store waiting for its
    # weight vector). The GPU tests of the rms rung as it is now (changed after run 59) and of the new layer_norm
    # cluster rung (never run), their family fuzz; rms's weight vectors loaded 1, 2 or 4 at a time, each in its own
    # process (kw bench checks first); then layer_norm's sweep with every rung and peer (carry .whl for Liger)
    step 150 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_rms_norm_cluster.py \
      tests/test_layer_norm_cluster.py
    step 60 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_ladders.py -k "norm and cluster"
    grep -E "passed|failed" "$LOG" | tail -2
    for g in 1 2 4; do
      step 40 python3 benchmarks/experiments/switch_bench.py kernelwright.ops._cluster_norm.W_GROUP=$g -- bench \
        rms_norm --dtypes bf16 --sizes 4096x65536,1024x262144 --variant cluster --variant split --no-peers \
        --max-seconds 0.3
      echo "   (W_GROUP=$g)" | tee -a "$LOG"
    done
    [ "${1}" = normcluster ] && step 150 python3 -m kernelwright.cli bench layer_norm --dtypes bf16 --max-seconds 0.4
    grep -E "│ (rms|layer)_norm|^   \(" "$LOG" | cut -c1-120
    ;;
  wstage)
    # session 15, run 61 (after run 60: rms's w of 4 accesses in flight won, the default for both norm cluster
    # rungs): both rungs' GPU tests, w staged in shared memory off / on (the switch W_STAGE, refuted by this run and
    # removed since), fp16 / fp32 for variant=None's choice by dtype
    step 150 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_rms_norm_cluster.py \
      tests/test_layer_norm_cluster.py
    NS="16384x8192,16384x16384,4096x65536,1024x262144"
    step 120 python3 -m kernelwright.cli bench rms_norm layer_norm --dtypes fp16,fp32 --sizes "$NS" \
      --variant cluster --variant split --variant fused --no-peers --max-seconds 0.3
    ;;
  normshape)
    # session 15, after run 61 (variant=None now takes the cluster rung where it led): the norms' GPU tests (the
    # public ops through the new choice; not run since session 11) and the cluster rungs'; then the cluster rungs'
    # launch shapes at the wide rows, where layer norm trails split: no shared-memory vectors (clusters of 2 / 8
    # CTAs of 512), CTAs of 256 (4 / 16), of 1024 (1 / 4), each in its own process; then both families' sweeps
    # with every rung and peer (carry .whl for Liger)
    step 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_ladders.py -k "norm"
    step 300 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_norms.py tests/test_rms_norm_cluster.py \
      tests/test_layer_norm_cluster.py
    grep -E "passed|failed" "$LOG" | tail -1
    for sw in "SMEM_VECTORS=8" "SMEM_VECTORS=0" "MAX_THREADS_SPLIT=256 SMEM_VECTORS=0" \
              "MAX_THREADS_SPLIT=1024 SMEM_VECTORS=0"; do
      args=""; for a in $sw; do args="$args kernelwright.ops.softmax.cuda.$a"; done
      step 60 python3 benchmarks/experiments/switch_bench.py $args -- bench rms_norm layer_norm --dtypes bf16 \
        --sizes 4096x65536,1024x262144 --variant cluster --no-peers --max-seconds 0.3
      echo "   ($sw)" | tee -a "$LOG"
    done
    step 200 python3 -m kernelwright.cli bench rms_norm layer_norm --dtypes bf16 --max-seconds 0.4
    grep -E "│ (rms|layer)_norm|^   \(" "$LOG" | cut -c1-100
    ;;
  bwdcluster)
    # session 16: the norm backward's cluster rung (CUDA C, persistent clusters, x and dy staged by cp.async), its
    # GPU tests first, then against split and fused at issue 4's widths (each family in one process), then switches
    # (SW: settings separated by spaces, a setting's switches by commas, e.g. SW="NV=2,STAGES=4 HOLD_W=True"; each
    # in its own process) at four widths. Run 67 (810ce04) ran SW="STAGES=3 HOLD_W=True HINTS=True" with w
    # read from L1 each pass; run 68 (775b1ac, w in shared memory) the default SW below
    step 240 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_norm_bwd_cluster.py
    grep -E "passed|failed" "$LOG" | tail -1
    BS="16384x1024,16384x4096,16384x8192,16384x16384,4096x65536,1024x262144"
    step 150 python3 -m kernelwright.cli bench rms_norm_bwd layer_norm_bwd add_rms_norm_bwd --dtypes bf16 \
      --sizes "$BS" --variant cluster --variant split --variant fused --no-peers --max-seconds 0.3
    for sw in ${SW:-"STAGES=3" "HOLD_W=True"}; do
      args=""; for a in ${sw//,/ }; do args="$args kernelwright.ops.rms_norm_bwd.cuda.$a"; done
      step 60 python3 benchmarks/experiments/switch_bench.py $args -- bench rms_norm_bwd layer_norm_bwd --dtypes bf16 \
        --sizes 16384x1024,16384x8192,4096x65536,1024x262144 --variant cluster --no-peers --max-seconds 0.3
      echo "   ($sw)" | tee -a "$LOG"
    done
    grep -E "│ (rms|layer|add_rms)_norm_bwd|^   \(" "$LOG" | cut -c1-100
    ;;
  bwdsweep)
    # session 16 (run 69, ab07637, ran it without the second step; session 17 added 65536 x 1024, the 1024-column
    # size the issue allows where 16384 rows stop the copy itself at 3.2 TB/s): the backward cluster rung's GPU tests, its launch
    # shape and the driver's resident clusters at each width, float64-checked through the harness (262144 columns
    # take clusters of 16: fewer than 8 resident leaves SMs idle), the public ops' forward and backward through the
    # choice, then the three backward families with every rung and peer in one process each (carry .whl for Liger).
    # The next session's first call: layer norm's narrow shape (NARROW_CENTER, default since runs 71-72) has been
    # checked only by the second step's script
    step 200 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_norm_bwd_cluster.py
    step 60 python3 benchmarks/experiments/bwd_cluster_switch_check.py
    step 120 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_norms.py -k public_ops_through
    grep -E "passed|failed|resident" "$LOG" | tail -24
    BS="16384x1024,65536x1024,16384x4096,16384x8192,16384x16384,4096x65536,1024x262144"
    step 300 python3 -m kernelwright.cli bench rms_norm_bwd layer_norm_bwd add_rms_norm_bwd --dtypes bf16 \
      --sizes "$BS" --max-seconds 0.3
    grep -E "│ (rms|layer|add_rms)_norm_bwd" "$LOG" | cut -c1-100
    # session 17: the one attention GPU test never run (the tuned rung in fp32 inputs)
    step 120 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_attention.py -k "rungs_fp16_fp32 and tuned"
    grep -E "passed|failed" "$LOG" | tail -1
    ;;
  fwdsweep)
    # session 17: the four forward families at the issue's sizes (1024 columns at 65536 rows, where the copy itself
    # reaches ~4 TB/s; 16384 rows stop it at 3.2), every rung and peer in one process each (carry .whl for Liger),
    # then the patched Llama's training step with the session-16 backward (README's 1.15x predates it)
    FS="65536x1024,16384x4096,16384x8192,16384x16384,4096x65536,1024x262144"
    step 300 python3 -m kernelwright.cli bench rms_norm layer_norm add_rms_norm swiglu --dtypes bf16 \
      --sizes "$FS" --max-seconds 0.3
    OUT="$OUT" step 150 python3 benchmarks/experiments/llama_patch_speed.py
    grep -E "tokens|speedup|logits" "$LOG" | tail -6
    ;;
  fusedfast)
    # session 17: the fused forward's FUSED_FAST switch (one dependent reduction fewer) off / on / off / on, each in
    # its own process, every family at the widths where fused leads or trails a peer (run 74: layer norm 3.44
    # against Liger's 3.63 at 16384 x 4096, 3.72 against torch.compile's 3.94 at 65536 x 1024)
    FF="65536x1024,16384x4096,16384x8192,16384x16384"
    for ff in False True False True; do
      step 90 python3 benchmarks/experiments/switch_bench.py kernelwright.ops.rms_norm.triton.FUSED_FAST=$ff -- \
        bench rms_norm layer_norm add_rms_norm --dtypes bf16 --sizes "$FF" --variant fused --no-peers \
        --max-seconds 0.3
      echo "   (FUSED_FAST=$ff)" | tee -a "$LOG"
    done
    grep -E "│ (rms|layer|add_rms)_norm|^   \(" "$LOG" | cut -c1-100
    ;;
  fusedwide)
    # session 18: the fused forward's tile (rows a program x warps) where layer norm misses 3.6 or trails a peer
    # (16384 x 4096: 3.52 against Liger's 3.63; 65536 x 1024: 3.55-3.83 against torch.compile's 3.94) and rms at
    # 8192 (3.95 against torch.compile's 4.19), each config float64-checked before it is timed (norm_configs.py)
    OUT="$OUT" step 300 python3 benchmarks/experiments/norm_configs.py --fused-wide --max-seconds 0.3
    grep -A40 "best per" "$LOG" | head -12
    ;;
  narrowtile)
    # session 19, not yet run: the fused forward's tile at 65536 x 1024 down to one warp a row (torch.compile's
    # layer norm there: one warp a row, 3.93 against 3.84, runs 82 / 84); each config float64-checked first
    OUT="$OUT" step 200 python3 benchmarks/experiments/norm_configs.py --narrow --max-seconds 0.3
    grep -A40 "best per" "$LOG" | head -12
    ;;
  fusedtile)
    # session 18: layer norm's fused tiles (rms_norm.triton.FUSED_CENTER_TILES, from run 80's sweep): the family's
    # fuzz on the GPU against float64 (kw check, every dtype), the norms' GPU tests, then layer norm's forward with
    # every rung and peer at the issue's sizes in one process (carry .whl for Liger)
    step 150 python3 -m kernelwright.cli check layer_norm --variant fused
    step 200 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_norms.py
    grep -E "passed|failed" "$LOG" | tail -1
    FS="65536x1024,16384x4096,16384x8192,16384x16384,4096x65536,1024x262144"
    step 200 python3 -m kernelwright.cli bench layer_norm --dtypes bf16 --sizes "$FS" --max-seconds 0.3
    grep -E "│ layer_norm" "$LOG" | cut -c1-100
    ;;
  fwdsweep2)
    # session 18, after layer norm's fused tiles (run 81 ran them without Liger: the wheel was not carried): the
    # three norm forward families with every rung and peer (carry .whl: Liger) at the issue's sizes, one process,
    # then the Triton code torch.compile generates where it leads (inductor_norm_code.py: saved for the journal)
    FS="65536x1024,16384x4096,16384x8192,16384x16384,4096x65536,1024x262144"
    step 300 python3 -m kernelwright.cli bench rms_norm layer_norm add_rms_norm --dtypes bf16 --sizes "$FS" \
      --max-seconds 0.3
    OUT="$OUT" step 120 python3 benchmarks/experiments/inductor_norm_code.py
    grep -E "│ (rms|layer|add_rms)_norm " "$LOG" | cut -c1-100
    ;;
  looped)
    # session 18: the chunked rung as a looped reduction (torch.compile's shape where it leads: rms 16384 x 8192,
    # layer norm 16384 x 16384), float64-checked then timed next to the cluster rung (norm_configs.py --looped);
    # then the configs Inductor's kernels settle on at those shapes (inductor_norm_code.py)
    OUT="$OUT" step 200 python3 benchmarks/experiments/norm_configs.py --looped --max-seconds 0.3
    grep -A20 "best per" "$LOG" | head -6
    OUT="$OUT" step 150 python3 benchmarks/experiments/inductor_norm_code.py
    grep -E "chosen|x[0-9]+: " "$LOG" | cut -c1-300
    ;;
  rmsfast)
    # session 18: the rms cluster rung's FAST_STATS (one-pass statistics where a chunk's range allows): its GPU tests
    # (both settings: float64, extremes, bit-equality inside the range), then off / on / off / on, each in its own
    # process, at the widths the rung serves (about 4 minutes with the start: the session's last device time)
    step 110 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_rms_norm_cluster.py
    grep -E "passed|failed" "$LOG" | tail -1
    for f in False True False True; do
      step 30 python3 benchmarks/experiments/switch_bench.py kernelwright.ops.rms_norm.cuda.FAST_STATS=$f -- \
        bench rms_norm --dtypes bf16 --sizes 16384x8192,16384x16384,4096x65536,1024x262144 --variant cluster \
        --no-peers --max-seconds 0.2
      echo "   (FAST_STATS=$f)" | tee -a "$LOG"
    done
    grep -E "│ rms_norm|^   \(" "$LOG" | cut -c1-90
    ;;
  normpair)
    # session 19, not yet run (no GPU was lent that session): are the norm cluster rungs' wide forwards bound by L2,
    # w (and b) read again for every row (layer norm at 65536 columns: 256 KB of them a row against 128 KB of x)?
    # GPU tests of both PAIR_ROWS kernels (two rows a cluster, w and b read once for both; the default kernels' SASS
    # is unchanged, so their tests are not repeated); norm_l2_probe.py (L2's read bandwidth; the layer norm rung with b = w; rms and softmax at the same
    # shapes); PAIR_ROWS off / on / on with layer norm's PAIR_ONE_PASS, twice, each in its own process, split
    # alongside; then Nsight
    # Compute's memory tables for one layer norm launch off and on (whether ncu reads counters on this machine: the
    # step says). About 5 minutes with the start.
    step 120 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_layer_norm_cluster.py \
      tests/test_rms_norm_cluster.py -k pair
    grep -E "passed|failed" "$LOG" | tail -1
    step 90 python3 benchmarks/experiments/norm_l2_probe.py
    for sw in "PAIR_ROWS=False" "PAIR_ROWS=True" "PAIR_ROWS=True PAIR_ONE_PASS=True" \
              "PAIR_ROWS=False" "PAIR_ROWS=True" "PAIR_ROWS=True PAIR_ONE_PASS=True"; do
      p=${sw%% *}; p=${p#PAIR_ROWS=}
      args="kernelwright.ops.layer_norm.cuda.PAIR_ROWS=$p kernelwright.ops.rms_norm.cuda.PAIR_ROWS=$p"
      [ "$sw" != "${sw#* }" ] && args="$args kernelwright.ops.layer_norm.cuda.PAIR_ONE_PASS=True"
      step 60 python3 benchmarks/experiments/switch_bench.py $args -- bench layer_norm rms_norm --dtypes bf16 \
        --sizes 4096x65536,1024x262144 --variant cluster --variant split --no-peers --max-seconds 0.3
      echo "   ($sw)" | tee -a "$LOG"
    done
    NCU="ncu --clock-control none --target-processes all --kernel-name regex:layer_norm_cluster --launch-skip 8
         --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables --section Occupancy --csv
         --page details"
    for p in False True; do
      echo "== ncu layer_norm cluster 4096x65536 PAIR_ROWS=$p" | tee -a "$LOG"
      timeout 90 $NCU python3 benchmarks/experiments/switch_bench.py kernelwright.ops.layer_norm.cuda.PAIR_ROWS=$p -- \
        bench layer_norm --variant cluster --no-peers --dtypes bf16 --sizes 4096x65536 --max-seconds 0.2 \
        > "/tmp/ncu_ln_$p.csv" 2>> "$LOG"
      echo "   rc=$?" | tee -a "$LOG"
      grep -E '"(Duration|Memory Throughput|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|L2 Hit Rate|Achieved Occupancy)' \
        "/tmp/ncu_ln_$p.csv" | awk -F'","' '{print $(NF-2) " | " $NF}' | head -20 | tee -a "$LOG"
    done
    tar -czf "$OUT/ncu.tgz" -C /tmp $(cd /tmp && ls ncu_ln_*.csv) 2>/dev/null
    grep -E "│ (layer|rms|add_rms)_norm|^   \(|TB/s" "$LOG" | cut -c1-100
    ;;
  gx)
    # session 21, not yet run: the norm backward's cluster rung with the row's sums traded through global memory
    # (rms_norm_bwd.cuda.GLOBAL_FROM: rows of at least that many CTAs; clusters of one, a cooperative grid of whole
    # groups: 262144 bf16 columns 8 groups of 16 on 128 SMs against 7 clusters of 16 on 112; 65536 33 groups of 4
    # against 30 clusters). Its GPU tests (float64, two runs bit for bit, the slots left zeroed), then off / 16 / 2
    # / 16 with three stages (a step's exchange waits on L2 round trips: more in flight may cover them), twice, each
    # in its own process, cluster rung only. About 5 minutes with the start.
    step 150 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_norm_bwd_cluster.py -k global
    grep -E "passed|failed" "$LOG" | tail -1
    bwd_switch_runs 4096x65536,1024x262144 ${GX_SW:-GLOBAL_FROM=0 GLOBAL_FROM=16 GLOBAL_FROM=2 \
      GLOBAL_FROM=16,STAGES=3 GLOBAL_FROM=0 GLOBAL_FROM=16 GLOBAL_FROM=2 GLOBAL_FROM=16,STAGES=3}
    ;;
  spare)
    # session 22, not yet run: the norm backward at 262144 columns, where 7 clusters of 16 leave 20 of 132 SMs idle:
    # a second launch on a side stream runs global-exchange groups (GROUP) there at the same time, over a share of
    # the rows (rms_norm_bwd.cuda.SPARE_WEIGHT: a group's rows against a cluster's; run 87: a group step ~1.4x a
    # cluster's). Its GPU tests (float64, dx bit for bit the clusters-only result, two runs the same bits), then
    # weights 0 / 0.5 / 0.7 / 0.9, twice, each in its own process, cluster rung only; 2048 rows beside 1024 (the
    # split of rows is coarser with fewer). About 5 minutes with the start.
    step 150 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_norm_bwd_cluster.py -k spare
    grep -E "passed|failed" "$LOG" | tail -1
    bwd_switch_runs 1024x262144,2048x262144 ${SPARE_SW:-SPARE_WEIGHT=0 SPARE_WEIGHT=0.5 SPARE_WEIGHT=0.7 \
      SPARE_WEIGHT=0.9 SPARE_WEIGHT=0 SPARE_WEIGHT=0.5 SPARE_WEIGHT=0.7 SPARE_WEIGHT=0.9}
    ;;
  lnfast)
    # session 22, not yet run: the layer norm cluster rung with fewer instructions an element (~15 against rms's ~7,
    # sm_90 SASS): FAST_STATS (the largest magnitude, sum and sum of squares in one pass and one barrier; the wide
    # 16-bit rows only) and STORE_FMA (the store as two FMAs); and the split rung's SPLIT_ONE_PASS (the same one
    # reduction in Triton). GPU tests first (and the split rung's, with the switch: test_ladders' layer_norm split),
    # then off / each / both, twice, each in its own process, cluster and split side by side. About 7 minutes.
    step 150 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_layer_norm_cluster.py -k fast_stats
    step 90 python3 benchmarks/experiments/switch_bench.py kernelwright.ops.rms_norm.triton.SPLIT_ONE_PASS=True -- \
      check layer_norm --variant split --dtypes bf16,fp16
    grep -E "passed|failed" "$LOG" | tail -1
    L=kernelwright.ops.layer_norm.cuda T=kernelwright.ops.rms_norm.triton
    for sw in "" "$L.FAST_STATS=True" "$L.STORE_FMA=True" "$L.FAST_STATS=True $L.STORE_FMA=True" \
              "$T.SPLIT_ONE_PASS=True" "" "$L.FAST_STATS=True" "$L.STORE_FMA=True" \
              "$L.FAST_STATS=True $L.STORE_FMA=True" "$T.SPLIT_ONE_PASS=True"; do
      step 60 python3 benchmarks/experiments/switch_bench.py $sw -- bench layer_norm --dtypes bf16 \
        --sizes 16384x8192,16384x16384,4096x65536,1024x262144 --variant cluster --variant split --no-peers \
        --max-seconds 0.3
      sw=${sw//kernelwright.ops./}; echo "   (${sw:-defaults})" | tee -a "$LOG"
    done
    grep -E "│ layer_norm|^   \(" "$LOG" | cut -c1-100
    ;;
  warpstate)
    # session 22, not yet run: where layer norm's wide forward waits (latency-bound by run 87's counters: DRAM 62%,
    # occupancy 47% at 4096 x 65536). Nsight Compute's stall reasons (issue-active cycles a warp spends stalled, by
    # reason) and issue rates for one launch each of layer norm's cluster and split rungs and rms's cluster rung (the
    # 4.0 TB/s contrast) at 4096 x 65536 and 1024 x 262144, bf16. First the CTAs' own timelines (norm_timeline.py:
    # phases, and whether the two CTAs of an SM overlap their memory phases or move in step). About 5 minutes.
    step 240 python3 benchmarks/experiments/norm_timeline.py
    cp /tmp/norm_timeline.json "$OUT/" 2>/dev/null
    for case in "layer_norm cluster" "layer_norm split" "rms_norm cluster"; do
      set -- $case
      for size in 4096x65536 1024x262144; do
        tag="${1}_${2}_$size"
        echo "== ncu $tag" | tee -a "$LOG"
        timeout 120 ncu --clock-control none --target-processes all --kernel-name "regex:${1}_cluster|_norm_fwd_split" \
          --launch-skip 6 --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats \
          --section SchedulerStats --csv --page raw \
          python3 -m kernelwright.cli bench "$1" --variant "$2" --no-peers --dtypes bf16 --sizes "$size" \
          --max-seconds 0.2 > "/tmp/ncu_ws_$tag.csv" 2>> "$LOG"
        echo "   rc=$?" | tee -a "$LOG"
        python3 - "/tmp/ncu_ws_$tag.csv" <<'PY' | tee -a "$LOG"
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if len(rows) < 3:
    print("   no metrics"); sys.exit()
head, units, vals = rows[0], rows[1], rows[-1]
got = {h: v for h, v in zip(head, vals)}
print("   kernel", got.get("Kernel Name", "?")[:60])
want = ("gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "sm__warps_active.avg.pct_of_peak_sustained_active", "smsp__issue_active.avg.pct_of_peak_sustained_active",
        "smsp__warps_eligible.avg.per_cycle_active", "launch__registers_per_thread")
for h in head:
    if h in want:
        print(f"   {h}: {got[h]}")
def num(v):
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return 0.0
st = sorted(((num(got[h]), h) for h in head
             if h.startswith("smsp__average_warps_issue_stalled_") and h.endswith("_per_issue_active.ratio")),
            reverse=True)
print("   stalls (cycles a warp a issue):", ", ".join(f"{h.split('stalled_')[1].split('_per')[0]} {v:.2f}"
                                                     for v, h in st[:8]))
PY
      done
    done
    tar -czf "$OUT/ncu.tgz" -C /tmp $(cd /tmp && ls ncu_ws_*.csv) 2>/dev/null
    grep -E "^== ncu|stalls|duration|dram__" "$LOG" | cut -c1-160
    sed -n '/^case  /,/^(phases/p' "$LOG"
    ;;
  proxy)
    # session 25: the H100s lent since session 24 run every wide-row forward at 88-95% of their 3.00 TB/s copy, so
    # they cannot show what holds the H200 at 3.0-3.5 of 4.25. sm_proxy.py holds N SMs with a resident occupier so
    # the other SMs each get the H200's HBM share (~32 GB/s), and reports GB/s an active SM and that times 132, for
    # the cases with H200 rows (runs 86-87) to check the stand-in against. About 2 minutes.
    # Run 96 (scattered occupier, 0-77 SMs held) matched the H200's rows at 65536 columns within 4% with 44 SMs held;
    # at 262144 the rungs' clusters of 4 lost their GPCs and the run hung at 77 (fixed). Now: whole GPCs held
    # (clusters of 16) at the wide sizes, and the narrow size where torch.compile led on the H200.
    P=benchmarks/experiments/sm_proxy.py
    step 150 python3 $P --cluster 16 --blocked 0,32,48 --sizes 4096x65536,1024x262144 --json "$OUT/sm_proxy_gpc.json"
    step 100 python3 $P --cluster 16 --blocked 0,48 --sizes 8192x32768,2048x131072 --only layer \
      --json "$OUT/sm_proxy_mid.json"
    step 120 python3 $P --blocked 0,44 --sizes 16384x8192 --json "$OUT/sm_proxy_narrow.json"
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
      step 240 python3 benchmarks/experiments/norm_timeline.py
      cp /tmp/norm_timeline.json "$OUT/" 2>/dev/null
    fi
    grep -E "^case|x132 .*at|^[a-z].* [0-9]+x[0-9]+ +[0-9.]+ " "$LOG" | grep -v "at [0-9]* s" | head -60
    ;;
  proxyrep)
    # session 25, after runs 96-97: the stand-in's own spread, both occupier shapes (44 SMs scattered, 48 as whole
    # GPCs) twice each, alternating, at the two wide sizes; the SM clock read after every case. About 2 minutes.
    P=benchmarks/experiments/sm_proxy.py
    for i in 1 2; do
      step 100 python3 $P --blocked 0,44 --sizes 4096x65536,1024x262144 --json "$OUT/sm_proxy_sm44_$i.json"
      step 100 python3 $P --cluster 16 --blocked 0,48 --sizes 4096x65536,1024x262144 --json "$OUT/sm_proxy_gpc48_$i.json"
    done
    grep -E "^case|^[a-z].* [0-9]+x[0-9]+ +[0-9.]+ +[0-9.]+$" "$LOG" | head -80
    ;;
  tcstats)
    # session 25 (compiled and emulated only): TC_STATS, FAST_STATS' sums by mma.sync (layer_norm: sum and sum of
    # squares, 3 tensor-core instructions a held vector where the fold issues 24; rms_norm: the squares, 2 against
    # 16). Its GPU tests first (float64, and rstd against the fold's), then, each setting in its own process, twice:
    # off / on / on with the store's early w and b (_cluster_norm.W_EARLY: the timeline's other layer norm phase, b's
    # L2 round trips; it spilled 84-96 bytes at 262144 without TC_STATS, 48 with; it forces rms's early loads at 65536
    # too, so read layer norm's rows there) / on with W_GROUP_SMEM=8, at 16384 x 8192 / 4096 x 65536 / 1024 x 262144:
    # kw bench (cluster beside split) on an H200; on an H100 the stand-in (48 SMs held as GPCs), where the statistics
    # phase took 4.7 us a CTA for layer norm (run 99).
    step 150 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_layer_norm_cluster.py \
      tests/test_rms_norm_cluster.py -k tc_stats
    grep -E "passed|failed" "$LOG" | tail -1
    L=kernelwright.ops.layer_norm.cuda.TC_STATS R=kernelwright.ops.rms_norm.cuda.TC_STATS C=kernelwright.ops._cluster_norm
    off="$L=False $R=False" on="$L=True $R=True"
    cluster_switch_rows tc "$off" "$on" "$on $C.W_EARLY=True" "$on $C.W_GROUP_SMEM=8" \
                           "$off" "$on" "$on $C.W_EARLY=True" "$on $C.W_GROUP_SMEM=8"
    grep -E "│ (layer|rms)_norm |^case|^[a-z].* [0-9]+x[0-9]+ +[0-9.]+ +[0-9.]+$|^   \(" "$LOG" | cut -c1-100 | head -90
    ;;
  next26)
    # the next session's first call, on whichever card comes (~7 minutes on an H200). On an H200: h200_wide_rows
    # (session 25's defaults: GPU tests, the wide rows twice, the backward, the stand-in, timelines). On either card:
    # the GPU tests of session 25-26's switches (TC_STATS; W_PREFETCH, the store's w and b prefetched into L1 ahead
    # of their loads), then each setting in its own process, alternating, twice: defaults / TC_STATS /
    # W_PREFETCH=2 / 4 / TC_STATS with W_PREFETCH=2 / W_PREFETCH=2 with HINTS (kw bench on an H200; on an H100 the
    # stand-in, with HINTS alone too); on an H200 last, rms 16384 x 8192 fused with FUSED_RELOAD (session 23's
    # reading of torch.compile's kernel) beside torch.compile, off / on twice.
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then h200_wide_rows; fi
    step 150 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_layer_norm_cluster.py \
      tests/test_rms_norm_cluster.py -k "tc_stats or prefetch"
    grep -E "passed|failed" "$LOG" | tail -1
    T="kernelwright.ops.layer_norm.cuda.TC_STATS=True kernelwright.ops.rms_norm.cuda.TC_STATS=True"
    P=kernelwright.ops._cluster_norm.W_PREFETCH
    H=kernelwright.ops.softmax.cuda.HINTS=True  # (x's register loads not kept in L1, which the prefetches need)
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
      cluster_switch_rows next - "$T" "$P=2" "$P=4" "$T $P=2" "$P=2 $H" - "$T" "$P=2" "$P=4" "$T $P=2" "$P=2 $H"
      # torch.compile's lead at rms 16384 x 8192 (4.17 against 4.02, run 86): the fused rung reading x again from L2
      # as Inductor's kernel does (FUSED_RELOAD + FUSED_SUM_FIRST; level with it on the H100, run 91), beside it
      F=kernelwright.ops.rms_norm.triton
      for sw in "$F.FUSED_RELOAD=False" "$F.FUSED_RELOAD=True $F.FUSED_SUM_FIRST=True" \
                "$F.FUSED_RELOAD=False" "$F.FUSED_RELOAD=True $F.FUSED_SUM_FIRST=True"; do
        step 90 python3 benchmarks/experiments/switch_bench.py $sw -- bench rms_norm --dtypes bf16 --sizes 16384x8192 \
          --variant fused --variant cluster --variant torch.compile --max-seconds 0.3
        sw=${sw//kernelwright.ops./}; echo "   ($sw)" | tee -a "$LOG"
      done
    else
      cluster_switch_rows next - "$T" "$P=2" "$P=4" "$H" "$P=2 $H" "$T $P=2" - "$T" "$P=2" "$P=4" "$H" "$P=2 $H" "$T $P=2"
    fi
    grep -E "│ (layer|rms)_norm(_bwd)? .*(65536|262144)|^case|^[a-z].* [0-9]+x[0-9]+ +[0-9.]+ +[0-9.]+$|^   \(" \
      "$LOG" | cut -c1-100 | tail -90
    ;;
  next27|next28)
    # session 27, after H100 run 101 (HINTS gave layer norm's cluster rung +6% / +3% under the stand-in, rms -3%):
    # softmax's HINTS apart for the norm rungs (_cluster_norm.HINT_LOADS / HINT_STORES: GPU tests first), each
    # setting in its own process, alternating, twice. On an H200 first h200_wide_rows (session 25's defaults), then
    # kw bench of cluster beside split: defaults / HINTS / loads only / stores only / W_PREFETCH=2 / TC_STATS with
    # W_PREFETCH=2; last the FUSED_RELOAD rows of next26 (torch.compile's lead at rms 16384 x 8192). On an H100 the
    # stand-in: defaults / HINTS / loads 1 / loads 2 (L1 only) / stores / loads 2 with W_PREFETCH=2.
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then h200_wide_rows; fi
    step 150 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_rms_norm_cluster.py -k "hint"
    grep -E "passed|failed" "$LOG" | tail -1
    C=kernelwright.ops._cluster_norm
    T="kernelwright.ops.layer_norm.cuda.TC_STATS=True kernelwright.ops.rms_norm.cuda.TC_STATS=True"
    H=kernelwright.ops.softmax.cuda.HINTS=True
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
      cluster_switch_rows next27 - "$H" "$C.HINT_LOADS=1" "$C.HINT_STORES=True" "$C.W_PREFETCH=2" "$T $C.W_PREFETCH=2" \
        - "$H" "$C.HINT_LOADS=1" "$C.HINT_STORES=True" "$C.W_PREFETCH=2" "$T $C.W_PREFETCH=2"
      F=kernelwright.ops.rms_norm.triton
      for sw in "$F.FUSED_RELOAD=False" "$F.FUSED_RELOAD=True $F.FUSED_SUM_FIRST=True" \
                "$F.FUSED_RELOAD=False" "$F.FUSED_RELOAD=True $F.FUSED_SUM_FIRST=True"; do
        step 90 python3 benchmarks/experiments/switch_bench.py $sw -- bench rms_norm --dtypes bf16 --sizes 16384x8192 \
          --variant fused --variant cluster --variant torch.compile --max-seconds 0.3
        sw=${sw//kernelwright.ops./}; echo "   ($sw)" | tee -a "$LOG"
      done
    elif [ "$1" = next28 ]; then
      # session 29, after run 102: rms's better halves together (HINT_LOADS=2 level or +1-2%, HINT_STORES +3.6% at
      # 262144 apart), layer norm's best (HINTS whole) again beside them
      cluster_switch_rows next28 - "$H" "$C.HINT_LOADS=2 $C.HINT_STORES=True" "$C.HINT_STORES=True" \
        - "$H" "$C.HINT_LOADS=2 $C.HINT_STORES=True" "$C.HINT_STORES=True"
    else
      cluster_switch_rows next27 - "$H" "$C.HINT_LOADS=1" "$C.HINT_LOADS=2" "$C.HINT_STORES=True" \
        "$C.HINT_LOADS=2 $C.W_PREFETCH=2" - "$H" "$C.HINT_LOADS=1" "$C.HINT_LOADS=2" "$C.HINT_STORES=True" \
        "$C.HINT_LOADS=2 $C.W_PREFETCH=2"
    fi
    grep -E "│ (layer|rms)_norm(_bwd)? .*(8192|65536|262144)|^case|^[a-z].* [0-9]+x[0-9]+ +[0-9.]+ +[0-9.]+$|^   \(" \
      "$LOG" | cut -c1-100 | tail -90
    ;;
  hints)
    # session 33: is the stand-in right about softmax.cuda.HINTS? On the H200 it cost softmax's cluster rung 7% at
    # both wide widths (run 54); under the stand-in it gave layer norm's cluster rung +7-9% at 65536 (runs 101-105),
    # never set beside softmax's, nor beside layer norm's split rung (variant=None's pick there). Defaults / HINTS,
    # alternating, three times, each in its own process: copy, layer norm cluster and split, softmax cluster. On an
    # H200 kw bench of the same rungs (then the stand-in's question is answered by the card itself).
    H=kernelwright.ops.softmax.cuda.HINTS=True
    ONLY="copy,layer cluster,layer split,softmax cluster" FAMILIES="layer_norm softmax" SIZES=4096x65536,1024x262144 \
      cluster_switch_rows hints - "$H" - "$H" - "$H"
    grep -E "│ (layer_norm|softmax) .*(65536|262144)|^case|^[a-z].* [0-9]+x[0-9]+ +[0-9.]+ +[0-9.]+$|^   \(" \
      "$LOG" | cut -c1-100 | tail -90
    ;;
  hints54)
    # session 33, after run 108 (the stand-in: softmax's cluster rung -3% with HINTS, where the H200 lost 7% in run
    # 54, with that run's launch shape since changed): run 54's softmax shape itself (cluster3's "$B": CTAs of 256,
    # clusters to 16, no shared-memory vectors, which came later) under the stand-in, defaults / HINTS alternating,
    # three times, so the stand-in and the H200 are asked about one kernel (H200 run 54: 3.82 / 3.53 -> 3.56 / 3.26)
    S=kernelwright.ops.softmax.cuda
    ONLY="copy,softmax cluster" FAMILIES=softmax SIZES=4096x65536,1024x262144 NOTE="run 54's kernel" \
      BASE="$S.MAX_THREADS_SPLIT=256 $S.NONPORTABLE=True $S.SMEM_VECTORS=0" \
      cluster_switch_rows hints54 - "$S.HINTS=True" - "$S.HINTS=True" - "$S.HINTS=True"
    grep -E "^case|^[a-z].* [0-9]+x[0-9]+ +[0-9.]+ +[0-9.]+$|^   \(" "$LOG" | cut -c1-100 | tail -40
    ;;
  last25)
    # session 25's last call, cut to the device time left (~3 minutes with the start). On an H200: layer norm cluster
    # vs split at the wide rows twice (variant=None's choice), rms at 262144, the backward's cluster rung at the wide
    # rows (SPARE_WEIGHT 0.35 by default: does 262144 pass 3.0?), the stand-in on the H200 itself (16 SMs held) and
    # the CTAs' timelines. On an H100: the store switches W_GROUP_SMEM=8 (run 99: +3-4% under the stand-in, one
    # process) and W_EARLY against the defaults, alternating, twice, under the stand-in (48 SMs held as GPCs).
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
      h200_wide_rows
      grep -E "│ (layer|rms|add_rms)_norm(_bwd)? .*(65536|262144)|^   \(" "$LOG" | cut -c1-100 | head -40
    else
      K=kernelwright.ops._cluster_norm
      i=0
      for sw in "" "$K.W_GROUP_SMEM=8" "$K.W_EARLY=True" "" "$K.W_GROUP_SMEM=8" "$K.W_EARLY=True"; do
        i=$((i + 1)); set -- ; for a in $sw; do set -- "$@" --set "$a"; done
        step 60 python3 benchmarks/experiments/sm_proxy.py "$@" --cluster 16 --blocked 0,48 \
          --sizes 4096x65536,1024x262144 --only "rms cluster,layer cluster" --json "/tmp/sm_proxy_store_$i.json"
        echo "   (${sw:-defaults})" | tee -a "$LOG"
      done
      tar -czf "$OUT/sm_proxy_store.tgz" -C /tmp $(cd /tmp && ls sm_proxy_store_*.json) 2>/dev/null
      grep -E "^case|^[a-z].* [0-9]+x[0-9]+ +[0-9.]+ +[0-9.]+$|^   \(" "$LOG" | head -60
    fi
    ;;
  either)
    # session 25: one call that is useful on whichever card comes. On an H200: layer norm cluster vs split at the wide
    # rows twice (variant=None's choice there), the CUDA graph and spare-SM tests, both sweeps with peers at the
    # issue's sizes (carry .whl), the CTAs' timelines. On an H100: layer norm's cluster switches with FAST_STATS on
    # under the stand-in (48 SMs held as whole GPCs; runs 97-98 read the cluster rungs 5-10% above the H200 against
    # split, so only differences between cluster settings are read from it), each setting in its own process; then
    # the CTAs' timelines with and without the occupier.
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
      standing_rows
      step 100 python3 benchmarks/experiments/norm_timeline.py
      cp /tmp/norm_timeline.json "$OUT/" 2>/dev/null
      grep -E "│ layer_norm .*(65536|262144)|^   \(" "$LOG" | head -12 | cut -c1-100
    else
      P=benchmarks/experiments/sm_proxy.py
      K=kernelwright.ops
      i=0
      for sw in "" "$K._cluster_norm.W_GROUP_SMEM=8" "$K._cluster_norm.W_EARLY=True" "$K.layer_norm.cuda.PAIR_ROWS=True" \
                "$K.softmax.cuda.MAX_THREADS_SPLIT=256" ""; do
        i=$((i + 1)); set -- ; for a in $sw; do set -- "$@" --set "$a"; done
        step 60 python3 $P "$@" --cluster 16 --blocked 0,48 --sizes 4096x65536,1024x262144 --only "layer cluster" \
          --json "$OUT/sm_proxy_switch_$i.json"
        echo "   (${sw:-defaults})" | tee -a "$LOG"
      done
      # the CTAs' timelines on the whole card and with 48 SMs held (the H200's per-SM share): which phase grows
      step 60 python3 benchmarks/experiments/norm_timeline.py --no-stagger --json "$OUT/norm_timeline_full.json"
      step 60 python3 benchmarks/experiments/norm_timeline.py --no-stagger --occupy 48 --cluster 16 \
        --json "$OUT/norm_timeline_gpc48.json"
      grep -E "^case|^[a-z].* [0-9]+x[0-9]+ +[0-9.]+ +[0-9.]+$|^   \(" "$LOG" | head -60
      grep -E "^(case|layer_norm|rms_norm|\(records)" "$LOG" | tail -16
    fi
    ;;
  standing)
    # session 25: issue 4's numbers with session 24's defaults (layer norm cluster FAST_STATS + STORE_FMA, the
    # backward's SPARE_WEIGHT=0.35), measured on the H100 only so far. Layer norm's cluster and split rungs at the
    # wide rows twice (variant=None picks split there from H200 rows that predate FAST_STATS); the backward's GPU
    # tests of the spare SMs (the CUDA graph test never ran); the backward and forward sweeps at the issue's sizes
    # with every rung and peer (carry .whl for Liger); the patched Llama's step. About 6 minutes.
    standing_rows
    OUT="$OUT" step 120 python3 benchmarks/experiments/llama_patch_speed.py
    grep -E "tokens|speedup|logits" "$LOG" | tail -6
    grep -E "│ layer_norm .*(65536|262144)|^   \(" "$LOG" | head -12 | cut -c1-100
    ;;
  confirm)
    # session 24: after run 91 (H100) made layer norm's FAST_STATS + STORE_FMA the cluster rung's default: the new
    # default against the old (FAST_STATS=False) beside split, twice; SPARE_WEIGHT 0 / 0.35 / 0.7 / 1.0 for the
    # 262144 backward (run 91: add_rms +3.5% at 0.7, layer norm -6%); FUSED_RELOAD's GPU test after its fix. ~3 min.
    L=kernelwright.ops.layer_norm.cuda
    for sw in "$L.FAST_STATS=True" "$L.FAST_STATS=False" "$L.FAST_STATS=True" "$L.FAST_STATS=False"; do
      step 60 python3 benchmarks/experiments/switch_bench.py $sw -- bench layer_norm --dtypes bf16 \
        --sizes 4096x65536,1024x262144 --variant cluster --variant split --no-peers --max-seconds 0.3
      sw=${sw//kernelwright.ops./}; echo "   ($sw)" | tee -a "$LOG"
    done
    bwd_switch_runs 1024x262144 SPARE_WEIGHT=0 SPARE_WEIGHT=0.35 SPARE_WEIGHT=0.7 SPARE_WEIGHT=1.0
    step 90 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_norms.py -k reload
    grep -E "passed|failed" "$LOG" | tail -1
    grep -E "│ layer_norm |^   \(" "$LOG" | cut -c1-100
    ;;
  catchup)
    # session 23: machines came rarely, so the decisive rows of `spare`, `lnfast`, `reload` and `tail` in one call
    # of ~6 minutes: their GPU tests, then each setting in its own process, off and on in turn, twice
    step 150 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_norm_bwd_cluster.py \
      tests/test_layer_norm_cluster.py tests/test_norms.py -k "spare or fast_stats or reload"
    grep -E "passed|failed" "$LOG" | tail -1
    bwd_switch_runs 1024x262144 SPARE_WEIGHT=0 SPARE_WEIGHT=0.7 SPARE_WEIGHT=0 SPARE_WEIGHT=0.7
    L=kernelwright.ops.layer_norm.cuda T=kernelwright.ops.rms_norm.triton
    for sw in "" "$L.FAST_STATS=True $L.STORE_FMA=True" "$T.SPLIT_ONE_PASS=True" \
              "" "$L.FAST_STATS=True $L.STORE_FMA=True" "$T.SPLIT_ONE_PASS=True"; do
      step 60 python3 benchmarks/experiments/switch_bench.py $sw -- bench layer_norm --dtypes bf16 \
        --sizes 4096x65536,1024x262144 --variant cluster --variant split --no-peers --max-seconds 0.3
      sw=${sw//kernelwright.ops./}; echo "   (${sw:-defaults})" | tee -a "$LOG"
    done
    for sw in "$T.FUSED_RELOAD=False" "$T.FUSED_RELOAD=True $T.FUSED_SUM_FIRST=True" \
              "$T.FUSED_RELOAD=False" "$T.FUSED_RELOAD=True $T.FUSED_SUM_FIRST=True"; do
      step 45 python3 benchmarks/experiments/switch_bench.py $sw -- bench rms_norm --dtypes bf16 \
        --sizes 16384x8192 --variant fused --variant cluster --variant torch.compile --max-seconds 0.3
      sw=${sw//kernelwright.ops./}; echo "   ($sw)" | tee -a "$LOG"
    done
    step 90 python3 -m kernelwright.cli bench rms_norm --dtypes bf16 --variant cluster \
      --sizes 990x262144,1024x262144,1056x262144,2048x262144 --no-peers --max-seconds 0.3
    grep -E "│ (rms|layer|add_rms)_norm|^   \(" "$LOG" | cut -c1-100
    ;;
  reload)
    # session 23, not yet run: torch.compile's rms at 16384 x 8192 (4.17-4.21 TB/s, runs 80-86) reads x twice, the
    # second time from L2 (evict_last, then evict_first), where ours holds it: FUSED_RELOAD does the same in the fused
    # rung (output bit for bit the default's). GPU tests, off / on twice (with FUSED_SUM_FIRST too, which makes the
    # kernel Inductor's statistic as well), then on with every rung and peer. About 2 minutes.
    step 90 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_norms.py -k reload
    grep -E "passed|failed" "$LOG" | tail -1
    T=kernelwright.ops.rms_norm.triton
    for sw in "$T.FUSED_RELOAD=False" "$T.FUSED_RELOAD=True" "$T.FUSED_RELOAD=True $T.FUSED_SUM_FIRST=True" \
              "$T.FUSED_RELOAD=False" "$T.FUSED_RELOAD=True" "$T.FUSED_RELOAD=True $T.FUSED_SUM_FIRST=True"; do
      step 45 python3 benchmarks/experiments/switch_bench.py $sw -- bench rms_norm --dtypes bf16 \
        --sizes 16384x4096,16384x8192,16384x16384 --variant fused --no-peers --max-seconds 0.3
      sw=${sw//kernelwright.ops./}; echo "   ($sw)" | tee -a "$LOG"
    done
    step 90 python3 benchmarks/experiments/switch_bench.py $T.FUSED_RELOAD=True -- bench rms_norm --dtypes bf16 \
      --sizes 16384x8192 --max-seconds 0.3
    echo "   (FUSED_RELOAD=True, every rung and peer)" | tee -a "$LOG"
    grep -E "│ rms_norm|^   \(" "$LOG" | cut -c1-100
    ;;
  tail)
    # session 23: is the last wave what holds the 262144 forward under 3.6? At 262144 bf16 columns a row is a cluster
    # of 4 CTAs of 512, two CTAs an SM: 66 clusters at a time on 132 SMs, so 1024 rows are 15.5 waves. 990 and 1056
    # rows are whole waves (15, 16), 2048 rows 31.03. If the half-empty wave costs what the simple model says (~3%),
    # 990 / 1056 / 2048 rows run ~3% faster than 1024; if all four agree, the tail is not the gap. About 1 minute.
    step 90 python3 -m kernelwright.cli bench rms_norm layer_norm --dtypes bf16 --variant cluster --variant split \
      --sizes 990x262144,1024x262144,1056x262144,2048x262144 --no-peers --max-seconds 0.3
    grep -E "│ (rms|layer)_norm" "$LOG" | cut -c1-100
    ;;
  ln1024)
    # session 21: layer norm at 1024 columns with FUSED_CENTER_NARROW (one warp a row from 65536 rows, runs 89-90),
    # every rung and peer in one process (carry .whl: Liger); first the GPU tests session 21 changed without a GPU
    # (the fused forward's FUSED_SUM_FIRST test after its generator fix; the backward launcher's folded fallbacks)
    step 120 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_norms.py -k sum_first
    step 200 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_norm_bwd_cluster.py -k "not global"
    grep -E "passed|failed" "$LOG" | tail -2
    step 150 python3 -m kernelwright.cli bench layer_norm --dtypes bf16 --sizes 65536x1024,16384x1024 --max-seconds 0.3
    grep -E "│ layer_norm" "$LOG" | cut -c1-100
    ;;
  sumfirst)
    # session 19, not yet run: the fused forward's statistic as torch.compile's (one single-operand sum of unscaled
    # squares, FUSED_SUM_FIRST; rms and add_rms): its GPU tests, off / on twice, then on with every rung and peer
    # (torch.compile's rms led at 16384 x 8192: 4.21 against 4.02, run 82; carry .whl for Liger). About 3 minutes.
    step 60 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_norms.py -k sum_first
    for f in False True False True; do
      step 45 python3 benchmarks/experiments/switch_bench.py kernelwright.ops.rms_norm.triton.FUSED_SUM_FIRST=$f -- \
        bench rms_norm add_rms_norm --dtypes bf16 --sizes 65536x1024,16384x4096,16384x8192 --variant fused \
        --no-peers --max-seconds 0.3
      echo "   (FUSED_SUM_FIRST=$f)" | tee -a "$LOG"
    done
    step 90 python3 benchmarks/experiments/switch_bench.py kernelwright.ops.rms_norm.triton.FUSED_SUM_FIRST=True -- \
      bench rms_norm --dtypes bf16 --sizes 16384x8192 --max-seconds 0.3
    echo "   (FUSED_SUM_FIRST=True, every rung and peer)" | tee -a "$LOG"
    grep -E "│ (rms|add_rms)_norm|^   \(" "$LOG" | cut -c1-100
    ;;
  lnwide)
    # session 15, not yet run: the norm cluster rungs' store and layer norm's statistics, where layer norm trails
    # split (run 62: 3.07 / 2.64 against 3.34 / 2.96 TB/s at 65536 / 262144) and rms misses 3.6 at 262144 (3.41).
    # GPU tests first (ONE_PASS_MEAN's included), then each setting in its own process: W_GROUP_SMEM=8 (the
    # shared-memory half of the store with 8 vectors in flight: layer norm 6 L2 round trips instead of 8, rms 3
    # instead of 4, 48 bytes of spills), W_EARLY (the store's first group loaded before the statistics: 16-64 bytes
    # of spills at the wide rows), ONE_PASS_MEAN (layer norm: two passes and two barriers, not three), all three,
    # and CTAs of twice the threads with half the vectors, 1536 threads an SM (8192 columns: 6 CTAs of 256 an SM, not
    # 8 of 128; 16384 x 8192 takes 15.5 waves of 8 x 132 rows by default, the half-empty last one ~3%: torch.compile
    # 4.20 against 4.01 there, run 62); then the fused rung's bias early or late
    step 200 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_layer_norm_cluster.py
    step 120 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_norms.py -k public_ops_through
    grep -E "passed|failed" "$LOG" | tail -2
    NS="16384x8192,16384x16384,4096x65536,1024x262144"
    for sw in "_cluster_norm.W_GROUP_SMEM=None" "_cluster_norm.W_GROUP_SMEM=8" "_cluster_norm.W_EARLY=True" \
              "layer_norm.cuda.ONE_PASS_MEAN=True" \
              "_cluster_norm.W_GROUP_SMEM=8 _cluster_norm.W_EARLY=True layer_norm.cuda.ONE_PASS_MEAN=True" \
              "softmax.cuda.VECTORS_A_THREAD=4 softmax.cuda.SM_THREADS=1536"; do
      args=""; for a in $sw; do args="$args kernelwright.ops.$a"; done
      step 60 python3 benchmarks/experiments/switch_bench.py $args -- bench rms_norm layer_norm --dtypes bf16 \
        --sizes "$NS" --variant cluster --variant split --no-peers --max-seconds 0.3
      echo "   ($sw)" | tee -a "$LOG"
    done
    for early in False True; do  # layer norm's fused rung: the bias loaded with the weight (as Liger) or after
      step 60 python3 benchmarks/experiments/switch_bench.py kernelwright.ops.rms_norm.triton.FUSED_BIAS_EARLY=$early \
        -- bench layer_norm --dtypes bf16 --sizes 16384x1024,16384x4096,16384x8192 --variant fused --no-peers \
        --max-seconds 0.3
      echo "   (FUSED_BIAS_EARLY=$early)" | tee -a "$LOG"
    done
    for pers in False True; do  # softmax's persistent cluster form at widths one CTA holds (never timed there)
      step 60 python3 benchmarks/experiments/switch_bench.py kernelwright.ops.softmax.cuda.PERSISTENT=$pers -- \
        bench softmax --dtypes bf16 --sizes 16384x4096,16384x8192,16384x16384 --variant cluster --variant fused \
        --no-peers --max-seconds 0.3
      echo "   (PERSISTENT=$pers)" | tee -a "$LOG"
    done
    grep -E "│ (rms|layer)_norm|│ softmax|^   \(" "$LOG" | cut -c1-100
    ;;
  fwd)
    step 150 python3 -m pytest -q -p no:cacheprovider -x tests/test_norms.py tests/test_swiglu_rope_ce.py \
      tests/test_softmax_bwd.py
    grep -E "passed|failed" "$LOG" | tail -1
    step 240 python3 -m kernelwright.cli bench rms_norm layer_norm add_rms_norm swiglu --dtypes bf16 --max-seconds 0.5
    step 60 python3 benchmarks/experiments/cross_entropy_memory.py --json "$OUT/cross_entropy_memory.json"
    OUT="$OUT" step 100 python3 benchmarks/experiments/llama_patch_speed.py
    ;;
  recheck)
    # after run 7/8: the fused backward's accumulator fix (7403a50), cross_entropy's default rung (online), and the
    # GPU tests that run 7's -x stopped
    step 150 python3 -m pytest -q -p no:cacheprovider tests/test_norms.py tests/test_swiglu_rope_ce.py \
      tests/test_softmax_bwd.py
    grep -E "passed|failed" "$LOG" | tail -1
    step 90 python3 -m kernelwright.cli bench rms_norm_bwd layer_norm_bwd add_rms_norm_bwd --dtypes bf16 \
      --sizes 16384x1024,16384x4096,16384x8192 --variant fused --variant split --max-seconds 0.5
    step 60 python3 benchmarks/experiments/cross_entropy_memory.py --json "$OUT/cross_entropy_memory.json"
    ;;
  configs)
    step 50 python3 -m pytest -q -p no:cacheprovider tests/test_norms.py tests/test_activation.py -k "gpu or sm90"
    OUT="$OUT" step 260 python3 benchmarks/experiments/norm_configs.py --hints \
      --only rms_norm,layer_norm,rms_norm_bwd,layer_norm_bwd --sizes 4096x65536,1024x262144,16384x1024
    OUT="$OUT" step 80 python3 benchmarks/experiments/softmax_split_configs.py --hints --wide
    step 45 python3 -m kernelwright.cli check activation
    step 45 python3 -m kernelwright.cli bench activation --dtypes bf16,fp16 --max-seconds 0.5
    grep -A30 "^best per" "$LOG" | head -30; grep "^best " "$LOG"
    ;;
  next)
    # session 7, after run 24: GPU tests; the norm split rungs' new defaults (backward weight held, layer norm's
    # register cap) next to one change each, torch's copy at the same sizes; kw bench of the six norm families
    step 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_norms.py
    OUT="$OUT" step 170 python3 benchmarks/experiments/norm_configs.py --library
    step 200 python3 -m kernelwright.cli bench rms_norm layer_norm add_rms_norm rms_norm_bwd layer_norm_bwd \
      add_rms_norm_bwd --dtypes bf16 --sizes 16384x1024,4096x65536,1024x262144 --max-seconds 0.5
    grep -A60 "^best per" "$LOG" | head -60
    ;;
  followup)
    # session 7, after run 25: layer norm's one-word exchange and the chunked rung's pipelined loops at the wide
    # shapes, the narrow rows at 65536 x 1024 (norm_configs --followup, float64-checked first); kw bench of the
    # forward families there, with peers; then the GPU tests of the norm files
    OUT="$OUT" step 75 python3 benchmarks/experiments/norm_configs.py --followup
    step 60 python3 -m kernelwright.cli bench rms_norm layer_norm add_rms_norm --dtypes bf16 --sizes 65536x1024 \
      --max-seconds 0.5
    step 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_norms.py
    ;;
  narrowbwd)
    # session 8 (CPU only so far): the fused backward at 1024 columns, the default next to FUSED_DW_PER_TILE
    # (fewer registers: 210 -> 187 rms, 251 -> 210 layer norm) with and without FUSED_MAXNREG=168 (three 4-warp
    # programs an SM), each in its own process, bf16, the rows the issue asks for (16k) and more (64k)
    for sw in "FUSED_DW_PER_TILE=False" "FUSED_DW_PER_TILE=True" "FUSED_DW_PER_TILE=True FUSED_MAXNREG=168" \
              "FUSED_DW_PER_TILE=False FUSED_MAXNREG=168"; do
      set -- $(for a in $sw; do echo "kernelwright.ops.rms_norm_bwd.triton.$a"; done)
      step 90 python3 benchmarks/experiments/switch_bench.py "$@" -- bench rms_norm_bwd layer_norm_bwd \
        add_rms_norm_bwd --variant fused --no-peers --dtypes bf16 --sizes 16384x1024,65536x1024 --max-seconds 0.5
    done
    grep -E "^switch|fused .*x1024" "$LOG" | cut -c1-130
    ;;
  paired)
    # session 10 (CPU only so far): layer norm's backward with its two row sums in one tl.reduce (sm_90 SASS: 6 -> 3
    # block barriers a tile, as rms), off then on, each in its own process; fused at the narrow widths, split at
    # the wide ones; bf16. About 3 minutes.
    for sw in False True; do
      step 100 python3 benchmarks/experiments/switch_bench.py kernelwright.ops.rms_norm_bwd.triton.PAIRED_SUMS=$sw \
        -- bench layer_norm_bwd --variant fused --variant split --no-peers --dtypes bf16 \
        --sizes 16384x1024,65536x1024,16384x4096,4096x16384,4096x65536,1024x262144 --max-seconds 0.5
    done
    grep -E "^switch|(fused|split) .*x(1024|4096|16384|65536|262144) " "$LOG" | cut -c1-130
    ;;
  faststats)
    # session 10 (CPU only so far): the split forward's chunk statistics in one reduction fewer (sm_90 SASS of the
    # path a row in range runs: 6 -> 3 block barriers a row for rms, 9 -> 6 for layer norm), off then on, each in
    # its own process, the widths the split rung takes; bf16. About 3 minutes.
    for sw in False True; do
      step 100 python3 benchmarks/experiments/switch_bench.py kernelwright.ops.rms_norm.triton.FAST_STATS=$sw \
        -- bench rms_norm layer_norm add_rms_norm --variant split --no-peers --dtypes bf16 \
        --sizes 16384x16384,4096x65536,1024x262144 --max-seconds 0.5
    done
    grep -E "^switch|split .*x(16384|65536|262144) " "$LOG" | cut -c1-130
    ;;
  ncu)
    # session 11's open question: FAST_STATS made rms's split forward 8% slower at 4096x65536 and 5% faster at
    # 1024x262144 (runs 41-42; the same 8192-column 4-warp programs). Nsight Compute on one launch of each (off / on):
    # throughput, warp stall reasons, occupancy. ncu reads counters only on some machines (H200.md: Firecracker yes,
    # gVisor no): the first step says which. Clocks left alone (--clock-control none). About 3 minutes.
    NCU="ncu --clock-control none --target-processes all --kernel-name regex:_norm_fwd_split_kernel --launch-skip 8
         --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats
         --section Occupancy --section SchedulerStats --csv --page details"
    for size in 4096x65536 1024x262144; do
      for sw in False True; do
        echo "== ncu rms split $size FAST_STATS=$sw" | tee -a "$LOG"
        timeout 120 $NCU python3 benchmarks/experiments/switch_bench.py kernelwright.ops.rms_norm.triton.FAST_STATS=$sw \
          -- bench rms_norm --variant split --no-peers --dtypes bf16 --sizes "$size" --max-seconds 0.2 \
          > "/tmp/ncu_${size}_$sw.csv" 2>> "$LOG"
        echo "   rc=$?" | tee -a "$LOG"
        grep -E '"(Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per Thread|Warp Cycles|Eligible|Issued|No Eligible)' \
          "/tmp/ncu_${size}_$sw.csv" | awk -F'","' '{print $(NF-2) " | " $NF}' | head -40 | tee -a "$LOG"
      done
    done
    tar -czf "$OUT/ncu.tgz" -C /tmp $(cd /tmp && ls ncu_*.csv) 2>/dev/null
    ;;
  gpusuite)
    # the whole GPU suite does not fit one 10-minute call (H100 run 103: ~12% in 560 s), so it runs in slices:
    # whole files in name order from KW_GPU_FROM (its first KW_GPU_SKIP tests left out: a file cut short resumes
    # after the tests it finished), each under the time left; where a slice stops, it prints the next one's start
    # (KW_GPU_TO=tests/test_y.py: the last file to run, so a resumed slice stops before files passed already)
    budget=${KW_GPU_BUDGET:-540}; from=${KW_GPU_FROM:-}; skip=${KW_GPU_SKIP:-0}; s=$SECONDS; started=""
    to=${KW_GPU_TO:-}; last=""
    for v in "KW_GPU_FROM=$from" "KW_GPU_TO=$to"; do
      f=${v#*=}; if [ -n "$f" ] && [ ! -f "$f" ]; then echo "$v: no such test file" | tee -a "$LOG"; exit 2; fi
    done
    [ -z "$from" ] && started=1
    for f in tests/test_*.py; do
      [ -n "$last" ] && { echo "   stopped after KW_GPU_TO=$to" | tee -a "$LOG"; break; }
      if [ "$f" = "$to" ] && [ -z "$started" ]; then
        echo "KW_GPU_TO=$to comes before KW_GPU_FROM=$from" | tee -a "$LOG"; exit 2
      fi
      [ "$f" = "$from" ] && started=1; [ -z "$started" ] && continue
      [ "$f" = "$to" ] && last=1
      left=$((budget - SECONDS + s))
      if [ "$left" -lt 30 ]; then echo "next slice: KW_GPU_FROM=$f KW_GPU_SKIP=$skip (time)" | tee -a "$LOG"; break; fi
      n=$(wc -l < "$LOG")
      step "$left" env PYTHONUNBUFFERED=1 KW_GPU_SKIP="$skip" python3 -m pytest -v -p no:cacheprovider -rfE -m gpu \
        "$f" --durations=3
      block=$(tail -n +$((n + 1)) "$LOG")
      if grep -qE "rc=124 in [0-9]+s$" <<< "$block"; then  # cut by the time left: the next slice resumes in this file
        done_here=$(grep -cE "^tests/.*::.* (PASSED|FAILED|SKIPPED|XFAIL|XPASS|ERROR)" <<< "$block")
        echo "   $f: cut by the time left after $done_here tests ($(grep -cE "::.* FAILED" <<< "$block") failed)" \
          | tee -a "$LOG"
        echo "next slice: KW_GPU_FROM=$f KW_GPU_SKIP=$((skip + done_here)) (time)" | tee -a "$LOG"; break
      fi
      tally=$(grep -E "passed|failed|error|no tests ran|deselected" <<< "$block" | tail -1 | sed -E 's/^=+ | =+$//g')
      echo "   $f: $tally" | tee -a "$LOG"
      skip=0
    done
    grep -E "^   tests/|next slice|no such|stopped after" "$LOG"
    ;;
  bwd)
    step 300 python3 -m kernelwright.cli bench rms_norm_bwd layer_norm_bwd add_rms_norm_bwd swiglu_bwd rope rope_bwd \
      cross_entropy softmax_bwd --dtypes bf16 --max-seconds 0.5
    ;;
esac
python3 -m kernelwright.cli report -o "$OUT/report.html" >> "$LOG" 2>&1
python3 benchmarks/ops_summary.py "$OUT/kernelwright.db" > "$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt" | head -150
grep -E "rc=|FAIL|Error|passed|failed" "$LOG" | head -30
