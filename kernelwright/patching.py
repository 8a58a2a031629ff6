"""``kernelwright.patch(model)``: run a Hugging Face Llama-style model's memory-bound ops on kernelwright's
kernels.

What is swapped, per model instance unless said otherwise:

- every ``*RMSNorm`` module with ``weight`` and ``variance_epsilon`` (Llama, Mistral, Qwen2 and kin) runs
  :func:`kernelwright.ops.rms_norm`;
- every MLP with ``gate_proj``, ``up_proj``, ``down_proj`` and a SiLU ``act_fn`` computes
  ``down_proj(swiglu(gate_proj(x), up_proj(x)))`` with :func:`kernelwright.ops.swiglu`;
- the rotary embedding: transformers' attention calls its modeling module's ``apply_rotary_pos_emb`` global, so
  that global is replaced, for every model of that architecture in the process, by
  :func:`kernelwright.nn.rope.apply_rotary_pos_emb` (same arguments, same results).

The projections and attention stay torch's (cuBLAS, SDPA). Each swapped forward falls back to the original when
an input is one the kernel does not take (a weight in another dtype than the activations), so patching never
changes what a model accepts. ``patch`` returns a :class:`Patched` handle whose ``undo()`` restores everything.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field

import torch

from kernelwright.errors import UsageError


@dataclass
class Patched:
    """What :func:`patch` changed; ``undo()`` puts it back."""

    norms: int = 0
    mlps: int = 0
    rope_modules: list[str] = field(default_factory=list)
    _undo: list = field(default_factory=list, repr=False)

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()

    def __str__(self) -> str:
        return (f"kernelwright.patch: {self.norms} RMSNorm module(s), {self.mlps} SwiGLU MLP(s), rotary embedding in "
                f"{', '.join(self.rope_modules) or 'no module'}")


def _rms_norm_forward(self, hidden_states):
    from kernelwright.ops import rms_norm

    if hidden_states.dtype != self.weight.dtype or hidden_states.shape[-1] != self.weight.shape[0]:
        return type(self).forward(self, hidden_states)
    return rms_norm(hidden_states, self.weight, self.variance_epsilon)


def _mlp_forward(self, x):
    from kernelwright.ops import swiglu

    gate, up = self.gate_proj(x), self.up_proj(x)
    if gate.dtype != up.dtype:
        return type(self).forward(self, x)
    return self.down_proj(swiglu(gate, up))


def _is_silu(act) -> bool:
    return isinstance(act, torch.nn.SiLU) or getattr(act, "__name__", "") == "silu" or \
        type(act).__name__ in ("SiLUActivation", "SiLU")


def _set_forward(module: torch.nn.Module, fn, record: Patched) -> None:
    had = "forward" in vars(module)
    old = vars(module).get("forward")
    module.forward = types.MethodType(fn, module)

    def restore():
        if had:
            module.forward = old
        else:
            del module.forward
    record._undo.append(restore)


def patch(model: torch.nn.Module, *, norms: bool = True, mlp: bool = True, rope: bool = True) -> Patched:
    """Swap ``model``'s RMSNorms, SwiGLU MLPs and rotary embedding for kernelwright's ops (see the module docs).

    Parameters
    ----------
    model : torch.nn.Module
        A Hugging Face causal LM or base model of the Llama family (anything with the modules described above).
    norms, mlp, rope : bool
        Which ops to swap.

    Returns
    -------
    Patched
        Counts of what was swapped, and ``undo()``.
    """
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    record = Patched()
    rope_modules: set[str] = set()
    for module in model.modules():
        name = type(module).__name__
        if norms and name.endswith("RMSNorm") and isinstance(getattr(module, "weight", None), torch.Tensor) \
                and hasattr(module, "variance_epsilon"):
            _set_forward(module, _rms_norm_forward, record)
            record.norms += 1
        elif mlp and all(hasattr(module, a) for a in ("gate_proj", "up_proj", "down_proj")) \
                and _is_silu(getattr(module, "act_fn", None)):
            _set_forward(module, _mlp_forward, record)
            record.mlps += 1
        if rope:
            mod = sys.modules.get(type(module).__module__)
            if mod is not None and callable(getattr(mod, "apply_rotary_pos_emb", None)) and "Attention" in name:
                rope_modules.add(mod.__name__)
    for mod_name in sorted(rope_modules):
        _swap_rope(sys.modules[mod_name], record)
    return record


def _swap_rope(mod, record: Patched) -> None:
    from kernelwright.nn.rope import apply_rotary_pos_emb as ours

    original = mod.apply_rotary_pos_emb
    if getattr(original, "_kernelwright", False):
        return  # already swapped by another patch(); that one's undo restores it

    def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
        if unsqueeze_dim not in (1, 2) or q.dtype != k.dtype or cos.dim() != 3:
            return original(q, k, cos, sin, position_ids, unsqueeze_dim)
        return ours(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)

    apply_rotary_pos_emb._kernelwright = True
    mod.apply_rotary_pos_emb = apply_rotary_pos_emb
    record.rope_modules.append(mod.__name__)
    record._undo.append(lambda: setattr(mod, "apply_rotary_pos_emb", original))
