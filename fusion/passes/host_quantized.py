"""Host ops that read and write 8-bit tensors, as onnxruntime's ``QLinearSoftmax`` does.

What stays on the host between kernels (Softmax and LRN by design, and a BatchNormalization
that no int8 weight reproduces exactly: :mod:`fusion.passes.batchnorm`) comes as
``dequantize -> op -> quantize``: three host steps, two of them only conversions of every
element, each priced as a host call of its own (:mod:`fusion.cost.host`). This pass, where
the ``dequantize``'s only reader is the op, the op's only reader a ``quantize``, and both
quantizations per tensor, makes the three hwgen's form of the op on 8-bit tensors:

    x (int8) -> dequantize -> op -> quantize -> y (int8)    becomes    x -> op' -> y

with ``op'`` the op (:data:`HWGEN_FORM`: ``softmax``, ``lrn``, ``batchnorm``) with ``dtype``
the quantize's. It dequantizes its input with x's Quant and quantizes its output with y's,
the same functions in the same order as the three nodes
(:func:`fusion.reference.onnx_host_ops.on_real`), so every value is the same, in float32 and
in float64 alike. The op's quantized constant parameters (a BatchNormalization's scale and
bias, each a ``dequantize`` of an int8 constant) become their float values, computed as the
``dequantize`` would. A softmax over its last axis reads, past a chain of layout ops that
keeps every element in its order and the last axis as it is, the chain's start, and gives
its output the chain's shape (:func:`read_view`); a QOperator model's ``QLinearSoftmax`` is
that softmax already, and becomes it (:func:`qlinear_softmax`), so that it reads so too.
Run after :mod:`fusion.passes.host_rows`, whose ops on a GEMM's rows it then takes too.
"""

from __future__ import annotations

from fusion.ir.graph import Graph, Node
from fusion.passes._edit import Edit, reads_constants, rewrite_each
from fusion.passes.constant_fold import evaluate
from fusion.passes.layout_identity import matrix_view_start

#: The host ops this pass takes, and hwgen's form of each, with the attributes it keeps
#: (the axis ONNX's own form implies where it has none).
HWGEN_FORM = {"Softmax": ("softmax", ("axis",), {}),
              "softmax": ("softmax", ("axis",), {}),
              "LRN": ("lrn", ("size", "alpha", "beta", "bias"), {"axis": 1}),
              "lrn": ("lrn", ("size", "alpha", "beta", "bias", "axis"), {}),
              "BatchNormalization": ("batchnorm", ("epsilon",), {"axis": 1}),
              "batchnorm": ("batchnorm", ("epsilon", "axis"), {})}


def rewrite(graph: Graph, node: Node) -> Graph | None:
    """``graph`` with the ``dequantize -> op -> quantize`` that ``node`` (the op) sits in as
    one host op on 8-bit tensors, or None where it is not that pattern (module docstring)."""
    if node.op not in HWGEN_FORM or node.attr("dtype", "float32") != "float32":
        return None
    dq = graph.producer(node.inputs[0])
    if dq is None or dq.op != "dequantize" or graph.sole_reader(dq.outputs[0]) is not node:
        return None
    q = graph.sole_reader(node.outputs[0], "quantize")
    if q is None or node.inputs[1:].count(node.inputs[0]):
        return None
    x, y = graph.tensors[dq.inputs[0]], graph.tensors[q.outputs[0]]
    if x.quant is None or x.quant.per_channel or y.quant is None or y.quant.per_channel:
        return None
    op, keep, implied = HWGEN_FORM[node.op]
    attrs = {**implied, **{k: node.attr(k) for k in keep if node.attr(k) is not None}}
    edit = Edit(graph)
    edit.drop(dq, node, q)
    params = [_folded(graph, edit, node, p) for p in node.inputs[1:]]
    edit.node(node.name, op, [x.name, *params], output=y.name, dtype=y.dtype, **attrs)
    return edit.apply()


def qlinear_softmax(graph: Graph, node: Node) -> Graph | None:
    """``graph`` with onnxruntime's ``QLinearSoftmax`` ``node`` as hwgen's ``softmax`` on
    8-bit tensors, computing in float64 as the QLinearSoftmax reference does (``real``), so
    that :func:`read_view` applies to it as to a QDQ model's; None where its quantizations are
    not per tensor, or where, before opset 13, it normalizes over more than its last axis
    (the input flattened to 2-D at ``axis``)."""
    if node.op != "QLinearSoftmax":
        return None
    x, y = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
    if x.quant is None or x.quant.per_channel or y.quant is None or y.quant.per_channel:
        return None
    rank = max(len(x.shape), 1)
    axis = node.attr("axis", -1) % rank
    if node.attr("opset", 13) < 13 and axis != rank - 1:
        return None
    edit = Edit(graph)
    edit.drop(node)
    edit.node(node.name, "softmax", [x.name], output=y.name, dtype=y.dtype, axis=axis,
              real="float64")
    return edit.apply()


def read_view(graph: Graph, node: Node) -> Graph | None:
    """``graph`` with hwgen's ``softmax`` ``node``, over its input's last axis, reading the
    start of the layout chain that makes its input, where that chain keeps every element in
    its order and the last axis as it is (SqueezeNet's pool, transposed, reshaped and
    flattened, all of one row of 1,000): the softmax of that tensor in the chain's shape.
    None where there is no such chain."""
    if node.op != "softmax":
        return None
    x = graph.tensors[node.inputs[0]]
    if node.attr("axis", -1) % len(x.shape) != len(x.shape) - 1:
        return None
    start = matrix_view_start(graph, x.name)
    if start is None or start == x.name:
        return None
    edit = Edit(graph)
    edit.drop(node)
    edit.node(node.name, "softmax", [start], output=node.outputs[0], dtype=node.attr("dtype"),
              axis=-1, shape=tuple(node.attr("shape") or ()) or x.shape,
              real=node.attr("real", ""))
    return edit.apply()


def _folded(graph: Graph, edit: Edit, node: Node, param: str) -> str:
    """``param`` of the op ``node``, or, where it is a constant's ``dequantize`` (or
    ``DequantizeLinear``) that only the op reads, that value as a constant: a host
    BatchNormalization's quantized scale and bias would otherwise be two more host steps
    each run (constant folding keeps a weight's dequantize for the Q/DQ folds, which are done
    with it by now)."""
    dq = graph.producer(param)
    if dq is None or dq.op not in ("dequantize", "DequantizeLinear") \
            or not reads_constants(graph, dq) or graph.sole_reader(param) is not node:
        return param
    edit.drop(dq)
    return edit.const(param, evaluate(graph, dq)[param])


def run(graph: Graph) -> tuple[Graph, bool]:
    """Every such op of ``graph`` on 8-bit tensors, and every softmax reading past the layout
    chain before it (:func:`read_view`).

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    (Graph, bool)
        The graph, and whether it changed.
    """
    graph, fused = rewrite_each(graph, rewrite)
    graph, converted = rewrite_each(graph, qlinear_softmax)
    graph, viewed = rewrite_each(graph, read_view)
    return graph, fused or converted or viewed
