"""Experiment: how the norm cluster rungs' CTAs spend their lives on the GPU, and whether the CTAs that share an SM
overlap their memory phases or move in step. GPU only:

    KW_DEVICE=cuda python benchmarks/experiments/norm_timeline.py   # table last; JSON to $OUT/norm_timeline.json

The forward kernels compiled with TIMELINE=1 (``ops/_cuda/rows.cuh``) record, for every CTA, its SM and the SM's
clock when it began, when its chunk had landed (a block barrier the plain kernel does not have), when the row's
statistics were known (after the cluster's exchange), and when its last store was issued. From those, per case:

- the phases' median lengths (us): load (begin to chunk landed), stats, store (issue of the stores, their L2 reads
  of w and b included; the stores themselves drain after);
- per SM, of the time a CTA lived there: the share with a CTA loading, with two or more loading at once, and with
  none loading or storing ("quiet": no HBM traffic issued by that SM);
- "in step": the share of CTA starts within a tenth of a lifetime of another CTA's start on the same SM (CTAs
  launched together and moving in step cannot cover each other's quiet phases);
- the gap from a CTA's end to the next start on its SM (the block scheduler's refill).

Each case runs again with STAGGER_NS (rows.cuh): the first wave's second CTA on each SM sleeps half a median
lifetime before it loads ("TB/s" then times the staggered kernel without the records). If the CTAs of an SM move in
step, that puts them half a life apart; whether they stay apart, and what it gains, is the test of the reading.

Run 87's Nsight Compute numbers (layer norm cluster at 4096 x 65536: DRAM 62%, occupancy 47%, nothing saturated)
and session 15's launch shapes (layer norm at 65536 columns ran 3.05 TB/s with one CTA of 1024 threads an SM and
3.07 with two of 512) raised the question this answers: is the layer norm rung's quiet time long (three reductions,
two per-column vectors in the store) and not covered by the second CTA on its SM? The instrumented kernel is also
timed against the plain one, so the instrument's own cost is on the table. Each case's output is checked against
float64 first.
"""

from __future__ import annotations

import json
import os
import statistics

import torch

from kernelwright.harness.timing import TimerConfig, time_fn
from kernelwright.ops import _cluster_norm as cn
from kernelwright.ops.layer_norm import cuda as ln
from kernelwright.ops.rms_norm import cuda as rms
from kernelwright.ops.softmax import cuda as sc

OUT = os.environ.get("OUT", "/tmp")
CFG = TimerConfig(max_seconds=0.3)
CASES = [("layer_norm", 4096, 65536), ("rms_norm", 4096, 65536), ("layer_norm", 1024, 262144),
         ("rms_norm", 1024, 262144), ("layer_norm", 16384, 16384), ("rms_norm", 16384, 16384)]


def instrumented(family: str, cfg: sc.ClusterConfig, dtype: torch.dtype, defines: tuple[str, ...] = ("TIMELINE=1",)):
    """The family's kernel for ``cfg`` as its launcher compiles it, with ``defines`` added."""
    plain = cn.options

    def with_timeline(cfg, dtype, extra, **kw):
        return plain(cfg, dtype, (*extra, *defines), **kw)

    cn.options = with_timeline
    try:
        return ln._kernel(cfg, dtype, False) if family == "layer_norm" else rms._kernel(cfg, dtype, False, False)
    finally:
        cn.options = plain


def run_case(family: str, rows: int, cols: int, dtype=torch.bfloat16, stagger_ns: int = 0,
             occupy: tuple[int, int] = (0, 1)) -> dict:
    """One case's records; ``occupy`` = (SMs, cluster): the recorded launch runs beside sm_proxy.py's occupier
    holding that many SMs (clusters of that size), so each SM left has the H200's share of the H100's HBM."""
    gen = torch.Generator("cuda").manual_seed(rows + cols)
    x = torch.randn(rows, cols, device="cuda", generator=gen).to(dtype)
    w = (torch.randn(cols, device="cuda", generator=gen) * 0.5 + 1).to(dtype)
    b = (torch.randn(cols, device="cuda", generator=gen) * 0.1).to(dtype)
    y = torch.full_like(x, float("nan"))
    vectors = (w, b) if family == "layer_norm" else (w,)
    cfg = cn.plan(lambda c: instrumented(family, c, dtype), x, y, vectors)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    stagger = (f"STAGGER_NS={stagger_ns}", f"STAGGER_FROM={sms // cfg.cluster}") if stagger_ns else ()
    k = instrumented(family, cfg, dtype, ("TIMELINE=1", *stagger))
    stats = (y, y) if family == "layer_norm" else (y,)
    eps = 1e-5 if family == "layer_norm" else 1e-6
    grid = rows * cfg.cluster
    tl_buf = torch.zeros(grid * 8, dtype=torch.int64, device="cuda")
    args = (x, *vectors, y, *stats, cols, x.stride(0), y.stride(0), eps, 1.0 / cols, tl_buf)

    def launch():
        k.launch((grid,), (cfg.threads,), args, shared_mem=sc.smem_bytes(cfg), cluster=sc.launch_cluster(cfg))

    launch()
    torch.cuda.synchronize()
    xd = x.double()
    if family == "layer_norm":
        ref = torch.nn.functional.layer_norm(xd, (cols,), w.double(), b.double(), eps)
    else:
        ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w.double()
    err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
    if not err < 2e-2:
        raise AssertionError(f"{family} {rows}x{cols}: the instrumented kernel is off by {err:.3g} (relative)")
    t_inst = time_fn(launch, CFG).median_ms
    plain_out = torch.empty_like(x)
    if stagger:  # the staggered kernel without the records
        ks = instrumented(family, cfg, dtype, stagger)
        t_plain = time_fn(lambda: ks.launch((grid,), (cfg.threads,), args[:-1], shared_mem=sc.smem_bytes(cfg),
                                            cluster=sc.launch_cluster(cfg)), CFG).median_ms
    elif family == "layer_norm":
        t_plain = time_fn(lambda: ln.layer_norm_cluster(x, w, b, eps, out=plain_out), CFG).median_ms
    else:
        t_plain = time_fn(lambda: rms.rms_norm_cluster(x, w, eps, out=plain_out), CFG).median_ms
    tl_buf.zero_()
    torch.cuda.synchronize()
    if occupy[0]:  # no device-wide synchronization while the occupier spins: the launch's own stream only
        from sm_proxy import Occupier  # this folder's

        with Occupier(*occupy):
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                launch()
            side.synchronize()
    else:
        launch()
    torch.cuda.synchronize()
    recs = tl_buf.view(grid, 8).cpu().tolist()
    return {"family": family, "rows": rows, "cols": cols, "stagger_ns": stagger_ns, "config": str(cfg),
            "occupied_sms": occupy[0], "max_rel_err": err, "rec_tbps": 4 * x.numel() / 1e6 / max(1.0, _span_us(recs)),
            "tbps_plain": 4 * x.numel() / t_plain / 1e9, "tbps_instrumented": 4 * x.numel() / t_inst / 1e9,
            **analyse(recs)}


def _span_us(recs: list[list[int]]) -> float:
    """The recorded launch's span by the global timer (first CTA's begin to last CTA's end), microseconds."""
    return (max(r[7] for r in recs) - min(r[6] for r in recs)) / 1e3


def _union(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def _covered_twice(intervals: list[tuple[int, int]]) -> int:
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    depth, last, twice = 0, None, 0
    for t, d in events:
        if depth >= 2 and last is not None:
            twice += t - last
        depth += d
        last = t
    return twice


def analyse(recs: list[list[int]]) -> dict:
    """Phase lengths and per-SM overlap from the CTAs' records [sm, c0, c1, c2, c3, -, ns0, ns1]."""
    ns_per_cycle = statistics.median((r[7] - r[6]) / (r[4] - r[1]) for r in recs if r[4] > r[1] and r[7] > r[6])
    us = lambda c: c * ns_per_cycle / 1e3  # noqa: E731
    load = [us(r[2] - r[1]) for r in recs]
    stat = [us(r[3] - r[2]) for r in recs]
    store = [us(r[4] - r[3]) for r in recs]
    by_sm: dict[int, list] = {}
    for r in recs:
        by_sm.setdefault(r[0], []).append(r)
    alive = loading = two_loading = busy = 0
    in_step = starts = 0
    gaps = []
    for ctas in by_sm.values():
        life = [(r[1], r[4]) for r in ctas]
        loads = [(r[1], r[2]) for r in ctas]
        traffic = loads + [(r[3], r[4]) for r in ctas]
        alive += _union(life)
        loading += _union(loads)
        two_loading += _covered_twice(loads)
        busy += _union(traffic)
        span = statistics.median(b - a for a, b in life)
        begins = sorted(a for a, _ in life)
        ends = sorted(b for _, b in life)
        for i, a in enumerate(begins):
            near = (i > 0 and a - begins[i - 1] < span / 10) or (i + 1 < len(begins) and begins[i + 1] - a < span / 10)
            in_step += near
            starts += 1
        for e in ends:
            nxt = [a for a in begins if a >= e]
            if nxt:
                gaps.append(us(min(nxt) - e))
    med = lambda v: round(statistics.median(v), 3) if v else None  # noqa: E731
    return {"ctas": len(recs), "sms": len(by_sm), "ns_per_cycle": round(ns_per_cycle, 4),
            "kernel_us": round((max(r[7] for r in recs) - min(r[6] for r in recs)) / 1e3, 1),
            "load_us": med(load), "stats_us": med(stat), "store_us": med(store),
            "loading_share": round(loading / alive, 3), "two_loading_share": round(two_loading / alive, 3),
            "quiet_share": round(1 - busy / alive, 3), "in_step_share": round(in_step / starts, 3),
            "refill_gap_us": med(gaps)}


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description="the norm cluster rungs' CTA timelines (see the module docstring)")
    ap.add_argument("--occupy", type=int, default=0, help="SMs held by sm_proxy.py's occupier during the records")
    ap.add_argument("--cluster", type=int, default=1, help="the occupier's cluster size (16: whole GPCs)")
    ap.add_argument("--no-stagger", action="store_true", help="skip the staggered runs")
    ap.add_argument("--json", default=os.path.join(OUT, "norm_timeline.json"))
    args = ap.parse_args()
    results = []
    for family, rows, cols in CASES:
        for stagger in (False,) if args.no_stagger else (False, True):  # then the second CTAs half a life late
            try:
                ns = 0
                if stagger:
                    base = results[-1]
                    if "error" in base:
                        continue
                    ns = int(500 * (base["load_us"] + base["stats_us"] + base["store_us"]))
                results.append(run_case(family, rows, cols, stagger_ns=ns, occupy=(args.occupy, args.cluster)))
            except Exception as e:  # one case's failure is reported, the rest still run
                results.append({"family": family, "rows": rows, "cols": cols, "error": f"{type(e).__name__}: {e}"})
            print(json.dumps(results[-1]), flush=True)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=1)
    if args.occupy:
        print(f"\n(records taken with {args.occupy} SMs held; 'rec TB/s': the recorded launch's bytes over its own "
              "span, 'x132' that per active SM times 132)")
    print(f"\n{'case':<34} {'TB/s':>5} {'inst':>5} {'load':>6} {'stats':>6} {'store':>6} {'loading':>7} "
          f"{'2 load':>6} {'quiet':>6} {'in step':>7} {'refill':>6} {'rec TB/s':>8} {'x132':>5}")
    for r in results:
        name = f"{r['family']} {r['rows']}x{r['cols']}{' stagger' if r.get('stagger_ns') else ''}"
        if "error" in r:
            print(f"{name:<34} {r['error'][:90]}")
            continue
        print(f"{name:<34} {r['tbps_plain']:>5.2f} {r['tbps_instrumented']:>5.2f} {r['load_us']:>6.2f} "
              f"{r['stats_us']:>6.2f} {r['store_us']:>6.2f} {r['loading_share']:>7.2f} {r['two_loading_share']:>6.2f} "
              f"{r['quiet_share']:>6.2f} {r['in_step_share']:>7.2f} {r['refill_gap_us']:>6.2f} "
              f"{r['rec_tbps']:>8.2f} {r['rec_tbps'] * 132 / r['sms']:>5.2f}")
    print("(phases: median us a CTA; shares: of the time a CTA lived on an SM, summed over SMs)")


if __name__ == "__main__":
    main()
