"""cross_entropy: the family's registration. Sizes are ``NxV`` (rows, vocabulary). Outputs: the loss (float32;
a scalar for "mean" and "sum", [N] for "none") and dlogits for dloss = 1 (the logits' dtype)."""

from __future__ import annotations

import torch

from kernelwright.errors import UsageError
from kernelwright.harness.inputs import random_values, with_layout
from kernelwright.harness.sizes import format_dims, parse_dims
from kernelwright.ops import _peers
from kernelwright.ops.cross_entropy.reference import cross_entropy, error_scale
from kernelwright.registry import Case, Family, Rung, Tolerance

_T = "kernelwright.ops.cross_entropy.triton"
DEFAULTS = {"ignore_index": -100, "label_smoothing": 0.0, "reduction": "mean"}

RUNGS = (
    Rung(
        "naive", "triton", f"{_T}:cross_entropy_naive",
        "As eager code runs it: log_softmax into an fp32 [N, V] temporary, the loss from it, exp(logp) - q from "
        "it, the reduction. In bf16 the traffic is 2 (read) + 2 (re-read) + 4 (write logp) + 4 (read) + 2 (write "
        "grad) = 14 bytes an element against the minimum 4, and N V fp32 scratch (4 GiB at 8192 x 128k). "
        "Predicted: ~30% of the online rung.",
    ),
    Rung(
        "online", "triton", f"{_T}:cross_entropy_online",
        "One program per row, 8192-column steps: pass 1 keeps a per-lane running max and rescaled sum (online "
        "log-sum-exp) and the sum of x for label smoothing, then writes the row's loss; pass 2 re-reads the row "
        "and writes p - q in the logits' dtype (into the logits' storage on the autograd path). No fp32 copy. "
        "Traffic: 2-3 passes (the re-read hits L2 only while the rows in flight fit). Predicted: 2.5-3 TB/s "
        "effective on 8192 x 128k bf16, ~2x torch's forward + backward.",
    ),
    Rung(
        "persistent", "triton", f"{_T}:cross_entropy_persistent",
        "The online row procedure in a persistent grid of one or two programs per SM walking the rows, so the "
        "rows in flight (132-264 rows of 256 KB at 128k bf16) stay within the 60 MB L2 and the gradient pass "
        "re-reads from L2 whatever the scheduler does. Compiled for sm_90 the row kernel takes ~100 registers a "
        "thread at 16 warps, so the hardware already runs one online program per SM: predicted within 5% of "
        "online at 8192 x 128k bf16 (both >= 3 TB/s effective if the re-read hits L2); it matters where more "
        "programs fit an SM (smaller steps, fp32 logits).",
    ),
    Rung(
        "split", "triton", f"{_T}:cross_entropy_split",
        "For few rows (16 rows of 128k are 16 programs elsewhere): the vocabulary is cut into chunks of >= 16384 "
        "columns, one program each; kernel 1 writes each chunk's (max, sum, sum x) and the target's logit, "
        "kernel 2 combines a row's partials (the same order in every program) and writes its chunk of the "
        "gradient. Two reads and one write. Predicted: 5-10x online at 16 x 128k, below persistent at 8192 rows.",
    ),
)


def parse_size(text: str) -> tuple[int, int]:
    dims = parse_dims(text, what="sizes")
    if len(dims) != 2:
        raise UsageError(f"sizes: expected NxV (rows x vocabulary), got {text!r}")
    return dims


def make_case(size, dtype, device, gen, dist="normal", layout="contiguous", ignore_index=-100, label_smoothing=0.0,
              reduction="mean") -> Case:
    n, v = size
    logits = with_layout(random_values((n, v), dtype, device, gen, dist), layout)
    target = torch.randint(0, max(v, 1), (n,), generator=gen, device=device)
    # about one row in four ignored (padding), never all of them (the API tests cover that case)
    ignored = torch.rand(n, generator=gen, device=device) < 0.25
    ignored[:1] = False
    target = torch.where(ignored, torch.full_like(target, ignore_index), target)
    kwargs = {"ignore_index": ignore_index, "label_smoothing": label_smoothing, "reduction": reduction}
    label = format_dims(size) + "".join(f" {k}={v}" for k, v in kwargs.items() if v != DEFAULTS[k])
    return Case(tuple(size), (logits, target), kwargs, label)


def out_shape(case: Case) -> list[tuple[int, ...]]:
    logits = case.args[0]
    loss = (logits.shape[0],) if case.kwargs.get("reduction", "mean") == "none" else ()
    return [loss, tuple(logits.shape)]


def cost(size, dtype) -> tuple[float, float]:
    n, v = size
    # ~8 operations an element over the two passes; read logits, write dlogits, read targets, write the loss
    return 8.0 * n * v, float(2 * n * v * (torch.finfo(dtype).bits // 8) + 8 * n + 4 * n)


def fuzz() -> list[tuple[tuple[int, ...], dict]]:
    return [
        ((0, 10), {}),                                               # no rows: loss 0
        ((1, 1), {}),                                                # one class: loss 0, gradient 0
        ((3, 127), {}),                                              # prime vocabulary, under one step
        ((5, 131), {"label_smoothing": 0.1}),                        # smoothing: the sum of x enters the loss
        ((4, 8193), {"reduction": "sum"}),                           # one past an 8192-column step
        ((6, 1000), {"reduction": "none", "label_smoothing": 0.2}),  # per-row losses
        ((7, 300), {"ignore_index": 5}),                             # an ignore_index that is a class id
        ((17, 50), {}),                                              # more rows than columns
        ((2, 20000), {"reduction": "none"}),                         # two split chunks, the second short
        ((1, 262144), {}),                                           # the widest row
    ]


def sweep(device: str) -> list[tuple[int, ...]]:
    if device == "cuda":
        # Llama-3 (128256), Llama-2 (32000), Qwen2 (151936), Gemma (262144) vocabularies; 16 rows: few tokens
        return [(8192, 128256), (8192, 32000), (4096, 151936), (1024, 262144), (16, 128256)]
    return [(64, 1000), (8, 32000)]


def _torch_cross_entropy(logits, target, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    # forward + backward, as a training step runs it
    x = logits.detach().requires_grad_()
    loss = torch.nn.functional.cross_entropy(x, target, ignore_index=ignore_index, label_smoothing=label_smoothing,
                                             reduction=reduction)
    loss.backward(torch.ones_like(loss))
    return loss.detach().float(), x.grad


def _liger_cross_entropy():
    from liger_kernel.transformers.functional import liger_cross_entropy

    def run(logits, target, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
        # Liger writes the gradient over its input, as in training; each call reads the previous call's output
        x = logits.detach().requires_grad_()
        loss = liger_cross_entropy(x, target, ignore_index=ignore_index, label_smoothing=label_smoothing,
                                   reduction=reduction)
        loss.backward(torch.ones_like(loss))
        return loss.detach().float(), x.grad

    return run


def choose(size, kwargs, dtype=None) -> list[str]:
    # H200 run 8 (bf16, 1k-8k rows, 32k-262k vocabularies): online 2.58-2.75 TB/s, split 2.23-2.58, persistent
    # 1.26-2.00; at 16 rows split (0.33) is the only one that spreads a row over the GPU
    n, _ = size
    return (["split", "online", "persistent", "naive"] if n < 256 else ["online", "split", "persistent", "naive"])


FAMILY = Family(
    name="cross_entropy",
    summary="cross-entropy loss of logits [N, V] (V up to 256k) and its gradient in one pass over the vocabulary",
    reference=cross_entropy,
    rungs=RUNGS,
    peers=(
        _peers.eager(_torch_cross_entropy),
        _peers.torch_compile(_torch_cross_entropy),
        _peers.optional_library("liger", "liger_kernel", _liger_cross_entropy),
    ),
    make_case=make_case,
    out_shape=out_shape,
    cost=cost,
    tolerances={
        # loss (float32 whatever the logits) and fp32 gradients: a few fp32 ulps; 16-bit gradients: 2 ulps of the
        # dtype. acc: the sums over up to V terms (see reference.error_scale), ~64 fp32 ulps of their scale
        torch.float32: Tolerance(atol=1e-7, rtol=2e-5, norm=1e-5, acc=2**-17),
        torch.float16: Tolerance(atol=1e-6, rtol=2**-10, norm=2**-11, acc=2**-17),
        torch.bfloat16: Tolerance(atol=1e-6, rtol=2**-7, norm=2**-8, acc=2**-17),
    },
    sweep=sweep,
    fuzz=fuzz,
    parse_size=parse_size,
    format_size=format_dims,
    flop_unit="vector",
    baseline="torch",
    choose=choose,
    scale_axis=("vocabulary (columns)", lambda size: float(size[1])),
    multi_output=True,
    out_dtype=lambda case, dtype: [torch.float32, dtype],
    error_scale=error_scale,
)
