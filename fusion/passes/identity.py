"""Identity and no-op removal.

A node is removed when its output provably equals its input (same shape, dtype and
quantization):

* ``Identity``, and a ``Sum`` of one input;
* ``Reshape``/``reshape``/``Flatten``/``flatten`` whose output shape is the input's;
* ``Transpose``/``transpose`` with the identity permutation;
* ``relu``/``Relu`` of a value already known to be non-negative (the output of a relu, of a
  clamp with ``lo >= 0``, of a ``Clip`` with a constant ``min >= 0``, or any uint8 value);
* ``clamp`` whose bounds contain every value its input can hold (the input's dtype range, or
  the bounds of a clamp before it);
* a ``relu`` read only by clamps with ``lo >= 0``, which discard what the relu did.

What it refuses: a no-op between a graph input (or initializer) and a graph output, since
removing it would rename the graph's interface; and a no-op whose output is annotated with a
different quantization than its input, since some hwgen ops read zero points from annotations
(an unannotated output takes its input's unless such an op reads it).
"""

from __future__ import annotations

import numpy as np

from fusion.ir import ops
from fusion.ir.graph import Graph, Node
from fusion.passes._edit import bypass, rewrite_each

#: hwgen ops whose result depends on their inputs' Quant (see :mod:`fusion.ir.ops`).
READS_QUANT = frozenset({"qmatmul", "qconv2d", "qadd", "im2col", "dequantize"})
_RESHAPES = ("Reshape", "reshape", "Flatten", "flatten")
_TRANSPOSES = ("Transpose", "transpose")


def _bounds(graph: Graph, name: str) -> tuple[float, float]:
    """Lower and upper bounds of the values tensor ``name`` can hold."""
    t = graph.tensors[name]
    lo, hi = ops.INT_RANGE.get(t.dtype, (-np.inf, np.inf))
    node = graph.producer(name)
    if node is None:
        return lo, hi
    if node.op in ("relu", "Relu"):
        inner_lo, inner_hi = _bounds(graph, node.inputs[0])
        return max(lo, inner_lo, 0), min(hi, inner_hi)
    if node.op == "clamp":
        return max(lo, node.attr("lo")), min(hi, node.attr("hi"))
    if node.op == "Clip":
        for slot, pick in ((1, max), (2, min)):
            if len(node.inputs) > slot and node.inputs[slot] in graph.initializers:
                bound = float(np.asarray(graph.initializers[node.inputs[slot]]).ravel()[0])
                lo, hi = (pick(lo, bound), hi) if slot == 1 else (lo, pick(hi, bound))
    return lo, hi


def _same_value_type(graph: Graph, node: Node) -> bool:
    src = node.inputs[0] if node.inputs else ""
    if not src or len(node.outputs) != 1:
        return False
    x, y = graph.tensors[src], graph.tensors[node.outputs[0]]
    if (x.shape, x.dtype) != (y.shape, y.dtype):
        return False
    if y.quant == x.quant:
        return True
    # An unannotated output (as ONNX import leaves an Identity's) may take the input's
    # quantization unless a reader takes zero points or scales from its input annotations.
    return y.quant is None and not any(r.op in READS_QUANT for r in graph.consumers(y.name))


def _is_noop(graph: Graph, node: Node) -> bool:
    src = node.inputs[0]
    x = graph.tensors[src]
    if node.op == "Identity" or node.op in _RESHAPES:
        return True  # same shape: a reshape keeps the element order
    if node.op == "Sum":
        return len(node.inputs) == 1  # a sum of one input is that input
    if node.op in _TRANSPOSES:
        perm = node.attr("perm")
        rank = len(x.shape)
        return tuple(perm) == tuple(range(rank)) if perm is not None else rank <= 1
    if node.op in ("relu", "Relu"):
        return _bounds(graph, src)[0] >= 0
    if node.op == "clamp":
        lo, hi = _bounds(graph, src)
        return lo >= node.attr("lo") and hi <= node.attr("hi")
    return False


def _relu_before_clamps(graph: Graph, node: Node) -> bool:
    if node.op != "relu" or node.outputs[0] in graph.outputs:
        return False
    readers = graph.consumers(node.outputs[0])
    return bool(readers) and all(r.op == "clamp" and r.attr("lo") >= 0 for r in readers)


def run(graph: Graph) -> tuple[Graph, bool]:
    """Remove identity and no-op nodes (see the module docstring for the list).

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    graph : Graph
    changed : bool
    """
    def remove(graph: Graph, node: Node) -> Graph | None:
        if not _same_value_type(graph, node):
            return None
        if _is_noop(graph, node) or _relu_before_clamps(graph, node):
            # None for an input-to-output no-op: it stays (see the module docstring)
            return bypass(graph, node, node.inputs[0], node.outputs[0])
        return None

    return rewrite_each(graph, remove)
