"""Implementations of the ONNX-semantics ops, as the ONNX spec and ``onnx.reference`` define them.

The arithmetic mirrors ``onnx.reference`` (same dtypes at each step), so that imported graphs
agree with it exactly for integer outputs. Scales and zero points are read from the input
values, as in ONNX; the tensors' Quant is only an annotation here.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from fusion.ir import windows as _windows
from fusion.reference.registry import Ctx, implements


def _per_axis(value: np.ndarray | None, shape: tuple[int, ...], axis: int, block: int = 0):
    """A Q/DQ scale or zero point shaped to broadcast against ``shape`` (ONNX's reshape_input)."""
    if value is None or value.ndim == 0:
        return value
    if value.size == 1:
        return value.reshape(())
    axis %= len(shape)
    if block:
        value = np.repeat(value, block, axis=axis).take(range(shape[axis]), axis=axis)
        return value
    dims = [1] * len(shape)
    dims[axis] = value.size
    return value.reshape(dims)


@implements("QuantizeLinear")
def _quantize_linear(ctx: Ctx, x, scale, zp=None):
    a = ctx.attrs
    scale = _per_axis(scale, x.shape, a["axis"], a["block_size"])
    # Clipped before the integer cast, which is undefined for huge or infinite values.
    q = np.clip(np.rint(x / scale), -(2.0**40), 2.0**40).astype(np.int64)
    if zp is not None:
        q = q + _per_axis(zp, x.shape, a["axis"], a["block_size"])
    info = np.iinfo(ctx.outputs[0].dtype)
    return (np.clip(q, info.min, info.max),)


@implements("DequantizeLinear")
def _dequantize_linear(ctx: Ctx, x, scale, zp=None):
    # float32 as ONNX declares it; in float64 for executor.run(float64=True), where
    # (x - zp) * scale of 8-bit values and a float32 scale is exact.
    a = ctx.attrs
    real = np.float64 if ctx.float64 else np.float32
    dx = x.astype(real)
    if zp is not None:
        dx = dx - _per_axis(zp, x.shape, a["axis"], a["block_size"])
    return (dx * _per_axis(scale, x.shape, a["axis"], a["block_size"]).astype(real),)


@implements("MatMul")
def _matmul(ctx: Ctx, a, b):
    return (np.matmul(a, b),)


@implements("Gemm")
def _gemm(ctx: Ctx, a, b, c=None):
    at = ctx.attrs
    a = a.T if at["transA"] else a
    b = b.T if at["transB"] else b
    out = np.dot(a, b) * at["alpha"]
    if c is not None and at["beta"] != 0:
        out = out + c * at["beta"]
    return (out,)


def _conv(ctx: Ctx, x, w, fill=0, acc=np.int64):
    a = ctx.attrs
    return _windows.conv2d(x, w, group=a["group"], strides=a["strides"],
                           dilations=a["dilations"], pads=a["pads"], fill=fill,
                           auto_pad=a["auto_pad"], acc=acc)


@implements("Conv")
def _conv_float(ctx: Ctx, x, w, b=None):
    out = _conv(ctx, x, w, acc=np.float64)
    if b is not None:
        out = out + b.reshape(1, -1, 1, 1)
    return (out,)


@implements("Add")
def _add(ctx: Ctx, a, b):
    return (np.add(a, b),)  # same dtype; integer addition wraps, as in onnx.reference


@implements("Sum")
def _sum(ctx: Ctx, *values):
    present = [v for v in values if v is not None]
    total = present[0]
    for v in present[1:]:
        total = np.add(total, v)  # in input order, as onnx.reference sums
    return (total,)


@implements("Relu")
def _relu(ctx: Ctx, x):
    return (np.maximum(x, np.zeros((), x.dtype)),)


@implements("Clip")
def _clip(ctx: Ctx, x, lo=None, hi=None):
    out = x
    if lo is not None:
        out = np.maximum(out, lo)
    if hi is not None:
        out = np.minimum(out, hi)  # min > max gives max, as np.clip does
    return (out,)


@implements("MaxPool")
def _maxpool(ctx: Ctx, x):
    a = ctx.attrs
    return (_windows.maxpool(x, a["kernel_shape"], a["strides"], a["dilations"], a["pads"],
                             a["auto_pad"], a["ceil_mode"]),)


@implements("Flatten", "Reshape")
def _reshape(ctx: Ctx, x, shape=None):
    return (x.reshape(ctx.outputs[0].shape),)


@implements("Transpose")
def _transpose(ctx: Ctx, x):
    return (np.transpose(x, ctx.attrs["perm"]),)


@implements("Identity")
def _identity(ctx: Ctx, x):
    return (x,)


def _minus(x: np.ndarray, zp: np.ndarray | None, axis: int | None = None) -> np.ndarray:
    """``x - zp`` in int64; a 1-D ``zp`` runs along ``axis`` of x."""
    x = x.astype(np.int64)
    if zp is None:
        return x
    zp = zp.astype(np.int64)
    if zp.ndim == 1 and zp.size > 1 and axis is not None:
        dims = [1] * x.ndim
        dims[axis % x.ndim] = zp.size
        zp = zp.reshape(dims)
    return x - zp


def _requantize(acc: np.ndarray, multiplier: np.ndarray, zp: np.ndarray, dtype) -> np.ndarray:
    # onnx.reference: int32 accumulator times the float scale ratio, round half to even.
    out = acc.astype(np.int32) * multiplier + zp
    info = np.iinfo(dtype)
    return np.clip(np.rint(out), info.min, info.max)


@implements("QLinearMatMul")
def _qlinear_matmul(ctx: Ctx, a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp):
    acc = np.matmul(_minus(a, a_zp, -2), _minus(b, b_zp, -1))
    return (_requantize(acc, a_scale * b_scale / y_scale, y_zp, y_zp.dtype),)


@implements("QLinearConv")
def _qlinear_conv(ctx: Ctx, x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias=None):
    acc = _conv(ctx, _minus(x, x_zp), _minus(w, w_zp, 0))
    if bias is not None:
        acc = acc + bias.astype(np.int64).reshape(1, -1, 1, 1)
    if w_scale.size > 1:
        w_scale = w_scale.reshape(1, -1, 1, 1)
    return (_requantize(acc, x_scale * w_scale / y_scale, y_zp, y_zp.dtype),)


@implements("MatMulInteger")
def _matmul_integer(ctx: Ctx, a, b, a_zp=None, b_zp=None):
    # A 1-D a_zero_point is per row of A (axis -2), a 1-D b_zero_point per column of B.
    return (np.matmul(_minus(a, a_zp, -2), _minus(b, b_zp, -1)).astype(np.int32),)


@implements("ConvInteger")
def _conv_integer(ctx: Ctx, x, w, x_zp=None, w_zp=None):
    return (_conv(ctx, _minus(x, x_zp), _minus(w, w_zp, 0)).astype(np.int32),)


# -- pooling and onnxruntime's com.microsoft quantized ops ----------------------------------


def _avgpool_float(ctx: Ctx, x: np.ndarray) -> np.ndarray:
    a = ctx.attrs
    return _windows.avgpool(x, a["kernel_shape"], a["strides"], a["dilations"], a["pads"],
                            a["auto_pad"], a["ceil_mode"], a["count_include_pad"])


def _global_mean(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64).mean(axis=tuple(range(2, x.ndim)), keepdims=True)


@implements("AveragePool")
def _avgpool(ctx: Ctx, x):
    return (_avgpool_float(ctx, x).astype(x.dtype),)


@implements("GlobalAveragePool")
def _global_avgpool(ctx: Ctx, x):
    return (_global_mean(x).astype(x.dtype),)


def _q(real: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, dtype) -> np.ndarray:
    """Per-tensor quantize of float32 ``real`` (round half to even, saturate)."""
    q = np.rint(np.float32(real) / np.float32(scale.ravel()[0]))
    if zp is not None:
        q = q + int(zp.ravel()[0])
    info = np.iinfo(dtype)
    return np.clip(q, info.min, info.max).astype(dtype)


def quantize_quotient(sums: np.ndarray, counts: np.ndarray, x_scale, y_scale, y_zp,
                      dtype) -> np.ndarray:
    """``Q(x_scale * sums / counts)`` to ``y_scale``/``y_zp`` computed exactly: the real value
    ``sums * x_scale / (counts * y_scale)`` (the float32 scales are exact binary fractions)
    rounded half to even, plus the zero point, saturated to ``dtype``.

    This is ``QuantizeLinear(AveragePool(DequantizeLinear(x)))`` in real numbers. Float
    arithmetic (onnxruntime's QLinear pools add the zero point before rounding, and divide in
    float32) rounds an exact half by the parity of ``value + zero point`` or by float32 noise:
    an exact -73.5 becomes -73 with an odd zero point, where round half to even gives -74.
    """
    ratio = Fraction(float(np.float32(np.asarray(x_scale).ravel()[0]))) / Fraction(
        float(np.float32(np.asarray(y_scale).ravel()[0])))
    num = sums.astype(np.int64).astype(object) * ratio.numerator
    den = np.broadcast_to(counts.astype(np.int64).astype(object) * ratio.denominator,
                          num.shape)
    # den > 0: counts are at least 1 and Fraction keeps the sign in the numerator.
    floor, rem = num // den, num % den
    twice = 2 * rem
    up = (twice > den) | ((twice == den) & (floor % 2 == 1))
    q = np.asarray(floor + up.astype(np.int64), np.int64)
    if y_zp is not None:
        q = q + int(np.asarray(y_zp).ravel()[0])
    info = np.iinfo(dtype)
    return np.clip(q, info.min, info.max).astype(dtype)


@implements("QLinearAveragePool")
def _qlinear_avgpool(ctx: Ctx, x, x_scale, x_zp=None, y_scale=None, y_zp=None):
    # The integer window sums of x - x_zp (padding adds 0) over each window's divisor,
    # quantized exactly (round half to even on the exact quotient).
    a = ctx.attrs
    sums, counts = _windows.window_sums(_minus(x, x_zp), a["kernel_shape"], a["strides"],
                                        a["dilations"], a["pads"], a["auto_pad"],
                                        a["ceil_mode"], a["count_include_pad"], np.int64)
    return (quantize_quotient(sums, counts, x_scale, y_scale, y_zp, x.dtype),)


@implements("QLinearGlobalAveragePool")
def _qlinear_global_avgpool(ctx: Ctx, x, x_scale, x_zp=None, y_scale=None, y_zp=None):
    count = np.int64(np.prod(x.shape[2:]))
    sums = _minus(x, x_zp).sum(axis=tuple(range(2, x.ndim)), keepdims=True)
    return (quantize_quotient(sums, count, x_scale, y_scale, y_zp, x.dtype),)


@implements("QLinearAdd")
def _qlinear_add(ctx: Ctx, a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp=None):
    # onnxruntime (MlasQLinearAdd): each input times its scale ratio to C in float32, plus
    # C's zero point, then rounded half to even (the zero point is added before rounding).
    c = np.float32(c_scale.ravel()[0])
    real = (_minus(a, a_zp).astype(np.float32) * (np.float32(a_scale.ravel()[0]) / c)
            + _minus(b, b_zp).astype(np.float32) * (np.float32(b_scale.ravel()[0]) / c))
    if c_zp is not None:
        real = real + np.float32(c_zp.ravel()[0])
    return (_q(real, np.ones(1, np.float32), None, a.dtype),)


@implements("QGemm")
def _qgemm(ctx: Ctx, a, a_scale, a_zp, b, b_scale, b_zp, c=None, y_scale=None, y_zp=None):
    at = ctx.attrs
    a = a.T if at["transA"] else a
    b = b.T if at["transB"] else b
    if b_zp is not None and b_zp.size > 1:
        b_zp = b_zp.reshape(1, -1)
    acc = np.matmul(_minus(a, a_zp), _minus(b, b_zp))
    if c is not None:
        acc = acc + c.astype(np.int64)
    scale = (np.float32(at["alpha"]) * np.float32(a_scale.ravel()[0]) *
             b_scale.astype(np.float32).reshape(1, -1))
    if y_scale is None:
        return ((acc.astype(np.int32).astype(np.float32) * scale).astype(np.float32),)
    return (_requantize(acc, scale / np.float32(y_scale.ravel()[0]), y_zp, y_zp.dtype)
            .astype(y_zp.dtype),)
