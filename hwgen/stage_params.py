"""The parameter records of the epilogue stages that have parameters: each checks its values
(``ValueError``) so that a kernel is never built with a register value its CSR cannot hold.
Their fields are fields of :class:`hwgen.reference.EpilogueParams`; :mod:`hwgen.stages`
names them as each stage's ``params``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwgen.lanes import INT8_MAX, INT8_MIN, INT32_MAX, INT32_MIN

#: What the residual stage can do with its operand (CSR ``res_mode`` 0, 1 and 2): ``add`` and
#: ``max`` of int8 lanes, and ``scaled``, the add of two quantized tensors in the output's scale.
RESIDUAL_OPS = ("add", "max", "scaled")


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _check_int32(record: object, *names: str) -> None:
    for name in names:
        value = getattr(record, name)
        if not _is_int(value) or not INT32_MIN <= value <= INT32_MAX:
            raise ValueError(f"{name} must be a signed 32-bit integer, not {value!r}")


@dataclass(frozen=True, kw_only=True)
class RequantParams:
    """Parameters of the requantize stage.

    Parameters
    ----------
    mult : int
        Multiplier, signed 32-bit.
    shift : int
        Right shift, 0..63.
    zp : int
        Output zero point, signed 32-bit (useful values are -128..127).
    per_channel : bool
        Requantize per output channel (CSR ``req_mode`` = 1): each column of the N axis has
        its own multiplier and shift, given as ``mult`` and ``shift`` vectors (operands of the
        kernel, read from the bias group's rows); the ``mult`` and ``shift`` fields are then
        unused, ``zp`` still applies to every channel.
    round_even : bool
        Round exact halves to even (CSR ``req_mode`` bit 1), as ONNX's ``QuantizeLinear``
        does, instead of toward +inf (gemmlowp's and TFLite's rule).
    """

    mult: int = 1
    shift: int = 0
    zp: int = 0
    per_channel: bool = False
    round_even: bool = False

    def __post_init__(self) -> None:
        _check_int32(self, "mult", "zp")
        if not _is_int(self.shift) or not 0 <= self.shift <= 63:
            raise ValueError(f"shift must be an integer from 0 to 63, not {self.shift!r}")
        for name in ("per_channel", "round_even"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, not {getattr(self, name)!r}")


@dataclass(frozen=True, kw_only=True)
class ClampParams:
    """Parameters of the clamp stage: bounds, signed 32-bit, ``clamp_lo <= clamp_hi``."""

    clamp_lo: int = INT32_MIN
    clamp_hi: int = INT32_MAX

    def __post_init__(self) -> None:
        _check_int32(self, "clamp_lo", "clamp_hi")
        if self.clamp_lo > self.clamp_hi:
            raise ValueError(
                f"clamp_lo ({self.clamp_lo}) must not exceed clamp_hi ({self.clamp_hi})"
            )


@dataclass(frozen=True, kw_only=True)
class ResidualParams:
    """Parameters of the residual stage.

    Parameters
    ----------
    residual_op : {"add", "max", "scaled"}
        CSR ``res_mode``: ``sat8(x + r)``, ``sat8(max(x, r))``, or the scaled add of two
        quantized tensors (:func:`hwgen.lanes.residual_scaled`), which uses the fields below.
    res_x_mult, res_r_mult : int
        Multipliers of ``x - res_x_zp`` and ``r - res_r_zp``, signed 32-bit: each input's
        scale over the output's, times ``2**res_shift``.
    res_shift : int
        Right shift of the sum, rounding half to even, 0..63.
    res_x_zp, res_r_zp : int
        The inputs' zero points in lane terms, -256..255.
    res_zp : int
        The output zero point in lane terms, -256..255.
    res_lo, res_hi : int
        Bounds of the output, int8, ``res_lo <= res_hi``: a ReLU or Clip after the add.
    """

    residual_op: str = "add"
    res_x_mult: int = 1
    res_r_mult: int = 1
    res_shift: int = 0
    res_x_zp: int = 0
    res_r_zp: int = 0
    res_zp: int = 0
    res_lo: int = INT8_MIN
    res_hi: int = INT8_MAX

    def __post_init__(self) -> None:
        if self.residual_op not in RESIDUAL_OPS:
            raise ValueError(f"residual_op must be one of {', '.join(RESIDUAL_OPS)}, not "
                             f"{self.residual_op!r}")
        _check_int32(self, "res_x_mult", "res_r_mult")
        for name, lo, hi in (("res_shift", 0, 63), ("res_x_zp", -256, 255),
                             ("res_r_zp", -256, 255), ("res_zp", -256, 255),
                             ("res_lo", INT8_MIN, INT8_MAX), ("res_hi", INT8_MIN, INT8_MAX)):
            value = getattr(self, name)
            if not _is_int(value) or not lo <= value <= hi:
                raise ValueError(f"{name} must be an integer from {lo} to {hi}, not {value!r}")
        if self.res_lo > self.res_hi:
            raise ValueError(f"res_lo ({self.res_lo}) must not exceed res_hi ({self.res_hi})")
