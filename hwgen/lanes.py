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
               zp: int) -> np.ndarray:
    """``sat8(((x * mult + round) >> shift) + zp)``, rounding half toward +inf.

    ``mult`` and ``shift`` are scalars (per tensor) or arrays broadcast against ``x`` (per
    channel: one value per column, along the last axis).

    ``x * mult`` needs 63 bits and adding the rounding constant could need 64, so the rounding
    is done as ``((p >> (shift - 1)) + 1) >> 1``, which equals
    ``(p + (1 << (shift - 1))) >> shift`` for every integer ``p`` and stays within int64.
    """
    p = int_array(x, "x") * np.asarray(mult, np.int64)
    s = np.asarray(shift, np.int64)
    # the shift by max(s - 1, 0) only keeps numpy's shift count valid where s == 0
    y = np.where(s == 0, p, ((p >> np.maximum(s - 1, 0)) + 1) >> np.int64(1))
    return sat(y + np.int64(zp), 8)


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
