"""Catalog entries of the ONNX and ``com.microsoft`` ops that have no accelerator kernel.

The accelerator multiplies, adds biases, requantizes, clamps and takes maxima; these ops need
something else (an exponential, a product of two activations, a table lookup, a copy into a
larger tensor). hwgen imports them with their ONNX (or onnxruntime) semantics and the
compiler plans them as *host ops*: the reference executor runs them between kernels
(:mod:`fusion.compiler.lower`, ``--no-host-fallback`` to refuse instead). Their reference
implementations are :mod:`fusion.reference.onnx_host_ops`.

Concat and QLinearConcat take any number of inputs; the registry's slots are fixed names,
so they list :data:`MAX_CONCAT_INPUTS` slots, all optional after the first.
"""

from __future__ import annotations

import math

from fusion.ir import shapes
from fusion.ir.catalog_onnx import broadcast_binary, qlinear_binary, variadic_broadcast
from fusion.ir.graph import Tensor
from fusion.ir.registry import INT8S, REQUIRED, Call, TensorType, register

_NUM = ("float32", "int8", "uint8", "int32", "int64")
#: Most inputs a Concat (or tensors a QLinearConcat) may join.
MAX_CONCAT_INPUTS = 32
#: Most inputs a Max or Min may take (ONNX's are variadic).
MAX_EXTREMUM_INPUTS = 8
_PAD_MODES = ("constant", "reflect", "edge", "wrap")


@register("Mul", "A B", summary="elementwise product with broadcasting (integers wrap)")
def _mul(c: Call):
    return broadcast_binary(c)


def _extremum(c: Call):
    # int8/uint8 run on the accelerator (fusion.passes.integer_eltwise), float32 on the host
    return variadic_broadcast(c, ("float32", "int8", "uint8"))


@register("Max", " ".join(f"data_{i}" for i in range(MAX_EXTREMUM_INPUTS)), 1,
          summary="elementwise maximum of the inputs, with broadcasting")
def _max(c: Call):
    return _extremum(c)


@register("Min", " ".join(f"data_{i}" for i in range(MAX_EXTREMUM_INPUTS)), 1,
          summary="elementwise minimum of the inputs, with broadcasting")
def _min(c: Call):
    return _extremum(c)


@register("Sigmoid", "X", summary="1 / (1 + exp(-x))")
def _sigmoid(c: Call):
    x = c.need("X", ("float32",))
    return (TensorType(x.shape, x.dtype),)


@register("Softmax", "input", axis=-1,
          summary="exp(x) / sum(exp(x)) along one axis (opset 13 semantics)")
def _softmax(c: Call):
    x = c.need("input", ("float32",))
    shapes.axis(c.attrs["axis"], max(len(x.shape), 1))
    return (TensorType(x.shape, x.dtype),)


@register("LRN", "X", size=REQUIRED, alpha=0.0001, beta=0.75, bias=1.0,
          summary="local response normalization across channels (a power of a windowed sum "
                  "of squares)")
def _lrn(c: Call):
    return _lrn_type(c, c.need("X", ("float32",)), "LRN needs (N, C, D1, ...)")


def _lrn_type(c: Call, x: Tensor, rank_fix: str) -> tuple[TensorType]:
    """An LRN's output type, its input of 3 or more axes and its ``size`` checked."""
    if len(x.shape) < 3:
        raise c.error(f"input {x.name!r} has shape {x.shape}; {rank_fix}")
    size = c.attrs["size"]
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise c.error(f"size is {size!r}; it must be a positive integer (the channels summed)")
    return (TensorType(x.shape, x.dtype),)


#: What hwgen's host ops (``softmax``, ``lrn``, ``batchnorm``) read and write: float32, or an
#: 8-bit tensor with its Quant, dequantized before the op and quantized after it
#: (:func:`fusion.reference.onnx_host_ops.on_real`, :mod:`fusion.passes.host_quantized`).
_REAL_OR_8BIT = ("float32",) + INT8S


def _real_type(c: Call, slot: str, out_shape: tuple[int, ...] | None = None
               ) -> tuple[Tensor, tuple[TensorType]]:
    """The input of a host op on real values, and its output's type (``dtype``)."""
    x = c.need(slot, _REAL_OR_8BIT)
    if c.attrs["dtype"] not in _REAL_OR_8BIT:
        raise c.error(f"dtype {c.attrs['dtype']!r} must be float32, int8 or uint8")
    return x, (TensorType(x.shape if out_shape is None else out_shape, c.attrs["dtype"]),)


@register("softmax", "x", axis=-1, dtype="float32", shape=(), real="",
          summary="Softmax along one axis (opset 13) of the real values x holds, on the host; "
                  "8-bit in and out with the tensors' Quant (fusion.passes.host_quantized); "
                  "shape: the output's, its elements in x's order (default x's); real: "
                  "'float64' computes in float64 always (QLinearSoftmax's), '' in the "
                  "executor's precision (Softmax's)")
def _softmax_real(c: Call):
    x = c.need("x", _REAL_OR_8BIT)
    if c.attrs["real"] not in ("", "float64"):
        raise c.error(f"real {c.attrs['real']!r} must be '' or 'float64'")
    shape = tuple(c.attrs["shape"]) or x.shape
    if any(not isinstance(d, int) or d < 0 for d in shape) or \
            math.prod(shape) != math.prod(x.shape):
        raise c.error(f"shape {shape} does not hold the {math.prod(x.shape)} elements of "
                      f"{x.name!r}")
    shapes.axis(c.attrs["axis"], max(len(x.shape), 1))
    return _real_type(c, "x", shape)[1]


@register("lrn", "x", size=REQUIRED, alpha=0.0001, beta=0.75, bias=1.0, axis=1,
          dtype="float32",
          summary="LRN across the channels on axis (2: a GEMM's [N, H*W, C] rows), on the "
                  "host (fusion.passes.host_rows); 8-bit in and out with the tensors' Quant "
                  "(fusion.passes.host_quantized)")
def _lrn_axis(c: Call):
    x, out = _real_type(c, "x")
    _lrn_type(c, x, "lrn needs 3 or more axes")
    shapes.axis(c.attrs["axis"], len(x.shape))
    return out


@register("BatchNormalization", "X scale B input_mean input_var", epsilon=1e-5, momentum=0.9,
          training_mode=0, summary="inference batch normalization: a per-channel affine "
          "(on the accelerator when quantized: fusion.passes.batchnorm)")
def _batch_normalization(c: Call):
    x = c.need("X", ("float32",))
    if c.attrs["training_mode"]:
        raise c.error("has training_mode=1; hwgen runs inference: export the model in eval "
                      "mode (training_mode=0)")
    if len(c.node.outputs) > 1:
        raise c.error(f"has {len(c.node.outputs)} outputs (the running statistics of "
                      f"training); inference BatchNormalization has one")
    if len(x.shape) < 2:
        raise c.error(f"input {x.name!r} has shape {x.shape}; BatchNormalization needs "
                      f"(N, C, ...)")
    return _per_channel(c, x, 1)


def _per_channel(c: Call, x: Tensor, axis: int) -> tuple[TensorType]:
    """A batch normalization's output type, its parameters one per channel on ``axis``."""
    channels = x.shape[axis]
    for slot in ("scale", "B", "input_mean", "input_var"):
        t = c.need(slot, ("float32",))
        if t.shape != (channels,):
            raise c.error(f"{slot} {t.name!r} has shape {t.shape}; it must be ({channels},), "
                          f"one value per channel of {x.name!r}")
    return (TensorType(x.shape, x.dtype),)


@register("batchnorm", "X scale B input_mean input_var", epsilon=1e-5, axis=1,
          dtype="float32",
          summary="inference batch normalization over the channels on axis (2: a GEMM's "
                  "[N, H*W, C] rows), on the host (fusion.passes.host_rows); 8-bit in and "
                  "out with the tensors' Quant (fusion.passes.host_quantized)")
def _batchnorm_axis(c: Call):
    x, out = _real_type(c, "X")
    _per_channel(c, x, shapes.axis(c.attrs["axis"], max(len(x.shape), 1)))
    return out


def concat_shape(c: Call, tensors: list, axis: int) -> tuple[int, ...]:
    """The shape of ``tensors`` joined along ``axis`` (raising ``c``'s error when they differ
    elsewhere)."""
    first = tensors[0].shape
    if not first:
        raise c.error("cannot concatenate scalars (rank 0)")
    ax = shapes.axis(axis, len(first))
    total = 0
    for t in tensors:
        if len(t.shape) != len(first) or any(a != b for i, (a, b) in
                                             enumerate(zip(t.shape, first, strict=True))
                                             if i != ax):
            raise c.error(f"input {t.name!r} has shape {t.shape}, which differs from "
                          f"{first} outside axis {axis}")
        total += t.shape[ax]
    return (*first[:ax], total, *first[ax + 1:])


@register("Concat", " ".join(f"input{i}" for i in range(MAX_CONCAT_INPUTS)), 1,
          axis=REQUIRED, summary="join tensors along an axis")
def _concat(c: Call):
    present = [t for t in c.inputs if t is not None]
    c.need("input0", _NUM)
    for i in range(1, len(c.inputs)):
        c.same("input0", f"input{i}")
    return (TensorType(concat_shape(c, present, c.attrs["axis"]), present[0].dtype),)


@register("Pad", "data pads constant_value axes", 2, const="pads constant_value axes",
          mode="constant",
          summary="pad (or crop, with negative pads) each axis; constant, reflect, edge, wrap")
def _pad(c: Call):
    x = c.need("data", _NUM)
    c.need("pads", ("int64",))
    mode = c.attrs["mode"]
    if mode not in _PAD_MODES:
        raise c.error(f"mode {mode!r} is not one of {', '.join(_PAD_MODES)}")
    if c.tensor("constant_value") is not None:
        c.same("data", "constant_value")
    begin, end = pad_amounts(c, len(x.shape))
    out = tuple(d + b + e for d, b, e in zip(x.shape, begin, end, strict=True))
    if any(d < 0 for d in out):
        raise c.error(f"pads {begin + end} crop more than the input {x.shape} holds")
    return (TensorType(out, x.dtype),)


def pad_amounts(c: Call, rank: int) -> tuple[list[int], list[int]]:
    """Pad's begin and end amounts per axis of a rank-``rank`` input, from its constants."""
    pads = c.value("pads")
    if pads is None:
        raise c.error(f"its pads input {c.node.inputs[1]!r} must be a constant initializer "
                      f"(hwgen graphs have static shapes)")
    axes_value = c.value("axes")
    axes = list(range(rank)) if axes_value is None else [
        shapes.axis(int(a), rank, "Pad axis") for a in axes_value.ravel()]
    pads = [int(p) for p in pads.ravel()]
    if len(pads) != 2 * len(axes):
        raise c.error(f"pads has {len(pads)} values; give 2 per padded axis ({2 * len(axes)})")
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[len(axes) + i]
    return begin, end


# -- onnxruntime's com.microsoft quantized ops (domain com.microsoft only) -------------------


@register("QLinearMul", "A A_scale A_zero_point B B_scale B_zero_point C_scale C_zero_point", 7,
          const="A_scale A_zero_point B_scale B_zero_point C_scale C_zero_point",
          summary="com.microsoft: Q(DQ(A) * DQ(B)), broadcasting")
def _qlinear_mul(c: Call):
    return qlinear_binary(c)


def _qlinear_unary(c: Call):
    x = c.need("X", INT8S)
    c.same("X", "X_zero_point", "Y_zero_point")
    for s in ("X_scale", "Y_scale"):
        c.need(s, ("float32",))
    return (TensorType(x.shape, x.dtype),)


@register("QLinearSigmoid", "X X_scale X_zero_point Y_scale Y_zero_point", 4,
          const="X_scale X_zero_point Y_scale Y_zero_point",
          summary="com.microsoft: Q(Sigmoid(DQ(X))), by a 256-entry table as onnxruntime")
def _qlinear_sigmoid(c: Call):
    return _qlinear_unary(c)


@register("QLinearLeakyRelu", "X X_scale X_zero_point Y_scale Y_zero_point", 4,
          const="X_scale X_zero_point Y_scale Y_zero_point", alpha=0.01,
          summary="com.microsoft: Q(LeakyRelu(DQ(X), alpha)), by a 256-entry table")
def _qlinear_leaky_relu(c: Call):
    return _qlinear_unary(c)


@register("QLinearSoftmax", "X X_scale x_zero_point Y_scale y_zero_point", 4,
          const="X_scale x_zero_point Y_scale y_zero_point", axis=-1, opset=REQUIRED,
          summary="com.microsoft: Q(Softmax(DQ(X))) (one axis from opset 13; before, the "
                  "input flattened to 2-D at axis)")
def _qlinear_softmax(c: Call):
    x = c.need("X", INT8S)
    c.same("X", "x_zero_point", "y_zero_point")
    for s in ("X_scale", "Y_scale"):
        c.need(s, ("float32",))
    shapes.axis(c.attrs["axis"], max(len(x.shape), 1))
    return (TensorType(x.shape, x.dtype),)


_QCONCAT_SLOTS = " ".join(f"X{i} X{i}_scale X{i}_zero_point" for i in range(MAX_CONCAT_INPUTS))


@register("QLinearConcat", f"Y_scale Y_zero_point {_QCONCAT_SLOTS}", 5,
          const="Y_scale Y_zero_point " + " ".join(
              f"X{i}_scale X{i}_zero_point" for i in range(MAX_CONCAT_INPUTS)),
          axis=REQUIRED, summary="com.microsoft: Q(Concat(DQ(X0), DQ(X1), ...)) along axis")
def _qlinear_concat(c: Call):
    y = c.need("Y_zero_point", INT8S)
    c.need("Y_scale", ("float32",))
    given = len(c.node.inputs) - 2
    if given % 3:
        raise c.error(f"has {len(c.node.inputs)} inputs; QLinearConcat takes Y_scale, "
                      f"Y_zero_point, then a (tensor, scale, zero point) triple per input")
    tensors = []
    for i in range(given // 3):
        t = c.need(f"X{i}", INT8S)
        if t.dtype != y.dtype:
            raise c.error(f"input X{i} ({t.name!r}) is {t.dtype} but Y_zero_point is "
                          f"{y.dtype}; they must match")
        c.need(f"X{i}_scale", ("float32",))
        c.need(f"X{i}_zero_point", INT8S)
        c.same(f"X{i}", f"X{i}_zero_point")
        tensors.append(t)
    return (TensorType(concat_shape(c, tensors, c.attrs["axis"]), y.dtype),)
