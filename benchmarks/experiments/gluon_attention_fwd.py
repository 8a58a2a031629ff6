"""FlashAttention-3-style attention forward for Hopper in Gluon: compile checks, GPU correctness, timing and a sweep.

The kernel and its launcher live in :mod:`kernelwright.ops.attention.gluon` (the ``fa3`` rung; its docstring has the
design: producer partition with TMA + mbarrier K/V ring, two consumer warpgroups with async wgmma, ping-pong). This
script drives it:

* ``--compile-only`` (no GPU needed): compiles every kernel the rung launches (bf16 / fp16, D64 / D128, causal,
  non-causal with Skv a multiple of 128 and ragged) and the sweep's configurations for sm_90a and reports registers
  / shared memory / spills / instruction checks (:func:`kernelwright.ops.attention.gluon.compile_check`).
* GPU mode (an H200): correctness against a float64 reference (NaN-poisoned outputs, bitwise-repeatable) on MHA,
  GQA (Hq 8 over Hkv 2), ragged lengths (S = 1, 17, 129, 1000), Sq != Skv causal both ways (rows with no key:
  o == 0 and lse == -inf), a non-contiguous q (a transposed [B, S, H, D] view), then timing against torch SDPA
  flash and cuDNN and a small knob sweep.

Usage: ``python benchmarks/experiments/gluon_attention_fwd.py --compile-only`` or, on an H200,
``python benchmarks/experiments/gluon_attention_fwd.py [--quick] [--out results.json]``.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import json
import math
import os
import sys
import time

import torch

from kernelwright.ops.attention import gluon as G
from kernelwright.ops.attention.gluon import FA3Config, Variant, attention_fa3, default_config

TRITON_VERSION = importlib.metadata.version("triton")  # (kernelwright first: it settles Triton's mode)
_D = default_config(128, False)
DEFAULT_CONFIG = dict(block_n=_D.block_n, stages=_D.stages, pingpong=_D.pingpong, producer_warps=_D.producer_warps)
SWEEP = [
    dict(block_n=128, stages=2, pingpong=True, producer_warps=4),
    dict(block_n=128, stages=2, pingpong=False, producer_warps=4),
    dict(block_n=128, stages=3, pingpong=True, producer_warps=4),
    dict(block_n=128, stages=3, pingpong=False, producer_warps=4),
    dict(block_n=64, stages=3, pingpong=True, producer_warps=4),
    dict(block_n=64, stages=4, pingpong=False, producer_warps=4),
    dict(block_n=128, stages=2, pingpong=True, producer_warps=1),
]


def gluon_attention(q, k, v, causal=False, scale=None, *, out=None, lse=None, **cfg):
    """The rung with an explicit config (``cfg``: FA3Config fields); allocates o and lse when not given."""
    B, Hq, Sq, _ = q.shape
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device) if out is None else out
    lse = torch.empty((B, Hq, Sq), device=q.device, dtype=torch.float32) if lse is None else lse
    attention_fa3(q, k, v, causal=causal, scale=scale, out=o, lse=lse, config=FA3Config(**cfg))
    return o, lse


# ---------------------------------------------------------------------------------------------------------------
# CPU compile (sm_90a)
# ---------------------------------------------------------------------------------------------------------------
def _variants_to_compile() -> list[Variant]:
    out = G.default_variants()
    for sw in SWEEP:
        for causal, ragged in ((False, False), (False, True), (True, False)):
            var = Variant(torch.bfloat16, 128, causal, ragged, FA3Config(**sw))
            if var not in out:
                out.append(var)
    return out


def compile_only():
    rows = G.compile_check(_variants_to_compile())
    ok = True
    for r in rows:
        if "error" in r:
            ok = False
            print(f"[FAIL] {r['label']}: {r['error'][:3000]}")
            continue
        ok &= r["ok"]
        print(f"[{'ok' if r['ok'] else 'CHECK'}] {r['label']}: {r['seconds']:.1f}s regs={r['regs']} "
              f"(maxnreg={r['maxnreg']}, setmaxnreg={r['setmaxnreg']}, warps={r['total_warps']}) "
              f"sass_max_R={r['sass_max_reg_index']} smem={r['shared']} B "
              f"spills={r['spill_stores']}/{r['spill_loads']} stack={r['stack']}")
        print(f"       ptx: {r['ptx_counts']}")
        print(f"       sass: {r['sass_counts']}")
        if r["ptxas_warnings"]:
            print(f"       ptxas warnings: {r['ptxas_warnings']}")
        print(f"       checks: {r['checks']}")
    print("compile-only:", "ALL OK" if ok else "SOME CHECKS FAILED")
    return ok, [{k: (str(v) if k == "variant" else v) for k, v in r.items()} for r in rows]


# ---------------------------------------------------------------------------------------------------------------
# GPU mode: correctness, timing, sweep
# ---------------------------------------------------------------------------------------------------------------
def reference(q, k, v, causal, scale):
    """float64 o and lse; GQA by repeating kv heads; causal bottom-right; rows with no key: o = 0, lse = -inf."""
    qd, kd, vd = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    kd, vd = kd.repeat_interleave(group, 1), vd.repeat_interleave(group, 1)
    s = torch.matmul(qd, kd.transpose(-1, -2)) * scale
    if causal:
        sq, skv = q.shape[2], k.shape[2]
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(skv, device=q.device)[None, :]
        s = s.masked_fill(j > i + skv - sq, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None].clamp_min(-1e300))
    p = torch.nan_to_num(p, nan=0.0)
    return torch.matmul(p, vd), lse


_SEED = [1234]

# (B, Hq, Hkv, Sq, Skv, D, layout): layout "contiguous" or "q_transposed" (q a [B, S, H, D] tensor's transpose)
CASES = [
    (1, 2, 2, 128, 128, 128, "contiguous"), (1, 2, 2, 256, 256, 128, "contiguous"),
    (1, 2, 2, 1024, 1024, 128, "contiguous"), (2, 4, 4, 2048, 2048, 128, "contiguous"),
    (1, 2, 2, 256, 256, 64, "contiguous"), (2, 4, 4, 1024, 1024, 64, "contiguous"),
    (1, 8, 2, 512, 512, 128, "contiguous"),  # GQA 4
    (2, 8, 2, 1000, 1000, 64, "contiguous"),  # GQA 4, ragged
    (1, 2, 2, 1, 1, 128, "contiguous"), (2, 2, 2, 17, 17, 128, "contiguous"),
    (1, 4, 4, 129, 129, 128, "contiguous"), (1, 4, 2, 1000, 1000, 128, "contiguous"),
    (1, 4, 4, 100, 700, 128, "contiguous"),  # Sq < Skv (a chunk on a cache)
    (1, 4, 2, 700, 100, 128, "contiguous"),  # Sq > Skv: causal rows 0..599 see no key
    (1, 2, 1, 300, 17, 64, "contiguous"),    # Sq > Skv, MQA
    (2, 4, 4, 384, 384, 128, "q_transposed"), (1, 8, 2, 200, 333, 64, "q_transposed"),
]


def _tensor(shape, dtype, layout, scale=1.0):
    if layout == "q_transposed":
        B, H, S, D = shape
        return (torch.randn(B, S, H, D, device="cuda", dtype=torch.float32) * scale).to(dtype).transpose(1, 2)
    return (torch.randn(shape, device="cuda", dtype=torch.float32) * scale).to(dtype)


def check_case(cfg, case, dt, causal, magnitude=1.0):
    B, Hq, Hkv, Sq, Skv, D, layout = case
    name = (f"B{B} Hq{Hq} Hkv{Hkv} Sq{Sq} Skv{Skv} D{D} {str(dt).replace('torch.', '')} "
            f"{'causal' if causal else 'full'} {layout}" + (f" x{magnitude:g}" if magnitude != 1.0 else ""))
    row = dict(case=list(case), dtype=str(dt), causal=causal, magnitude=magnitude, config=dict(cfg))
    _WATCHDOG.beat(f"correctness {cfg} {name}")
    try:
        _SEED[0] += 1
        torch.manual_seed(_SEED[0])
        q = _tensor((B, Hq, Sq, D), dt, layout, magnitude)
        k = _tensor((B, Hkv, Skv, D), dt, "contiguous", magnitude)
        v = _tensor((B, Hkv, Skv, D), dt, "contiguous")
        scale = 1.0 / math.sqrt(D)
        outs = []
        for _ in range(2):
            o = torch.full((B, Hq, Sq, D), float("nan"), device="cuda", dtype=dt)
            lse = torch.full((B, Hq, Sq), float("nan"), device="cuda", dtype=torch.float32)
            gluon_attention(q, k, v, causal=causal, scale=scale, out=o, lse=lse, **cfg)
            torch.cuda.synchronize()
            outs.append((o, lse))
        o_ref, lse_ref = reference(q, k, v, causal, scale)
        (o, lse), (o2, lse2) = outs
        err_o = (o.double() - o_ref).abs().max().item()
        fin = torch.isfinite(lse_ref)
        err_lse = (lse.double()[fin] - lse_ref[fin]).abs().max().item() if fin.any() else 0.0
        nan = bool(torch.isnan(o).any().item() or torch.isnan(lse).any().item())
        empty = ~fin  # rows with no key
        empty_ok = bool((lse[empty] == float("-inf")).all().item() and (o[empty] == 0).all().item()
                        and torch.isfinite(lse[fin]).all().item())
        bitwise = bool(torch.equal(o, o2) and torch.equal(lse, lse2))
        tol_o = 2e-2 if dt == torch.bfloat16 else 5e-3
        tol_lse = 1e-3 * max(1.0, magnitude ** 2)
        ok = (not nan) and err_o <= tol_o and err_lse <= tol_lse and bitwise and empty_ok
        row.update(err_o=err_o, err_lse=err_lse, nan=nan, bitwise_repeat=bitwise, empty_rows=int(empty.sum()),
                   empty_ok=empty_ok, tol_o=tol_o, passed=ok)
        print(f"  [{'PASS' if ok else 'FAIL'}] {name}: max|o-ref|={err_o:.3e} (tol {tol_o:g}) "
              f"max|lse-ref|={err_lse:.3e} (tol {tol_lse:g}) nan={nan} empty rows={int(empty.sum())} ok={empty_ok} "
              f"repeat-bitwise-equal={bitwise}", flush=True)
    except Exception as e:  # noqa: BLE001
        row.update(passed=False, error=f"{type(e).__name__}: {e}")
        print(f"  [FAIL] {name}: {type(e).__name__}: {str(e)[:500]}", flush=True)
    return row


def check_correctness(cfg, cases, dtypes, causals, magnitudes=(1.0, )):
    return [check_case(cfg, case, dt, causal, mag) for dt in dtypes for causal in causals for case in cases
            for mag in magnitudes]


def _time_ms(fn, reps=20, inner=10):
    """Median over `reps` of the mean time of `inner` back-to-back launches (CUDA events), after warm-up."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    times.sort()
    return times[len(times) // 2]


def _sdpa_ms(q, k, v, causal, backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    try:
        with sdpa_kernel(be):
            fn = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
            fn()
            return _time_ms(fn)
    except Exception as e:  # noqa: BLE001
        print(f"    sdpa {backend} failed: {type(e).__name__}: {str(e)[:200]}")
        return None


def _tflops(B, H, S, D, causal, ms):
    if ms is None:
        return None
    flops = 4.0 * B * H * S * S * D / (2 if causal else 1)
    return flops / (ms * 1e-3) / 1e12


def _fmt(x, width=7):
    return f"{x:{width}.1f}" if x else " " * (width - 3) + "n/a"


def run_timing(cfg, shapes, causals, with_sdpa=True, label="default"):
    rows = []
    for causal in causals:
        for (B, H, S, D) in shapes:
            _WATCHDOG.beat(f"timing {label} B{B} H{H} S{S} D{D} causal={causal}")
            q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            row = dict(shape=[B, H, S, D], causal=causal, config=dict(cfg), label=label)
            try:
                o = torch.empty_like(q)
                lse = torch.empty((B, H, S), device="cuda", dtype=torch.float32)
                fn = functools.partial(gluon_attention, q, k, v, causal=causal, out=o, lse=lse, **cfg)
                ms = _time_ms(fn)
                row.update(gluon_ms=ms, gluon_tflops=_tflops(B, H, S, D, causal, ms))
            except Exception as e:  # noqa: BLE001
                row.update(gluon_ms=None, gluon_tflops=None, error=f"{type(e).__name__}: {e}")
                print(f"    gluon failed {cfg}: {type(e).__name__}: {str(e)[:500]}")
            if with_sdpa:
                for be in ("flash", "cudnn"):
                    _WATCHDOG.beat(f"timing sdpa-{be} B{B} H{H} S{S} D{D} causal={causal}")
                    ms = _sdpa_ms(q, k, v, causal, be)
                    row[f"{be}_ms"] = ms
                    row[f"{be}_tflops"] = _tflops(B, H, S, D, causal, ms)
            g, c = row.get("gluon_tflops"), row.get("cudnn_tflops")
            row["gluon_over_cudnn"] = g / c if g and c else None
            rows.append(row)
            kind = "causal" if causal else "full  "
            line = f"    B{B} H{H} S{S} D{D} {kind} [{label}] gluon {_fmt(row['gluon_tflops'])}"
            if with_sdpa:
                line += f" flash {_fmt(row.get('flash_tflops'))} cudnn {_fmt(row.get('cudnn_tflops'))}"
            print(line + " TFLOP/s", flush=True)
    return rows


class _Watchdog:
    """A GPU hang (e.g. an mbarrier deadlock) cannot be caught: report what was running, save partial results, exit."""

    def __init__(self, timeout_s=90.0):
        self.timeout_s = timeout_s
        self.label = "start"
        self.last = time.time()
        self.results = None
        self.out_path = None
        self.thread = None

    def beat(self, label):
        self.label = label
        self.last = time.time()

    def start(self, results, out_path):
        import threading

        self.results, self.out_path = results, out_path
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            time.sleep(5)
            if time.time() - self.last > self.timeout_s:
                print(f"\nWATCHDOG: no progress for {self.timeout_s:.0f}s during '{self.label}': "
                      "probable kernel hang (deadlock); aborting.", flush=True)
                if self.out_path and self.results is not None:
                    try:
                        self.results["hang"] = self.label
                        with open(self.out_path, "w") as fh:
                            json.dump(self.results, fh, indent=1, default=str)
                    except Exception as e:  # noqa: BLE001
                        print("could not write partial results:", e, flush=True)
                os._exit(3)


_WATCHDOG = _Watchdog()


def gpu_main(out_path, quick=False):
    t_start = time.time()
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  triton {TRITON_VERSION}")
    results = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=TRITON_VERSION)
    _WATCHDOG.start(results, out_path)
    cfg = dict(DEFAULT_CONFIG)

    print("== correctness (default config", cfg, ")")
    corr = check_correctness(cfg, CASES, (torch.bfloat16, torch.float16), (False, True))
    # large magnitudes (logits up to ~|q||k| scale ~ 9 sqrt(D)): the running max must keep exp2 in range
    corr += check_correctness(cfg, [CASES[1], CASES[7], CASES[13]], (torch.bfloat16, ), (False, True), (3.0, ))
    print("== correctness of the sweep configs (bf16)")
    for sw in SWEEP:
        if sw != cfg:
            print(" ", sw)
            corr += check_correctness(dict(sw), [CASES[2], CASES[7], CASES[13]], (torch.bfloat16, ),
                                      (False, True))
    results["correctness"] = corr
    n_fail = sum(not r.get("passed") for r in corr)
    print(f"correctness: {len(corr) - n_fail}/{len(corr)} passed  ({time.time() - t_start:.0f}s)")

    print("== timing (bf16)")
    tshapes = [(4, 32, 4096, 128)] + [(16384 // S, 32, S, 128) for S in (1024, 2048, 8192, 16384)]
    if quick:
        tshapes = tshapes[:1]
    timing = run_timing(cfg, tshapes, (False, True))
    results["timing"] = timing
    print(f"  ({time.time() - t_start:.0f}s)")

    print("== knob sweep at B4 H32 S4096 D128 bf16")
    sweep = []
    for sw in SWEEP:
        sweep += run_timing(dict(sw), [(4, 32, 4096, 128)], (False, True), with_sdpa=False,
                            label=" ".join(f"{k}={v}" for k, v in sw.items()))
    results["sweep"] = sweep

    print("\n== summary (TFLOP/s, bf16; default config", cfg, ")")
    print(f"{'shape':<22}{'causal':<8}{'gluon':>8}{'flash':>8}{'cudnn':>8}{'g/cudnn':>9}")
    for r in timing:
        B, H, S, D = r["shape"]
        f = functools.partial(_fmt, width=8)
        ratio = f"{r['gluon_over_cudnn']:9.3f}" if r.get("gluon_over_cudnn") else "      n/a"
        print(f"{f'B{B} H{H} S{S} D{D}':<22}{str(r['causal']):<8}{f(r.get('gluon_tflops'))}"
              f"{f(r.get('flash_tflops'))}{f(r.get('cudnn_tflops'))}{ratio}")
    print("sweep (4k shape):")
    for r in sweep:
        t = r.get("gluon_tflops")
        print(f"  {r['label']:<70} {'causal' if r['causal'] else 'full  '} "
              + (f"{t:7.1f}" if t else "  error: " + str(r.get("error", ""))[:200]))
    best = max((r for r in sweep if r.get("gluon_tflops") and not r["causal"]), key=lambda r: r["gluon_tflops"],
               default=None)
    if best:
        print(f"best non-causal sweep config: {best['label']} -> {best['gluon_tflops']:.1f} TFLOP/s")
    results["elapsed_s"] = time.time() - t_start
    if out_path:
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        with open(out_path, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
        print("wrote", out_path)
    print(f"total {time.time() - t_start:.0f}s; correctness {'ALL PASS' if n_fail == 0 else f'{n_fail} FAILED'}")
    return n_fail == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compile-only", action="store_true", help="compile every config for sm_90a (no GPU needed)")
    ap.add_argument("--quick", action="store_true", help="GPU mode: time only the 4k shape")
    default_out = os.path.join(os.environ["OUT"], "gluon_attention.json") if os.environ.get("OUT") else None
    ap.add_argument("--out", default=default_out, help="JSON results path (default $OUT/gluon_attention.json)")
    args = ap.parse_args()
    if args.compile_only:
        ok, rows = compile_only()
        if args.out:
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out, "w") as fh:
                json.dump(rows, fh, indent=1, default=str)
        return 0 if ok else 1
    if not torch.cuda.is_available():
        print("no CUDA device: use --compile-only")
        return 2
    return 0 if gpu_main(args.out, quick=args.quick) else 1


if __name__ == "__main__":
    sys.exit(main())
