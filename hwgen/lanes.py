"""Bit-exact numpy arithmetic of the epilogue's int32 lanes: the stages' reference functions.

Every function works on integer arrays and is exact: values are widened to int64 where a
32-bit intermediate could overflow, and narrowed with the same saturation the hardware
applies. The stage specs (:mod:`hwgen.stages`) apply them; :mod:`hwgen.reference` re-exports
them.
"""

from __future__ import annotations

import numpy as np

INT8_MIN, INT8_MAX = -(1 << 7), (1 << 7) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def int_array(x: np.ndarray, name: str) -> np.ndarray:
    """``x`` as an int64 array; a ``ValueError`` naming ``name`` if it is not integer."""
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"{name} must be an integer array, not {x.dtype}")
    return x.astype(np.int64)


def sat(x: np.ndarray, bits: int) -> np.ndarray:
    """Saturate to a signed ``bits``-bit range (returned as int64)."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return np.clip(int_array(x, "x"), lo, hi)


def bias_add(x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """``sat32(x + bias)``, the bias broadcast along the last axis (columns)."""
    return sat(int_array(x, "x") + int_array(bias, "bias"), 32)


def requantize(x: np.ndarray, mult: int | np.ndarray, shift: int | np.ndarray,
               zp: int, *, round_even: bool = False) -> np.ndarray:
    """``sat8(round(x * mult / 2**shift) + zp)``, rounding half toward +inf, or with
    ``round_even`` half to even (as ONNX's ``QuantizeLinear`` and onnxruntime's requantize).

    ``mult`` and ``shift`` are scalars (per tensor) or arrays broadcast against ``x`` (per
    channel: one value per column, along the last axis). ``x * mult`` needs 63 bits.
    """
    return sat(requantize_unsaturated(x, mult, shift, zp, round_even=round_even), 8)


def requantize_unsaturated(x: np.ndarray, mult: int | np.ndarray, shift: int | np.ndarray,
                           zp: int, *, round_even: bool = False) -> np.ndarray:
    """:func:`requantize` before its ``sat8`` (int64): what the clamp saturates is outside
    ``[-128, 127]``."""
    p = int_array(x, "x") * np.asarray(mult, np.int64)
    return round_shift(p, shift, even=round_even) + np.int64(zp)


def round_shift(p: np.ndarray, shift: int | np.ndarray, *, even: bool = False) -> np.ndarray:
    """``p / 2**shift`` rounded to the nearest integer, ties toward +inf or (``even``) to
    even; ``shift`` 0 leaves ``p``. ``shift`` is a scalar or an array broadcast against ``p``.

    Done as the truncated quotient plus a carry: the remainder is over half, or exactly half
    and (half up) always or (even) when the quotient is odd. The hardware gets the same carry
    from one addition: ``2**(shift-1)`` for half up; ``2**(shift-1) - 1`` plus bit ``shift``
    of ``p`` (the quotient's parity) for half to even. Works on int64 and on object arrays
    of Python integers (any width).
    """
    p = np.asarray(p)
    if p.dtype == object:
        s = np.asarray(shift, object)
        q = p >> s
        rem = p - (q << s)
        half = np.where(s == 0, 0, 1 << np.maximum(s - 1, 0).astype(object))
    else:
        s = np.asarray(shift, np.int64)
        q = p >> s
        rem = p - (q << s)
        half = np.where(s == 0, 0, np.int64(1) << np.maximum(s - 1, 0))
    tie = (s > 0) & (rem == half)
    carry = (rem > half) & (s > 0) | (tie & ((q & 1) == 1) if even else tie)
    return q + carry.astype(np.int64 if p.dtype != object else object)


def channel_params(mult: np.ndarray | None, shift: np.ndarray | None,
                   n: int) -> tuple[np.ndarray, np.ndarray]:
    """Check per-channel requantize vectors; return them as int64 arrays of length ``n``.

    Raises
    ------
    ValueError
        If either is missing, not ``n`` integers, or out of range (a multiplier must be a
        signed 32-bit integer, a shift 0..63).
    """
    out = []
    for name, value, lo, hi in (("mult", mult, INT32_MIN, INT32_MAX), ("shift", shift, 0, 63)):
        if value is None:
            raise ValueError(f"per-channel requantize needs a {name} vector of {n} values "
                             f"(one per output column); pass {name}=")
        v = np.asarray(value)
        if v.shape != (n,) or not np.issubdtype(v.dtype, np.integer):
            raise ValueError(f"the per-channel {name} must be {n} integers (one per output "
                             f"column), not a {v.dtype} array of shape {v.shape}")
        if v.size and (v.min() < lo or v.max() > hi):
            raise ValueError(f"the per-channel {name} has values outside {lo}..{hi} "
                             f"({int(v.min())}..{int(v.max())})")
        out.append(v.astype(np.int64))
    return out[0], out[1]


def relu(x: np.ndarray) -> np.ndarray:
    """``max(x, 0)``."""
    return np.maximum(int_array(x, "x"), 0)


def clamp(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``min(max(x, lo), hi)``."""
    return np.minimum(np.maximum(int_array(x, "x"), np.int64(lo)), np.int64(hi))


def residual_add(x: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """``sat8(x + residual)`` with an int8 residual of the same shape."""
    return sat(int_array(x, "x") + int_array(residual, "residual"), 8)


def residual_max(x: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """``sat8(max(x, residual))`` with an int8 residual of the same shape (``res_mode`` 1)."""
    return sat(np.maximum(int_array(x, "x"), int_array(residual, "residual")), 8)


def residual_scaled(x: np.ndarray, residual: np.ndarray, x_mult: int, r_mult: int, shift: int,
                    x_zp: int, r_zp: int, zp: int, lo: int, hi: int) -> np.ndarray:
    """The residual stage's scaled add (``res_mode`` 2): two quantized tensors added in the
    output's scale, ONNX's ``DequantizeLinear -> Add -> QuantizeLinear`` in integers.

    ``y = min(max(rne(((x - x_zp) * x_mult + (r - r_zp) * r_mult) / 2**shift) + zp, lo), hi)``
    where ``rne`` rounds to the nearest integer, ties to even (as onnxruntime's float
    ``QLinearAdd`` and ``QuantizeLinear`` do). The sum is exact: on int64 when it fits, on
    Python integers otherwise (an int32 ``x`` times a 32-bit multiplier needs 65 bits).
    ``lo`` and ``hi`` are int8, so the result is too.
    """
    x, r = int_array(x, "x"), int_array(residual, "residual")
    dx, dr = x - np.int64(x_zp), r - np.int64(r_zp)
    big = max(int(np.abs(dx).max(initial=0)), 1) * abs(x_mult) + \
        max(int(np.abs(dr).max(initial=0)), 1) * abs(r_mult)
    if big < 1 << 61:
        p = dx * np.int64(x_mult) + dr * np.int64(r_mult)
    else:
        p = dx.astype(object) * x_mult + dr.astype(object) * r_mult
    y = round_shift(p, shift, even=True) + zp
    return np.minimum(np.maximum(y, lo), hi).astype(np.int64)
