"""cross_entropy reference: the loss of logits [N, V] against class targets [N] and its gradient for dloss = 1.

    p = softmax(x),  q = (1 - eps) * onehot(t) + eps / V          (eps: label smoothing)
    loss_i = -sum_j q_j log p_j = lse - (1 - eps) x_t - (eps / V) sum_j x_j,  lse = log sum_j exp(x_j)
    dloss_i / dx_j = p_j - q_j

Rows whose target is ``ignore_index`` have loss 0 and gradient 0. Reductions: "mean" divides by the number of
rows not ignored (torch's rule) but by 1 when every row is ignored (torch returns NaN there: here loss 0,
gradient 0); "sum"; "none" (loss [N], the gradient of each row's loss for dloss_i = 1).

Memory: read the logits once, write the gradient once (2 N V elements); the loss and targets are O(N).
"""

import torch

REDUCTIONS = ("mean", "sum", "none")


def _rows(logits, target, ignore_index):
    valid = target != ignore_index
    t = torch.where(valid, target, 0).long()
    return valid, t


def _row_scale(valid, reduction):
    """dloss / dloss_i: 1 / n_valid for "mean" (1 when none is valid), else 1."""
    if reduction == "mean":
        return 1.0 / valid.sum().clamp_min(1).to(torch.float64)
    return torch.ones((), dtype=torch.float64, device=valid.device)


def _reduce(rows, valid, reduction):
    if reduction == "none":
        return rows
    total = rows.sum()
    return total * _row_scale(valid, reduction) if reduction == "mean" else total


def cross_entropy(logits, target, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    n, v = logits.shape
    valid, t = _rows(logits, target, ignore_index)
    logp = torch.log_softmax(logits, -1)
    nll = -logp.gather(1, t[:, None])[:, 0]
    smooth = -logp.mean(-1) if n * v else logp.new_zeros(n)
    loss_rows = torch.where(valid, (1 - label_smoothing) * nll + label_smoothing * smooth, 0.0)
    q = torch.nn.functional.one_hot(t, v).to(logits.dtype) * (1 - label_smoothing) + label_smoothing / v
    grad = (logp.exp() - q) * valid[:, None] * _row_scale(valid, reduction)
    return _reduce(loss_rows, valid, reduction).to(torch.float64), grad


def error_scale(logits, target, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    """Magnitudes of the terms that each output sums (see :class:`kernelwright.registry.Tolerance`).

    loss_i = (m - x_t)(1 - eps) + eps (m - mean x) + log s, with m the row max and s = sum exp(x - m) >= 1: no
    cancellation, but log s carries the relative rounding error of a sum of up to V terms, so its scale is 1 plus
    the other terms. The gradient at the target, p_t - (1 - eps) - eps / V, cancels when p_t -> 1: its scale is
    the sum of the terms' magnitudes, times the row's reduction scale.
    """
    n, v = logits.shape
    valid, t = _rows(logits, target, ignore_index)
    m = logits.amax(-1) if v else logits.new_zeros(n)
    xt = logits.gather(1, t[:, None])[:, 0]
    mean = logits.mean(-1) if v else logits.new_zeros(n)
    rows = torch.where(valid, 1 + (m - xt) * (1 - label_smoothing) + label_smoothing * (m - mean), 0.0)
    p = torch.softmax(logits, -1)
    terms = p + torch.nn.functional.one_hot(t, v).to(logits.dtype) * (1 - label_smoothing) + label_smoothing / v
    return _reduce(rows, valid, reduction), terms * valid[:, None] * _row_scale(valid, reduction)
