"""The op catalog: every op a graph may hold, its attributes, dtype rules and shape inference.

Two families share the catalog:

* **ONNX ops** (CamelCase: ``QuantizeLinear``, ``QLinearConv``, ``MatMul`` ...) keep the ONNX
  semantics and the ONNX input lists (scales and zero points stay inputs), exactly as the
  importer reads them. The executor runs them as the ONNX spec defines them.
* **hwgen ops** (lower case: ``qmatmul``, ``requant`` ...) are the integer-domain ops the passes
  fold to and the hardware runs. Their quantization lives in the tensors'
  :class:`~fusion.ir.graph.Quant` (zero points of ``qmatmul``/``qconv2d``/``qadd``/``im2col``
  inputs, parameters of ``quantize``/``dequantize``) or in attributes (the requantize CSRs).
  Their semantics are below; :mod:`fusion.reference.executor` implements them with
  :mod:`hwgen.reference`.

:func:`get` looks an op up, :func:`node_attrs` merges defaults and :func:`infer` gives a node's
output types; :func:`fusion.ir.validation.validate` checks a whole graph. The ops themselves are
declared in :mod:`fusion.ir.catalog_onnx` and :mod:`fusion.ir.catalog_hwgen`, which register
them into :mod:`fusion.ir.registry`.

Integer op semantics
--------------------
``qmatmul(a, b) -> int32``
    ``(a - a_zp) @ (b - b_zp)``, numpy matmul shapes, accumulated exactly and wrapped to int32
    like the accumulators. ``a_zp`` is a's per-tensor zero point; ``b_zp`` is per tensor or
    per output channel (``b.quant.axis`` = b's last axis). A tensor without ``Quant`` has zero
    point 0.
``qconv2d(x, w) -> int32``
    NCHW convolution of ``(x - x_zp)`` (padding with ``x_zp``, so the padding contributes 0) and
    ``(w - w_zp)`` (per tensor or per output channel, axis 0). Attributes ``strides``,
    ``pads`` (top, left, bottom, right), ``dilations``, ``group`` (dividing the input and
    output channels; weights ``M x C/group x kH x kW``; depthwise is ``group`` = C).
``bias_add(x, bias) -> int32``
    ``sat32(x + bias)``, the 1-D bias along ``axis`` (default -1; 1 for NCHW).
``requant(x) -> int8 | uint8``
    Per element of channel ``c`` along ``axis``: ``sat(((x * mult[c] + 2**(shift[c]-1)) >>
    shift[c]) + zp)``, i.e. :func:`hwgen.reference.requantize`: rounding half toward +inf.
    ``mult``/``shift`` are ints (per tensor) or tuples (per channel). ``out_dtype`` "uint8"
    saturates to 0..255; the hardware runs it as the int8 requant with ``zp - 128`` followed by
    flipping the sign bit, which is exactly the same.
``relu(x)``, ``clamp(x)``
    ``max(x, 0)`` and ``min(max(x, lo), hi)``, any integer dtype, same dtype out. On a
    quantized int8 tensor ``relu`` is ``clamp(lo=zp, hi=127)``; the passes choose.
``qadd(a, b) -> int8 | uint8``
    ``requant(sat32((a - a_zp) * a_mult + (b - b_zp) * b_mult))`` with the requant attributes
    ``mult``, ``shift``, ``zp``, ``out_dtype``; ``a_zp``/``b_zp`` from the tensors' Quant.
    ``a_mult``/``b_mult`` are int8 (-128..127): the accelerator runs a ``qadd`` as one GEMM of
    ``[a - a_zp | b - b_zp]`` with the constant weights ``[[a_mult * I], [b_mult * I]]``.
    :func:`fusion.ir.ops.qadd_attrs` computes the attributes from the three scales.
``maxpool(x)``
    2-D max pooling, NCHW; ``kernel_shape``, ``strides``, ``pads``, ``dilations``, ``ceil_mode``;
    padding never wins. Order-preserving, so it commutes with the quantization.
``flatten``, ``reshape`` (``shape`` attribute, ONNX 0/-1 rules), ``transpose`` (``perm``)
    Layout only; the output keeps the input's quantization.
``quantize(x: float32) -> int8 | uint8``
    ``sat(round_half_even(x / scale) + zp)`` with the output tensor's Quant (ONNX
    QuantizeLinear; the host does it at the graph boundary).
``dequantize(x) -> float32``
    ``(x - zp) * scale`` with the input tensor's Quant (ONNX DequantizeLinear).
``im2col(x) -> x.dtype``
    ``[N, C, H, W] -> [N, OH*OW, C*kH*kW]``: row ``oh*OW + ow`` holds the window of output
    position (oh, ow), columns ordered (c, kh, kw) like ``w.reshape(M, -1)``; padding is
    filled with x's zero point. Attributes ``kernel_shape``, ``strides``, ``pads``,
    ``dilations`` as qconv2d. So, for group 1, ``qconv2d(x, w)`` equals
    ``transpose(qmatmul(im2col(x), wT), perm=(0, 2, 1))`` reshaped to ``[N, M, OH, OW]``,
    where ``wT = w.reshape(M, -1).T`` (its Quant per channel on axis 1). With ``group`` g the
    same holds for the block-diagonal ``wT`` ``[C*kH*kW, M]`` whose column o holds o's weights
    at the rows of its group's input channels and zeros elsewhere
    (:mod:`fusion.passes.conv_legalize`).
``repeat(x) -> x.dtype``
    ``x`` tiled ``times`` (1..8) times along its last axis, same Quant. With weights split into
    int8 parts ``[w_1; ...; w_P]`` along K (:mod:`fusion.passes.weight_zero_point`, for weights
    whose zero point moves them out of int8), ``qmatmul(repeat(a), [w_1; ...; w_P])`` equals
    ``qmatmul(a, w_1 + ... + w_P)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# The catalogs register their ops into the registry when imported; this module looks them up.
from fusion.ir import catalog_hwgen, catalog_onnx, catalog_onnx_host  # noqa: F401
from fusion.ir.graph import GraphError, Node, Tensor
from fusion.ir.registry import (  # noqa: F401  (re-exported: the catalog's vocabulary)
    INT8S,
    INT_RANGE,
    INTS,
    ONNX_ELEM_TYPES,
    REQUIRED,
    SPECS,
    Call,
    OpSpec,
    TensorType,
)

#: Largest magnitude of a ``qadd`` input multiplier: the accelerator runs ``qadd`` as a GEMM
#: whose constant weights are ``a_mult``/``b_mult``, so they must be int8 (see :func:`qadd_attrs`).
QADD_MULT_MAX = 127


def get(op: str) -> OpSpec:
    """The spec of ``op``.

    Raises
    ------
    GraphError
        If ``op`` is not supported; the message lists the supported ops.
    """
    try:
        return SPECS[op]
    except KeyError:
        raise GraphError(f"op {op!r} is not supported; supported ops are "
                         f"{', '.join(SUPPORTED_OPS)}") from None


def node_attrs(node: Node) -> dict[str, Any]:
    """The attributes of ``node`` with the catalog defaults filled in.

    Raises
    ------
    GraphError
        For an unsupported op, an unknown attribute or a missing required one.
    """
    spec = _lookup(node)
    given = node.attr_dict
    unknown = sorted(set(given) - set(spec.attrs))
    if unknown:
        raise GraphError(f"node {node.name!r} ({node.op}) has unknown attribute(s) "
                         f"{', '.join(unknown)}; {node.op} takes "
                         f"{', '.join(sorted(spec.attrs)) or 'no attributes'}")
    merged = {**spec.attrs, **given}
    missing = sorted(k for k, v in merged.items() if v is REQUIRED)
    if missing:
        raise GraphError(f"node {node.name!r} ({node.op}) needs attribute(s) "
                         f"{', '.join(missing)}")
    return merged


def _lookup(node: Node) -> OpSpec:
    try:
        return get(node.op)
    except GraphError as exc:
        raise GraphError(f"node {node.name!r}: {exc}") from None


def infer(node: Node, inputs: Sequence[Tensor | None],
          constants: Mapping[str, np.ndarray] | None = None) -> tuple[TensorType, ...]:
    """The output types of ``node`` given its input tensors.

    Parameters
    ----------
    node : Node
    inputs : sequence of Tensor or None
        One per entry of ``node.inputs``; None for an absent optional input (``""``).
    constants : mapping of str to ndarray, optional
        Initializer values (needed for ``Reshape``'s shape); usually ``graph.initializers``.

    Returns
    -------
    tuple of TensorType
        One per output of the node.

    Raises
    ------
    GraphError
        Naming the node and the fix: unsupported op, wrong input count, dtype mismatch, bad
        attribute or shape.
    """
    spec = _lookup(node)
    attrs = node_attrs(node)
    present = len(node.inputs)
    while present and not node.inputs[present - 1]:
        present -= 1
    if not spec.min_inputs <= present <= len(spec.slots):
        want = (str(spec.min_inputs) if spec.min_inputs == len(spec.slots)
                else f"{spec.min_inputs} to {len(spec.slots)}")
        raise GraphError(f"node {node.name!r} ({node.op}) has {present} inputs, but {node.op} "
                         f"takes {want} ({', '.join(spec.slots)})")
    for i in range(spec.min_inputs):
        if not node.inputs[i]:
            raise GraphError(f"node {node.name!r} ({node.op}): input {spec.slots[i]!r} is "
                             f"required but empty")
    call = Call(node, spec, attrs, tuple(inputs), constants or {})
    try:
        out = spec.infer(call)
    except GraphError as exc:
        if str(exc).startswith(f"node {node.name!r}"):
            raise
        raise call.error(str(exc)) from None
    if len(node.outputs) != len(out):
        raise call.error(f"has {len(node.outputs)} outputs, but hwgen supports "
                         f"{len(out)} for {node.op}")
    return out


# -- parameters for the integer ops (one place that turns float scales into CSRs) ------------


def requant_attrs(scale: float | Sequence[float], zp: int = 0, *, out_dtype: str = "int8",
                  axis: int = -1) -> dict[str, Any]:
    """Attributes of a ``requant`` node that multiplies int32 values by ``scale``.

    Parameters
    ----------
    scale : float or sequence of float
        ``in_scale * w_scale / out_scale``, per tensor or one per channel along ``axis``.
    zp : int
        Output zero point, in the range of ``out_dtype``.
    out_dtype : {"int8", "uint8"}
    axis : int
        Channel axis for per-channel scales.
    """
    from hwgen.reference import quantize_multiplier

    if np.ndim(scale) == 0:
        mult, shift = quantize_multiplier(float(scale))
        return {"mult": mult, "shift": shift, "zp": int(zp), "out_dtype": out_dtype}
    pairs = [quantize_multiplier(float(s)) for s in np.ravel(scale)]
    return {"mult": tuple(m for m, _ in pairs), "shift": tuple(s for _, s in pairs),
            "zp": int(zp), "out_dtype": out_dtype, "axis": axis}


def qadd_input_mults(a_scale: float, b_scale: float) -> tuple[int, int]:
    """The int8 input multipliers ``(a_mult, b_mult)`` of a ``qadd`` of these input scales.

    The pair whose ratio ``b_mult / a_mult`` is nearest ``b_scale / a_scale`` among all pairs of
    magnitude at most :data:`QADD_MULT_MAX`: for each multiplier ``w`` of the larger-scale
    input (1..127), the other is ``round(w * smaller / larger)``; the least error wins, ties
    (equal fractions such as 3/4 and 6/8) going to the larger ``w``. The larger-scale input
    then stands exactly for ``w`` units of ``larger / w``, and the other is off by
    ``|mult / w - smaller / larger|`` relative to the larger scale per unit of its input.

    Parameters
    ----------
    a_scale, b_scale : float
        The input scales, positive.

    Returns
    -------
    a_mult, b_mult : int, int
        In ``1..QADD_MULT_MAX``.

    Raises
    ------
    ValueError
        If a scale is not positive and finite, or the scales differ by more than a factor of
        ``2 * QADD_MULT_MAX``, so that the smaller input's multiplier would round to 0.
    """
    for name, s in (("a_scale", a_scale), ("b_scale", b_scale)):
        if not (math.isfinite(s) and s > 0):
            raise ValueError(f"qadd {name} must be positive and finite, not {s!r}")
    big, small = max(a_scale, b_scale), min(a_scale, b_scale)
    ratio = small / big
    best = (math.inf, 0, 0)
    for w in range(1, QADD_MULT_MAX + 1):
        other = round(w * ratio)  # ratio <= 1, so other <= w <= QADD_MULT_MAX
        error = abs(other / w - ratio)
        if error <= best[0]:  # <=: an equal fraction with a larger w wins the tie
            best = (error, w, other)
    _, w, other = best
    if other == 0:
        raise ValueError(f"qadd input scales {a_scale!r} and {b_scale!r} differ by more than "
                         f"a factor of {2 * QADD_MULT_MAX}: the smaller input's int8 "
                         f"multiplier would be 0; requantize it closer to the other first")
    return (w, other) if a_scale >= b_scale else (other, w)


def qadd_attrs(a_scale: float, b_scale: float, y_scale: float, zp: int = 0, *,
               out_dtype: str = "int8") -> dict[str, Any]:
    """Attributes of a ``qadd`` computing ``a_scale*(a-a_zp) + b_scale*(b-b_zp)`` in y's scale.

    The input multipliers are the int8 pair of :func:`qadd_input_mults` (the accelerator
    multiplies them as int8 GEMM weights); with ``w`` the larger-scale input's multiplier, the
    sum is in units of ``larger / w`` and ``requant`` by ``larger / (w * y_scale)`` brings it
    to y.

    Parameters
    ----------
    a_scale, b_scale, y_scale : float
        The scales of the inputs and the output.
    zp : int
        The output zero point.
    out_dtype : {"int8", "uint8"}

    Returns
    -------
    dict
        ``a_mult``, ``b_mult``, ``mult``, ``shift``, ``zp``, ``out_dtype``.

    Raises
    ------
    ValueError
        From :func:`qadd_input_mults`, or when the requantize scale does not fit the multiplier.
    """
    from hwgen.reference import quantize_multiplier

    a_mult, b_mult = qadd_input_mults(a_scale, b_scale)
    if a_scale >= b_scale:
        mult, shift = quantize_multiplier(a_scale / (y_scale * a_mult))
    else:
        mult, shift = quantize_multiplier(b_scale / (y_scale * b_mult))
    return {"a_mult": a_mult, "b_mult": b_mult, "mult": mult, "shift": shift, "zp": int(zp),
            "out_dtype": out_dtype}


def qadd_error_bound(attrs: Mapping[str, Any], a_scale: float, b_scale: float, y_scale: float,
                     a_max: int, b_max: int) -> float:
    """The largest error, in output LSBs before rounding, of a ``qadd`` against the real sum.

    ``qadd`` computes ``(da * a_mult + db * b_mult) * mult / 2**shift`` where the real sum is
    ``(da * a_scale + db * b_scale) / y_scale``; for ``|da| <= a_max`` and ``|db| <= b_max``
    the two differ by at most the returned value. Below 1/2, the rounded result is within one
    LSB of the correctly rounded real sum (ONNX's ``DQ -> Add -> Q``); the int8 input
    multipliers can make it larger when the output scale is small against the input scales
    and their ratio is far from every fraction of int8 multipliers.

    Parameters
    ----------
    attrs : mapping
        The ``qadd`` attributes (``a_mult``, ``b_mult``, ``mult``, ``shift``).
    a_scale, b_scale, y_scale : float
    a_max, b_max : int
        The largest ``|a - a_zp|`` and ``|b - b_zp|``.

    Returns
    -------
    float
    """
    real = attrs["mult"] / 2.0 ** attrs["shift"]
    return (a_max * abs(attrs["a_mult"] * real - a_scale / y_scale)
            + b_max * abs(attrs["b_mult"] * real - b_scale / y_scale))


#: Every op name the catalog knows: ONNX ops, then hwgen ops, each sorted.
ONNX_OPS = tuple(sorted(n for n, s in SPECS.items() if s.domain == "onnx"))
HWGEN_OPS = tuple(sorted(n for n, s in SPECS.items() if s.domain == "hwgen"))
SUPPORTED_OPS = ONNX_OPS + HWGEN_OPS
