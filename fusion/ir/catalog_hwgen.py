"""Catalog entries of hwgen's integer-domain ops (registered into :mod:`fusion.ir.registry`).

Their exact semantics are documented in :mod:`fusion.ir.ops` and implemented by
:mod:`fusion.reference.executor`.
"""

from __future__ import annotations

from fusion.ir import shapes
from fusion.ir.catalog_onnx_host import MAX_CONCAT_INPUTS, concat_shape
from fusion.ir.registry import INT8S, INT_RANGE, INTS, REQUIRED, Call, TensorType, register

REQ = REQUIRED

_WIN = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1)}


def _int32(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and \
        INT_RANGE["int32"][0] <= value <= INT_RANGE["int32"][1]


def check_requant(c: Call, channels: int | None) -> str:
    """Check the requantize attributes; the output dtype."""
    out, zp = c.attrs["out_dtype"], c.attrs["zp"]
    if out not in INT8S:
        raise c.error(f"out_dtype {out!r} must be int8 or uint8")
    lo, hi = INT_RANGE[out]
    if not isinstance(zp, int) or not lo <= zp <= hi:
        raise c.error(f"zero point {zp!r} is out of range for {out} ({lo}..{hi}); "
                      f"give a zero point in that range")
    mult, shift = c.attrs["mult"], c.attrs["shift"]
    per_channel = isinstance(mult, tuple)
    if per_channel != isinstance(shift, tuple):
        raise c.error("mult and shift must both be ints (per tensor) or both tuples "
                      "(per channel)")
    mults, shifts = (mult, shift) if per_channel else ((mult,), (shift,))
    if per_channel and (channels is None or len(mults) != channels or len(shifts) != channels):
        raise c.error(f"per-channel mult/shift need one value per channel along the axis "
                      f"({channels}), not {len(mults)} and {len(shifts)}")
    for m, s in zip(mults, shifts, strict=True):
        if not _int32(m):
            raise c.error(f"mult {m!r} must be a signed 32-bit integer "
                          f"(use fusion.ir.ops.requant_attrs to convert a float scale)")
        if not isinstance(s, int) or not 0 <= s <= 63:
            raise c.error(f"shift {s!r} must be an integer from 0 to 63")
    return out


def _window_attrs(c: Call, x_shape: tuple[int, ...], kernel: tuple[int, ...], ceil: int = 0,
                  crop: bool = False):
    """The window's output size; with ``crop``, negative end pads crop the input
    (:func:`fusion.ir.shapes.crop_ends`)."""
    if len(x_shape) != 4:
        raise c.error(f"input must be 4-D NCHW, not {x_shape}")
    if len(kernel) != 2:
        raise c.error(f"kernel_shape must have 2 entries, not {kernel}")
    spatial, pads = x_shape[2:], c.attrs["pads"]
    if crop and isinstance(pads, tuple | list) and any(
            isinstance(p, int) and p < 0 for p in pads):
        spatial, pads = shapes.crop_ends(spatial, pads)
    out, _, _ = shapes.window(spatial, kernel, c.attrs["strides"], c.attrs["dilations"], pads,
                              "NOTSET", ceil)
    return out


@register("qmatmul", "a b", weights="b", group=1, asked=1,
          summary="(a - a_zp) @ (b - b_zp) -> int32; asked=0: the model asks for none of "
                  "its multiply-accumulates (a channel permutation the compiler made, "
                  "fusion.passes.channel_shuffle), so utilization does not count them")
def _qmatmul(c: Call):
    a, b = c.need("a", INT8S), c.need("b", INT8S)
    group = c.attrs["group"]
    if not isinstance(group, int) or isinstance(group, bool) or group < 1 or (
            len(b.shape) == 2 and (b.shape[0] % group or b.shape[1] % group)):
        raise c.error(f"group {group!r} must be a positive integer dividing both dimensions "
                      f"of the weight {b.shape}")
    if b.quant is not None and b.quant.per_channel and \
            shapes.axis(b.quant.axis, len(b.shape)) != len(b.shape) - 1:
        raise c.error(f"b's per-channel quantization must be along its last axis (output "
                      f"channels), not axis {b.quant.axis}")
    if a.quant is not None and a.quant.per_channel:
        raise c.error("a must be quantized per tensor")
    return (TensorType(shapes.matmul(a.shape, b.shape), "int32"),)


@register("qconv2d", "x w", weights="w", group=1, **_WIN,
     summary="NCHW conv of (x - x_zp) and (w - w_zp) -> int32")
def _qconv2d(c: Call):
    x, w = c.need("x", INT8S), c.need("w", INT8S)
    if len(w.shape) != 4:
        raise c.error(f"weights must be 4-D (M x C/group x kH x kW), not {w.shape}")
    group = c.attrs["group"]
    if not isinstance(group, int) or group < 1:
        raise c.error(f"group {group!r} must be a positive integer")
    if len(x.shape) == 4 and (x.shape[1] % group or w.shape[0] % group
                              or x.shape[1] // group != w.shape[1]):
        raise c.error(f"input channels {x.shape[1]}, weight shape {w.shape} and group {group} "
                      f"do not agree: group must divide the input and output channels and the "
                      f"weights be M x C/group x kH x kW")
    if w.quant is not None and w.quant.per_channel and shapes.axis(w.quant.axis, 4) != 0:
        raise c.error(f"w's per-channel quantization must be along axis 0, not {w.quant.axis}")
    out = _window_attrs(c, x.shape, w.shape[2:])
    return (TensorType((x.shape[0], w.shape[0], *out), "int32"),)


@register("bias_add", "x bias", const="bias", axis=-1, summary="sat32(x + bias along axis)")
def _bias_add(c: Call):
    x, b = c.need("x", ("int32",)), c.need("bias", ("int32",))
    ax = shapes.axis(c.attrs["axis"], len(x.shape))
    if b.shape != (x.shape[ax],):
        raise c.error(f"bias must have shape ({x.shape[ax]},) to run along axis {ax} of "
                      f"{x.shape}, not {b.shape}")
    return (TensorType(x.shape, "int32"),)


@register("requant", "x", mult=REQ, shift=REQ, zp=0, axis=-1, out_dtype="int8", round_even=0,
     summary="sat(((x * mult + round) >> shift) + zp), per tensor or per channel")
def _requant(c: Call):
    x = c.need("x", ("int32",))
    if c.attrs["round_even"] not in (0, 1):
        raise c.error(f"round_even {c.attrs['round_even']!r} must be 0 (halves toward +inf) "
                      f"or 1 (halves to even)")
    ax = shapes.axis(c.attrs["axis"], max(len(x.shape), 1))
    return (TensorType(x.shape, check_requant(c, x.shape[ax] if x.shape else 1)),)


@register("relu", "x", summary="max(x, 0)")
def _hw_relu(c: Call):
    x = c.need("x", INTS)
    return (TensorType(x.shape, x.dtype),)


@register("clamp", "x", lo=REQ, hi=REQ, summary="min(max(x, lo), hi)")
def _clamp(c: Call):
    x = c.need("x", INTS)
    lo, hi = c.attrs["lo"], c.attrs["hi"]
    if not (isinstance(lo, int) and isinstance(hi, int)) or lo > hi:
        raise c.error(f"lo ({lo!r}) and hi ({hi!r}) must be integers with lo <= hi")
    return (TensorType(x.shape, x.dtype),)


@register("add_wrap", "x c", const="c",
          summary="x + c modulo 256 (int8/uint8; c a constant along the last axis)")
def _add_wrap(c: Call):
    x = c.need("x", INT8S)
    c.same("x", "c")
    want = (x.shape[-1],) if x.shape else (1,)
    if c.tensor("c").shape != want:
        raise c.error(f"c must have shape {want} (one value per element of the last axis), "
                      f"not {c.tensor('c').shape}")
    return (TensorType(x.shape, x.dtype),)


@register("emax", "x c", const="c",
          summary="max(x, c) element by element (int8/uint8; c a constant of x's shape)")
def _emax(c: Call):
    x = c.need("x", INT8S)
    c.same("x", "c")
    if c.tensor("c").shape != x.shape:
        raise c.error(f"c must have x's shape {x.shape}, not {c.tensor('c').shape}")
    return (TensorType(x.shape, x.dtype),)


def _int8_out(c: Call) -> str:
    """Check ``out_dtype`` (int8 or uint8) and ``zp`` (in its range); the output dtype."""
    out, zp = c.attrs["out_dtype"], c.attrs["zp"]
    if out not in INT8S:
        raise c.error(f"out_dtype {out!r} must be int8 or uint8")
    lo, hi = INT_RANGE[out]
    if not isinstance(zp, int) or isinstance(zp, bool) or not lo <= zp <= hi:
        raise c.error(f"zero point {zp!r} is out of range for {out} ({lo}..{hi}); "
                      f"give a zero point in that range")
    return out


@register("qadd", "a b", a_mult=REQ, b_mult=REQ, shift=REQ, zp=0, out_dtype="int8",
     summary="sat(rne(((a - a_zp) * a_mult + (b - b_zp) * b_mult) / 2**shift) + zp)")
def _qadd(c: Call):
    a, b = c.need("a", INT8S), c.need("b", INT8S)
    for t in (a, b):
        if t.quant is not None and t.quant.per_channel:
            raise c.error(f"input {t.name!r} must be quantized per tensor")
    for name in ("a_mult", "b_mult"):
        if not _int32(c.attrs[name]):
            raise c.error(f"{name} {c.attrs[name]!r} must be a signed 32-bit integer; use "
                          f"fusion.ir.ops.qadd_attrs to choose the multipliers from the scales")
    shift = c.attrs["shift"]
    if not isinstance(shift, int) or isinstance(shift, bool) or not 0 <= shift <= 63:
        raise c.error(f"shift {shift!r} must be an integer from 0 to 63")
    return (TensorType(shapes.broadcast(a.shape, b.shape), _int8_out(c)),)


@register("qconcat", " ".join(f"x{i}" for i in range(MAX_CONCAT_INPUTS)), 2, axis=REQ,
          mult=REQ, shift=REQ, zp=0, out_dtype="int8",
          summary="concat along axis of sat(rne((x_i - x_i_zp) * mult_i / 2**shift_i) + zp)")
def _qconcat(c: Call):
    present = [t for t in c.inputs if t is not None]
    for i, t in enumerate(present):
        c.need(f"x{i}", INT8S)
        if t.quant is not None and t.quant.per_channel:
            raise c.error(f"input {t.name!r} must be quantized per tensor")
    mult, shift = c.attrs["mult"], c.attrs["shift"]
    if not (isinstance(mult, tuple) and isinstance(shift, tuple)
            and len(mult) == len(shift) == len(present)):
        raise c.error(f"mult and shift must be tuples of one value per input ({len(present)})")
    for m, s in zip(mult, shift, strict=True):
        if not _int32(m) or m <= 0:
            raise c.error(f"mult {m!r} must be a positive signed 32-bit integer")
        if not isinstance(s, int) or isinstance(s, bool) or not 0 <= s <= 63:
            raise c.error(f"shift {s!r} must be an integer from 0 to 63")
    return (TensorType(concat_shape(c, present, c.attrs["axis"]), _int8_out(c)),)


@register("maxpool", "x", kernel_shape=REQ, ceil_mode=0, **_WIN,
          summary="2-D max pooling, NCHW (a negative end pad crops the input)")
def _hw_maxpool(c: Call):
    x = c.need("x", INTS)
    out = _window_attrs(c, x.shape, tuple(c.attrs["kernel_shape"]), c.attrs["ceil_mode"],
                        crop=True)
    return (TensorType((*x.shape[:2], *out), x.dtype),)


@register("flatten", "x", axis=1, summary="reshape to 2-D at axis")
def _hw_flatten(c: Call):
    x = c.need("x", INTS + ("float32",))
    return (TensorType(shapes.flatten(x.shape, c.attrs["axis"]), x.dtype),)


@register("reshape", "x", shape=REQ, summary="reshape to the shape attribute")
def _hw_reshape(c: Call):
    x = c.need("x", INTS + ("float32",))
    return (TensorType(shapes.reshape(x.shape, c.attrs["shape"]), x.dtype),)


@register("transpose", "x", perm=None, summary="permute axes")
def _hw_transpose(c: Call):
    x = c.need("x", INTS + ("float32",))
    return (TensorType(shapes.transpose(x.shape, c.attrs["perm"]), x.dtype),)


#: The most copies ``repeat`` makes: a weight with zero points splits into at most three int8
#: parts (:mod:`fusion.passes.weight_zero_point`); a bound keeps a bad attribute from growing
#: a tensor without limit.
MAX_REPEAT = 8


@register("repeat", "x", times=REQ,
          summary="x repeated `times` times along its last axis (numpy.tile), same Quant")
def _repeat(c: Call):
    x = c.need("x", INTS)
    times = c.attrs["times"]
    if not isinstance(times, int) or isinstance(times, bool) or not 1 <= times <= MAX_REPEAT:
        raise c.error(f"times {times!r} must be an integer from 1 to {MAX_REPEAT}")
    if not x.shape:
        raise c.error("input must have at least one dimension")
    return (TensorType((*x.shape[:-1], x.shape[-1] * times), x.dtype),)


@register("quantize", "x", dtype="int8", summary="float32 -> int8/uint8 with the output's Quant")
def _quantize(c: Call):
    x = c.need("x", ("float32",))
    if c.attrs["dtype"] not in INT8S:
        raise c.error(f"dtype {c.attrs['dtype']!r} must be int8 or uint8")
    return (TensorType(x.shape, c.attrs["dtype"]),)


@register("dequantize", "x", summary="(x - zp) * scale with the input's Quant -> float32")
def _dequantize(c: Call):
    x = c.need("x", INT8S + ("int32",))
    return (TensorType(x.shape, "float32"),)


@register("im2col", "x", kernel_shape=REQ, **_WIN, spatial=(), cropped=0,
     summary="NCHW -> [N, OH*OW, C*kH*kW] windows, padded with x's zero point; with "
             "spatial=(H, W), x is the [N, H*W, C] rows of the pixels instead; cropped: "
             "the last output columns, computed for whole blocks, that the reader crops")
def _im2col(c: Call):
    x = c.need("x", INT8S)
    kernel = tuple(c.attrs["kernel_shape"])
    cropped = c.attrs["cropped"]
    if not isinstance(cropped, int) or isinstance(cropped, bool) or cropped < 0:
        raise c.error(f"cropped {cropped!r} must be a whole number of output columns")
    spatial = tuple(c.attrs["spatial"])
    if spatial:  # the rows of a GEMM's output: [N, H*W, C]
        if len(spatial) != 2 or len(x.shape) != 3 or spatial[0] * spatial[1] != x.shape[1] \
                or min(spatial) < 1:
            raise c.error(f"spatial {spatial} does not lay out the [N, H*W, C] rows {x.shape}")
        nchw = (x.shape[0], x.shape[2], *spatial)
    else:
        nchw = x.shape
    out = _window_attrs(c, nchw, kernel)
    if cropped >= out[1]:
        raise c.error(f"cropped {cropped} leaves none of the {out[1]} output columns")
    return (TensorType((nchw[0], out[0] * out[1], nchw[1] * kernel[0] * kernel[1]),
                       x.dtype),)
