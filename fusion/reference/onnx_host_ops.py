"""Implementations of the ops without an accelerator kernel (:mod:`fusion.ir.catalog_onnx_host`).

The standard ops follow the ONNX spec (``onnx.reference``'s arithmetic: float32 throughout,
integers wrapping). onnxruntime's quantized ops follow onnxruntime's CPU kernels step by step,
so that their integer outputs agree with it:

* ``QLinearSigmoid``, ``QLinearLeakyRelu`` and the rescaled inputs of ``QLinearConcat`` are a
  256-entry table, built as onnxruntime's ``QlinearBuildLookupTable`` does: each possible
  input value dequantized in float32 (``x_scale * (v - x_zp)``), the function applied in
  float32, then quantized (``round_half_even(y / y_scale) + y_zp``, saturated). The table is
  then indexed by the input. ``QLinearConcat`` copies an input whose scale and zero point are
  the output's.
* ``QLinearMul`` multiplies the zero-point-free integers (exactly, in float32) by the float32
  ratio ``a_scale * b_scale / c_scale``, adds C's zero point and rounds half to even, as MLAS
  does (dequantizing each input first differs from onnxruntime by 1 LSB on ~1% of values).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fusion.reference.hwgen_ops import dequantized, quantized
from fusion.reference.registry import Ctx, implements


@implements("Mul")
def _mul(ctx: Ctx, a, b):
    return (np.multiply(a, b),)  # same dtype; integer products wrap, as in onnx.reference


@implements("Max")
def _max(ctx: Ctx, *values):
    return (np.maximum.reduce(np.broadcast_arrays(*[v for v in values if v is not None])),)


@implements("Min")
def _min(ctx: Ctx, *values):
    return (np.minimum.reduce(np.broadcast_arrays(*[v for v in values if v is not None])),)


@implements("Sigmoid")
def _sigmoid(ctx: Ctx, x):
    with np.errstate(over="ignore"):  # exp(-x) overflows to inf for x < -88: sigmoid is 0
        return ((1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32),)


def softmax(x: np.ndarray, axis: int, real=np.float32) -> np.ndarray:
    """Softmax along ``axis``, in float64, as ``real``."""
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(real)


@implements("Softmax")
def _softmax(ctx: Ctx, x):
    return (softmax(x, ctx.attrs["axis"] % max(x.ndim, 1),
                    np.float64 if ctx.float64 else np.float32),)


def lrn(x: np.ndarray, size: int, alpha: float, beta: float, bias: float,
        axis: int = 1) -> np.ndarray:
    """ONNX's LRN across the channels on ``axis`` (ONNX's own: 1, NCHW; hwgen's ``lrn`` of a
    GEMM's ``[N, H*W, C]`` rows: 2), in float64: each element over ``bias + alpha / size *``
    the sum of squares of channels ``c - floor((size-1)/2) .. c + ceil((size-1)/2)``
    (clipped) to the ``beta``. The same operations, in the same order, on either axis."""
    x = np.moveaxis(x, axis, 1)
    squares = np.square(x.astype(np.float64))
    before, after = (size - 1) // 2, -(-(size - 1) // 2)
    padded = np.pad(squares, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    window = sum(padded[:, i:i + x.shape[1]] for i in range(size))
    return np.moveaxis(x / (bias + alpha / size * window) ** beta, 1, axis)


@implements("LRN")
def _lrn(ctx: Ctx, x):
    a = ctx.attrs
    y = lrn(x, a["size"], a["alpha"], a["beta"], a["bias"])
    return (y.astype(np.float64 if ctx.float64 else np.float32),)


def on_real(fn):
    """hwgen's form of a host op, ``fn(ctx, x, *rest) -> float array``, on the real values
    its tensors hold: an 8-bit input dequantized with its Quant first, and an 8-bit output
    (the op's ``dtype``) quantized with its Quant after, as ``dequantize`` and ``quantize``
    would around it (:mod:`fusion.passes.host_quantized`); float32 in and out as it is. An op
    whose ``real`` attribute is ``"float64"`` computes in float64 whatever the executor's
    precision (QLinearSoftmax's, :func:`_qlinear_softmax`)."""
    def run(ctx: Ctx, x, *rest):
        if ctx.attrs.get("real") == "float64" and not ctx.float64:
            ctx = dataclasses.replace(ctx, float64=True)  # QLinearSoftmax's, in any executor
        if x.dtype.kind in "iu":
            x = dequantized(ctx, x)
        y = fn(ctx, x, *rest).astype(np.float64 if ctx.float64 else np.float32)
        return (quantized(ctx, y) if ctx.attrs["dtype"] != "float32" else y,)
    return run


@implements("softmax")
@on_real
def _softmax_real(ctx: Ctx, x):
    y = softmax(x, ctx.attrs["axis"] % max(x.ndim, 1), np.float64 if ctx.float64 else
                np.float32)
    return y.reshape(ctx.outputs[0].shape)


@implements("lrn")
@on_real
def _lrn_axis(ctx: Ctx, x):
    a = ctx.attrs
    return lrn(x, a["size"], a["alpha"], a["beta"], a["bias"], a["axis"] % x.ndim)


def batch_normalization(x: np.ndarray, scale, bias, mean, var, epsilon: float,
                        axis: int = 1) -> np.ndarray:
    """Inference batch normalization of ``x`` over its channels on ``axis`` (ONNX's own: 1,
    ``(N, C, ...)``; hwgen's ``batchnorm`` of a GEMM's ``[N, H*W, C]`` rows: 2), operation
    for operation and dtype for dtype as ONNX's reference (``s * (x - mean) / sqrt(var +
    epsilon) + bias``): float32 parameters keep ``sqrt(var + epsilon)`` in float32, as
    there."""
    shape = (-1,) + (1,) * (x.ndim - 1 - axis)
    scale, bias, mean, var = (np.asarray(v).reshape(shape) for v in (scale, bias, mean, var))
    return scale * (x - mean) / np.sqrt(var + epsilon) + bias


@implements("BatchNormalization")
def _batch_normalization(ctx: Ctx, x, scale, bias, mean, var):
    y = batch_normalization(x, scale, bias, mean, var, ctx.attrs["epsilon"])
    return (y.astype(np.float64 if ctx.float64 else np.float32),)


@implements("batchnorm")
@on_real
def _batch_normalization_axis(ctx: Ctx, x, scale, bias, mean, var):
    return batch_normalization(x, scale, bias, mean, var, ctx.attrs["epsilon"],
                               ctx.attrs["axis"] % x.ndim)


@implements("QLinearSoftmax")
def _qlinear_softmax(ctx: Ctx, x, x_scale, x_zp, y_scale, y_zp=None):
    # Q(Softmax(DQ(x))) in float64, rounded half to even as QuantizeLinear does; before opset
    # 13 Softmax coerced the input to 2-D at axis and normalized over all the trailing axes
    axis = ctx.attrs["axis"] % max(x.ndim, 1)
    x_zp = 0 if x_zp is None else int(x_zp.ravel()[0])
    real = (x.astype(np.float64) - x_zp) * np.float64(x_scale.ravel()[0])
    if ctx.attrs["opset"] < 13:
        flat = real.reshape(int(np.prod(x.shape[:axis])), -1)
        value = softmax(flat, 1, np.float64).reshape(x.shape)
    else:
        value = softmax(real, axis, np.float64)
    q = np.rint(value / np.float64(y_scale.ravel()[0])) + (0 if y_zp is None else
                                                           int(y_zp.ravel()[0]))
    info = np.iinfo(ctx.outputs[0].dtype)
    return (np.clip(q, info.min, info.max).astype(ctx.outputs[0].dtype),)


@implements("Concat")
def _concat(ctx: Ctx, *values):
    return (np.concatenate([v for v in values if v is not None], axis=ctx.attrs["axis"]),)


@implements("Pad")
def _pad(ctx: Ctx, x, pads, constant_value=None, axes=None):
    rank = x.ndim
    chosen = (list(range(rank)) if axes is None else
              [int(a) % rank for a in np.asarray(axes).ravel()])
    amounts = [int(p) for p in np.asarray(pads).ravel()]
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(chosen):
        begin[a], end[a] = amounts[i], amounts[len(chosen) + i]
    # negative pads crop first; np.pad then adds the positive ones
    crop = tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0))
                 for i, (b, e) in enumerate(zip(begin, end, strict=True)))
    x = x[crop]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end, strict=True)]
    mode = ctx.attrs["mode"]
    if mode == "constant":
        fill = 0 if constant_value is None else np.asarray(constant_value).ravel()[0]
        return (np.pad(x, widths, mode="constant", constant_values=fill),)
    return (np.pad(x, widths, mode={"edge": "edge", "reflect": "reflect",
                                    "wrap": "wrap"}[mode]),)


# -- onnxruntime's com.microsoft quantized ops -----------------------------------------------


def _scalar(value: np.ndarray | None, dtype=np.float32):
    return dtype(0) if value is None else np.asarray(value).ravel()[0].astype(dtype)


def _quantize(y: np.ndarray, y_scale, y_zp, dtype) -> np.ndarray:
    """MLAS QuantizeLinear: ``round_half_even(y / scale) + zp``, saturated (float32 steps)."""
    q = np.rint(y.astype(np.float32) / np.float32(_scalar(y_scale)))
    info = np.iinfo(dtype)
    return np.clip(q + np.float32(_scalar(y_zp, np.int32)), info.min, info.max).astype(dtype)


def lookup_table(fn, x_scale, x_zp, y_scale, y_zp, dtype) -> np.ndarray:
    """onnxruntime's ``QlinearBuildLookupTable``: ``Q(fn(DQ(v)))`` for every 8-bit ``v``,
    indexed by ``v`` (for int8, by ``v + 128``)."""
    info = np.iinfo(dtype)
    values = np.arange(info.min, info.max + 1, dtype=np.int32)
    real = np.float32(_scalar(x_scale)) * (values - _scalar(x_zp, np.int32)).astype(np.float32)
    return _quantize(fn(real.astype(np.float32)), y_scale, y_zp, dtype)


def _apply_table(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    offset = -int(np.iinfo(x.dtype).min)
    return table[x.astype(np.int32) + offset]


def _sigmoid_f32(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return (np.float32(1) / (np.float32(1) + np.exp(-x))).astype(np.float32)


@implements("QLinearSigmoid")
def _qlinear_sigmoid(ctx: Ctx, x, x_scale, x_zp=None, y_scale=None, y_zp=None):
    return (_apply_table(x, lookup_table(_sigmoid_f32, x_scale, x_zp, y_scale, y_zp,
                                         x.dtype)),)


@implements("QLinearLeakyRelu")
def _qlinear_leaky_relu(ctx: Ctx, x, x_scale, x_zp=None, y_scale=None, y_zp=None):
    alpha = np.float32(ctx.attrs["alpha"])

    def leaky(v: np.ndarray) -> np.ndarray:
        return np.where(v >= 0, v, v * alpha).astype(np.float32)

    return (_apply_table(x, lookup_table(leaky, x_scale, x_zp, y_scale, y_zp, x.dtype)),)


@implements("QLinearMul")
def _qlinear_mul(ctx: Ctx, a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp=None):
    # MLAS QLinearMul: the integer product (exact in float32: |a*b| <= 255*255) times the
    # float32 ratio a_scale * b_scale / c_scale, plus C's zero point, rounded half to even.
    ratio = np.float32(np.float32(_scalar(a_scale)) * np.float32(_scalar(b_scale))
                       / np.float32(_scalar(c_scale)))
    product = ((a.astype(np.int32) - _scalar(a_zp, np.int32)) *
               (b.astype(np.int32) - _scalar(b_zp, np.int32))).astype(np.float32)
    real = ratio * product + np.float32(_scalar(c_zp, np.int32))
    info = np.iinfo(a.dtype)
    return (np.clip(np.rint(real), info.min, info.max).astype(a.dtype),)


@implements("QLinearConcat")
def _qlinear_concat(ctx: Ctx, y_scale, y_zp, *triples):
    parts = []
    for i in range(0, len(triples), 3):
        x, xs, xz = triples[i:i + 3]
        if x is None:
            continue
        if _scalar(xs) == _scalar(y_scale) and _scalar(xz, np.int32) == _scalar(y_zp, np.int32):
            parts.append(x)  # onnxruntime copies an input quantized as the output
            continue
        table = lookup_table(lambda v: v, xs, xz, y_scale, y_zp, x.dtype)
        parts.append(_apply_table(x, table))
    return (np.concatenate(parts, axis=ctx.attrs["axis"]),)
