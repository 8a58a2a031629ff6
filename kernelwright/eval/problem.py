"""A KernelBench problem's inputs and models, rebuilt identically in every worker from seeds.

Input sets are never shipped between processes: each worker calls the problem's ``get_inputs()`` under the
same seed (and applies the same seeded value transform on the device), and the parent compares fingerprints
(float64 sums) to be sure both workers hold the same values.

Distributions (``InputSpec.dist``), each a transform of ``get_inputs()``'s own values that keeps signs, zeros
and integer-valued tensors (masks, labels, indices) as they are, so no input leaves the problem's domain:

* ``as_is``: ``get_inputs()`` under a seed;
* ``heavy``: every float element times ``|t|``, ``t`` Student-t with 2 degrees of freedom (rare factors up to
  3e4: catches kernels that assume small values, skip max-subtraction, or sum in a fragile order);
* ``large``: times 1e3;
* ``perturb``: times a uniform factor in [0.5, 1.5] (fresh values for timing sets without another
  ``get_inputs()`` call when that is slow).

Models are built KernelBench's way: ``torch.manual_seed(seed)`` then ``Model(*get_init_inputs())``; ModelNew
is built under the same seed and then given the reference's ``state_dict`` where names and shapes match
(``strict=False``), so a candidate that declares its parameters differently still starts from the same weights
when it names them the same.
"""

from __future__ import annotations

import math
import types
from dataclasses import asdict, dataclass, field

import torch

TRANSFORMS = ("heavy", "large", "perturb")


@dataclass(frozen=True)
class InputSpec:
    name: str
    seed: int
    """seed of ``get_inputs()``"""
    dist: str = "as_is"
    transform_seed: int = 0
    overrides: dict = field(default_factory=dict)
    """module constants set while ``get_inputs``/``get_init_inputs`` run (a second problem size)"""

    def to_dict(self) -> dict:
        return asdict(self)


def spec_from_dict(d: dict) -> InputSpec:
    return InputSpec(d["name"], int(d["seed"]), d["dist"], int(d["transform_seed"]), dict(d["overrides"]))


def seed_all(seed: int) -> None:
    torch.manual_seed(seed)


def init_inputs(mod: types.ModuleType) -> list:
    return list(mod.get_init_inputs())


def build_model(cls: type, init: list, seed: int, device: str) -> torch.nn.Module:
    seed_all(seed)
    model = cls(*init)
    return model.to(device)


def load_matching_state(model: torch.nn.Module, state: dict) -> list[str]:
    """Copy the entries of ``state`` whose names and shapes ``model`` shares; returns the names copied."""
    own = model.state_dict()
    take = {k: v for k, v in state.items() if k in own and tuple(own[k].shape) == tuple(v.shape)
            and own[k].dtype == v.dtype}
    if take:
        model.load_state_dict(take, strict=False)
    return sorted(take)


def is_structural(t: torch.Tensor) -> bool:
    """Integer-valued tensors (masks, labels, indices stored as floats) keep their values under every transform."""
    if not t.is_floating_point() or t.numel() == 0:
        return True
    return bool(torch.equal(t, t.round()))


def _transform(t: torch.Tensor, dist: str, gen: torch.Generator) -> torch.Tensor:
    if is_structural(t):
        return t
    shape, dev = t.shape, t.device
    if dist == "heavy":
        u = torch.rand(shape, device=dev, generator=gen).clamp_min_(1e-12)
        n = torch.randn(shape, device=dev, generator=gen)
        factor = (n / torch.sqrt(-torch.log(u))).abs_().clamp_(1e-3, 3e4)
    elif dist == "large":
        factor = torch.full(shape, 1e3, device=dev)
    elif dist == "perturb":
        factor = torch.rand(shape, device=dev, generator=gen) + 0.5
    else:
        raise ValueError(f"unknown input distribution {dist!r}")
    top = torch.finfo(t.dtype).max / 4
    return (t.float() * factor).clamp_(-top, top).to(t.dtype)


def build_inputs(mod: types.ModuleType, spec: InputSpec, device: str, cache: dict | None = None) -> list:
    """The forward's arguments for ``spec``: tensors on ``device`` (each set its own tensors), other values as
    ``get_inputs`` gave them. ``mod`` is the problem imported with ``spec.overrides`` applied. ``cache`` keeps
    ``get_inputs()`` results per seed and overrides, so the transformed sets of one seed call it once (it draws
    on the CPU, which is slow for large problems)."""
    key = (spec.seed, tuple(sorted(spec.overrides.items())))
    base = cache.get(key) if cache is not None else None
    if base is None:
        seed_all(spec.seed)
        base = list(mod.get_inputs())
        base = [a.to(device) if isinstance(a, torch.Tensor) else a for a in base]
        if cache is not None:
            cache[key] = base
    args = list(base)
    if spec.dist != "as_is":
        gen = torch.Generator(device=device)
        gen.manual_seed(spec.transform_seed)
        args = [_transform(a, spec.dist, gen) if isinstance(a, torch.Tensor) else a for a in args]
        # a tensor the transform kept (integer-valued) is cloned: sets never share a tensor
        args = [a.clone() if isinstance(a, torch.Tensor) and any(a is b for b in base) else a for a in args]
    return args


def fingerprint(args: list) -> list:
    """Per argument: dtype, shape and float64 sums of values and magnitudes (tensors), or the repr (others)."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            d = a.detach()
            if d.is_complex():
                d = torch.view_as_real(d)
            s = float(d.sum(dtype=torch.float64)) if d.numel() else 0.0
            m = float(d.abs().sum(dtype=torch.float64)) if d.numel() else 0.0
            out.append([str(a.dtype), list(a.shape), s, m])
        else:
            out.append(repr(a)[:200])
    return out


def same_fingerprint(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, list) and isinstance(y, list):
            if x[:2] != y[:2]:
                return False
            for u, v in zip(x[2:], y[2:], strict=True):
                if not (u == v or (math.isnan(u) and math.isnan(v)) or abs(u - v) <= 1e-9 * max(abs(u), abs(v))):
                    return False
        elif x != y:
            return False
    return True


def clone_args(args: list) -> list:
    """Fresh copies of the tensor arguments, at new addresses (same strides: a transposed input stays so)."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            c = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device)
            c.copy_(a)
            out.append(c)
        else:
            out.append(a)
    return out


def tensor_bytes(values: list) -> int:
    return sum(a.numel() * a.element_size() for a in values if isinstance(a, torch.Tensor))


def to_float64(args: list) -> list:
    return [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


def outputs_list(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def scale_size(value: int, factor: float) -> int:
    """``value`` scaled by ``factor``, kept a multiple of ``gcd(value, 8)`` (alignment an honest kernel may rely on:
    even head dims, multiples of 8) and never below ``min(value, 8)``; always a different value."""
    g = math.gcd(value, 8)
    new = max(min(value, 8), g * max(1, round(value * factor / g)))
    if new == value:
        new = value - g if value - g >= min(value, 8) and value > g else value + g
    return new


def alt_size_attempts(constants: dict[str, int]) -> list[dict[str, int]]:
    """Overrides to try, in order, for a second problem size: every size constant of at least 8 scaled by 3/4
    (4096 -> 3072, 96 -> 72), by 1/2, each alone by 1/2, all doubled, then batch-like ones plus one. Values stay
    multiples of ``gcd(value, 8)`` (:func:`scale_size`), so a kernel that relies on alignment is not taken for
    a specialised one; a kernel that hard-codes the problem's sizes is. The first whose reference runs and gives
    another output shape is kept."""
    sizes = {k: v for k, v in constants.items() if v >= 8}
    attempts = []
    if sizes:
        attempts.append({k: scale_size(v, 0.75) for k, v in sizes.items()})
        attempts.append({k: scale_size(v, 0.5) for k, v in sizes.items()})
        if len(sizes) > 1:
            attempts += [{k: scale_size(v, 0.5)} for k, v in sizes.items()]
        attempts.append({k: scale_size(v, 2.0) for k, v in sizes.items()})
    batch = {k: v + 1 for k, v in constants.items() if "batch" in k.lower()}
    if batch:
        attempts.append(batch)
    seen, unique = set(), []
    for a in attempts:
        key = tuple(sorted(a.items()))
        if key not in seen and any(constants[k] != v for k, v in a.items()):
            seen.add(key)
            unique.append(a)
    return unique
