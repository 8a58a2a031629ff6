"""attention: the family's registration (rungs, inputs, cost, tolerances, sweep, peers).

Sizes are ``BxHqxHkvxSqxSkvxD`` with flags after colons: ``4x32x32x4096x4096x128``, ``4x32x8x4096x4096x128:causal``,
``8x32x8x4096x4096x128:varlen:causal``. Short forms: ``BxHxSxD`` (Hkv = H, Skv = S), ``BxHqxHkvxSxD``, and one
number ``S`` for the issue's sweep point ``(16384 / S) x 32 x 32 x S x S x 128``. With ``:varlen`` the case packs
B sequences whose lengths are drawn deterministically from the size (the first is the longest, Sq x Skv; the
others' key lengths uniform in [Skv / 16, Skv], query lengths in proportion), so the cost model and every run see
the same batch.

The family's output is ``o``; every rung also writes the float32 log-sum-exp when given ``lse=`` (the backward
needs it), and ``tests/test_attention.py`` checks it. Peers (torch SDPA) return ``o`` only.
"""

from __future__ import annotations

import contextlib
import functools
import random
from typing import NamedTuple

import torch

from kernelwright import runtime
from kernelwright.errors import Unavailable, UsageError
from kernelwright.harness.inputs import random_values, with_layout
from kernelwright.harness.sizes import parse_dims
from kernelwright.ops.attention.reference import attention, error_scale
from kernelwright.registry import Case, Family, Peer, Rung, Tolerance

_T = "kernelwright.ops.attention.triton"
_H = "kernelwright.ops.attention.hooks"


# --- sizes ---------------------------------------------------------------------------------------------------------
class Problem(NamedTuple):
    b: int
    hq: int
    hkv: int
    sq: int
    skv: int
    d: int
    causal: bool
    varlen: bool


# The size tuple carries the mask and layout as a 7th number (1 + causal + 2 * varlen, never 0: the CLI rejects
# sizes with a zero in them as empty): cost(size, dtype) must know them, and it sees nothing but the size.
def encode(b: int, hq: int, hkv: int, sq: int, skv: int, d: int, *, causal: bool = False,
           varlen: bool = False) -> tuple[int, ...]:
    return (b, hq, hkv, sq, skv, d, 1 + int(causal) + 2 * int(varlen))


def decode(size: tuple[int, ...]) -> Problem:
    b, hq, hkv, sq, skv, d = size[:6]
    flags = (size[6] if len(size) > 6 else 1) - 1
    return Problem(b, hq, hkv, sq, skv, d, bool(flags & 1), bool(flags & 2))


def parse_size(text: str) -> tuple[int, ...]:
    head, *flags = text.strip().lower().split(":")
    unknown = [f for f in flags if f not in ("causal", "varlen")]
    if unknown:
        raise UsageError(f"sizes: unknown flag {unknown[0]!r} in {text!r}; flags are :causal and :varlen")
    dims = parse_dims(head, what="sizes")
    if len(dims) == 1:
        s = dims[0]
        dims = (max(1, 16384 // max(s, 1)), 32, 32, s, s, 128)
    elif len(dims) == 4:
        dims = (dims[0], dims[1], dims[1], dims[2], dims[2], dims[3])
    elif len(dims) == 5:
        dims = (dims[0], dims[1], dims[2], dims[3], dims[3], dims[4])
    elif len(dims) != 6:
        raise UsageError(f"sizes: expected BxHqxHkvxSqxSkvxD (or BxHxSxD, BxHqxHkvxSxD, S) with optional :causal "
                         f":varlen, got {text!r}")
    b, hq, hkv, sq, skv, d = dims
    if hkv == 0 or hq % hkv:
        raise UsageError(f"sizes: Hq = {hq} must be a multiple of Hkv = {hkv} in {text!r}")
    return encode(*dims, causal="causal" in flags, varlen="varlen" in flags)


def format_size(size: tuple[int, ...]) -> str:
    p = decode(size)
    return "x".join(map(str, size[:6])) + (":varlen" if p.varlen else "") + (":causal" if p.causal else "")


def seqlens(size: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """Per-sequence (query lengths, key lengths) of a size: all equal when padded; drawn from a generator seeded by
    the size when varlen (the same lists in every process, so ``cost`` matches the case)."""
    p = decode(size)
    if not p.varlen:
        return [p.sq] * p.b, [p.skv] * p.b
    rng = random.Random(p.b * 1_000_003 + p.sq * 7919 + p.skv * 31 + p.d)
    lk = [p.skv] + [rng.randint(max(1, p.skv // 16), p.skv) if p.skv else 0 for _ in range(p.b - 1)]
    lq = [p.sq] + [round(x * p.sq / p.skv) if p.skv else p.sq for x in lk[1:]]
    return lq[:p.b], lk[:p.b]


def pairs(lq: int, lk: int, causal: bool) -> int:
    """(query, key) pairs attended in one sequence: Lq * Lk, or with the bottom-right causal mask (row i sees
    max(0, i + Lk - Lq + 1) keys) Lq * (Lk - Lq + 1) + Lq (Lq - 1) / 2 when Lq <= Lk, else Lk (Lk + 1) / 2."""
    if not causal:
        return lq * lk
    if lq <= lk:
        return lq * (lk - lq + 1) + lq * (lq - 1) // 2
    return lk * (lk + 1) // 2


def cost(size, dtype) -> tuple[float, float]:
    """4 * D flops per attended pair (q.k and p.v, a multiply-add each), for Hq heads; minimum bytes: read q, k,
    v once, write o and the float32 lse. Varlen counts real tokens only."""
    p = decode(size)
    lq, lk = seqlens(size)
    attended = sum(pairs(a, b, p.causal) for a, b in zip(lq, lk, strict=True))
    elt = torch.finfo(dtype).bits // 8
    tq, tk = sum(lq), sum(lk)
    return 4.0 * p.hq * p.d * attended, float((2 * tq * p.hq + 2 * tk * p.hkv) * p.d * elt + 4 * tq * p.hq)


# --- inputs --------------------------------------------------------------------------------------------------------
def _qk_values(shape, dtype, device, gen, dist: str, temperature: float) -> torch.Tensor:
    """q or k rows from ``dist`` rescaled to unit RMS (heavy tails stay inside a row), times ``temperature``:
    ``|scale * q . k|`` stays under ``temperature^2 * sqrt(D)``, where the fp32 scores every rung computes are
    exact enough to compare with float64. Unnormalized heavy-tailed q and k would make logits of 1e6, where no
    fp32 kernel (and no float64 reference rounded to fp32) agrees on which key wins a near tie."""
    x = random_values(shape, torch.float32, device, gen, dist)
    rms = x.square().mean(-1, keepdim=True).sqrt().clamp_min(1e-6) if x.numel() else x
    return (x / rms * temperature).to(dtype)


def make_case(size, dtype, device, gen, dist="normal", layout="contiguous", scale=None,
              causal=None, max_seqlen_q=None, max_seqlen_k=None, lens=None) -> Case:
    """Inputs of a size (``lens``: explicit ((Lq, Lk), ...) per varlen sequence, for fuzz cases; ``causal`` and
    the max lengths are read from the size, accepted only so a case's own kwargs can rebuild it)."""
    p = decode(size)
    if lens is not None:
        lq, lk = [a for a, _ in lens], [b for _, b in lens]
    else:
        lq, lk = seqlens(size)
    # "large": q rows at RMS 3 -> logits up to ~9 sqrt(D) ~ 100, past exp's fp32 range without max subtraction
    temp = 3.0 if dist == "large" else 1.0
    if p.varlen:
        shape_q, shape_k = (sum(lq), p.hq, p.d), (sum(lk), p.hkv, p.d)
    else:
        shape_q, shape_k = (p.b, p.hq, p.sq, p.d), (p.b, p.hkv, p.skv, p.d)
    q = _qk_values(shape_q, dtype, device, gen, dist, temp)
    k = _qk_values(shape_k, dtype, device, gen, dist, 1.0)
    v = random_values(shape_k, dtype, device, gen, dist)
    args = [with_layout(q, layout), with_layout(k, layout), with_layout(v, layout)]
    kwargs = {"causal": p.causal, "scale": scale}
    label = format_size(size)
    if p.varlen:
        cu = [torch.tensor([0, *_cumsum(x)], dtype=torch.int32, device=device) for x in (lq, lk)]
        args += cu
        kwargs.update(max_seqlen_q=max(lq, default=0), max_seqlen_k=max(lk, default=0))
        if lens is not None:
            label += " lens=" + ",".join(f"{a}/{b}" for a, b in lens)
    if scale is not None:
        label += f" scale={scale:g}"
    return Case(tuple(size), tuple(args), kwargs, label)


def _cumsum(xs: list[int]) -> list[int]:
    out, s = [], 0
    for x in xs:
        s += x
        out.append(s)
    return out


FULL, CAUSAL, VARLEN, VARLEN_CAUSAL = {}, {"causal": True}, {"varlen": True}, {"causal": True, "varlen": True}


def _s(b, hq, hkv, sq, skv, d, flags=FULL) -> tuple[int, ...]:
    return encode(b, hq, hkv, sq, skv, d, **flags)


def fuzz() -> list[tuple[tuple[int, ...], dict]]:
    return [
        (_s(1, 1, 1, 1, 1, 16), {}),                      # one query, one key: o = v exactly
        (_s(2, 4, 4, 17, 17, 32, CAUSAL), {}),            # MHA, 17 rows: under one block, diagonal inside it
        (_s(1, 8, 2, 129, 129, 32, CAUSAL), {}),          # GQA 4: one past 128, a 1-row block, a ragged key tile
        (_s(1, 8, 1, 33, 100, 64, CAUSAL), {}),           # MQA (8): a 33-token chunk attending a 100-key cache
        (_s(2, 2, 2, 70, 20, 16, CAUSAL), {}),            # Sq > Skv causal: rows 0..49 see no key (o 0, lse -inf)
        (_s(1, 4, 2, 48, 200, 128, FULL), {"scale": 0.3}),  # D 128, 4 key tiles, the last ragged; a given scale
        (_s(2, 2, 1, 65, 31, 24, FULL), {}),              # D 24 (padded to 32), Sq > Skv without a mask
        (_s(4, 4, 2, 40, 40, 32, VARLEN_CAUSAL), {"lens": ((17, 17), (0, 0), (1, 1), (40, 40))}),  # empty seq
        (_s(3, 4, 1, 30, 70, 16, VARLEN), {"lens": ((30, 70), (5, 0), (12, 33))}),  # Lq != Lk; a seq with no keys
        (_s(2, 2, 2, 20, 60, 32, VARLEN_CAUSAL), {"lens": ((20, 9), (3, 60))}),     # Lq > Lk and Lq < Lk, causal
        (_s(1, 2, 2, 5, 0, 16), {}),                      # no keys at all: zeros
        (_s(1, 2, 2, 20, 20, 256, CAUSAL), {}),           # the widest head dim
        (_s(1, 2, 2, 0, 5, 16), {}),                      # no queries: empty output
    ]


def sweep(device: str) -> list[tuple[int, ...]]:
    if device == "cuda":
        d128 = [_s(16384 // s, 32, 32, s, s, 128, flags) for s in (1024, 2048, 4096, 8192, 16384)
                for flags in (FULL, CAUSAL)]
        d64 = [_s(8, 32, 32, 2048, 2048, 64, flags) for flags in (FULL, CAUSAL)]
        # the last: decoding (one query row a head, GQA 4, a 4096-key cache; kw optimize's l1/20 in bf16)
        return d128 + d64 + [_s(4, 32, 8, 4096, 4096, 128, CAUSAL), _s(8, 32, 8, 4096, 4096, 128, VARLEN_CAUSAL),
                             _s(32, 32, 8, 1, 4096, 128)]
    # the interpreter's: ~0.1-0.5 s a call, small enough for `kw run` on a CPU
    return [_s(1, 4, 2, 128, 128, 64, CAUSAL), _s(2, 4, 2, 128, 128, 32, VARLEN)]


# --- rungs ---------------------------------------------------------------------------------------------------------
def naive_limit(size, kwargs) -> str | None:
    from kernelwright.ops.attention.triton import NAIVE_MAX_SCORE_BYTES

    p = decode(size)
    need = 4 * p.b * p.hq * p.sq * p.skv
    if need > NAIVE_MAX_SCORE_BYTES:
        return (f"naive: the fp32 score matrix would take {need / 2**30:.1f} GiB "
                f"(> {NAIVE_MAX_SCORE_BYTES // 2**30} GiB): the memory wall")
    return None


def fa3_limit(size, kwargs) -> str | None:
    from kernelwright.ops.attention.gluon import fa3_limit as limit

    return limit(size, kwargs)


RUNGS = (
    Rung(
        "naive", "triton", f"{_T}:attention_naive",
        "Three kernels with the fp32 score matrix S [B*Hq, Sq, Skv] in memory between them: scores (write 4 bytes "
        "a pair), a two-pass row softmax in place that also writes the lse (read 4, read 4 and write 4), and P @ V "
        "(read 4): 20 bytes of traffic per (query, key) pair against the D-wide operands' few. Predicted (bf16, "
        "B4 H32 S4k D128, non-causal): ~43 GB moved, ~12 ms, ~90 TFLOP/s, 10-15% of cuDNN; refuses cases whose "
        "score matrix exceeds 16 GiB (S16k at B1 H32 needs 32 GiB).",
        limit=naive_limit,
    ),
    Rung(
        "flash", "triton", f"{_T}:attention_flash",
        "FlashAttention-2's forward: one program per 128 query rows and head, q in registers, k and v streamed "
        "once in 64-key tiles, online softmax (running max, running sum, accumulator rescaled by exp(m_old - m_new) "
        "every tile), one division at the end; S never leaves registers. Every tile is masked elementwise and, "
        "causal or not, every key tile is computed, the ones above the diagonal too. Predicted (bf16 D128): "
        "non-causal 250-330 TFLOP/s (near SDPA flash's 348); causal about half that, 130-170 TFLOP/s counting "
        "only the attended pairs, since half the tiles are computed then thrown away.",
        artifacts=f"{_H}:artifacts_flash",
    ),
    Rung(
        "causal_skip", "triton", f"{_T}:attention_causal_skip",
        "The key loop split in two: tiles every row of the query block sees in full run with no mask and no "
        "predicated loads; only tiles the diagonal (or the ragged end of the keys) crosses are masked, at most "
        "BM/BN + 1 per block; tiles wholly above the diagonal are never loaded. Predicted: causal 2x flash's "
        "time-per-pair gain minus the diagonal's cost, 230-300 TFLOP/s at S >= 4k (85-90% of the non-causal "
        "rate); non-causal +0-5% (mask-free loads and softmax in all but the last tile).",
        artifacts=f"{_H}:artifacts_causal_skip",
    ),
    Rung(
        "exp2", "triton", f"{_T}:attention_exp2",
        "Scores in the exp2 domain: exp2(qk * (scale * log2 e) - m) is one FFMA and one MUFU.EX2 per score (exp "
        "needs the scale multiply, the subtraction and a log2 e multiply before its EX2); the accumulator is "
        "rescaled every tile, row by row, as in FlashAttention-2 and -3. Written after the lazy rung above it "
        "(session 9): its rescale decision is one tl.max over the block, and in the sm_90 SASS (D128, 128 x 64, 8 "
        "warps) 3 of the key loop's 5 block barriers a tile were that decision's. Measured before it was a rung "
        "(H200 run 34, exp2_lazy's kernel with the decision switched off, bf16): +8-14% over exp2_lazy at D128 "
        "(474 against 424 TFLOP/s at 4k non-causal, 434 against 386 causal), +8% at D64 2k; so exp2 with the "
        "lazy rescale is the slower of the two on Hopper in Triton.",
        artifacts=f"{_H}:artifacts_exp2",
    ),
    Rung(
        "exp2_lazy", "triton", f"{_T}:attention_exp2_lazy",
        "exp2 (the rung below) plus FlashAttention-4's lazy rescale: the reference max stays stale unless some "
        "row's max grows past it by more than 8 (2^8 = 256: p stays <= 256, safe for fp32 sums and fp16/bf16 P), "
        "so the [BM, D] accumulator rescale runs in a few early tiles instead "
        "of every tile; the final o / l is exact. sm_90 SASS (kw inspect's compiler, D128, non-causal): 710 FP32 non-"
        "FMA instructions against causal_skip's 1000. Predicted: +3-6% at D128, +5-10% at D64 (the softmax's share of"
        " the work is larger); the risk is the data-dependent branch breaking the overlap of the two wgmma's with the"
        " softmax, which would show as a loss. Written (and measured in runs 10-29) as the rung above causal_skip, "
        "exp2 and lazy together: +25% over causal_skip at D128. Run 34 took the lazy decision out (now the exp2 "
        "rung): the lazy rescale alone costs 8-14%.",
        artifacts=f"{_H}:artifacts_exp2_lazy",
    ),
    Rung(
        "pipelined", "triton", f"{_T}:attention_pipelined",
        "exp2_lazy with the key loop software-pipelined by hand (FlashAttention-3's intra-warpgroup overlap): each "
        "iteration first issues the next tile's Q K^T, then runs this tile's softmax and P V. In exp2_lazy's sm_90 "
        "SASS (kw inspect's compiler) a wait for every wgmma (WARPGROUP.DEPBAR) sits between the scores' HGMMAs and "
        "the softmax's 34 MUFU.EX2s, so the tensor cores idle while the exponentials run and the reverse; here "
        "ptxas interleaves the next tile's HGMMAs with this tile's MUFU.EX2s. Costs a second fp32 score tile (141 "
        "-> 184 registers a thread at 128 x 64 over 8 warps, D128, in a test kernel) and one wasted score tile per "
        "key loop. Predicted: +5-15% at D128 (FA3 reports its two overlaps together at +10-20%); less at D64. "
        "H200 run 29: 8-11% slower than exp2_lazy at D128, 1-2% at D64 (the journal has the SASS reading).",
        artifacts=f"{_H}:artifacts_pipelined",
    ),
    Rung(
        "tuned", "triton", f"{_T}:attention_tuned",
        "exp2 with (BM, BN, warps, pipeline stages, k/v by TMA descriptors, "
        "pipelined or not, lazy rescale or not) searched per bucket (head dim, causal or not, short or long "
        "sequences) by kernelwright.tune, pruned by shared memory and registers (the lazy dimension since session 9; "
        "before it every config was lazy); causal query blocks launched longest first so the long blocks near the "
        "diagonal's end do not form a tail. No warp specialization: Triton 3.6 documents "
        "tl.range(warp_specialize=True) for Blackwell, and on sm_90 it compiles this kernel to the identical cubin. "
        "Predicted: +5-15% over exp2_lazy; 380-450 TFLOP/s non-causal D128, above SDPA flash (FA2, 348), 65-75% of "
        "cuDNN (604).",
        tune=f"{_H}:tune_tuned", artifacts=f"{_H}:artifacts_tuned",
    ),
    Rung(
        "fa3", "gluon", "kernelwright.ops.attention.gluon:attention_fa3",
        "FlashAttention-3's design, written in Gluon (Triton's explicit-layout dialect) for Hopper: warp "
        "specialization the Triton rungs cannot get on sm_90. One CTA per 128 query rows and head, three partitions: "
        "a producer warpgroup that TMA-loads q once and streams k and v tiles into a two-stage shared-memory ring "
        "(mbarriers for full and empty slots), and two consumer warpgroups of 64 rows each that issue their own "
        "async wgmma's: S_j = Q K_j^T and O += P_{j-1} V_{j-1} back to back, so one tile's softmax overlaps the "
        "other matmul (intra-warpgroup overlap), with P fed from registers; the two consumers take turns on the "
        "tensor cores through mbarriers (ping-pong), so one's softmax overlaps the other's matmuls; setmaxnreg "
        "gives the consumers 240 registers and the producer 24. Written after the tuned rung had stopped at "
        "0.81-0.83x cuDNN at D128 (no prediction recorded before its first run). First run (H200 run 76, "
        "benchmarks/experiments/gluon_attention_fwd.py, bf16 D128, same process): B4 H32 S4k 577 TFLOP/s "
        "non-causal (cuDNN 583, SDPA flash 337), 512 causal (cuDNN 514); 8k-16k 597-599 (cuDNN 596-597). Padded "
        "and packed (varlen, its own kernel: per-sequence offsets and masks; H200 run 79: 0.95x the fixed-length 4k "
        "rate, tuned 0.77x) layouts; D 64 and 128; fp16 and bf16.",
        needs="hopper", dtypes=(torch.float16, torch.bfloat16), limit=fa3_limit,
        artifacts="kernelwright.ops.attention.gluon:artifacts_fa3",
    ),
    Rung(
        "split_kv", "triton", "kernelwright.ops.attention.decode:attention_split_kv",
        "For decoding (one or a few query rows against a long cache), flash-decoding: the query rows of the heads "
        "that share a kv head form one tile (GQA 4 at Sq 1: 4 rows in a 16-row tile, the cache read once per kv head "
        "instead of once per query head), and the keys are split into ranges, one program each, so that B x Hkv x "
        "ranges programs fill the GPU; each writes its rows' partial o and log-sum-exp, a second kernel merges them. "
        "The flash rungs give such a problem one program per (batch, query head) holding 1 real row of a 16-row tile."
        " Predicted (l1/20's shape: B32, 32 heads over 8, 4096 keys, D128, fp16; 537 MB of cache): near the copy "
        "ceiling, 3.3-3.9 TB/s, i.e. 0.85-1.0x eager SDPA (138.6 us, 3.9 TB/s, in run 43) against the flash rungs' "
        "0.38-0.47x; at prefill sizes it is a slow rung (no tile skipping, small tiles).",
        artifacts=f"{_H}:artifacts_split_kv",
    ),
)


SPLIT_KV_AUTO = True
"""``auto`` takes split_kv for decode-shaped cases (see :func:`decode_shaped`) instead of tuned: on the H200 it ran
2.0-3.1x faster than tuned at the five decode sizes of run 44 (``benchmarks/h200/attention.sh decode``; journal
"Session 12"). Off, auto takes tuned for everything."""


def decode_shaped(size) -> bool:
    """A decode step: the query rows of the heads sharing a kv head fit one 64-row tile, against at least 512 keys
    (where the flash rungs' 128-row query tiles are mostly empty and their programs too few)."""
    p = decode(size)
    return (p.hq // max(p.hkv, 1)) * p.sq <= 64 and p.skv >= 512


FA3_AUTO = True
"""``auto`` takes fa3 (Hopper, padded layout, fp16 / bf16; it refuses the rest, which fall to tuned) where it led
tuned in H200 run 77 (``benchmarks/h200/attention.sh fa3``, bf16, same process): every D128 point of the issue's
sweep (1k-16k, causal and not: +13-31%; the GQA 4k causal point +31%), and D64 from 4096 keys (+6-12%); at D64 1k-2k
tuned led (388 / 423 against 361 / 408 non-causal, 279 / 337 against 236 / 320 causal). Varlen cases (packed, on
since run 79: ``gluon.FA3_VARLEN``) follow the same rule on their longest sequence: at D128 run 79's batch of 32
sequences of 128..8192 tokens ran fa3 581 / 525 TFLOP/s non-causal / causal against tuned's 471 / 405. Off, auto
never takes it."""
FA3_D64_FROM = 4096


def fa3_leads(size) -> bool:
    """Where fa3 measured faster than tuned (see :data:`FA3_AUTO`); its own limits are checked by the caller."""
    p = decode(size)
    return FA3_AUTO and (p.d == 128 or (p.d == 64 and p.skv >= FA3_D64_FROM))


def choose(size, kwargs, dtype=None) -> list[str]:
    order = ["tuned", "exp2", "pipelined", "exp2_lazy", "causal_skip", "flash", "naive"]
    if SPLIT_KV_AUTO and decode_shaped(size):
        return ["split_kv", *order]
    if fa3_leads(size):
        return ["fa3", *order]
    return order


# --- peers: torch SDPA on each backend; varlen cases loop over the sequences ---------------------------------------
def _sdpa_one(q, k, v, causal: bool, scale):
    import torch.nn.functional as F

    gqa = q.shape[1] != k.shape[1]
    sq, skv = q.shape[2], k.shape[2]
    if causal and sq != skv:  # SDPA's is_causal is top-left aligned; the lower-right bias is ours
        from torch.nn.attention.bias import causal_lower_right

        if gqa:  # the bias's fused paths take equal head counts
            k = k.repeat_interleave(q.shape[1] // k.shape[1], 1)
            v = v.repeat_interleave(q.shape[1] // v.shape[1], 1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(sq, skv), scale=scale)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa)


def _sdpa(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, *, causal=False, scale=None, max_seqlen_q=None,
          max_seqlen_k=None, backend=None):
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
        if cu_seqlens_q is None:
            return _sdpa_one(q, k, v, causal, scale)
        o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        for b in range(len(cq) - 1):
            qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
            one = _sdpa_one(q[qs].transpose(0, 1)[None], k[ks].transpose(0, 1)[None], v[ks].transpose(0, 1)[None],
                            causal, scale)
            o[qs] = one[0].transpose(0, 1)
        return o


def _sdpa_peer(name: str, backend: str, note: str, cuda_only: bool = True) -> Peer:
    def make():
        if cuda_only and runtime.current_device() != "cuda":
            raise Unavailable(f"{name}: a CUDA backend of SDPA (inputs here are on the CPU)")
        from torch.nn.attention import SDPBackend

        return functools.partial(_sdpa, backend=getattr(SDPBackend, backend))

    return Peer(name, make, note + "; varlen cases loop over the sequences (SDPA has no packed form)")


PEERS = (
    _sdpa_peer("torch", "MATH", "torch SDPA, math backend: eager, materialises the scores", cuda_only=False),
    _sdpa_peer("sdpa_flash", "FLASH_ATTENTION", "torch SDPA, FlashAttention-2 backend"),
    _sdpa_peer("sdpa_cudnn", "CUDNN_ATTENTION", "torch SDPA, cuDNN backend"),
    _sdpa_peer("sdpa_efficient", "EFFICIENT_ATTENTION", "torch SDPA, memory-efficient (xformers) backend"),
)


FAMILY = Family(
    name="attention",
    summary="scaled dot-product attention forward (MHA/GQA/MQA, bottom-right causal, varlen): from the score matrix "
            "in memory to a tuned flash kernel",
    reference=attention,
    rungs=RUNGS,
    peers=PEERS,
    make_case=make_case,
    out_shape=lambda case: tuple(case.args[0].shape),
    cost=cost,
    tolerances={
        # Per element: one rounding of o (rtol: twice the dtype's unit roundoff) plus, on the scale of P @ |V|
        # (acc), P's rounding to the input dtype before the second matmul (at most 2^-8 relative in bf16, 2^-11 in
        # fp16, none in fp32) and fp32 score errors (|scores| up to ~100 in the "large" inputs: ~1e-5 relative in
        # P). Seen on the CPU (rungs naive to exp2_lazy, the fuzz cases x 4 distributions x 3 seeds): worst element
        # at 0.27 (fp32), 0.48 (fp16), 0.46 (bf16) of these bounds, worst relative norm at 0.05 / 0.38 / 0.32.
        torch.float32: Tolerance(atol=1e-12, rtol=2**-20, norm=2**-15, acc=2**-14),
        torch.float16: Tolerance(atol=1e-7, rtol=2**-10, norm=2**-10, acc=2**-10),
        torch.bfloat16: Tolerance(atol=1e-7, rtol=2**-7, norm=2**-7, acc=2**-7),
    },
    sweep=sweep,
    fuzz=fuzz,
    parse_size=parse_size,
    format_size=format_size,
    flop_unit="tensor",
    baseline="torch",
    choose=choose,
    scale_axis=("sequence length (Sq)", lambda size: float(decode(size).sq)),
    error_scale=error_scale,
)
