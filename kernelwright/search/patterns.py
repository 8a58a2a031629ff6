"""Find the ops of a traced reference that a kernelwright op can take over ("sites"), and replace them.

A :class:`Site` is a small set of nodes of a ``torch.fx`` graph computing something one kernelwright op computes
(``F.linear``; ``softmax``; a residual ``add`` feeding ``rms_norm``; ``silu(gate) * up``; the six nodes of
``x * cos + cat(-x2, x1) * sin``; ...), named by its ``kind`` and its *anchor* (the node whose value is the site's
result). fx names nodes from the code's structure, not from sizes, so the anchor names the same site in every
trace of the same forward: the built-in proposer finds sites in the reference and a candidate finds them again in
its own trace (:mod:`kernelwright.search.rewrite`).

Matching is structural only (no shapes): whether the op takes the values is the wrapper's business at run time
(:mod:`kernelwright.search.kernels`), and the proposer drops sites whose traced shapes rule them out.

Kinds and the family each uses for its variants:

============== ============== ==================================================================================
kind           family         matches
============== ============== ==================================================================================
linear         matmul         ``F.linear(x, W[, b])``, ``nn.Linear``
linear_epilogue matmul        a linear followed by an activation (relu, gelu, tanh-gelu, silu: functions, methods
                              or modules) and/or a residual ``+ r`` of the output's shape: fused into the
                              product's epilogue
matmul         matmul         ``torch.matmul``, ``torch.mm``, ``a @ b``, ``a.matmul(b)`` (2-D right operand)
softmax        softmax        ``torch.softmax``, ``F.softmax``, ``x.softmax``, ``nn.Softmax`` (no ``dtype=``)
log_softmax    softmax        ``torch.log_softmax``, ``F.log_softmax``, ``x.log_softmax``, ``nn.LogSoftmax`` (the
                              fused, online and split rungs)
rms_norm       rms_norm       ``F.rms_norm``, ``nn.RMSNorm``, hand-written ``x * rsqrt(mean(x^2) + eps) [* w]``
layer_norm     layer_norm     ``F.layer_norm``, ``nn.LayerNorm``
add_rms_norm   add_rms_norm   ``a + b`` feeding an ``F.rms_norm`` / ``nn.RMSNorm`` (the sum may have other users; with
                              none, it is never stored)
swiglu         swiglu         ``silu(g) * u`` (``F.silu``, ``nn.SiLU`` or ``g * sigmoid(g)``)
rope           rope           ``x * cos + cat((-x2, x1), -1) * sin`` with ``x1, x2 = x.chunk(2, -1)``
rope_pair      rope           two rope sites sharing cos and sin (q and k) in one launch
cross_entropy  cross_entropy  ``F.cross_entropy`` without class weights (absorbs a ``.float()`` of the logits)
attention      attention      ``F.scaled_dot_product_attention`` without mask or dropout (if the family exists)
add            vector_add     ``a + b`` of two tensors (kept only where the traced shapes are equal)
activation     activation     a standalone relu, gelu (exact or tanh) or silu (functions, methods, modules; not
                              in place): where no fusion above takes it
============== ============== ==================================================================================
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from kernelwright.search import kernels

FAMILY = {"linear": "matmul", "linear_epilogue": "matmul", "matmul": "matmul", "softmax": "softmax",
          "log_softmax": "softmax",
          "rms_norm": "rms_norm", "layer_norm": "layer_norm", "add_rms_norm": "add_rms_norm", "swiglu": "swiglu",
          "rope": "rope", "rope_pair": "rope", "cross_entropy": "cross_entropy", "attention": "attention",
          "add": "vector_add", "activation": "activation"}
"""site kind -> the kernelwright family whose rungs are its variants"""

FUSED = ("add_rms_norm", "rope_pair", "swiglu", "cross_entropy", "attention", "linear_epilogue", "linear", "matmul",
         "rms_norm", "layer_norm", "softmax", "log_softmax", "rope", "add", "activation")
"""kinds in order of preference when sites overlap (a fusion before its parts)"""


def has_attention() -> bool:
    import kernelwright.ops as ops

    return hasattr(ops, "attention")


@dataclass(frozen=True)
class Attr:
    """A module attribute (a parameter) the wrapper reads, fetched afresh where the wrapper is called."""

    target: str


@dataclass
class Site:
    kind: str
    anchor: str
    nodes: tuple[fx.Node, ...]
    """every node the site replaces"""
    outputs: tuple[fx.Node, ...]
    """nodes whose uses take the wrapper's results, in the wrapper's output order"""
    fn: object
    args: tuple
    kwargs: dict = field(default_factory=dict)
    shape_of: dict = field(default_factory=dict)
    """role -> node, for the proposer's shape checks (``x``, ``w``, ``a``, ``b``, ``q``, ``k``, ...)"""

    @property
    def key(self) -> tuple[str, str]:
        return self.kind, self.anchor

    @property
    def family(self) -> str:
        return FAMILY[self.kind]

    def overlaps(self, other: Site) -> bool:
        return bool(set(self.nodes) & set(other.nodes))

    def inputs(self) -> list[fx.Node]:
        found: list[fx.Node] = []
        fx.node.map_arg((self.args, self.kwargs), lambda n: found.append(n) if isinstance(n, fx.Node) else None)
        return found

    def insertion_point(self, order: dict[fx.Node, int]) -> fx.Node:
        """Where the wrapper call goes: before the site's last node, or before an earlier use of one of its
        outputs by a node outside it."""
        point = max(self.nodes, key=order.__getitem__)
        for out in self.outputs:
            for user in out.users:
                if user not in self.nodes and order[user] < order[point]:
                    point = user
        return point

    def valid(self, order: dict[fx.Node, int]) -> bool:
        """Inner nodes are used only inside the site, and every input exists before the insertion point."""
        inner = set(self.nodes) - set(self.outputs)
        if any(u not in self.nodes for n in inner for u in n.users):
            return False
        point = order[self.insertion_point(order)]
        return all(n.op == "get_attr" or order[n] < point for n in self.inputs() if n not in self.nodes)

    def apply(self, graph: fx.Graph, variant: str | None) -> None:
        """Replace the site's nodes by one call of its wrapper with ``variant``."""
        order = {n: i for i, n in enumerate(graph.nodes)}
        with graph.inserting_before(self.insertion_point(order)):
            def fresh(a):
                if isinstance(a, Attr):
                    return graph.get_attr(a.target)
                if isinstance(a, fx.Node) and a.op == "get_attr":
                    return graph.get_attr(a.target)
                return a

            args = _map(self.args, fresh)
            kwargs = {**_map(self.kwargs, fresh), "variant": variant}
            call = graph.call_function(self.fn, args, kwargs)
            if len(self.outputs) == 1:
                results = [call]
            else:
                results = [graph.call_function(operator.getitem, (call, i)) for i in range(len(self.outputs))]
        for old, new in zip(self.outputs, results, strict=True):
            old.replace_all_uses_with(new)
        for n in sorted(self.nodes, key=order.__getitem__, reverse=True):
            if not n.users:
                graph.erase_node(n)


def _map(obj, fn):
    if isinstance(obj, tuple):
        return tuple(_map(o, fn) for o in obj)
    if isinstance(obj, list):
        return [_map(o, fn) for o in obj]
    if isinstance(obj, dict):
        return {k: _map(v, fn) for k, v in obj.items()}
    return fn(obj)


def cleanup(graph: fx.Graph) -> None:
    """Erase attribute reads and shape lookups nothing uses any more (never anything else: an unused in-place
    op of the reference must stay)."""
    changed = True
    while changed:
        changed = False
        for n in reversed(list(graph.nodes)):
            if n.users or n.op == "output":
                continue
            if n.op == "get_attr" or (n.op == "call_function" and n.target in (getattr, operator.getitem)) \
                    or (n.op == "call_method" and n.target in ("size", "dim")):
                graph.erase_node(n)
                changed = True


# --- node predicates ----------------------------------------------------------------------------------------------
def _fn(n, *targets) -> bool:
    return isinstance(n, fx.Node) and n.op == "call_function" and n.target in targets


def _method(n, *names) -> bool:
    return isinstance(n, fx.Node) and n.op == "call_method" and n.target in names


def _module(root: nn.Module, n, *types_) -> nn.Module | None:
    if not (isinstance(n, fx.Node) and n.op == "call_module"):
        return None
    try:
        m = root.get_submodule(n.target)
    except AttributeError:
        return None
    return m if isinstance(m, types_) else None


def _arg(n: fx.Node, i: int, name: str, default=None):
    if len(n.args) > i:
        return n.args[i]
    return n.kwargs.get(name, default)


def _is_add(n) -> bool:
    return (_fn(n, operator.add, torch.add) or _method(n, "add")) and len(n.args) == 2 and "alpha" not in n.kwargs


def _is_mul(n) -> bool:
    return (_fn(n, operator.mul, torch.mul) or _method(n, "mul")) and len(n.args) == 2


def _pairs(n: fx.Node):
    a, b = n.args[0], n.args[1]
    return ((a, b), (b, a))


def _only_user(n, user) -> bool:
    return isinstance(n, fx.Node) and set(n.users) == {user}


def _const(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


_SOFTMAX = (torch.softmax, F.softmax, torch.Tensor.softmax)
_LOG_SOFTMAX = (torch.log_softmax, F.log_softmax, torch.Tensor.log_softmax)
_RMS = tuple(f for f in (F.rms_norm, getattr(torch, "rms_norm", None)) if f is not None)
_LN = (F.layer_norm, torch.layer_norm)
_MATMUL = (torch.matmul, torch.mm, operator.matmul)
_SIGMOID = (torch.sigmoid, F.sigmoid)
_CAT = tuple(f for f in (torch.cat, getattr(torch, "concat", None), getattr(torch, "concatenate", None)) if f)


# --- matchers: each looks at one node and returns the site anchored there, or None --------------------------------
def _linear(root, n):
    if _fn(n, F.linear):
        x, w, b = n.args[0], _arg(n, 1, "weight"), _arg(n, 2, "bias")
        return Site("linear", n.name, (n,), (n,), kernels.kw_linear, (x, w, b), shape_of={"x": x, "w": w})
    m = _module(root, n, nn.Linear)
    if m is not None:
        bias = Attr(f"{n.target}.bias") if m.bias is not None else None
        return Site("linear", n.name, (n,), (n,), kernels.kw_linear, (n.args[0], Attr(f"{n.target}.weight"), bias),
                    shape_of={"x": n.args[0], "w_shape": tuple(m.weight.shape)})
    return None


def _linear_call(root, n):
    """(x, weight, bias, shape_of) of an ``F.linear`` / ``nn.Linear`` node, else None."""
    if _fn(n, F.linear):
        x, w = n.args[0], _arg(n, 1, "weight")
        return x, w, _arg(n, 2, "bias"), {"x": x, "w": w}
    m = _module(root, n, nn.Linear)
    if m is not None:
        bias = Attr(f"{n.target}.bias") if m.bias is not None else None
        return n.args[0], Attr(f"{n.target}.weight"), bias, {"x": n.args[0], "w_shape": tuple(m.weight.shape)}
    return None


def _activation_of(root, n) -> tuple[fx.Node, str] | None:
    """(input, name) when ``n`` applies relu, gelu (exact or tanh) or silu to one tensor, else None."""
    if not isinstance(n, fx.Node) or n.kwargs.get("inplace") or (len(n.args) > 1 and n.op != "call_function"):
        return None
    if _fn(n, F.relu, torch.relu) or _method(n, "relu"):
        return n.args[0], "relu"
    if _fn(n, F.silu) or _method(n, "silu"):
        return (n.args[0], "silu") if len(n.args) == 1 else None
    if _fn(n, F.gelu):
        approx = _arg(n, 1, "approximate", "none")
        return (n.args[0], "gelu_tanh" if approx == "tanh" else "gelu") if approx in ("none", "tanh") else None
    m = _module(root, n, nn.ReLU, nn.SiLU, nn.GELU)
    if m is not None and not getattr(m, "inplace", False):
        if isinstance(m, nn.GELU):
            return (n.args[0], "gelu_tanh" if m.approximate == "tanh" else "gelu")
        return n.args[0], "relu" if isinstance(m, nn.ReLU) else "silu"
    return None


def _linear_epilogue(root, n):
    """``act(linear(x))``, ``linear(x) + r`` or ``act(linear(x)) + r``, anchored at the last node."""
    def head(p):  # (linear node, activation node or None, activation name) ending at p
        act = _activation_of(root, p)
        if act is not None and isinstance(act[0], fx.Node) and _linear_call(root, act[0]) is not None \
                and _only_user(act[0], p):
            return act[0], p, act[1]
        if _linear_call(root, p) is not None:
            return p, None, None
        return None

    residual, found = None, None
    if _is_add(n) and all(isinstance(a, fx.Node) for a in n.args):
        for p, r in _pairs(n):
            h = head(p)
            if h is not None and _only_user(p, n) and r is not h[0]:
                found, residual = h, r
                break
    if found is None:
        h = head(n)
        if h is None or h[1] is None:
            return None
        found = h
    lin, act_node, activation = found
    x, w, b, shape_of = _linear_call(root, lin)
    nodes = tuple(x for x in (lin, act_node, n if residual is not None else None) if x is not None)
    return Site("linear_epilogue", n.name, nodes, (n,), kernels.kw_linear_epilogue, (x, w, b, activation, residual),
                shape_of={**shape_of, **({"res": residual} if residual is not None else {})})


def _matmul(root, n):
    if (_fn(n, *_MATMUL) or _method(n, "matmul", "mm")) and len(n.args) == 2:
        a, b = n.args
        return Site("matmul", n.name, (n,), (n,), kernels.kw_matmul, (a, b), shape_of={"a": a, "b": b})
    return None


def _softmax(root, n):
    if _fn(n, *_SOFTMAX) or _method(n, "softmax"):
        dim = _arg(n, 1, "dim")
        if not isinstance(dim, int) or n.kwargs.get("dtype") is not None or (len(n.args) > 3 and n.args[3]):
            return None
        return Site("softmax", n.name, (n,), (n,), kernels.kw_softmax, (n.args[0], dim), shape_of={"x": n.args[0]})
    m = _module(root, n, nn.Softmax)
    if m is not None and isinstance(m.dim, int):
        return Site("softmax", n.name, (n,), (n,), kernels.kw_softmax, (n.args[0], m.dim), shape_of={"x": n.args[0]})
    return None


def _log_softmax(root, n):
    if _fn(n, *_LOG_SOFTMAX) or _method(n, "log_softmax"):
        dim = _arg(n, 1, "dim")
        if not isinstance(dim, int) or n.kwargs.get("dtype") is not None or (len(n.args) > 3 and n.args[3]):
            return None
        return Site("log_softmax", n.name, (n,), (n,), kernels.kw_log_softmax, (n.args[0], dim),
                    shape_of={"x": n.args[0]})
    m = _module(root, n, nn.LogSoftmax)
    if m is not None and isinstance(m.dim, int):
        return Site("log_softmax", n.name, (n,), (n,), kernels.kw_log_softmax, (n.args[0], m.dim),
                    shape_of={"x": n.args[0]})
    return None


def _last_dim(shape, x):
    """``None`` (the last dim of x) for a ``normalized_shape`` spelled ``(x.shape[-1],)`` or ``(x.size(-1),)``,
    else the shape as given. Dropping the lookup lets a fused site start before it reads x's shape."""
    if isinstance(shape, list | tuple) and len(shape) == 1 and isinstance(shape[0], fx.Node):
        s = shape[0]
        if _fn(s, operator.getitem) and s.args[1] == -1 and _fn(s.args[0], getattr) \
                and s.args[0].args == (x, "shape"):
            return None
        if _method(s, "size") and s.args == (x, -1):
            return None
    return shape


def _rms_call(root, n):
    """(x, normalized_shape, weight, eps) of an ``F.rms_norm`` / ``nn.RMSNorm`` node, else None."""
    if _fn(n, *_RMS):
        x = n.args[0]
        return x, _last_dim(_arg(n, 1, "normalized_shape"), x), _arg(n, 2, "weight"), _arg(n, 3, "eps")
    m = _module(root, n, *(t for t in (getattr(nn, "RMSNorm", None),) if t is not None))
    if m is not None and m.weight is not None:
        return n.args[0], tuple(m.normalized_shape), Attr(f"{n.target}.weight"), m.eps
    return None


def _rms_norm(root, n):
    call = _rms_call(root, n)
    if call is not None:
        x, shape, w, eps = call
        return Site("rms_norm", n.name, (n,), (n,), kernels.kw_rms_norm, (x, shape, w, eps), shape_of={"x": x})
    return _rms_by_hand(n)


def _rms_by_hand(n):
    """``x * rsqrt(mean(x^2, -1, keepdim=True) + eps)``, optionally ``* w`` (a parameter), either operand order;
    anchored at the last multiply."""
    if not _is_mul(n):
        return None
    for x, r in _pairs(n):
        if not (_fn(r, torch.rsqrt) or _method(r, "rsqrt")) or not _only_user(r, n):
            continue
        ad = r.args[0]
        if not _is_add(ad) or not _only_user(ad, r):
            continue
        ms, eps = (ad.args if isinstance(ad.args[0], fx.Node) else (ad.args[1], ad.args[0]))
        if not _const(eps) or not (_method(ms, "mean") or _fn(ms, torch.mean)) or not _only_user(ms, ad):
            continue
        dim, keep = _arg(ms, 1, "dim"), _arg(ms, 2, "keepdim", False)
        if dim not in (-1, [-1], (-1,)) or not keep:
            continue
        sq = ms.args[0]
        squares = (_method(sq, "pow") or _fn(sq, torch.pow, operator.pow)) and sq.args[0] is x and sq.args[1] == 2 \
            or (_is_mul(sq) and sq.args[0] is x and sq.args[1] is x)
        if not squares or not _only_user(sq, ms):
            continue
        nodes = [sq, ms, ad, r, n]
        out, weight = n, None
        if len(n.users) == 1:
            (u,) = n.users
            if _is_mul(u):
                w = next((o for s, o in _pairs(u) if s is n and isinstance(o, fx.Node) and o.op == "get_attr"), None)
                if w is not None:
                    nodes.append(u)
                    out, weight = u, w
        if weight is None:
            return None  # the op takes a weight; an unweighted norm is rare enough to leave to torch
        return Site("rms_norm", out.name, tuple(nodes), (out,), kernels.kw_rms_norm, (x, None, weight, float(eps)),
                    shape_of={"x": x})
    return None


def _layer_norm(root, n):
    if _fn(n, *_LN):
        x = n.args[0]
        args = (x, _last_dim(_arg(n, 1, "normalized_shape"), x), _arg(n, 2, "weight"), _arg(n, 3, "bias"),
                _arg(n, 4, "eps", 1e-5))
        return Site("layer_norm", n.name, (n,), (n,), kernels.kw_layer_norm, args, shape_of={"x": x})
    m = _module(root, n, nn.LayerNorm)
    if m is not None and m.weight is not None and m.bias is not None:
        args = (n.args[0], tuple(m.normalized_shape), Attr(f"{n.target}.weight"), Attr(f"{n.target}.bias"), m.eps)
        return Site("layer_norm", n.name, (n,), (n,), kernels.kw_layer_norm, args, shape_of={"x": n.args[0]})
    return None


def _shape_queries_for(x: fx.Node, n: fx.Node) -> list[fx.Node] | None:
    """When every use of ``x`` other than ``n`` only reads its shape for ``n`` (``x.shape[-1]``, ``x.size(-1)``):
    those nodes; None when some other node reads x's values."""
    found: list[fx.Node] = []
    for u in x.users:
        if u is n:
            continue
        shape = (u.op == "call_function" and u.target is getattr and u.args[1:] == ("shape",)) or \
                (u.op == "call_method" and u.target == "size")
        if not shape:
            return None
        found.append(u)
        for g in u.users:  # x.shape[-1] -> n, or x.size(-1) -> n
            if g is n:
                continue
            if not (g.op == "call_function" and g.target is operator.getitem and set(g.users) == {n}):
                return None
            found.append(g)
    return found


def _add_rms_norm(root, n):
    call = _rms_call(root, n)
    if call is None:
        return None
    x, shape, w, eps = call
    if not (_is_add(x) and all(isinstance(a, fx.Node) for a in x.args)):
        return None
    a, b = x.args
    shape_nodes = _shape_queries_for(x, n)
    if shape_nodes is not None:  # the sum feeds the norm alone (and its own shape to it): it need not be stored
        return Site("add_rms_norm", n.name, (x, *shape_nodes, n), (n,), kernels.kw_add_rms_norm,
                    (a, b, shape, w, eps, False), shape_of={"a": a, "b": b})
    return Site("add_rms_norm", n.name, (x, n), (n, x), kernels.kw_add_rms_norm, (a, b, shape, w, eps),
                shape_of={"a": a, "b": b})


def _silu_of(n, user):
    """(gate, nodes) when ``n`` is silu(gate) used only by ``user``."""
    if not _only_user(n, user):
        return None
    if _fn(n, F.silu) or _method(n, "silu"):
        return n.args[0], (n,)
    if _is_mul(n):
        for g, s in _pairs(n):
            if (_fn(s, *_SIGMOID) or _method(s, "sigmoid")) and s.args[0] is g and _only_user(s, n):
                return g, (s, n)
    return None


def _swiglu(root, n):
    if not _is_mul(n):
        return None
    for s, u in _pairs(n):
        if not isinstance(s, fx.Node) or not isinstance(u, fx.Node):
            continue
        found = _silu_of(s, n)
        if found is None and _module(root, s, nn.SiLU) is not None and _only_user(s, n):
            found = (s.args[0], (s,))
        if found is not None:
            gate, nodes = found
            return Site("swiglu", n.name, (*nodes, n), (n,), kernels.kw_swiglu, (gate, u),
                        shape_of={"a": gate, "b": u})
    return None


def _rope(root, n):
    if not _is_add(n):
        return None
    for m1, m2 in _pairs(n):
        if not (_is_mul(m1) and _is_mul(m2)) or not (_only_user(m1, n) and _only_user(m2, n)):
            continue
        for cat, sin in _pairs(m2):
            if not _fn(cat, *_CAT) or not _only_user(cat, m2):
                continue
            parts, dim = cat.args[0], _arg(cat, 1, "dim", 0)
            if dim != -1 or not isinstance(parts, list | tuple) or len(parts) != 2:
                continue
            neg, x1 = parts
            if not (_fn(neg, operator.neg, torch.neg) or _method(neg, "neg")) or not _only_user(neg, cat):
                continue
            x2 = neg.args[0]
            if not (_fn(x1, operator.getitem) and _fn(x2, operator.getitem)) or x1.args[1] != 0 or x2.args[1] != 1:
                continue
            chunk = x1.args[0]
            if chunk is not x2.args[0] or not (_method(chunk, "chunk") or _fn(chunk, torch.chunk)):
                continue
            if _arg(chunk, 1, "chunks") != 2 or _arg(chunk, 2, "dim", 0) != -1 or set(chunk.users) != {x1, x2}:
                continue
            if not (_only_user(x1, cat) and _only_user(x2, neg)):
                continue
            x = chunk.args[0]
            cos = next((o for s, o in _pairs(m1) if s is x), None)
            if cos is None:
                continue
            return Site("rope", n.name, (chunk, x1, x2, neg, cat, m1, m2, n), (n,), kernels.kw_rope, (x, cos, sin),
                        shape_of={"x": x, "cos": cos})
    return None


def _cross_entropy(root, n):
    if not _fn(n, F.cross_entropy):
        return None
    logits, target = n.args[0], _arg(n, 1, "target")
    if _arg(n, 2, "weight") is not None or _arg(n, 3, "size_average") is not None or _arg(n, 5, "reduce") is not None:
        return None
    ignore, reduction = _arg(n, 4, "ignore_index", -100), _arg(n, 6, "reduction", "mean")
    smoothing = _arg(n, 7, "label_smoothing", 0.0)
    if not isinstance(ignore, int) or not isinstance(reduction, str) or not _const(smoothing):
        return None
    nodes, upcast = (n,), False
    if (_method(logits, "float") and len(logits.args) == 1
            or _method(logits, "to") and len(logits.args) == 2 and logits.args[1] is torch.float32) \
            and _only_user(logits, n):
        nodes, upcast, logits = (logits, n), True, logits.args[0]
    return Site("cross_entropy", n.name, nodes, (n,), kernels.kw_cross_entropy,
                (logits, target, ignore, reduction, float(smoothing), upcast), shape_of={"x": logits})


def _attention(root, n):
    if not _fn(n, F.scaled_dot_product_attention) or not has_attention():
        return None
    q, k, v = n.args[0], _arg(n, 1, "key"), _arg(n, 2, "value")
    if _arg(n, 3, "attn_mask") is not None or _arg(n, 4, "dropout_p", 0.0) not in (0, 0.0):
        return None
    causal, scale, gqa = _arg(n, 5, "is_causal", False), _arg(n, 6, "scale"), _arg(n, 7, "enable_gqa", False)
    if not isinstance(causal, bool) or not isinstance(gqa, bool) or not (scale is None or _const(scale)):
        return None
    return Site("attention", n.name, (n,), (n,), kernels.kw_attention, (q, k, v, causal, scale, gqa),
                shape_of={"q": q, "k": k})


def _add(root, n):
    if _is_add(n) and all(isinstance(a, fx.Node) for a in n.args):
        return Site("add", n.name, (n,), (n,), kernels.kw_add, tuple(n.args), shape_of={"a": n.args[0], "b": n.args[1]})
    return None


def _activation(root, n):
    act = _activation_of(root, n)
    if act is None or not isinstance(act[0], fx.Node):
        return None
    return Site("activation", n.name, (n,), (n,), kernels.kw_activation, act, shape_of={"x": act[0]})


MATCHERS = (_linear, _linear_epilogue, _matmul, _softmax, _log_softmax, _rms_norm, _layer_norm, _add_rms_norm,
            _swiglu, _rope, _cross_entropy, _attention, _add, _activation)


def find_sites(root: nn.Module, graph: fx.Graph) -> list[Site]:
    """Every valid site of ``graph`` (traced from ``root``), in graph order; rope pairs after their parts."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    sites = []
    for n in graph.nodes:
        for match in MATCHERS:
            s = match(root, n)
            if s is not None and s.valid(order):
                sites.append(s)
    ropes = [s for s in sites if s.kind == "rope"]
    used: set[str] = set()
    for i, a in enumerate(ropes):
        if a.anchor in used:
            continue
        b = next((r for r in ropes[i + 1:] if r.anchor not in used and r.args[1] is a.args[1]
                  and r.args[2] is a.args[2] and r.args[0] is not a.args[0]), None)
        if b is None:
            continue
        pair = Site("rope_pair", f"{a.anchor}+{b.anchor}", a.nodes + b.nodes, (a.outputs[0], b.outputs[0]),
                    kernels.kw_rope_pair, (a.args[0], b.args[0], a.args[1], a.args[2]),
                    shape_of={"x": a.args[0], "k": b.args[0]})
        if pair.valid(order):
            sites.append(pair)
            used.update((a.anchor, b.anchor))
    return sites
