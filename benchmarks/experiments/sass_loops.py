"""Experiment: the sm_90 SASS of kernels' key loops, compiled on this machine (no GPU), for the configurations and
switches the journals compare. Prints one line a kernel: registers, programs an SM, spills, and each innermost
loop's per-iteration counts (``kw inspect``'s ``loop`` lines).

    python benchmarks/experiments/sass_loops.py attention   # flash configs, lazy rescale or every tile
    python benchmarks/experiments/sass_loops.py norm_bwd    # the fused backward at 1024 columns: DW_PER_TILE x cap
    python benchmarks/experiments/sass_loops.py paired      # layer norm backward: PAIRED_SUMS off / on
    python benchmarks/experiments/sass_loops.py fast_stats  # the split forward: FAST_STATS off / on

Journals: ``attention.md`` (run 29, sessions 8 and 9), ``norms.md`` (sessions 8, 9 and 10).
"""

from __future__ import annotations

import sys

import torch

from kernelwright.harness.inspect import analyze, compile_triton, loop_summary


def _line(label: str, report) -> str:
    spill = f"{report.mix.local_store_bytes}/{report.mix.local_load_bytes} B" if report.mix else "?"
    loops = "; ".join(loop_summary(lp) for lp in report.loops)
    return (f"{label:<48} {report.registers:>3} regs  {report.occupancy.blocks_per_sm} an SM  spills {spill}  "
            f"{loops}")


def attention() -> None:
    import dataclasses

    from kernelwright.ops.attention import hooks
    from kernelwright.ops.attention import triton as T
    from kernelwright.ops.attention.spec import encode

    # compiled as the tuned rung's kernel so the config carries the rescale (lazy: exp2_lazy's, every tile: exp2's);
    # the tuned kernel differs from the fixed rungs only in launching causal blocks longest first (the program id's
    # mapping, outside the key loops)
    configs = [("128x64 8w", T.AttentionConfig(128, 64, 8, 3)),
               ("128x64 8w TMA", T.AttentionConfig(128, 64, 8, 3, tma=True)),
               ("128x128 8w", T.AttentionConfig(128, 128, 8, 3)),
               ("64x64 4w", T.AttentionConfig(64, 64, 4, 3)),
               ("pipelined 128x64 8w", T.AttentionConfig(128, 64, 8, 3, pipeline=True)),
               ("pipelined 128x64 8w TMA", T.AttentionConfig(128, 64, 8, 3, tma=True, pipeline=True)),
               ("pipelined 64x64 4w TMA", T.AttentionConfig(64, 64, 4, 3, tma=True, pipeline=True))]
    for lazy in (True, False):
        for causal in (False, True):
            size = encode(4, 32, 32, 4096, 4096, 128, causal=causal)
            for name, cfg in configs:
                cfg = dataclasses.replace(cfg, lazy=lazy)
                report = analyze(hooks.flash_artifact("tuned", size, torch.bfloat16, cfg))
                label = f"{name} {'causal' if causal else 'full'} {'lazy' if lazy else 'every-tile'}"
                print(_line(label, report), flush=True)


def _bwd_sig() -> tuple[dict, list]:
    sig = {n: "*bf16" for n in ("x_ptr", "w_ptr", "dy_ptr", "dh_ptr", "dx_ptr")}
    sig |= {n: "*fp32" for n in ("mean_ptr", "rstd_ptr", "dw_ptr", "db_ptr")}
    sig |= {n: "i32" for n in ("n_rows", "n_cols", "x_stride", "dy_stride", "dh_stride", "dx_stride")}
    aligned = [n for n, t in sig.items() if t.startswith("*")] + ["n_cols", "x_stride", "dy_stride", "dh_stride",
                                                                 "dx_stride"]
    return sig, aligned


def _bwd_fused(cols: int, center: bool, cap: int | None = None, **switches):
    """The fused backward's sm_90 compile at ``cols`` columns in the library's configuration, with ``switches``
    (DW_PER_TILE, PAIRED_SUMS) over the library's values; returns (its configuration in words, the report)."""
    from kernelwright.ops.rms_norm_bwd import triton as B

    sig, aligned = _bwd_sig()
    block, rows, warps = B.fused_bwd_config(cols)
    consts = dict(CENTER=center, DH=False, OFFSET=False, PREFETCH=B.FUSED_PREFETCH, BLOCK_R=rows, BLOCK=block,
                  DW_PER_TILE=B.FUSED_DW_PER_TILE, PAIRED_SUMS=B.PAIRED_SUMS is not False) | switches  # GPU default
    art = compile_triton(B._norm_bwd_fused_kernel, sig, consts, num_warps=warps, maxnreg=cap, aligned=aligned)
    return f"{rows}x{block} {warps}w", analyze(art)


def norm_bwd() -> None:
    for center in (False, True):
        for per_tile in (False, True):
            for cap in (None, 168):
                config, report = _bwd_fused(1024, center, cap, DW_PER_TILE=per_tile)
                label = (f"{'layer' if center else 'rms'} {config} "
                         f"{'per-tile' if per_tile else 'after-loop'} cap {cap}")
                print(_line(label, report), flush=True)


def paired() -> None:
    """Layer norm's backward with PAIRED_SUMS off and on: the fused kernel at 1024 and 4096 columns, the split one
    in its 16384-column (two 8192-column chunks) and wide (8192 x 8 warps, held weight) configurations."""
    from unittest import mock

    from kernelwright.ops.rms_norm_bwd import triton as B

    sig, aligned = _bwd_sig()
    for cols in (1024, 4096):
        for on in (False, True):
            config, report = _bwd_fused(cols, True, PAIRED_SUMS=on)
            print(_line(f"layer fused {cols}: {config} paired {on}", report), flush=True)
    for cols in (16384, 262144):
        with mock.patch("kernelwright.runtime.interpreting", lambda: False):  # the GPU's configuration
            chunk, warps, hints = B.split_config(cols)
        n = cols // chunk
        for on in (False, True):
            consts = dict(CENTER=True, DH=False, OFFSET=False, N_CHUNKS=n, CHUNKS_POW2=n, CHUNK=chunk,
                          EVICT=hints[0], STORE_CACHE=hints[1], W_EVICT=B._fwd.WEIGHT_EVICT,
                          W_HOLD=B.WEIGHT_HOLD and cols >= B.WEIGHT_HOLD_FROM, PAIRED_SUMS=on)
            art = compile_triton(B._norm_bwd_split_kernel, {**sig, "slot_ptr": "*i64"}, consts, num_warps=warps,
                                 aligned=aligned + ["slot_ptr"])
            report = analyze(art)  # the row loop holds the wait loops: the innermost loops are the waits
            bars = sum(n for op, n in report.mix.opcodes.items() if op.startswith("BAR.SYNC")) if report.mix else "?"
            print(_line(f"layer split {cols}: {chunk} x {warps}w paired {on}", report) + f"  kernel: BAR.SYNC {bars}, "
                  f"{report.mix.total if report.mix else '?'} instructions", flush=True)


def fast_stats() -> None:
    """The split forward (rms, layer norm; bf16) with FAST_STATS off, on, and on with its range widened to every
    exponent (the compiler then drops the scaled fallback: what a row in range executes), in its 65536- and
    262144-column configurations: registers, programs an SM, spills, and the kernel's block barriers and
    instructions (static counts: "on" holds both paths)."""
    from unittest import mock

    import triton.language as tl

    from kernelwright.ops.rms_norm import triton as F

    sig = {n: "*bf16" for n in ("x_ptr", "res_ptr", "w_ptr", "b_ptr", "y_ptr", "h_ptr")}
    sig |= {"mean_ptr": "*fp32", "rstd_ptr": "*fp32", "slot_ptr": "*i64", "eps": "fp32"}
    ints = ("n_rows", "n_cols", "x_stride", "res_stride", "y_stride", "h_stride")
    sig |= {n: "i32" for n in ints}
    aligned = [n for n, t in sig.items() if t.startswith("*")] + [n for n in ints if n != "n_rows"]
    lo, hi = F.FAST_LO, F.FAST_HI
    for center in (False, True):
        for cols in (65536, 262144):
            with mock.patch("kernelwright.runtime.interpreting", lambda: False):  # the GPU's configuration
                chunk, warps, hints = F.split_config(cols, False)
            n = cols // chunk
            # the library's cap (F._split_cap), spelled out: register_cap gives none in an interpreter process
            cap = F.SPLIT_MAXNREG or (F.WIDE_LAYER_MAXNREG if center and cols > F.SPLIT_CHUNK else None)
            for mode in ("off", "on", "fast path"):
                F.FAST_LO, F.FAST_HI = (tl.constexpr(-1000), tl.constexpr(1000)) if mode == "fast path" else (lo, hi)
                consts = dict(CENTER=center, RESIDUAL=False, STORE_H=False, OFFSET=False, SAVE_STATS=True,
                              N_CHUNKS=n, CHUNKS_POW2=n, CHUNK=chunk, EVICT=hints[0], STORE_CACHE=hints[1],
                              W_EVICT=F.WEIGHT_EVICT, W_HOLD=F.WEIGHT_HOLD, FAST=mode != "off")
                try:
                    art = compile_triton(F._norm_fwd_split_kernel, sig, consts, num_warps=warps, aligned=aligned,
                                         maxnreg=cap)
                finally:
                    F.FAST_LO, F.FAST_HI = lo, hi
                report = analyze(art)
                mix = report.mix
                bars = sum(c for op, c in mix.opcodes.items() if op.startswith("BAR.SYNC"))
                print(f"{'layer' if center else 'rms':<5} split {cols}: {chunk} x {warps}w {mode:<9} "
                      f"{report.registers:>3} regs  {report.occupancy.blocks_per_sm} an SM  "
                      f"spills {mix.local_store_bytes}/{mix.local_load_bytes} B  kernel: BAR.SYNC {bars}, "
                      f"{mix.total} instructions", flush=True)


if __name__ == "__main__":
    which = sys.argv[1:] or ["attention", "norm_bwd", "paired", "fast_stats"]
    for w in which:
        {"attention": attention, "norm_bwd": norm_bwd, "paired": paired, "fast_stats": fast_stats}[w]()
