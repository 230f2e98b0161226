"""Quantization annotations of an imported ONNX graph (QOperator and QDQ alike).

The importer keeps every ONNX node as it is, scales and zero points included as inputs. This
module reads those constant scale/zero-point initializers and records them as the
:class:`~fusion.ir.graph.Quant` of the integer tensors they describe, which is what the passes and
the hwgen integer ops read:

* ``QuantizeLinear`` annotates its output, ``DequantizeLinear`` its input (an int32 bias too);
* ``QLinearMatMul``/``QLinearConv`` annotate a/x, b/w (per column of b, per output channel of
  w) and y, and QLinearConv's int32 bias with scale ``x_scale * w_scale`` and zero point 0;
* onnxruntime's ``QLinearAdd``, ``QLinearMul``, ``QGemm`` (b per column, or per row with
  ``transB``), ``QLinear(Global)AveragePool``, ``QLinearSigmoid``, ``QLinearLeakyRelu``,
  ``QLinearSoftmax`` and ``QLinearConcat`` (each input's triple and the output) annotate
  their integer inputs and output the same way;
* ``MatMulInteger``/``ConvInteger`` carry zero points but no scale: their operands get a unit
  scale (1.0, the integer value is the real value), and only when nothing else quantizes them.

Scales that are not initializers (computed, or graph inputs) and blocked quantization leave the
tensor unannotated; :func:`fusion.ir.validation.validate` then reports the missing initializer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fusion.ir.graph import GraphError, Quant


@dataclass(frozen=True)
class _Note:
    quant: Quant
    node: str
    weak: bool  # a unit scale that any real annotation overrides


def annotate(nodes: Sequence, ranks: Mapping[str, int],
             constants: Mapping[str, np.ndarray]) -> dict[str, Quant]:
    """The Quant of every integer tensor the Q/DQ/QLinear/Integer nodes describe.

    Parameters
    ----------
    nodes : sequence of fusion.ir.graph.Node
        The imported nodes (ONNX ops, ONNX input lists).
    ranks : mapping of str to int
        The rank of every tensor, for per-axis annotations.
    constants : mapping of str to ndarray
        Initializer values.

    Raises
    ------
    GraphError
        If two nodes quantize one tensor differently.
    """
    notes: dict[str, _Note] = {}

    def value(name: str) -> np.ndarray | None:
        return constants.get(name) if name else None

    def note(tensor: str, node, scale: str | np.ndarray | None, zp: str, axis: int = 1,
             weak: bool = False) -> None:
        s = value(scale) if isinstance(scale, str) else scale
        if not tensor or s is None or (zp and value(zp) is None):
            return
        z = value(zp) if zp else np.zeros(s.shape, np.int64)
        if s.size == 1:
            quant = Quant(s.ravel()[:1], z.ravel()[:1])
        elif s.ndim == 1:
            quant = Quant(s, z, axis % ranks[tensor])
        else:
            return  # blocked quantization: no per-tensor or per-channel Quant describes it
        _merge(notes, tensor, _Note(quant, node.name, weak))

    for node in nodes:
        i = tuple(node.inputs) + ("",) * 9
        axis = node.attr("axis", 1)
        if node.op == "QuantizeLinear" and not node.attr("block_size", 0):
            note(node.outputs[0], node, i[1], i[2], axis)
        elif node.op == "DequantizeLinear" and not node.attr("block_size", 0):
            note(i[0], node, i[1], i[2], axis)
        elif node.op == "QLinearMatMul":
            note(i[0], node, i[1], i[2], -1)
            note(i[3], node, i[4], i[5], -1)
            note(node.outputs[0], node, i[6], i[7])
        elif node.op == "QLinearConv":
            note(i[0], node, i[1], i[2])
            note(i[3], node, i[4], i[5], 0)
            note(node.outputs[0], node, i[6], i[7])
            xs, ws = value(i[1]), value(i[4])
            if i[8] and xs is not None and ws is not None:
                note(i[8], node, (xs.astype(np.float64) * ws).ravel(), "", 0)
        elif node.op in ("QLinearAveragePool", "QLinearGlobalAveragePool"):
            note(i[0], node, i[1], i[2])
            note(node.outputs[0], node, i[3], i[4])
        elif node.op in ("QLinearAdd", "QLinearMul"):
            note(i[0], node, i[1], i[2])
            note(i[3], node, i[4], i[5])
            note(node.outputs[0], node, i[6], i[7])
        elif node.op in ("QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax"):
            note(i[0], node, i[1], i[2])
            note(node.outputs[0], node, i[3], i[4])
        elif node.op == "QLinearConcat":
            note(node.outputs[0], node, i[0], i[1])
            for k in range(2, len(node.inputs) - 2, 3):
                note(node.inputs[k], node, node.inputs[k + 1], node.inputs[k + 2])
        elif node.op == "QGemm":
            note(i[0], node, i[1], i[2])
            note(i[3], node, i[4], i[5], 0 if node.attr("transB", 0) else 1)
            note(node.outputs[0], node, i[7], i[8])
        elif node.op in ("MatMulInteger", "ConvInteger"):
            for operand, zp, ax in ((i[0], i[2], -2 if node.op == "MatMulInteger" else 1),
                                    (i[1], i[3], -1 if node.op == "MatMulInteger" else 0)):
                z = value(zp)
                if operand and (z is not None or not zp):
                    ones = np.ones(1 if z is None else z.shape, np.float32)
                    note(operand, node, ones, zp, ax, weak=True)
    return {name: n.quant for name, n in notes.items()}


def _merge(notes: dict[str, _Note], tensor: str, new: _Note) -> None:
    old = notes.get(tensor)
    if old is None or (old.weak and not new.weak):
        if old is not None and old.quant.zero_point != new.quant.zero_point:
            _conflict(tensor, old, new)
        notes[tensor] = new
    elif old.quant != new.quant and not (new.weak and
                                         old.quant.zero_point == new.quant.zero_point):
        _conflict(tensor, old, new)


def _conflict(tensor: str, old: _Note, new: _Note) -> None:
    def show(q: Quant) -> str:
        return f"scale {list(q.scale)}, zero point {list(q.zero_point)}"
    raise GraphError(
        f"tensor {tensor!r} is quantized with {show(old.quant)} by node {old.node!r} but with "
        f"{show(new.quant)} by node {new.node!r}; a tensor has one quantization: requantize "
        f"explicitly (DequantizeLinear then QuantizeLinear) where the parameters change")
