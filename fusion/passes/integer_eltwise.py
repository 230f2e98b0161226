"""Standalone integer element-wise ONNX ops as epilogue ops the accelerator runs.

An int8 or uint8 ``Relu``, ``Clip``, or ``Add``, ``Max`` or ``Min`` with a constant operand,
outside any Q/DQ pattern (ONNX's integer semantics, no scales), becomes ops the accelerator
runs as memory-to-memory passes (:mod:`fusion.kernels.epipass`, :mod:`fusion.kernels.eltmax`)
instead of on the host:

- ``Relu`` -> ``relu`` (int8; of uint8 it is the identity, which lowering knows);
- ``Clip(x, min, max)`` with constant scalar bounds -> ``clamp(lo=min, hi=max)``, a missing
  bound being the type's limit. ``min > max`` gives ``max`` everywhere (ONNX applies ``max``
  after ``min``), which is ``clamp(max, max)``;
- ``Add(x, C)`` with a constant ``C`` of the same type -> ``add_wrap``: ``x + C`` modulo 256,
  as ONNX's integer ``Add`` wraps. The accelerator adds in int32 lanes (the bias stage; two
  int8 values never saturate int32) and its int8 store keeps the low byte, which is the wrap
  exactly (uint8 too: its lanes are ``x - 128`` and ``(x - 128 + c) mod 256 - 128`` is the
  lane of ``(x + c) mod 256``). The bias stage adds a vector along the last axis, so a ``C``
  that varies along other axes is flattened: ``x`` is viewed as one row ``[1, numel]`` by
  host ``reshape`` steps (data movement) and ``C`` broadcast to it.

- ``Max(x, C...)`` with constant ``C`` (folded into one, broadcast to ``x``'s shape) ->
  ``emax(x, C)``: the element-wise max of two planes on the residual stage in max mode
  (:mod:`fusion.kernels.eltmax`). Max is monotonic, so the uint8 lanes ``x - 128`` keep it.
- ``Min(x, C...)`` -> ``not(emax(not(x), not(C)))``, where ``not(v) = -1 - v`` for int8 and
  ``255 - v`` for uint8 (bitwise NOT: a bijection of the type that reverses its order, so it
  turns a min into a max, exactly, with no value that overflows the way ``-v`` does at
  -128). ``not`` of the activation is a ``qadd`` with a zero constant: the residual stage's
  scaled add ``(x - 0) * -1 + 0 * 0 + zp`` with ``zp`` -1 (int8) or 255 (uint8), exact.

A ``Clip`` whose bounds are not constant, and an ``Add``, ``Max`` or ``Min`` of two
activations, stay host ops.
"""

from __future__ import annotations

import math

import numpy as np

from fusion.ir.graph import Graph, Node
from fusion.passes._edit import Edit, rewrite_each

INT8S = ("int8", "uint8")


def _limits(dtype: str) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _scalar(graph: Graph, name: str) -> int | None:
    value = graph.initializers.get(name)
    if value is None or value.size != 1:
        return None
    return int(value.reshape(()))


def _clip(graph: Graph, node: Node) -> Graph | None:
    x = graph.tensors[node.inputs[0]]
    lo, hi = _limits(x.dtype)
    bounds = []
    for i, default in ((1, lo), (2, hi)):
        name = node.inputs[i] if len(node.inputs) > i else ""
        if not name:
            bounds.append(default)
            continue
        value = _scalar(graph, name)
        if value is None:
            return None  # a bound computed at run time: the host's Clip
        bounds.append(value)
    b_lo, b_hi = bounds
    b_lo = min(b_lo, b_hi)  # max(min(x, ...)) with min > max is max everywhere
    edit = Edit(graph)
    edit.drop(node)
    edit.node(node.name, "clamp", [node.inputs[0]], output=node.outputs[0], lo=b_lo, hi=b_hi)
    return edit.apply()


def _relu(graph: Graph, node: Node) -> Graph:
    edit = Edit(graph)
    edit.drop(node)
    edit.node(node.name, "relu", [node.inputs[0]], output=node.outputs[0])
    return edit.apply()


def _add(graph: Graph, node: Node) -> Graph | None:
    consts = [i for i in node.inputs if i in graph.initializers]
    if len(consts) != 1:
        return None  # two activations (or two constants, which constant folding takes)
    c_name = consts[0]
    x_name = node.inputs[1] if node.inputs[0] == c_name else node.inputs[0]
    x, y = graph.tensors[x_name], graph.tensors[node.outputs[0]]
    if x.shape != y.shape:
        return None  # the constant widens the activation: not an element-wise pass
    c = np.broadcast_to(graph.initializers[c_name], y.shape)
    n = y.shape[-1] if y.shape else 1
    rows = c.reshape(-1, n) if y.shape else c.reshape(1, 1)
    edit = Edit(graph)
    edit.drop(node)
    if y.shape and np.all(rows == rows[:1]):  # C runs along the last axis only
        cvec = edit.const(f"{node.name}/c", np.ascontiguousarray(rows[0]))
        edit.node(node.name, "add_wrap", [x_name, cvec], output=node.outputs[0])
        return edit.apply()
    numel = math.prod(y.shape)
    flat = edit.node(f"{node.name}/row", "reshape", [x_name], shape=(1, numel))
    cvec = edit.const(f"{node.name}/c", np.ascontiguousarray(c).reshape(numel))
    out = edit.node(node.name, "add_wrap", [flat, cvec])
    edit.node(f"{node.name}/back", "reshape", [out], output=node.outputs[0], shape=y.shape)
    return edit.apply()


#: ``not(v)``'s zero point: ``-1 - v`` (int8), ``255 - v`` (uint8).
_NOT_ZP = {"int8": -1, "uint8": 255}


def _not(edit: Edit, base: str, x: str, dtype: str, shape: tuple[int, ...],
         output: str | None = None) -> str:
    """``not(x)`` as a ``qadd`` of ``x`` and a zero constant (module docstring)."""
    zeros = edit.const(f"{base}/zeros", np.zeros(shape, dtype))
    return edit.node(base, "qadd", [x, zeros], output=output, a_mult=-1, b_mult=0, shift=0,
                     zp=_NOT_ZP[dtype], out_dtype=dtype)


def _extremum(graph: Graph, node: Node) -> Graph | None:
    consts = [i for i in node.inputs if i and i in graph.initializers]
    xs = [i for i in node.inputs if i and i not in graph.initializers]
    if len(xs) != 1 or not consts:
        return None  # several activations (or none): the host's
    x, y = graph.tensors[xs[0]], graph.tensors[node.outputs[0]]
    if x.shape != y.shape:
        return None  # a constant widens the activation: not an element-wise pass
    reduce = np.maximum if node.op == "Max" else np.minimum
    c = reduce.reduce([np.broadcast_to(graph.initializers[n], y.shape).astype(y.dtype)
                       for n in consts])
    edit = Edit(graph)
    edit.drop(node)
    if node.op == "Max":
        cmax = edit.const(f"{node.name}/c", np.ascontiguousarray(c))
        edit.node(node.name, "emax", [xs[0], cmax], output=node.outputs[0])
        return edit.apply()
    lo, hi = _limits(y.dtype)
    inverted = (lo + hi - c.astype(np.int64)).astype(y.dtype)  # not(c): -1 - c, 255 - c
    notx = _not(edit, f"{node.name}/not_x", xs[0], y.dtype, y.shape)
    cmax = edit.const(f"{node.name}/not_c", np.ascontiguousarray(inverted))
    m = edit.node(f"{node.name}/max", "emax", [notx, cmax])
    _not(edit, node.name, m, y.dtype, y.shape, output=node.outputs[0])
    return edit.apply()


def rewrite_one(graph: Graph, node: Node) -> Graph | None:
    """The rewritten graph when ``node`` is one of the module docstring's forms, else None."""
    if node.op not in ("Relu", "Clip", "Add", "Max", "Min") or not node.inputs:
        return None
    if graph.tensors[node.inputs[0]].dtype not in INT8S or \
            graph.tensors[node.outputs[0]].dtype not in INT8S:
        return None
    if node.op == "Relu":
        return _relu(graph, node)
    if node.op == "Clip":
        return _clip(graph, node)
    if node.op in ("Max", "Min"):
        return _extremum(graph, node)
    return _add(graph, node)


def run(graph: Graph) -> tuple[Graph, bool]:
    """Rewrite every standalone int8/uint8 ``Relu``, ``Clip``, and ``Add``, ``Max`` or
    ``Min`` with a constant (module docstring); ``(graph, changed)`` like every pass."""
    return rewrite_each(graph, rewrite_one)
