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
    point 0. ``group`` (default 1) records that b is block-diagonal (a grouped conv in GEMM
    form, :mod:`fusion.passes.conv_legalize`): it changes nothing computed, only the MACs
    the model asks for, ``M*K*N/group``, which the run report's utilization counts.
``qconv2d(x, w) -> int32``
    NCHW convolution of ``(x - x_zp)`` (padding with ``x_zp``, so the padding contributes 0) and
    ``(w - w_zp)`` (per tensor or per output channel, axis 0). Attributes ``strides``,
    ``pads`` (top, left, bottom, right), ``dilations``, ``group`` (dividing the input and
    output channels; weights ``M x C/group x kH x kW``; depthwise is ``group`` = C).
``bias_add(x, bias) -> int32``
    ``sat32(x + bias)``, the 1-D bias along ``axis`` (default -1; 1 for NCHW).
``requant(x) -> int8 | uint8``
    Per element of channel ``c`` along ``axis``: ``sat(((x * mult[c] + 2**(shift[c]-1)) >>
    shift[c]) + zp)``, i.e. :func:`hwgen.reference.requantize`: rounding half toward +inf;
    with ``round_even`` = 1 exact halves round to even (ONNX's ``QuantizeLinear``: the Q/DQ
    folds set it). ``mult``/``shift`` are ints (per tensor) or tuples (per channel).
    ``out_dtype`` "uint8" saturates to 0..255; the hardware runs it as the int8 requant with
    ``zp - 128`` followed by flipping the sign bit, which is exactly the same.
``relu(x)``, ``clamp(x)``
    ``max(x, 0)`` and ``min(max(x, lo), hi)``, any integer dtype, same dtype out. On a
    quantized int8 tensor ``relu`` is ``clamp(lo=zp, hi=127)``; the passes choose.
``qadd(a, b) -> int8 | uint8``
    ``sat(rne(((a - a_zp) * a_mult + (b - b_zp) * b_mult) / 2**shift) + zp)``, ``rne``
    rounding half to even (as onnxruntime's float ``QLinearAdd`` does), saturating to
    ``out_dtype``; ``a_zp``/``b_zp`` from the tensors' Quant, ``a_mult``/``b_mult`` signed
    32-bit, ``shift`` 0..63. It is the residual stage's scaled add
    (:func:`hwgen.lanes.residual_scaled`): fused after the GEMM that makes one input, or a
    pass. :func:`fusion.ir.ops.qadd_attrs` computes the attributes from the three scales.
``qconcat(x0, x1, ...) -> int8 | uint8``
    The inputs joined along ``axis``, input ``i`` rescaled into the output's quantization:
    ``sat(rne((x_i - x_i_zp) * mult[i] / 2**shift[i]) + zp)``, ``rne`` rounding half to
    even, ``x_i_zp`` from input ``i``'s Quant (per tensor), ``mult``/``shift`` one per input.
    :mod:`fusion.passes.concat_fold` makes it from ``DequantizeLinear -> Concat ->
    QuantizeLinear`` only where it equals that float computation on every code of every
    input; an input quantized as the output has ``mult = 2**30, shift = 30`` (a copy).
``maxpool(x)``
    2-D max pooling, NCHW; ``kernel_shape``, ``strides``, ``pads``, ``dilations``, ``ceil_mode``;
    padding never wins. Order-preserving, so it commutes with the quantization. A negative
    end pad (never ONNX's) crops that many trailing rows or columns first: the pool reads a
    convolution's output computed in whole blocks of columns (:mod:`fusion.compiler.whole_rows`).
``lrn(x: float32) -> float32``
    ONNX's LRN (``size``, ``alpha``, ``beta``, ``bias``) across the channels on ``axis``
    rather than axis 1: on the host, over a convolution's ``[N, H*W, C]`` rows
    (:mod:`fusion.passes.host_rows`).
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
from fractions import Fraction
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
from hwgen.lanes import INT32_MAX


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
                  axis: int = -1, round_even: bool = False) -> dict[str, Any]:
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
    round_even : bool
        Round exact halves to even, as ONNX's ``QuantizeLinear`` does (the attribute is
        written only when set; absent, halves round toward +inf).
    """
    from hwgen.reference import quantize_multiplier

    even = {"round_even": 1} if round_even else {}
    if np.ndim(scale) == 0:
        mult, shift = quantize_multiplier(float(scale))
        return {"mult": mult, "shift": shift, "zp": int(zp), "out_dtype": out_dtype, **even}
    pairs = [quantize_multiplier(float(s)) for s in np.ravel(scale)]
    return {"mult": tuple(m for m, _ in pairs), "shift": tuple(s for _, s in pairs),
            "zp": int(zp), "out_dtype": out_dtype, "axis": axis, **even}


def qadd_attrs(a_scale: float, b_scale: float, y_scale: float, zp: int = 0, *,
               out_dtype: str = "int8") -> dict[str, Any]:
    """Attributes of a ``qadd`` computing ``a_scale*(a-a_zp) + b_scale*(b-b_zp)`` in y's scale.

    Each input's multiplier is its scale over the output's, ``a_scale / y_scale``, times
    ``2**shift``, rounded; ``shift`` is the largest (at most 63) that keeps both multipliers
    within a signed 32-bit integer, so the larger has 31 significant bits and each is within
    half a unit of the exact ratio (:func:`qadd_error_bound`). TFLite's add keeps 31-bit
    multipliers too, with three roundings; here the sum is exact and rounded once.

    Parameters
    ----------
    a_scale, b_scale, y_scale : float
        The scales of the inputs and the output, positive and finite.
    zp : int
        The output zero point.
    out_dtype : {"int8", "uint8"}

    Returns
    -------
    dict
        ``a_mult``, ``b_mult``, ``shift``, ``zp``, ``out_dtype``.

    Raises
    ------
    ValueError
        If a scale is not positive and finite, an input's scale is 2**31 times the output's
        or more (no multiplier holds it), or the smaller input's multiplier rounds to 0 at the
        largest shift (its scale is under ``2**-64`` times the output's).
    """
    for name, s in (("a_scale", a_scale), ("b_scale", b_scale), ("y_scale", y_scale)):
        if not (math.isfinite(s) and s > 0):
            raise ValueError(f"qadd {name} must be positive and finite, not {s!r}")
    ra, rb = Fraction(a_scale) / Fraction(y_scale), Fraction(b_scale) / Fraction(y_scale)
    top = max(ra, rb)
    if round(top) > INT32_MAX:
        raise ValueError(f"qadd input scale {float(top * Fraction(y_scale))!r} is more than "
                         f"2**31 times the output scale {y_scale!r}: every non-zero input "
                         f"saturates; give the output a larger scale")
    shift = 0
    while shift < 63 and round(top * 2 ** (shift + 1)) <= INT32_MAX:
        shift += 1
    a_mult, b_mult = round(ra * 2 ** shift), round(rb * 2 ** shift)
    if min(a_mult, b_mult) == 0:
        raise ValueError(f"qadd input scales {a_scale!r} and {b_scale!r} over the output scale "
                         f"{y_scale!r}: the smaller input's multiplier rounds to 0 even at "
                         f"shift 63; requantize it closer to the output first")
    return {"a_mult": a_mult, "b_mult": b_mult, "shift": shift, "zp": int(zp),
            "out_dtype": out_dtype}


def qadd_error_bound(attrs: Mapping[str, Any], a_scale: float, b_scale: float, y_scale: float,
                     a_max: int, b_max: int) -> Fraction:
    """The largest error, in output LSBs before rounding, of a ``qadd`` against the real sum.

    ``qadd`` rounds ``(da * a_mult + db * b_mult) / 2**shift`` where the real sum is
    ``(da * a_scale + db * b_scale) / y_scale``; for ``|da| <= a_max`` and ``|db| <= b_max``
    the two differ by at most the returned value (exact, a Fraction). Below 1/2 the rounded
    result is within one LSB of the correctly rounded real sum (ONNX's ``DQ -> Add -> Q``),
    and equal to it unless the real sum is within the bound of a rounding boundary. With
    :func:`qadd_attrs` it is at most ``(a_max + b_max) / 2**(shift + 1)``: about ``1e-7``
    LSB for scales of one magnitude.

    Parameters
    ----------
    attrs : mapping
        The ``qadd`` attributes (``a_mult``, ``b_mult``, ``shift``).
    a_scale, b_scale, y_scale : float
    a_max, b_max : int
        The largest ``|a - a_zp|`` and ``|b - b_zp|``.

    Returns
    -------
    fractions.Fraction
    """
    unit = Fraction(1, 2 ** attrs["shift"])
    y = Fraction(y_scale)
    return (a_max * abs(attrs["a_mult"] * unit - Fraction(a_scale) / y)
            + b_max * abs(attrs["b_mult"] * unit - Fraction(b_scale) / y))


#: Every op name the catalog knows: ONNX ops, then hwgen ops, each sorted.
ONNX_OPS = tuple(sorted(n for n, s in SPECS.items() if s.domain == "onnx"))
HWGEN_OPS = tuple(sorted(n for n, s in SPECS.items() if s.domain == "hwgen"))
SUPPORTED_OPS = ONNX_OPS + HWGEN_OPS
