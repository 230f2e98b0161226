"""Standalone integer element-wise ONNX ops as epilogue ops the accelerator runs.

An int8 or uint8 ``Relu``, ``Clip`` or ``Add`` with a constant operand, outside any Q/DQ
pattern (ONNX's integer semantics, no scales), becomes an epilogue op, so that it runs as a
memory-to-memory pass (:mod:`fusion.kernels.epipass`) instead of on the host:

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

A ``Clip`` whose bounds are not constant, and an ``Add`` of two activations, stay host ops.
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


def rewrite_one(graph: Graph, node: Node) -> Graph | None:
    """The rewritten graph when ``node`` is one of the module docstring's forms, else None."""
    if node.op not in ("Relu", "Clip", "Add") or not node.inputs:
        return None
    if graph.tensors[node.inputs[0]].dtype not in INT8S or \
            graph.tensors[node.outputs[0]].dtype not in INT8S:
        return None
    if node.op == "Relu":
        return _relu(graph, node)
    if node.op == "Clip":
        return _clip(graph, node)
    return _add(graph, node)


def run(graph: Graph) -> tuple[Graph, bool]:
    """Rewrite every standalone int8/uint8 ``Relu``, ``Clip`` and ``Add`` with a constant
    (module docstring); ``(graph, changed)`` like every pass."""
    return rewrite_each(graph, rewrite_one)
