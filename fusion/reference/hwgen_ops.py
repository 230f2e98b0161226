"""Implementations of hwgen's integer ops, bit-exact with the hardware.

Every one of them calls :mod:`hwgen.reference` (requantize, int32 bias saturation, relu, clamp,
the int32 GEMM wrap), so the executor, the shadow check and the kernel builders share one
implementation. Their semantics are documented in :mod:`fusion.ir.ops`.
"""

from __future__ import annotations

import numpy as np

from fusion.ir import ops
from fusion.ir import windows as _windows
from fusion.ir.graph import Tensor
from fusion.reference.registry import Ctx, implements
from hwgen import reference as ref
from hwgen.lanes import requantize_unsaturated, residual_scaled

# -- quantization parameters of tensors ------------------------------------------------------


def zero_point(tensor: Tensor | None, rank: int | None = None) -> np.ndarray:
    """The zero point of ``tensor`` as int64, shaped to broadcast against it (0 without Quant)."""
    q = None if tensor is None else tensor.quant
    if q is None:
        return np.int64(0)
    zp = np.array(q.zero_point, dtype=np.int64)
    if q.axis is None:
        return zp.reshape(())
    rank = len(tensor.shape) if rank is None else rank
    dims = [1] * rank
    dims[q.axis % rank] = zp.size
    return zp.reshape(dims)


def scale(tensor: Tensor) -> np.ndarray:
    """The scale of ``tensor`` as float32, shaped to broadcast against it."""
    q = tensor.quant
    s = np.array(q.scale, dtype=np.float32)
    if q.axis is None:
        return s.reshape(())
    dims = [1] * len(tensor.shape)
    dims[q.axis % len(tensor.shape)] = s.size
    return s.reshape(dims)


# -- hwgen integer ops -------------------------------------------------------------------------


@implements("qmatmul")
def _qmatmul(ctx: Ctx, a, b):
    a64 = a.astype(np.int64) - zero_point(ctx.inputs[0])
    b64 = b.astype(np.int64) - zero_point(ctx.inputs[1])
    if a64.ndim == 2 and b64.ndim == 2:
        return (ref.gemm(a64, b64),)
    return (np.matmul(a64, b64).astype(np.int32),)  # exact in int64, wrapped like ref.gemm


@implements("qconv2d")
def _qconv2d(ctx: Ctx, x, w):
    a = ctx.attrs
    xzp = zero_point(ctx.inputs[0])
    if xzp.ndim:
        raise ctx.error("x must be quantized per tensor")
    w64 = w.astype(np.int64) - zero_point(ctx.inputs[1])
    # Padding with x's zero point makes it contribute (zp - zp) * w = 0, as in ONNX.
    acc = _windows.conv2d(x.astype(np.int64) - xzp, w64, group=a["group"],
                          strides=a["strides"], dilations=a["dilations"], pads=a["pads"], fill=0)
    return (acc.astype(np.int32),)


@implements("bias_add")
def _bias_add(ctx: Ctx, x, bias):
    moved = np.moveaxis(x, ctx.attrs["axis"], -1)
    return (np.moveaxis(ref.bias_add(moved, bias), -1, ctx.attrs["axis"]),)


def requant(x: np.ndarray, mult, shift, zp: int, out_dtype: str, axis: int = -1,
            round_even: bool = False, *, saturate: bool = True) -> np.ndarray:
    """The ``requant`` op on int32 values (see :mod:`fusion.ir.ops`), per tensor or per channel.

    uint8 runs the int8 requantize with ``zp - 128`` and adds 128 (the hardware's sign-bit
    flip): ``sat_u8(y + zp) == sat_s8(y + zp - 128) + 128`` for every integer ``y``. Without
    ``saturate``, the values before the clamp (int64; outside ``out_dtype``'s range where
    the clamp saturates them).
    """
    offset = 128 if out_dtype == "uint8" else 0
    fn = ref.requantize if saturate else requantize_unsaturated
    if not isinstance(mult, tuple):
        out = fn(x, mult, shift, zp - offset, round_even=round_even)
    else:
        moved = np.moveaxis(np.asarray(x), axis, 0)
        out = np.stack([fn(moved[c], m, s, zp - offset, round_even=round_even)
                        for c, (m, s) in enumerate(zip(mult, shift, strict=True))])
        out = np.moveaxis(out, 0, axis)
    return (out + offset).astype(out_dtype) if saturate else out + offset


@implements("requant")
def _requant(ctx: Ctx, x):
    a = ctx.attrs
    return (requant(x, a["mult"], a["shift"], a["zp"], a["out_dtype"], a["axis"],
                    bool(a["round_even"])),)


@implements("relu")
def _relu(ctx: Ctx, x):
    return (ref.relu(x),)


@implements("clamp")
def _clamp(ctx: Ctx, x):
    return (ref.clamp(x, ctx.attrs["lo"], ctx.attrs["hi"]),)


@implements("add_wrap")
def _add_wrap(ctx: Ctx, x, c):
    return (np.add(x, c.astype(x.dtype)),)  # same dtype: wraps modulo 256, as ONNX's Add


@implements("emax")
def _emax(ctx: Ctx, x, c):
    return (np.maximum(x, c.astype(x.dtype)),)


@implements("qadd")
def _qadd(ctx: Ctx, a, b):
    at = ctx.attrs
    lo, hi = ops.INT_RANGE[at["out_dtype"]]
    y = residual_scaled(a, b, at["a_mult"], at["b_mult"], at["shift"],
                        zero_point(ctx.inputs[0]), zero_point(ctx.inputs[1]), at["zp"], lo, hi)
    return (y.astype(at["out_dtype"]),)


def qconcat_part(x: np.ndarray, x_zp: int, mult: int, shift: int, zp: int,
                 out_dtype: str) -> np.ndarray:
    """One input of a ``qconcat`` in the output's quantization (see :mod:`fusion.ir.ops`)."""
    return requant(np.asarray(x, np.int64) - x_zp, mult, shift, zp, out_dtype, round_even=True)


@implements("qconcat")
def _qconcat(ctx: Ctx, *xs):
    a = ctx.attrs
    present = [(x, t) for x, t in zip(xs, ctx.inputs, strict=False) if x is not None]
    parts = [qconcat_part(x, int(zero_point(t)), m, s, a["zp"], a["out_dtype"])
             for (x, t), m, s in zip(present, a["mult"], a["shift"], strict=True)]
    return (np.concatenate(parts, axis=a["axis"]),)


@implements("maxpool")
def _maxpool(ctx: Ctx, x):
    a = ctx.attrs
    return (_windows.maxpool(x, a["kernel_shape"], a["strides"], a["dilations"], a["pads"],
                             ceil_mode=a["ceil_mode"]),)


@implements("flatten")
def _flatten(ctx: Ctx, x):
    return (x.reshape(ctx.outputs[0].shape),)


@implements("reshape")
def _reshape(ctx: Ctx, x):
    return (x.reshape(ctx.outputs[0].shape),)


@implements("transpose")
def _transpose(ctx: Ctx, x):
    return (np.transpose(x, ctx.attrs["perm"]),)


@implements("repeat")
def _repeat(ctx: Ctx, x):
    return (np.tile(x, (1,) * (x.ndim - 1) + (ctx.attrs["times"],)),)


@implements("quantize")
def _quantize(ctx: Ctx, x):
    return (quantized(ctx, x),)


def quantized(ctx: Ctx, x: np.ndarray) -> np.ndarray:
    """``x`` quantized to ``ctx``'s output with its Quant, as ONNX QuantizeLinear: float32
    division (float64 with ``ctx.float64``), round half to even, saturate."""
    out = ctx.outputs[0]
    if out.quant is None:
        raise ctx.error(f"its output {out.name!r} has no quantization; give it a Quant")
    lo, hi = ops.INT_RANGE[out.dtype]
    q = np.rint(x.astype(np.float64 if ctx.float64 else np.float32) / scale(out))
    q = np.clip(q, -(2.0**40), 2.0**40).astype(np.int64) + zero_point(out)  # cast-safe
    return np.clip(q, lo, hi)


@implements("dequantize")
def _dequantize(ctx: Ctx, x):
    return (dequantized(ctx, x),)


def dequantized(ctx: Ctx, x: np.ndarray) -> np.ndarray:
    """``x``, ``ctx``'s first input, dequantized with its Quant, as ONNX DequantizeLinear
    (float32, float64 with ``ctx.float64``)."""
    t = ctx.inputs[0]
    if t.quant is None:
        raise ctx.error(f"its input {t.name!r} has no quantization; give it a Quant")
    real = np.float64 if ctx.float64 else np.float32  # as DequantizeLinear (onnx_ops)
    return (x.astype(real) - zero_point(t).astype(real)) * scale(t).astype(real)


@implements("im2col")
def _im2col(ctx: Ctx, x):
    a = ctx.attrs
    fill = zero_point(ctx.inputs[0])
    if fill.ndim:
        raise ctx.error("x must be quantized per tensor")
    if a.get("spatial"):  # [N, H*W, C] rows -> NCHW
        n, _, ch = x.shape
        x = x.reshape(n, *a["spatial"], ch).transpose(0, 3, 1, 2)
    return (_windows.im2col(x, a["kernel_shape"], a["strides"], a["dilations"], a["pads"],
                            int(fill)),)
