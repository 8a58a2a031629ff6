"""Experiment (not yet measured): version 4 of the split softmax rung against the library's version 3.

Version 4 publishes the *next* row's (max, sum) before waiting for this row's partners, so partners have
published a row one iteration before anyone waits for it (see benchmarks/journal/softmax.md). It passed the CPU
emulation of the exchange (pre-published slots, as in tests/test_softmax_split.py, at commit 8ff6c66) but no
H200 was available to run it in that session, so the library kept version 3. This script checks version 4
against float64 three times per shape (a moving result is a race) on the shapes of tests/test_gpu.py and the
issue's four, then times both versions side by side. GPU only:

    KW_DEVICE=cuda python benchmarks/experiments/softmax_split_v4.py     # JSON to $OUT/split_v4.json
"""

import json
import os

import kernelwright  # first: it settles the device (and Triton's interpreter on CPU) before triton loads

kernelwright.runtime.current_device()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernelwright.harness.inputs import generator, poisoned_like  # noqa: E402
from kernelwright.harness.timing import time_fn  # noqa: E402
from kernelwright.harness.verify import compare, reference64, same_values  # noqa: E402
from kernelwright.ops._triton_helpers import to_output  # noqa: E402
from kernelwright.ops.softmax import triton as sm  # noqa: E402
from kernelwright.registry import get_family  # noqa: E402


@triton.jit
def _split_publish(slot_ptr, row64, chunk, m, s, ok, N_CHUNKS: tl.constexpr):
    # high word: bits of m (finite, so never the all-ones NaN of the -1 sentinel); low word: bits of s
    word = (m.to(tl.int32, bitcast=True).to(tl.int64) << 32) | s.to(tl.uint32, bitcast=True).to(tl.int64)
    tl.atomic_xchg(slot_ptr + row64 * N_CHUNKS + chunk, word, sem="relaxed", mask=ok)


@triton.jit
def _split_combine(slot_ptr, row64, N_CHUNKS: tl.constexpr, CHUNKS_POW2: tl.constexpr):
    """Wait until every chunk of the row has published; return the row's (max, sum of exp(x - max))."""
    ks = tl.arange(0, CHUNKS_POW2)
    kmask = ks < N_CHUNKS
    slots = slot_ptr + row64 * N_CHUNKS + ks
    # volatile loads go to L2, where the atomics land
    w = tl.load(slots, mask=kmask, other=0, volatile=True)
    while tl.sum((w == -1).to(tl.int32), 0) > 0:
        w = tl.load(slots, mask=kmask, other=0, volatile=True)
    pm = tl.where(kmask, (w >> 32).to(tl.int32).to(tl.float32, bitcast=True), float("-inf"))
    ps = tl.where(kmask, (w & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True), 0.0)
    row_max = tl.max(pm, 0)
    return row_max, tl.sum(ps * tl.exp(pm - row_max), 0)


@triton.jit
def _softmax_split_v4_kernel(x_ptr, y_ptr, slot_ptr, n_rows, n_cols, x_stride, y_stride,
                          N_CHUNKS: tl.constexpr, CHUNKS_POW2: tl.constexpr, CHUNK: tl.constexpr):
    # slot: [R, N_CHUNKS] int64, all -1 at launch; a chunk publishes (max, sum of exp(x - max)) packed into one
    # 64-bit word, so a single relaxed atomic carries its whole message: no counter, no release fence (which
    # would wait for this program's earlier stores of y to drain).
    # Pipeline, per program: publish the partials of the *next* row before waiting for this row's partners, and
    # keep the load of the row after that in flight. Partners publish a row one iteration before anyone waits
    # for it, so the wait is mostly already over when it starts.
    pid = tl.program_id(0)
    chunk = pid % N_CHUNKS
    groups = tl.num_programs(0) // N_CHUNKS  # rows processed at once; each group of N_CHUNKS programs, one row
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    first = pid // N_CHUNKS  # < n_rows: the launcher makes at most R groups
    x = tl.load(x_ptr + tl.cast(first, tl.int64) * x_stride + cols, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, 0)  # every chunk holds at least one column (N_CHUNKS = cdiv(D, CHUNK)): m is finite
    e = tl.exp(x - m)
    s = tl.sum(e, 0)
    if N_CHUNKS > 1:
        _split_publish(slot_ptr, tl.cast(first, tl.int64), chunk, m, s, first < n_rows, N_CHUNKS)
    nxt0 = first + groups
    x_next = tl.load(x_ptr + tl.cast(nxt0, tl.int64) * x_stride + cols, mask=mask & (nxt0 < n_rows),
                     other=float("-inf"))
    for row in range(first, n_rows, groups):
        row64 = tl.cast(row, tl.int64)
        nxt = row + groups
        has_next = nxt < n_rows
        xn = x_next.to(tl.float32)
        after = nxt + groups
        x_next = tl.load(x_ptr + tl.cast(after, tl.int64) * x_stride + cols, mask=mask & (after < n_rows),
                         other=float("-inf"))
        m_n = tl.max(xn, 0)
        m_n = tl.where(has_next, m_n, 0.0)  # past the last row xn is all -inf: keep the arithmetic finite
        e_n = tl.exp(xn - m_n)
        s_n = tl.sum(e_n, 0)
        if N_CHUNKS == 1:
            scale = 1.0 / s
        else:
            _split_publish(slot_ptr, tl.cast(nxt, tl.int64), chunk, m_n, s_n, has_next, N_CHUNKS)
            row_max, row_sum = _split_combine(slot_ptr, row64, N_CHUNKS, CHUNKS_POW2)
            scale = tl.exp(m - row_max) / row_sum
        tl.store(y_ptr + row64 * y_stride + cols, to_output(e * scale, y_ptr.dtype.element_ty), mask=mask)
        m, e, s = m_n, e_n, s_n


def run_v4(x2, y2, chunk=None, warps=None):
    sm._split(x2, y2, chunk=chunk, num_warps=warps, kernel=_softmax_split_v4_kernel)


def main():
    assert kernelwright.runtime.current_device() == "cuda", "needs a CUDA GPU"
    fam = get_family("softmax")
    rows = []
    for shape in [(3, 65536 + 3), (257, 8192 * 5 + 1), (64, 262144)] + fam.sweep("cuda"):
        for dtype in (torch.float32, torch.bfloat16):
            gen, seed = generator("cuda")
            case = fam.make_case(shape, dtype, "cuda", gen)
            ref = reference64(fam, case)
            outs = []
            for _ in range(3):
                out = poisoned_like(shape, dtype, "cuda")
                run_v4(case.args[0], out)
                outs.append(out)
            cmp = compare(outs[0], ref, fam.tolerances[dtype])
            stable = all(same_values(outs[0], o) for o in outs[1:])
            row = {"shape": shape, "dtype": str(dtype), "seed": seed, "ok": cmp.ok and stable, "reason": cmp.reason,
                   "race": not stable}
            if row["ok"] and shape in fam.sweep("cuda") and dtype == torch.bfloat16:
                nbytes = fam.cost(shape, dtype)[1]
                o = outs[0]
                x = case.args[0]
                t3 = time_fn(lambda x=x, o=o: sm._split(x, o))
                t4 = time_fn(lambda x=x, o=o: run_v4(x, o))
                row.update(v3_us=t3.median_ms * 1e3, v4_us=t4.median_ms * 1e3,
                           v3_tbps=nbytes / t3.median_ms / 1e9, v4_tbps=nbytes / t4.median_ms / 1e9)
            rows.append(row)
            print(row, flush=True)
            del case, ref, outs
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "split_v4.json"), "w") as fh:
        json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
