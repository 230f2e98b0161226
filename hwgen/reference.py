"""Bit-exact numpy reference of the accelerator's arithmetic.

This is the meaning of a kernel, written once: the shadow check, the kernel builders' expected
results and the tests all compare against it. Every function works on integer arrays and is
exact: values are widened to int64 where a 32-bit intermediate could overflow, and narrowed with
the same saturation or wrap-around the hardware applies.

The epilogue stages, their parameters and their arithmetic are declared in :mod:`hwgen.stages`
(one :class:`~hwgen.stages.StageSpec` each, whose ``doc`` states the stage's rule; the lane
functions of :mod:`hwgen.lanes` are re-exported here). :func:`epilogue` applies a chain of
them through each spec's ``reference``. The requantize rounding is **half toward +inf**:
``-2.5`` rounds to ``-2`` and ``2.5`` to ``3``.

A stored int8 result is the low byte of the final lane (:func:`to_dtype`); the stages that end in
a saturation to int8 (``requant``, ``residual``) make that exact.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hwgen.config import EPILOGUE_STAGES
from hwgen.lanes import (  # noqa: F401 - the lane arithmetic is part of this module's API
    INT8_MAX,
    INT8_MIN,
    INT32_MAX,
    INT32_MIN,
    bias_add,
    channel_params,
    clamp,
    int_array,
    relu,
    requantize,
    residual_add,
    residual_max,
    sat,
)
from hwgen.stages import OPERANDS, RESIDUAL_OPS, SPECS, STAGES, spec  # noqa: F401

#: Parameter field -> the stage whose record holds it.
_OWNER = {f: s.name for s in STAGES if s.params for f in s.params.__dataclass_fields__}


@dataclass(frozen=True, init=False)
class EpilogueParams:
    """The epilogue parameters of one kernel: one record per stage that has parameters.

    Each record is the ``params`` type of that stage's :class:`~hwgen.stages.StageSpec` (for
    the requantize stage ``mult``, ``shift``, ``zp``, ``per_channel``; for clamp
    ``clamp_lo``, ``clamp_hi``; for the residual stage ``residual_op``), and checks its
    values. The constructor takes the records' fields by name, and reads them back as
    attributes, whichever stage they belong to::

        EpilogueParams(mult=..., shift=..., zp=..., clamp_lo=..., residual_op="max").mult

    It also takes a whole record (or the mapping :func:`dataclasses.asdict` makes of it) by
    its stage's name, so that ``EpilogueParams(**dataclasses.asdict(params)) == params``; fields
    given by name override that record's, so that ``dataclasses.replace(params, zp=3)`` works.
    Fields not given take the record's defaults, which make every stage but the saturations
    an identity.

    Raises
    ------
    ValueError
        From a stage's record, naming the bad value.
    TypeError
        For a keyword that is no stage's parameter.
    """

    __annotations__ = {s.name: s.params for s in STAGES if s.params}

    def __init__(self, **values: Any) -> None:
        grouped: dict[str, dict[str, Any]] = {name: {} for name in self.__annotations__}
        records: dict[str, Any] = {}
        for key, value in values.items():
            if key in grouped:
                records[key] = value
            elif key in _OWNER:
                grouped[_OWNER[key]][key] = value
            else:
                raise TypeError(f"EpilogueParams has no parameter {key!r}; the parameters are "
                                f"{', '.join(_OWNER)} (or a whole record by stage: "
                                f"{', '.join(grouped)})")
        for name, kind in self.__annotations__.items():
            record = records.get(name, {})
            if isinstance(record, kind):
                record = {f: getattr(record, f) for f in kind.__dataclass_fields__}
            elif not isinstance(record, Mapping):
                raise TypeError(f"EpilogueParams {name}= must be a {kind.__name__} or a "
                                f"mapping of its fields, not {type(record).__name__}")
            # fields given by name override the record's (dataclasses.replace does that)
            object.__setattr__(self, name, kind(**{**record, **grouped[name]}))

    def __getattr__(self, name: str) -> Any:
        # Called only for names that are not attributes: the records' fields.
        stage = _OWNER.get(name)
        if stage is None:
            raise AttributeError(f"EpilogueParams has no attribute {name!r}")
        return getattr(object.__getattribute__(self, stage), name)

    def stage(self, name: str) -> Any:
        """The parameters record of stage ``name`` (None for a stage without parameters)."""
        return getattr(self, name) if spec(name).params else None

    @classmethod
    def from_scale(cls, scale: float, **kwargs: Any) -> EpilogueParams:
        """Params whose requantize multiplies by ``scale`` (see :func:`quantize_multiplier`)."""
        mult, shift = quantize_multiplier(scale)
        return cls(mult=mult, shift=shift, **kwargs)


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


def gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for int8 ``a`` (M x K) and ``b`` (K x N), accumulated in wrapping int32."""
    a64, b64 = int_array(a, "a"), int_array(b, "b")
    if a64.ndim != 2 or b64.ndim != 2 or a64.shape[1] != b64.shape[0]:
        raise ValueError(f"gemm needs M x K and K x N operands, not {a64.shape} and {b64.shape}")
    # Exact in int64 for K < 2**32; the wrap to int32 mirrors the accumulators.
    return (a64 @ b64).astype(np.int32)


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


def _operands(given: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(given) - set(OPERANDS))
    if unknown:
        raise TypeError(f"unknown epilogue operand(s) {', '.join(unknown)}; the stages read "
                        f"{', '.join(OPERANDS)}")
    return {name: given.get(name) for name in OPERANDS}


def apply_stage(x: np.ndarray, stage: str, params: EpilogueParams,
                **operands: np.ndarray | None) -> np.ndarray:
    """Apply one named stage to an int32-valued array (returned as int64), through its spec's
    reference function.

    ``operands`` are the arrays the stages read, named as their specs' reads name them
    (:data:`hwgen.stages.OPERANDS`): ``bias`` (N values), ``residual`` (M x N int8), and the
    per-channel requantize vectors ``mult`` and ``shift`` (one value per column, used by
    ``requant`` when ``params.per_channel`` and ignored otherwise).
    """
    s = spec(stage)
    return s.reference(x, params.stage(stage), _operands(operands))


def epilogue(x: np.ndarray, stages: Sequence[str], params: EpilogueParams,
             **operands: np.ndarray | None) -> np.ndarray:
    """Apply a chain of stages, in the given order, to int32 accumulators.

    Parameters
    ----------
    x : ndarray
        M x N accumulator values (int32 range).
    stages : sequence of str
        Stage names, applied in this order (each at most once).
    params : EpilogueParams
        The parameters of the stages (their CSR values).
    **operands : ndarray, optional
        What the stages read from the epilogue scratchpad (:data:`hwgen.stages.OPERANDS`):
        ``bias``, N int32 values, needed by ``bias``; ``residual``, M x N int8 values, needed
        by ``residual``; ``mult`` and ``shift``, N values each (signed 32-bit multipliers,
        shifts 0..63): the per-channel requantize, needed by ``requant`` when
        ``params.per_channel``, ignored otherwise.

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
    operands = _operands(operands)
    out = int_array(x, "x")
    for stage in stages:
        out = SPECS[stage].reference(out, params.stage(stage), operands)
    return out


def output_dtype(stages: Sequence[str]) -> np.dtype:
    """The stored element type after ``stages``: int8 once a stage whose output is int8
    (``requant``, ``residual``) ran."""
    return np.dtype(np.int8 if any(spec(s).int8_out for s in stages) else np.int32)


def to_dtype(x: np.ndarray, dtype: np.dtype | type) -> np.ndarray:
    """Narrow int32 lanes to ``dtype`` as the store does: int8 keeps the low byte (wraps)."""
    return int_array(x, "x").astype(np.int32).astype(dtype)


def gemm_epilogue(a: np.ndarray, b: np.ndarray, stages: Sequence[str], params: EpilogueParams,
                  **operands: np.ndarray | None) -> np.ndarray:
    """The result of a GEMM with a fused epilogue, in its stored type (:func:`output_dtype`).

    The operands are those of :func:`epilogue`; ``mult`` and ``shift`` (per column of the N
    axis) are needed when ``params.per_channel`` and ``requant`` is a stage.
    """
    return to_dtype(epilogue(gemm(a, b), stages, params, **operands), output_dtype(stages))


def window_load(memory: np.ndarray, port_bytes: int, rows: int, *, ext: int, stride: int,
                next: int, count: int, shift: int, step: int, mask: int,  # noqa: A002
                fill: int, keep: bool = False, old: np.ndarray | None = None) -> np.ndarray:
    """The A scratchpad rows a LOADW writes (``hwgen.isa``), from ``memory`` (uint8 bytes,
    word ``w`` at ``[w*port_bytes, (w+1)*port_bytes)``).

    Row ``i`` is the byte string of words ``ext + i*stride + j*next`` (j = 0, 1, ...); lane
    ``r`` is its byte ``shift + r*step``, or, when bit ``r`` of ``mask`` is clear, ``fill``
    (without ``keep``) or the lane's old byte in ``old`` (with ``keep``: the ``count x rows``
    rows the scratchpad held before).

    Returns
    -------
    ndarray
        ``count x rows`` int8.
    """
    mem = np.asarray(memory, np.uint8)
    if keep:
        if old is None:
            raise ValueError("a LOADW with keep needs the rows it merges into (old)")
        before = np.asarray(old).astype(np.uint8).reshape(count, rows)
    need = (shift + (rows - 1) * step) // port_bytes + 1  # hwgen.isa.window_words
    out = np.empty((count, rows), np.uint8)
    for i in range(count):
        base = ext + i * stride
        string = np.concatenate([mem[(base + j * next) * port_bytes:
                                     (base + j * next + 1) * port_bytes] for j in range(need)])
        for r in range(rows):
            if mask >> r & 1:
                out[i, r] = string[shift + r * step]
            else:
                out[i, r] = before[i, r] if keep else fill & 0xFF
    return out.view(np.int8)


@dataclass(frozen=True)
class WindowGeometry:
    """The window unit's geometry, as one ``WCFG`` sets it (:mod:`hwgen.isa`).

    ``mode`` is ``"mac"``, ``"max"`` or ``"sum"``; the other fields are WCFG's.
    """

    win: int
    hin: int
    kh: int = 3
    kw: int = 3
    stride: int = 1
    pt: int = 0
    pl: int = 0
    fill: int = 0
    mode: str = "mac"

    def taps(self, oy: int, ox: int) -> list[tuple[int, int, int, int]]:
        """``(ky, kx, iy, ix)`` of each tap of output pixel ``(oy, ox)``."""
        return [(ky, kx, oy * self.stride + ky - self.pt, ox * self.stride + kx - self.pl)
                for ky in range(self.kh) for kx in range(self.kw)]


def window_tile(a_spad: np.ndarray, e_spad: np.ndarray, geom: WindowGeometry, *, a: int,
                w: int, pos: int, count: int, ow: int, rows: int) -> np.ndarray:
    """The accumulators of one ``WINDOW`` tile (before the epilogue), as :mod:`hwgen.isa`
    defines them.

    Parameters
    ----------
    a_spad : ndarray
        ``depth x lanes`` int8: the A scratchpad, one input pixel's channels a row.
    e_spad : ndarray
        ``depth x lanes`` int32: the epilogue scratchpad; mac mode reads tap ``(ky, kx)``'s
        weights from the low byte of row ``w + 3*ky + kx``.
    geom : WindowGeometry
    a, w, pos, count, ow : int
        The WINDOW's operands (``pos`` packs ``oy0 << 16 | ox0``).
    rows : int
        The array's rows: the tile's height.

    Returns
    -------
    ndarray
        ``rows x lanes`` int32; rows from ``count`` on are 0.
    """
    a_spad = np.asarray(a_spad, np.int8)
    depth, lanes = a_spad.shape
    fill = np.full(lanes, np.int8(np.uint8(geom.fill & 0xFF).view(np.int8)), np.int64)
    weights = (np.asarray(e_spad, np.int64) & 0xFF).astype(np.uint8).view(np.int8)
    weights = weights.astype(np.int64)

    def pixel(row: int) -> np.ndarray:
        return a_spad[row % depth].astype(np.int64)

    out = np.zeros((rows, lanes), np.int64)
    oy, ox = pos >> 16, pos & 0xFFFF
    for r in range(count):
        if geom.mode == "sum":
            image = (oy + r) * geom.hin * geom.win
            out[r] = sum(pixel(a + image + i) for i in range(geom.hin * geom.win))
            continue
        taps = []
        for ky, kx, iy, ix in geom.taps(oy, ox):
            inside = 0 <= iy < geom.hin and 0 <= ix < geom.win
            x = pixel(a + iy * geom.win + ix) if inside else fill
            taps.append(x * weights[(w + 3 * ky + kx) % len(weights)]
                        if geom.mode == "mac" else x)
        out[r] = np.sum(taps, axis=0) if geom.mode == "mac" else np.max(taps, axis=0)
        ox += 1
        if ox == ow:
            oy, ox = oy + 1, 0
    # sums wrap at 32 bits, as the accumulators do
    return ((out + 2**31) % 2**32 - 2**31).astype(np.int32)
