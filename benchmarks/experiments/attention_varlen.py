"""Experiment: packed variable-length attention against padding, bf16, Hq 32, Hkv 8, D 128 (or 64), causal and not.

32 sequences with lengths drawn uniformly from 128..8192 (fixed seed), run three ways:

* ``varlen``: ``ops.attention_varlen`` on the packed batch (no padding); TFLOP/s counts real tokens only;
* ``fixed4k``: a padded batch of equal sequences of S = 4096 with about as many tokens: the rate varlen should
  approach (same kernel, no ragged sequences);
* ``padded``: every sequence padded to the longest (B = 32, S = max length), the time a padded call costs (the
  kernel attends to the padding too: the result rows of a real model would need a key mask; this is the time
  floor of padding). "useful TFLOP/s" divides the real tokens' work by that time.

The varlen output is checked against the float64 reference on three sequences (the shortest, the longest and one
between) before anything is timed. GPU only:
    KW_DEVICE=cuda python benchmarks/experiments/attention_varlen.py   # JSON to $OUT/attention_varlen.json
    KW_VARLEN_D=64 KW_DEVICE=cuda python benchmarks/experiments/attention_varlen.py   # D 64: ..._d64.json

Each rung that takes the packed layout (``fa3``, ``tuned``, ``exp2_lazy``) is checked against float64 on those
three sequences (and for NaN) before it is timed; a failed check is recorded as a row with ``error`` and the other
rows still run. ``varlen/auto`` is the public op's own choice (fa3 on Hopper since run 79). ``fixed4k`` and
``padded`` run auto's choice too.
"""

import json
import os
import random

import torch

import kernelwright
from kernelwright import ops
from kernelwright.harness.timing import TimerConfig, time_fn
from kernelwright.harness.verify import compare
from kernelwright.ops.attention import gluon, spec
from kernelwright.ops.attention.reference import attention as reference
from kernelwright.ops.attention.reference import error_scale
from kernelwright.registry import get_family

assert kernelwright.runtime.current_device() == "cuda"
fam = get_family("attention")
tol = fam.tolerances[torch.bfloat16]
HQ, HKV, N = 32, 8, 32
D = int(os.environ.get("KW_VARLEN_D", "128"))  # head dim: 128 (the issue's), or 64
assert D in (64, 128), f"KW_VARLEN_D: 64 or 128, got {D}"
lens = [random.Random(2026 + i).randint(128, 8192) for i in range(N)]
total = sum(lens)
gen = torch.Generator("cuda").manual_seed(0)
timer = TimerConfig(max_seconds=1.0)
rows = []


def rnd(*shape):
    return torch.randn(shape, device="cuda", generator=gen, dtype=torch.float32).to(torch.bfloat16)


def work(causal, lq_lk):
    """Flops of the attended pairs, as the family's cost model counts them."""
    return 4.0 * HQ * D * sum(spec.pairs(a, b, causal) for a, b in lq_lk)


def record(name, causal, real_flops, ms, extra=None):
    row = {"case": name, "causal": causal, "median_ms": ms, "useful_tflops": real_flops / (ms * 1e-3) / 1e12,
           "tokens": total, **(extra or {})}
    rows.append(row)
    print(f"{name:<10} causal={causal!s:<5} {ms:9.3f} ms  useful {row['useful_tflops']:7.1f} TFLOP/s"
          + "".join(f"  {k} {v}" for k, v in (extra or {}).items()), flush=True)


def timed(call) -> float:
    return time_fn(call, timer).median_ms


def check(o, q, k, v, cu, causal) -> str | None:
    """Three sequences of the packed output against float64: None, or what is wrong."""
    for b in (lens.index(min(lens)), lens.index(max(lens)), N // 2):
        s = slice(int(cu[b]), int(cu[b + 1]))
        args = [t[s].transpose(0, 1)[None].double() for t in (q, k, v)]
        cmp = compare(o[s].transpose(0, 1)[None], reference(*args, causal=causal), tol,
                      error_scale(*args, causal=causal))
        if not cmp.ok:
            return f"varlen sequence {b} (length {lens[b]}): {cmp.reason}"
    return None


def packed(causal: bool) -> None:
    q, k, v = rnd(total, HQ, D), rnd(total, HKV, D), rnd(total, HKV, D)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    smax = max(lens)
    real = work(causal, [(n, n) for n in lens])
    for variant in (None, "fa3", "tuned", "exp2_lazy"):
        def call(variant=variant):
            return ops.attention_varlen(q, k, v, cu, cu, smax, smax, causal=causal, variant=variant)

        name = f"varlen/{variant or 'auto'}"
        try:  # correctness first: three sequences against float64; a failure is a row, not a crash
            o = call()
            why = "NaN in o" if torch.isnan(o).any() else check(o, q, k, v, cu, causal)
        except Exception as e:  # noqa: BLE001 - recorded
            why = f"{type(e).__name__}: {e}"
        if why:
            rows.append({"case": name, "causal": causal, "error": why})
            print(f"{name} causal={causal!s:<5} FAILED: {why}", flush=True)
        else:
            record(name, causal, real, timed(call))


def fixed4k(causal: bool) -> None:
    """The same tokens as equal 4k sequences: the rate without ragged sequences."""
    b4k = max(1, total // 4096)
    q, k, v = rnd(b4k, HQ, 4096, D), rnd(b4k, HKV, 4096, D), rnd(b4k, HKV, 4096, D)
    ms = timed(lambda: ops.attention(q, k, v, causal=causal))
    record("fixed4k", causal, work(causal, [(4096, 4096)] * b4k), ms, {"batch": b4k})


def padded(causal: bool) -> None:
    """Every sequence padded to the longest: B = 32, S = max(lens)."""
    smax = max(lens)
    q, k, v = rnd(N, HQ, smax, D), rnd(N, HKV, smax, D), rnd(N, HKV, smax, D)
    ms = timed(lambda: ops.attention(q, k, v, causal=causal))
    record("padded", causal, work(causal, [(n, n) for n in lens]), ms,
           {"padded_tflops": round(work(causal, [(smax, smax)] * N) / (ms * 1e-3) / 1e12, 1), "smax": smax,
            "padding_fraction": round(1 - total / (N * smax), 3)})


for causal in (True, False):
    for experiment in (packed, fixed4k, padded):
        experiment(causal)
        torch.cuda.empty_cache()

name = "attention_varlen.json" if D == 128 else f"attention_varlen_d{D}.json"
with open(os.path.join(os.environ.get("OUT", "/tmp"), name), "w") as fh:
    json.dump({"lens": lens, "hq": HQ, "hkv": HKV, "d": D, "fa3_varlen": gluon.FA3_VARLEN, "rows": rows}, fh, indent=2)
