"""A Concat of quantized tensors as one integer op: ``qconcat``.

A QDQ model joins quantized tensors in float: ``DQ(x_0), DQ(x_1), ... -> Concat -> Q``, and
onnxruntime's QOperator format writes the same as ``com.microsoft::QLinearConcat``. Each
input ends up in the output's quantization: a copy where the input is quantized as the output
is, and otherwise a rescale ``Q(DQ(x_i))``, a function of the input's code alone. This pass
writes the pair as a ``qconcat`` (:mod:`fusion.ir.ops`), which the accelerator runs
(:mod:`fusion.kernels.concat`) and whose rescale is the requantize stage:
``rne((x_i - x_i_zp) * mult_i / 2**shift_i) + zp``.

Exact on every code, or left as it is. An 8-bit input has 256 codes, so per input the pass
computes the table of the computation as ONNX defines it (the dequantized value exact, its
quotient by the output scale rounded half to even, saturated: :func:`table`) and looks for
the multiplier that reproduces all of it (:func:`rescale`): each code that does not saturate
bounds the multiplier to an interval, and multipliers inside every interval are checked
exactly against the whole table. Where none exists the Concat stays, and the host
computes it in float as before. (onnxruntime and hwgen's host compute the quotient in
float32, which puts a value a few ulps from a half on either side: with an output scale of
exactly twice the input's, an odd code's half rounds to even one time and away the next; the
exact table has no such code.)

What stays: a Concat whose inputs are not all dequantized 8-bit tensors (per tensor), whose
output is read by anything but one ``QuantizeLinear`` (per tensor) or is a graph output.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fusion.ir import ops
from fusion.ir.graph import Graph, Node, Quant
from fusion.passes._edit import Edit, rewrite_each
from fusion.passes._qdq_common import exact_multiplier, next_node

#: The requantize multiplier and shift of a scale of 1 (:func:`hwgen.reference.
#: quantize_multiplier`): an input quantized as the output is copied.
COPY = (1 << 30, 30)


def table(in_dtype: str, in_scale: float, in_zp: int, out_dtype: str, out_scale: float,
          out_zp: int) -> np.ndarray:
    """``Q(DQ(code))`` for every code of ``in_dtype`` in order, as ONNX defines it: the
    dequantized value exact (an 8-bit integer times a float32 scale, in float64), divided by
    the output scale, rounded half to even, saturated (what :mod:`examples.exact_reference`
    computes for ``DequantizeLinear -> Concat -> QuantizeLinear`` and for ``QLinearConcat``)."""
    lo, hi = ops.INT_RANGE[in_dtype]
    codes = np.arange(lo, hi + 1, dtype=np.int64)
    real = (codes - in_zp).astype(np.float64) * np.float64(np.float32(in_scale))
    q = np.rint(real / np.float64(np.float32(out_scale))).astype(np.int64) + out_zp
    return np.clip(q, *ops.INT_RANGE[out_dtype])


def rescale(want: np.ndarray, in_dtype: str, in_zp: int, out_dtype: str, out_zp: int,
            ratio: float) -> tuple[int, int] | None:
    """``(mult, shift)`` of the requantize that gives ``want`` (:func:`table`) on every code of
    ``in_dtype``, or None when no multiplier at the shift of ``ratio`` (the real scale
    ``in_scale / out_scale``) does.

    ``want - out_zp`` is ``sat(rne(v * mult / 2**shift))`` with ``v = code - in_zp``:
    :func:`fusion.passes._qdq_common.exact_multiplier` finds it.
    """
    lo_code, hi_code = ops.INT_RANGE[in_dtype]
    v = np.arange(lo_code, hi_code + 1, dtype=np.int64) - in_zp
    return exact_multiplier(v, want, ratio, out_zp, out_dtype)


def _per_tensor(quant: Quant | None) -> tuple[float, int] | None:
    if quant is None or quant.per_channel or len(quant.scale) != 1:
        return None
    return float(quant.scale[0]), int(quant.zero_point[0])


def parameters(graph: Graph, inputs: Sequence[str], out_dtype: str, out_scale: float,
               out_zp: int) -> tuple[list[int], list[int]] | str:
    """The ``qconcat`` multipliers and shifts of 8-bit per-tensor ``inputs`` joined into
    ``(out_dtype, out_scale, out_zp)``, or why there are none."""
    mults, shifts = [], []
    for name in inputs:
        t = graph.tensors[name]
        found = _per_tensor(t.quant)
        if t.dtype not in ("int8", "uint8") or found is None:
            return f"input {name!r} is not an 8-bit tensor quantized per tensor"
        scale, zp = found
        want = table(t.dtype, scale, zp, out_dtype, out_scale, out_zp)
        got = rescale(want, t.dtype, zp, out_dtype, out_zp,
                      float(np.float32(scale)) / float(np.float32(out_scale)))
        if got is None:
            return (f"no integer requantize reproduces input {name!r}'s rescale "
                    f"(scale {scale:g} to {out_scale:g}) on every code")
        mult, shift = got
        mults.append(mult)
        shifts.append(shift)
    return mults, shifts


def _qdq(graph: Graph, node: Node) -> tuple[list[str], Node] | None:
    """``DQ(x_i) -> Concat -> Q``: the ``x_i`` and the Q, or None."""
    if node.op != "Concat" or node.outputs[0] in graph.outputs:
        return None
    q = next_node(graph, node.outputs[0])
    if q is None or q.op != "quantize":
        return None
    sources = []
    for name in node.inputs:
        dq = graph.producer(name) if name else None
        if dq is None or dq.op != "dequantize":
            return None
        sources.append(dq.inputs[0])
    return sources, q


def _rewrite(graph: Graph, node: Node) -> Graph | None:
    if node.op == "Concat":
        found = _qdq(graph, node)
        if found is None:
            return None
        sources, q = found
        drop, out = (node, q), q.outputs[0]
    elif node.op == "QLinearConcat":
        sources = [x for x in node.inputs[2::3] if x]
        drop, out = (node,), node.outputs[0]
        if out in graph.outputs:
            return None
    else:
        return None
    y = graph.tensors[out]
    quant = _per_tensor(y.quant)
    if quant is None or y.dtype not in ("int8", "uint8"):
        return None
    found = parameters(graph, sources, y.dtype, *quant)
    if isinstance(found, str):
        return None
    mults, shifts = found
    rank = len(y.shape)
    edit = Edit(graph)
    edit.drop(*drop)
    edit.node(node.name, "qconcat", sources, output=out, axis=node.attr("axis") % rank,
              mult=tuple(mults), shift=tuple(shifts), zp=quant[1], out_dtype=y.dtype)
    return edit.apply()


def run(graph: Graph) -> tuple[Graph, bool]:
    """Rewrite every Concat of quantized tensors the module docstring describes.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    graph : Graph
    changed : bool
    """
    return rewrite_each(graph, _rewrite)
