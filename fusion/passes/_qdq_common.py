"""What the Q/DQ folding rewrites share: reading Q/DQ parameters, activations, epilogues.

A quantized value ``q`` with :class:`~fusion.ir.graph.Quant` ``(s, z)`` means ``s * (q - z)``. Every
helper here either returns what a pattern needs or a string that says why it does not match,
which :func:`fusion.passes.qdq_fold.explain` reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fusion.ir import ops, shapes
from fusion.ir.graph import Graph, Node, Quant
from fusion.passes._edit import Edit, describe_quant
from hwgen.lanes import round_shift

DQ_OPS = ("DequantizeLinear", "dequantize")
Q_OPS = ("QuantizeLinear", "quantize")


class Refused(Exception):
    """A pattern that matched in shape but cannot be folded; the message says why."""


def const(graph: Graph, name: str) -> np.ndarray | None:
    """The value of initializer ``name`` (None for ``""`` or a computed tensor)."""
    return graph.initializers.get(name) if name else None


def quant_from(graph: Graph, tensor: str, scale: str, zp: str, axis: int) -> Quant:
    """The Quant that constant ``scale``/``zp`` inputs give ``tensor`` (as the importer does).

    Raises
    ------
    Refused
        For computed scales or zero points, or blocked quantization.
    """
    s = const(graph, scale)
    z = const(graph, zp) if zp else np.zeros(np.shape(s) if s is not None else (), np.int64)
    if s is None or z is None:
        raise Refused(f"the scale or zero point of {tensor!r} is not a constant initializer")
    if s.size == 1:
        return Quant(s.ravel()[:1], z.ravel()[:1])
    if s.ndim == 1:
        return Quant(s, z, axis % max(len(graph.tensors[tensor].shape), 1))
    raise Refused(f"{tensor!r} uses blocked quantization, which hwgen has no integer op for")


def dq_source(graph: Graph, name: str) -> tuple[str, Quant] | None:
    """``(q, quant)`` when float tensor ``name`` is a dequantize of integer tensor ``q``."""
    node = graph.producer(name)
    if node is None or node.op not in DQ_OPS:
        return None
    src = node.inputs[0]
    if node.op == "dequantize":
        return src, graph.tensors[src].quant
    if node.attr("block_size", 0):
        raise Refused(f"{node.name!r} uses blocked quantization")
    inputs = node.inputs + ("",) * 2
    return src, quant_from(graph, src, inputs[1], inputs[2], node.attr("axis", 1))


def q_target(graph: Graph, node: Node) -> tuple[str, Quant] | None:
    """``(y, quant)`` when ``node`` quantizes its float input to integer tensor ``y``."""
    if node.op not in Q_OPS:
        return None
    y = node.outputs[0]
    if node.op == "quantize":
        quant = graph.tensors[y].quant
    else:
        if node.attr("block_size", 0):
            raise Refused(f"{node.name!r} uses blocked quantization")
        inputs = node.inputs + ("",) * 2
        quant = quant_from(graph, y, inputs[1], inputs[2], node.attr("axis", 1))
    if quant.per_channel:
        raise Refused(f"{node.name!r} quantizes per channel; hwgen requantizes to one scale "
                      f"per tensor")
    return y, quant


def per_tensor(name: str, quant: Quant) -> Quant:
    if quant.per_channel:
        raise Refused(f"activation {name!r} is quantized per channel ({describe_quant(quant)}); "
                      f"hwgen needs per-tensor activations")
    return quant


def next_node(graph: Graph, tensor: str) -> Node | None:
    """The one reader of ``tensor`` when it has exactly one and is not a graph output."""
    return graph.sole_reader(tensor)


def quantize_value(value: float, quant: Quant, dtype: str) -> int:
    """ONNX QuantizeLinear of one real value (float32 division, half to even, saturation)."""
    lo, hi = ops.INT_RANGE[dtype]
    q = np.rint(np.float32(value) / np.float32(quant.scale[0])) + quant.zero_point[0]
    return int(np.clip(q, lo, hi))


def activation_bounds(graph: Graph, node: Node, quant: Quant, dtype: str) -> tuple[int, int]:
    """The integer clamp that a float ``Relu``/``Clip`` before a quantize to ``quant`` becomes.

    The quantizer is monotone, so ``Q(clip(r, a, b)) == clip(Q(r), Q(a), Q(b))`` exactly, and
    ``Relu`` is ``Clip(0, inf)``.
    """
    lo, hi = ops.INT_RANGE[dtype]
    if node.op == "Relu":
        return max(lo, quantize_value(0.0, quant, dtype)), hi
    inputs = node.inputs + ("",) * 2
    for slot in (1, 2):
        if inputs[slot] and inputs[slot] not in graph.initializers:
            raise Refused(f"Clip {node.name!r} has a computed bound; make it a constant")
    a, b = const(graph, inputs[1]), const(graph, inputs[2])
    if a is not None:
        lo = max(lo, quantize_value(float(a.ravel()[0]), quant, dtype))
    if b is not None:
        hi = min(hi, quantize_value(float(b.ravel()[0]), quant, dtype))
    return lo, hi


@dataclass(frozen=True)
class Tail:
    """What follows an integer core: optional float activation, then the quantize."""

    nodes: tuple[Node, ...]        # the float nodes replaced (activation, quantize)
    output: str                    # the integer tensor the tail produces
    quant: Quant
    dtype: str
    clamp: tuple[int, int] | None  # integer activation after the requantize


def match_tail(graph: Graph, tensor: str) -> Tail | None:
    """Match ``[Relu | Clip] -> QuantizeLinear`` reading float ``tensor``; None if absent."""
    node = next_node(graph, tensor)
    act = None
    if node is not None and node.op in ("Relu", "Clip"):
        act, node = node, next_node(graph, node.outputs[0])
    if node is None:
        return None
    target = q_target(graph, node)
    if target is None:
        return None
    y, quant = target
    dtype = graph.tensors[y].dtype
    bounds = activation_bounds(graph, act, quant, dtype) if act is not None else None
    nodes = (act, node) if act is not None else (node,)
    return Tail(nodes, y, quant, dtype, bounds)


def emit_activation(edit: Edit, base: str, x: str, bounds: tuple[int, int] | None, dtype: str,
                    output: str | None, quant: Quant) -> str:
    """``relu``/``clamp`` of int8 ``x``, or nothing when the dtype's range already does it.

    The result goes into the existing tensor ``output``, or a new one when it is None.

    Returns the tensor holding the result (``x`` itself when no node was needed).
    """
    lo, hi = ops.INT_RANGE[dtype]
    if bounds is None or (bounds[0] <= lo and bounds[1] >= hi):
        return x
    if bounds == (0, hi):
        return edit.node(f"{base}/relu", "relu", [x], output=output, quant=quant)
    return edit.node(f"{base}/clamp", "clamp", [x], output=output, quant=quant,
                     lo=bounds[0], hi=bounds[1])


def requant_epilogue(edit: Edit, base: str, acc: str, acc_scale: np.ndarray, axis: int,
                     tail: Tail, attrs: dict | None = None) -> None:
    """``requant`` of int32 ``acc`` (real scale ``acc_scale``) then the tail's activation;
    ``attrs``: the requantize's attributes, when the caller chose its multipliers."""
    scale = np.asarray(acc_scale, np.float64) / tail.quant.scale[0]
    try:
        attrs = attrs or ops.requant_attrs(
            float(scale[0]) if scale.size == 1 else tuple(scale.tolist()),
            tail.quant.zero_point[0], out_dtype=tail.dtype, axis=axis,
            round_even=True)  # QuantizeLinear rounds halves to even
    except ValueError as exc:
        raise Refused(f"the requantize scale cannot be held by the multiplier: {exc}") from None
    if not _needs_activation(tail):
        edit.node(f"{base}/requant", "requant", [acc], output=tail.output, quant=tail.quant,
                  **attrs)
        return
    y = edit.node(f"{base}/requant", "requant", [acc], quant=tail.quant, **attrs)
    emit_activation(edit, base, y, tail.clamp, tail.dtype, tail.output, tail.quant)


def _needs_activation(tail: Tail) -> bool:
    lo, hi = ops.INT_RANGE[tail.dtype]
    return tail.clamp is not None and not (tail.clamp[0] <= lo and tail.clamp[1] >= hi)


def window_pads(node: Node, x_shape: tuple[int, ...], kernel: tuple[int, ...]) -> tuple[int, ...]:
    """Explicit ``pads`` (begins, then ends) of an ONNX conv or pool, ``auto_pad`` resolved."""
    _, begin, end = shapes.window(x_shape[2:], kernel, node.attr("strides"),
                                  node.attr("dilations"), node.attr("pads"),
                                  node.attr("auto_pad", "NOTSET"), node.attr("ceil_mode", 0))
    return (*begin, *end)


def maxpool_attrs(node: Node, x_shape: tuple[int, ...]) -> dict:
    """The ``maxpool`` attributes of an ONNX ``MaxPool`` node (``auto_pad`` resolved)."""
    kernel = tuple(node.attr("kernel_shape"))
    return {"kernel_shape": kernel, "pads": window_pads(node, x_shape, kernel),
            "strides": tuple(node.attr("strides") or (1,) * len(kernel)),
            "dilations": tuple(node.attr("dilations") or (1,) * len(kernel)),
            "ceil_mode": node.attr("ceil_mode", 0)}


def multiplier_range(acc: np.ndarray, want: np.ndarray, zp: int, bounds: tuple[int, int],
                     shift: int) -> tuple[float, float] | None:
    """The requantize multipliers at ``shift`` that could give ``want`` from ``acc``:
    ``rne(acc * mult / 2**shift) + zp == want`` holds within half a unit, an interval of
    ``mult`` per element, on every element whose ``want`` lies strictly inside ``bounds``
    (a saturated one bounds it on one side only) and whose ``acc`` is not zero. Their
    intersection ``(low, high)``, in float64, or None when it is empty or no element bounds
    it. The callers take candidates from it and check each exactly on every element."""
    lo, hi = bounds
    inside = (want > lo) & (want < hi) & (acc != 0)
    if not inside.any():
        return None
    t = (want[inside] - zp).astype(np.float64)
    a = acc[inside].astype(np.float64)
    ends = np.stack([(t - 0.5) * 2.0**shift / a, (t + 0.5) * 2.0**shift / a])
    low, high = ends.min(axis=0).max(), ends.max(axis=0).min()
    return (float(low), float(high)) if 0 < low <= high else None


def exact_multiplier(acc: np.ndarray, want: np.ndarray, ratio: float, zp: int,
                     out_dtype: str) -> tuple[int, int] | None:
    """``(mult, shift)`` of the round-half-even requantize that gives ``want`` from every
    value of ``acc`` (``sat(rne(acc * mult / 2**shift) + zp)``), or None when no multiplier
    at the shift of ``ratio`` (the real scale it approximates) does.

    Each ``acc`` whose ``want`` does not saturate bounds ``mult`` to an interval
    (:func:`multiplier_range`); the candidates (the multiplier of ``ratio``, the middle and
    the ends of the intersection) are checked exactly on every value, saturated ones
    included. Callers pass the whole domain of ``acc`` (an 8-bit input's codes, a window
    sum's range), so a multiplier found is exact on any input.
    """
    try:
        attrs = ops.requant_attrs(ratio, 0)
    except ValueError:
        return None
    mult0, shift = int(attrs["mult"]), int(attrs["shift"])
    if mult0 <= 0:
        return None
    lo, hi = ops.INT_RANGE[out_dtype]
    candidates = [mult0]
    found = multiplier_range(acc, want, zp, (lo, hi), shift)
    if found is not None:
        low, high = found
        candidates += [round((low + high) / 2), math.ceil(low), math.floor(high)]
    for mult in dict.fromkeys(candidates):
        if 0 < mult < 2**31:
            got = round_shift(np.asarray(acc, np.int64) * mult, shift, even=True) + zp
            if np.array_equal(np.clip(got, lo, hi), want):
                return mult, shift
    return None
