"""Bit-exact numpy reference of the accelerator's arithmetic.

This is the meaning of a kernel, written once: the shadow check, the kernel builders' expected
results and the tests all compare against it. Every function works on integer arrays and is
exact: values are widened to int64 where a 32-bit intermediate could overflow, and narrowed with
the same saturation or wrap-around the hardware applies.

The epilogue stages, each on int32 lanes ``x``:

``bias``
    ``x = sat32(x + bias[col])``
``requant``
    ``y = (x * mult + (1 << (shift - 1) if shift > 0 else 0)) >> shift``, then
    ``x = sat8(y + zp)``. The shift is arithmetic, so the rounding is **half toward +inf**:
    ``-2.5`` rounds to ``-2`` and ``2.5`` to ``3``. Per channel
    (``EpilogueParams.per_channel``), ``mult`` and ``shift`` are vectors over the columns.
``relu``
    ``x = max(x, 0)``
``clamp``
    ``x = min(max(x, lo), hi)``
``residual``
    ``x = sat8(x + residual[row, col])`` (the residual is int8); with
    ``EpilogueParams.residual_op == "max"``, ``x = sat8(max(x, residual[row, col]))``.

A stored int8 result is the low byte of the final lane (:func:`to_dtype`); the stages that end in
a saturation to int8 (``requant``, ``residual``) make that exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hwgen.config import EPILOGUE_STAGES

INT8_MIN, INT8_MAX = -(1 << 7), (1 << 7) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
#: What the residual stage can do with its operand (CSR ``res_mode`` 0 and 1).
RESIDUAL_OPS = ("add", "max")


@dataclass(frozen=True, kw_only=True)
class EpilogueParams:
    """The epilogue control registers (CSRs) of one kernel.

    Parameters
    ----------
    mult : int
        Requantize multiplier, signed 32-bit.
    shift : int
        Requantize right shift, 0..63.
    zp : int
        Requantize output zero point, signed 32-bit (useful values are -128..127).
    clamp_lo, clamp_hi : int
        Clamp bounds, signed 32-bit, ``clamp_lo <= clamp_hi``.
    per_channel : bool
        Requantize per output channel (CSR ``req_mode`` = 1): each column of the N axis has
        its own multiplier and shift, given as ``mult`` and ``shift`` vectors (operands of the
        kernel, not fields of this class); the ``mult`` and ``shift`` fields are then unused,
        ``zp`` still applies to every channel. Only meaningful with the ``requant`` stage.
    residual_op : {"add", "max"}
        What the residual stage does (CSR ``res_mode``): ``sat8(x + r)`` or
        ``sat8(max(x, r))``.

    The defaults make every stage but the saturations an identity.
    """

    mult: int = 1
    shift: int = 0
    zp: int = 0
    clamp_lo: int = INT32_MIN
    clamp_hi: int = INT32_MAX
    per_channel: bool = False
    residual_op: str = "add"

    def __post_init__(self) -> None:
        for name in ("mult", "zp", "clamp_lo", "clamp_hi"):
            value = getattr(self, name)
            if not _is_int(value) or not INT32_MIN <= value <= INT32_MAX:
                raise ValueError(f"{name} must be a signed 32-bit integer, not {value!r}")
        if not _is_int(self.shift) or not 0 <= self.shift <= 63:
            raise ValueError(f"shift must be an integer from 0 to 63, not {self.shift!r}")
        if self.clamp_lo > self.clamp_hi:
            raise ValueError(
                f"clamp_lo ({self.clamp_lo}) must not exceed clamp_hi ({self.clamp_hi})"
            )
        if not isinstance(self.per_channel, bool):
            raise ValueError(f"per_channel must be True or False, not {self.per_channel!r}")
        if self.residual_op not in RESIDUAL_OPS:
            raise ValueError(f"residual_op must be one of {', '.join(RESIDUAL_OPS)}, not "
                             f"{self.residual_op!r}")

    @classmethod
    def from_scale(cls, scale: float, **kwargs: int) -> EpilogueParams:
        """Params whose requantize multiplies by ``scale`` (see :func:`quantize_multiplier`)."""
        mult, shift = quantize_multiplier(scale)
        return cls(mult=mult, shift=shift, **kwargs)


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def quantize_multiplier(scale: float) -> tuple[int, int]:
    """Approximate a real scale as ``mult * 2**-shift`` for the requantize stage.

    Parameters
    ----------
    scale : float
        The real multiplier, typically ``in_scale * weight_scale / out_scale``. It may be
        negative; ``abs(scale)`` must be below ``2**31``.

    Returns
    -------
    mult, shift : int, int
        A signed 32-bit multiplier and a shift in 0..63 with the most precision the CSRs hold:
        ``abs(mult)`` is in ``[2**30, 2**31)`` unless the shift limit forces it lower.

    Raises
    ------
    ValueError
        If ``scale`` is not finite, too large for a 32-bit multiplier, or so small that it
        rounds to zero even at the largest shift.
    """
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, not {scale!r}")
    if scale == 0:
        return 0, 0
    frac, exp = math.frexp(abs(scale))  # abs(scale) = frac * 2**exp, frac in [0.5, 1)
    mult, shift = round(frac * (1 << 31)), 31 - exp
    if mult == 1 << 31:  # frac rounded up to 1.0
        mult, shift = mult >> 1, shift - 1
    if shift < 0:
        raise ValueError(
            f"scale {scale!r} is too large: the requantize multiplier holds less than 2**31"
        )
    if shift > 63:
        mult, shift = round(abs(scale) * 2.0**63), 63
        if mult == 0:
            raise ValueError(f"scale {scale!r} rounds to zero even at the largest shift (63)")
    return (-mult if scale < 0 else mult), shift


# -- GEMM and the stages -----------------------------------------------------------------


def _int_array(x: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"{name} must be an integer array, not {x.dtype}")
    return x.astype(np.int64)


def gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for int8 ``a`` (M x K) and ``b`` (K x N), accumulated in wrapping int32."""
    a64, b64 = _int_array(a, "a"), _int_array(b, "b")
    if a64.ndim != 2 or b64.ndim != 2 or a64.shape[1] != b64.shape[0]:
        raise ValueError(f"gemm needs M x K and K x N operands, not {a64.shape} and {b64.shape}")
    # Exact in int64 for K < 2**32; the wrap to int32 mirrors the accumulators.
    return (a64 @ b64).astype(np.int32)


def sat(x: np.ndarray, bits: int) -> np.ndarray:
    """Saturate to a signed ``bits``-bit range (returned as int64)."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return np.clip(_int_array(x, "x"), lo, hi)


def bias_add(x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """``sat32(x + bias)``, the bias broadcast along the last axis (columns)."""
    return sat(_int_array(x, "x") + _int_array(bias, "bias"), 32)


def requantize(x: np.ndarray, mult: int | np.ndarray, shift: int | np.ndarray,
               zp: int) -> np.ndarray:
    """``sat8(((x * mult + round) >> shift) + zp)``, rounding half toward +inf.

    ``mult`` and ``shift`` are scalars (per tensor) or arrays broadcast against ``x`` (per
    channel: one value per column, along the last axis).

    ``x * mult`` needs 63 bits and adding the rounding constant could need 64, so the rounding
    is done as ``((p >> (shift - 1)) + 1) >> 1``, which equals
    ``(p + (1 << (shift - 1))) >> shift`` for every integer ``p`` and stays within int64.
    """
    p = _int_array(x, "x") * np.asarray(mult, np.int64)
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
    return np.maximum(_int_array(x, "x"), 0)


def clamp(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``min(max(x, lo), hi)``."""
    return np.minimum(np.maximum(_int_array(x, "x"), np.int64(lo)), np.int64(hi))


def residual_add(x: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """``sat8(x + residual)`` with an int8 residual of the same shape."""
    return sat(_int_array(x, "x") + _int_array(residual, "residual"), 8)


def residual_max(x: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """``sat8(max(x, residual))`` with an int8 residual of the same shape (``res_mode`` 1)."""
    return sat(np.maximum(_int_array(x, "x"), _int_array(residual, "residual")), 8)


def check_stages(stages: Sequence[str], chain: Sequence[str] = EPILOGUE_STAGES) -> tuple[str, ...]:
    """Check that ``stages`` is an ordered subset of ``chain``; return it as a tuple.

    Raises
    ------
    ValueError
        Naming the first stage that is unknown, repeated, or out of chain order.
    """
    if isinstance(stages, str):
        raise ValueError(f"stages must be a sequence of stage names, not the string {stages!r}")
    stages = tuple(stages)
    last = -1
    for stage in stages:
        if stage not in chain:
            raise ValueError(
                f"epilogue stage {stage!r} is not in the chain ({', '.join(chain) or 'empty'}); "
                f"use a variant whose epilogue has it"
            )
        index = chain.index(stage)
        if index <= last:
            raise ValueError(
                f"stages {list(stages)} are not an ordered subset of the chain {list(chain)}: "
                f"{stage!r} is repeated or out of order"
            )
        last = index
    return stages


def apply_stage(
    x: np.ndarray,
    stage: str,
    params: EpilogueParams,
    *,
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    mult: np.ndarray | None = None,
    shift: np.ndarray | None = None,
) -> np.ndarray:
    """Apply one named stage to an int32-valued array (returned as int64).

    ``mult`` and ``shift`` are the per-channel requantize vectors (one value per column),
    used by ``requant`` when ``params.per_channel`` and ignored otherwise.
    """
    if stage == "bias":
        if bias is None:
            raise ValueError("the bias stage needs a bias vector")
        return bias_add(x, bias)
    if stage == "requant":
        if params.per_channel:
            x = _int_array(x, "x")
            mults, shifts = channel_params(mult, shift, x.shape[-1])
            return requantize(x, mults, shifts, params.zp)
        return requantize(x, params.mult, params.shift, params.zp)
    if stage == "relu":
        return relu(x)
    if stage == "clamp":
        return clamp(x, params.clamp_lo, params.clamp_hi)
    if stage == "residual":
        if residual is None:
            raise ValueError("the residual stage needs a residual tensor")
        if params.residual_op == "max":
            return residual_max(x, residual)
        return residual_add(x, residual)
    raise ValueError(f"unknown epilogue stage {stage!r}; the known stages are "
                     f"{', '.join(EPILOGUE_STAGES)}")


def epilogue(
    x: np.ndarray,
    stages: Sequence[str],
    params: EpilogueParams,
    *,
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    mult: np.ndarray | None = None,
    shift: np.ndarray | None = None,
) -> np.ndarray:
    """Apply a chain of stages, in the given order, to int32 accumulators.

    Parameters
    ----------
    x : ndarray
        M x N accumulator values (int32 range).
    stages : sequence of str
        Stage names, applied in this order (each at most once).
    params : EpilogueParams
        The CSR values used by ``requant``, ``clamp`` and ``residual``.
    bias : ndarray, optional
        N int32 values, needed by ``bias``.
    residual : ndarray, optional
        M x N int8 values, needed by ``residual``.
    mult, shift : ndarray, optional
        N values each (signed 32-bit multipliers, shifts 0..63): the per-channel requantize,
        needed by ``requant`` when ``params.per_channel``, ignored otherwise.

    Returns
    -------
    ndarray
        The int32 lanes after the chain, as int64 (convert with :func:`to_dtype`).

    Raises
    ------
    ValueError
        A stage unknown or out of order, or an operand a stage needs missing or malformed.
    """
    stages = check_stages(stages)
    out = _int_array(x, "x")
    for stage in stages:
        out = apply_stage(out, stage, params, bias=bias, residual=residual, mult=mult,
                          shift=shift)
    return out


def output_dtype(stages: Sequence[str]) -> np.dtype:
    """The stored element type after ``stages``: int8 once requant or residual ran."""
    return np.dtype(np.int8 if {"requant", "residual"} & set(stages) else np.int32)


def to_dtype(x: np.ndarray, dtype: np.dtype | type) -> np.ndarray:
    """Narrow int32 lanes to ``dtype`` as the store does: int8 keeps the low byte (wraps)."""
    return _int_array(x, "x").astype(np.int32).astype(dtype)


def gemm_epilogue(
    a: np.ndarray,
    b: np.ndarray,
    stages: Sequence[str],
    params: EpilogueParams,
    *,
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    mult: np.ndarray | None = None,
    shift: np.ndarray | None = None,
) -> np.ndarray:
    """The result of a GEMM with a fused epilogue, in its stored type (:func:`output_dtype`).

    The operands are those of :func:`epilogue`; ``mult`` and ``shift`` (per column of the N
    axis) are needed when ``params.per_channel`` and ``requant`` is a stage.
    """
    out = epilogue(gemm(a, b), stages, params, bias=bias, residual=residual, mult=mult,
                   shift=shift)
    return to_dtype(out, output_dtype(stages))
