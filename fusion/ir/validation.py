"""Whole-graph validation: the checks a graph must pass before passes or hardware see it.

:func:`validate` raises :class:`~fusion.ir.graph.GraphError`
with a message that names the node or tensor and the fix. Cycles, dangling names and
duplicate producers are already refused by :class:`~fusion.ir.graph.Graph` itself.
"""

from __future__ import annotations

from fusion.ir import ops
from fusion.ir.graph import Graph, GraphError, Node, Tensor

#: Ops whose weight operand may come through a dequantize (QDQ form).
_DEQUANTIZE = ("DequantizeLinear", "dequantize")


def validate(graph: Graph) -> None:
    """Check every node of ``graph``.

    The checks, in order for each node (topological order):

    * the op is supported and its attributes are known (:func:`fusion.ir.ops.node_attrs`);
    * input dtypes and shapes fit the op, and the declared output tensors have the inferred
      shape and dtype (a dtype mismatch names both);
    * inputs that must be constant (scales, zero points, ``Reshape`` shapes, biases) are
      initializers (a missing initializer);
    * constant weights of matmul/conv ops are int8 or uint8, directly or behind a dequantize;
    * every tensor's quantization fits its dtype and shape (a zero point out of range).

    Raises
    ------
    GraphError
        On the first problem found.
    """
    for tensor in graph.tensors.values():
        _check_quant(tensor)
    for node in graph.topo_order():
        inputs = [graph.tensors[n] if n else None for n in node.inputs]
        out_types = ops.infer(node, inputs, graph.initializers)
        for name, want in zip(node.outputs, out_types, strict=True):
            have = graph.tensors[name]
            if have.dtype != want.dtype:
                raise GraphError(
                    f"node {node.name!r} ({node.op}) produces {want.dtype}, but its output "
                    f"{name!r} is declared {have.dtype}: dtype mismatch; declare it "
                    f"{want.dtype} or convert the value with a quantize/requant node")
            if have.shape != want.shape:
                raise GraphError(
                    f"node {node.name!r} ({node.op}) produces shape {want.shape}, but its "
                    f"output {name!r} is declared {have.shape}; declare {want.shape}")
        spec = ops.get(node.op)
        for slot, name in zip(spec.slots, node.inputs, strict=False):
            if not name:
                continue
            if slot in spec.const and name not in graph.initializers:
                where = (f"computed by node {graph.producer(name).name!r}"
                         if graph.producer(name) else "a graph input")
                raise GraphError(
                    f"node {node.name!r} ({node.op}) needs its input {slot!r} ({name!r}) to be "
                    f"a constant initializer, but it is {where}: missing initializer; store "
                    f"{name!r} as an initializer")
            if slot in spec.weights:
                _check_weights(graph, node, slot, name)
        _check_needs_quant(graph, node)


def _check_quant(t: Tensor) -> None:
    q = t.quant
    if q is None:
        return
    if q.axis is not None:
        if not -len(t.shape) <= q.axis < len(t.shape):
            raise GraphError(f"tensor {t.name!r} is quantized along axis {q.axis}, which its "
                             f"shape {t.shape} does not have")
        if len(q.scale) != t.shape[q.axis]:
            raise GraphError(f"tensor {t.name!r} has {len(q.scale)} per-channel scales but "
                             f"{t.shape[q.axis]} channels on axis {q.axis}; give one per channel")
    if t.dtype == "float32":
        return
    lo, hi = (0, 0) if t.dtype in ("int32", "int64") else ops.INT_RANGE[t.dtype]
    bad = [z for z in q.zero_point if not lo <= z <= hi]
    if bad:
        why = ("int32 tensors (accumulators, biases) have zero point 0" if hi == 0
               else f"{t.dtype} holds {lo}..{hi}")
        raise GraphError(f"tensor {t.name!r} ({t.dtype}) has zero point {bad[0]}, out of "
                         f"range: {why}; re-quantize it with a zero point in range")


def _check_weights(graph: Graph, node: Node, slot: str, name: str) -> None:
    source, via = name, ""
    producer = graph.producer(name)
    if producer is not None and producer.op in _DEQUANTIZE and producer.inputs:
        source, via = producer.inputs[0], f" (through {producer.name!r})"
    if source not in graph.initializers:
        return  # an activation operand, not weights
    dtype = graph.tensors[source].dtype
    if dtype not in ("int8", "uint8"):  # uint8: folded to int8 parts exactly, see
        raise GraphError(                # fusion.passes.weight_zero_point
            f"node {node.name!r} ({node.op}) has {dtype} weights {source!r}{via} in {slot!r}; "
            f"hwgen multiplies 8-bit weights: quantize the weights to int8 or uint8 (for ONNX, "
            f"quantize_static with weight_type=QInt8)")


def _check_needs_quant(graph: Graph, node: Node) -> None:
    if node.op == "quantize":
        name, role = node.outputs[0], "output"
    elif node.op == "dequantize":
        name, role = node.inputs[0], "input"
    else:
        return
    if graph.tensors[name].quant is None:
        raise GraphError(f"node {node.name!r} ({node.op}): its {role} {name!r} has no "
                         f"quantization; give the tensor a Quant (scale and zero point)")
