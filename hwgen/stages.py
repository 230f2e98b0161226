"""One record per epilogue stage: everything the hardware and the compiler must agree on.

A :class:`StageSpec` declares, once, a stage's name, its control registers (the CSRs a CSRWI
writes, with their number, width and signedness, and how their values follow from the stage's
parameters), the rows of the epilogue scratchpad it reads, whether its output is int8 (and the
range it maps values to), its bit-exact numpy reference, the graph op it implements, its
parameters (the fields it contributes to :class:`hwgen.reference.EpilogueParams`) and its
latency. Gemmini's ``ScaleArguments`` keeps a unit's hardware function, latency and C
expression in one record so that they cannot drift; this is the same idea. The gateware builds
the control-register signature, the sequencer's CSRWI decode and the scratchpad read ports
from these records (``hwgen.gateware.epilogue``), :mod:`hwgen.isa` numbers the CSRs from them,
and the compiler derives its CSR writes (``fusion.kernels.epilogue.csr_writes``), its
graph-op-to-stage table and the stored types of unfused passes from them. The reference
functions are exact numpy (:mod:`hwgen.lanes`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from hwgen import lanes
from hwgen.lanes import INT8_MAX, INT8_MIN, INT32_MAX, INT32_MIN
from hwgen.stage_params import RESIDUAL_OPS, ClampParams, RequantParams, ResidualParams

# -- the bias group: epilogue scratchpad rows relative to a job's ``bias`` row -------------

#: The bias vector of the column block.
BIAS_ROW = 0
#: Per-channel requantize: each lane's multiplier.
REQ_MULT_ROW = 1
#: Per-channel requantize: each lane's shift (its low 6 bits).
REQ_SHIFT_ROW = 2


# -- the records ---------------------------------------------------------------------------


def _always(params: Any) -> bool:
    return True


@dataclass(frozen=True)
class Reg:
    """One control register of a stage, written by CSRWI and held until the next write.

    Attributes
    ----------
    name : str
        Its name in the ISA and the assembler (``csrwi csr=req_mult``) and in the gateware's
        control-register signature.
    csr : int
        Its number (the CSRWI ``csr`` field); :class:`hwgen.isa.Csr` is made from these.
    width : int
        Bits the gateware holds (the low bits of the written value).
    signed : bool
        Whether the stage reads it as a signed number.
    doc : str
        What it means (``docs/isa.md``).
    value : callable
        Its value from the stage's parameters record.
    when : callable
        Whether a kernel with these parameters writes it (per-channel requantize does not
        use the per-tensor multiplier and shift registers, so it does not write them).
    """

    name: str
    csr: int
    width: int
    signed: bool
    doc: str
    value: Callable[[Any], int]
    when: Callable[[Any], bool] = _always


@dataclass(frozen=True)
class ERead:
    """A row of the epilogue scratchpad that a stage reads for every beat (a synchronous
    block-RAM read as the beat enters the stage, so the stage's first cycle is the read).

    Attributes
    ----------
    name : str
        The read port's name in the gateware.
    base : {"bias", "res"}
        The beat's row pointer it is relative to: ``bias`` (the job's bias row: one group
        per column block, the same for every row of a tile) or ``res`` (the job's residual
        row, which steps with the tile's rows).
    offset : int
        Rows after ``base``.
    operand : str
        The kernel operand the row holds (``hwgen.reference.epilogue``'s keyword).
    when : callable
        Whether the stage uses the row with these parameters.
    """

    name: str
    base: str
    offset: int
    operand: str
    when: Callable[[Any], bool] = _always


@dataclass(frozen=True)
class StageSpec:
    """Everything about one epilogue stage that the gateware and the compiler share.

    Attributes
    ----------
    name : str
        The stage's name in a variant's chain (:data:`STAGE_NAMES`).
    doc : str
        Its arithmetic on an int32 lane ``x``.
    op : str or None
        The graph op it implements (``fusion.ir``'s catalog), or None if none does directly.
    params : type or None
        A frozen keyword-only dataclass of its parameters, with defaults, that checks its
        values (``ValueError``); its fields are fields of ``EpilogueParams``.
    regs : tuple of Reg
        Its control registers.
    reads : tuple of ERead
        The epilogue scratchpad rows it reads.
    int8_out : bool
        Its output always fits int8 (it ends in a saturation to int8), so a stored int8
        result is exact.
    reference : callable
        ``reference(x, params, operands) -> x``: the numpy semantics, bit-exact, on int64
        lanes; ``params`` is its record (None without one), ``operands`` maps the operand
        names of :attr:`reads` to arrays (or None when not given).
    out_range : callable or None
        ``out_range(lo, hi, params) -> (lo, hi)``: the range of its output for inputs in
        ``[lo, hi]``. None: int8 when :attr:`int8_out`, else any int32.
    latency : int
        Cycles a beat spends in the stage: its pipeline registers, as the gateware builds
        them (``hwgen.gateware.epilogue``, which refuses to build a stage whose registers
        differ). A stage that reads the epilogue scratchpad spends its first cycle on the
        block RAM's read; the multiplies, the rounding add and the shift get one each.
    in_range : callable or None
        ``in_range(params) -> (lo, hi)``: the inputs the gateware computes exactly with
        ``params`` (its operands are only as wide as the math needs: the residual stage's
        scaled add multiplies an int8 ``x``). None: any int32. :func:`check_inputs` refuses a
        chain that can give a stage more.
    """

    name: str
    doc: str
    op: str | None
    params: type | None
    regs: tuple[Reg, ...]
    reads: tuple[ERead, ...]
    int8_out: bool
    reference: Callable[[np.ndarray, Any, Mapping[str, np.ndarray | None]], np.ndarray]
    out_range: Callable[[int, int, Any], tuple[int, int]] | None = None
    latency: int = 1
    in_range: Callable[[Any], tuple[int, int]] | None = None

    def output_range(self, lo: int, hi: int, params: Any) -> tuple[int, int]:
        """The range of the stage's output for inputs in ``[lo, hi]``."""
        if self.out_range is not None:
            return self.out_range(lo, hi, params)
        return (INT8_MIN, INT8_MAX) if self.int8_out else (INT32_MIN, INT32_MAX)

    def csr_writes(self, params: Any) -> list[tuple[str, int]]:
        """``(register name, value)`` of each register a kernel with ``params`` writes."""
        return [(r.name, r.value(params)) for r in self.regs if r.when(params)]

    def reads_used(self, params: Any) -> tuple[ERead, ...]:
        """The scratchpad rows the stage uses with ``params``."""
        return tuple(r for r in self.reads if r.when(params))


# -- the stages ----------------------------------------------------------------------------


def _bias(x, params, operands):
    if operands.get("bias") is None:
        raise ValueError("the bias stage needs a bias vector")
    return lanes.bias_add(x, operands["bias"])


def _requant(x, p: RequantParams, operands):
    if p.per_channel:
        x = lanes.int_array(x, "x")
        mults, shifts = lanes.channel_params(operands.get("mult"), operands.get("shift"),
                                             x.shape[-1])
        return lanes.requantize(x, mults, shifts, p.zp, round_even=p.round_even)
    return lanes.requantize(x, p.mult, p.shift, p.zp, round_even=p.round_even)


def _residual(x, p: ResidualParams, operands):
    if operands.get("residual") is None:
        raise ValueError("the residual stage needs a residual tensor")
    if p.residual_op == "scaled":
        x = lanes.int_array(x, "x")
        if x.size and (x.min() < INT8_MIN or x.max() > INT8_MAX):
            raise ValueError(f"the residual stage's scaled add takes int8 x, not values in "
                             f"[{x.min()}, {x.max()}]: requantize to int8 before it")
        return lanes.residual_scaled(x, operands["residual"], p.res_x_mult, p.res_r_mult,
                                     p.res_shift, p.res_x_zp, p.res_r_zp, p.res_zp, p.res_lo,
                                     p.res_hi)
    op = lanes.residual_max if p.residual_op == "max" else lanes.residual_add
    return op(x, operands["residual"])


def _scaled(p: ResidualParams) -> bool:
    return p.residual_op == "scaled"


def _residual_inputs(p: ResidualParams) -> tuple[int, int]:
    # The scaled add multiplies ``x - res_x_zp`` (10 bits for an int8 x) by a 32-bit
    # multiplier: two MULT18X18D, not the four a 33-bit x would need. x is int8 wherever the
    # compiler makes one (a qadd's inputs are quantized tensors); add and max take any int32.
    return (INT8_MIN, INT8_MAX) if p.residual_op == "scaled" else (INT32_MIN, INT32_MAX)


def _residual_range(lo: int, hi: int, p: ResidualParams) -> tuple[int, int]:
    return (p.res_lo, p.res_hi) if p.residual_op == "scaled" else (INT8_MIN, INT8_MAX)


def _per_channel(p: RequantParams) -> bool:
    return p.per_channel


def _per_tensor(p: RequantParams) -> bool:
    return not p.per_channel


#: The stages, in the canonical chain order (:data:`hwgen.config.EPILOGUE_STAGES` is their
#: names): the order the compiler fuses graph ops in.
STAGES: tuple[StageSpec, ...] = (
    StageSpec(
        name="bias", doc="x = sat32(x + bias[col])", op="bias_add", params=None,
        # Not written from the stage's parameters: a kernel that skips all-zero A tiles
        # (fusion.kernels.gemm.skip) subtracts the A zero point at the array's edge instead of
        # folding it into the bias, and writes (then clears) it itself.
        regs=(Reg("a_zp", 15, 9, True,
                  "A operand zero point, subtracted from every A operand as it enters the "
                  "array (9-bit operands): a skipped all-zero-point A tile then contributes "
                  "exactly nothing. 0 (no subtraction) after reset",
                  lambda p: 0, lambda p: False),),
        reads=(ERead("bias", "bias", BIAS_ROW, "bias"),), int8_out=False, reference=_bias,
        latency=3),
    StageSpec(
        name="requant",
        doc="x = sat8(((x * mult + round) >> shift) + zp), round = 1 << (shift - 1) (0 when "
            "shift is 0), an arithmetic shift: rounding half toward +inf; with round_even, "
            "exact halves round to even. Per channel, lane c's mult and shift come from the "
            "bias group's rows",
        op="requant", params=RequantParams,
        regs=(Reg("req_mult", 0, 32, True, "requantize multiplier, signed 32-bit",
                  lambda p: p.mult, _per_tensor),
              Reg("req_shift", 1, 6, False, "requantize right shift, 0..63",
                  lambda p: p.shift, _per_tensor),
              Reg("req_zp", 2, 32, True, "requantize output zero point, signed",
                  lambda p: p.zp),
              Reg("req_mode", 5, 2, False,
                  f"bit 0: per-channel requantize; lane c's multiplier is then read from "
                  f"epilogue row `bias + {REQ_MULT_ROW}` and its shift from row "
                  f"`bias + {REQ_SHIFT_ROW}`: a column block's bias, multipliers and shifts "
                  f"sit together as a group of rows. Bit 1: round exact halves to even",
                  lambda p: int(p.per_channel) | int(p.round_even) << 1)),
        reads=(ERead("pc_mult", "bias", REQ_MULT_ROW, "mult", _per_channel),
               ERead("pc_shift", "bias", REQ_SHIFT_ROW, "shift", _per_channel)),
        int8_out=True, reference=_requant, latency=7),
    StageSpec(
        name="relu", doc="x = max(x, 0)", op="relu", params=None, regs=(), reads=(),
        int8_out=False, reference=lambda x, p, o: lanes.relu(x),
        out_range=lambda lo, hi, p: (max(lo, 0), max(hi, 0))),
    StageSpec(
        name="clamp", doc="x = min(max(x, clamp_lo), clamp_hi)", op="clamp",
        params=ClampParams,
        regs=(Reg("clamp_lo", 3, 32, True, "clamp lower bound, signed 32-bit",
                  lambda p: p.clamp_lo),
              Reg("clamp_hi", 4, 32, True, "clamp upper bound, signed 32-bit",
                  lambda p: p.clamp_hi)),
        reads=(), int8_out=False,
        reference=lambda x, p, o: lanes.clamp(x, p.clamp_lo, p.clamp_hi),
        out_range=lambda lo, hi, p: (min(max(lo, p.clamp_lo), p.clamp_hi),
                                     min(max(hi, p.clamp_lo), p.clamp_hi))),
    StageSpec(
        name="residual",
        doc="x = sat8(x + res[row, col]) (an int8 tensor, sign-extended); with residual_op "
            "max, sat8(max(x, res[row, col])): saturated either way, so that the stage always "
            "ends in int8; chains of max passes make max pooling. With residual_op scaled (an "
            "int8 x), x = min(max(rne(((x - res_x_zp) * res_x_mult + (r - res_r_zp) * "
            "res_r_mult) / 2**res_shift) + res_zp, res_lo), res_hi), rounding half to even: "
            "the add of two quantized tensors in the output's scale",
        op="qadd", params=ResidualParams,
        regs=(Reg("res_mode", 6, 2, False,
                  "0: `sat8(x + r)`; 1: `sat8(max(x, r))` (chains of such passes make max "
                  "pooling); 2: the scaled add of two quantized tensors, x int8 "
                  "(registers `res_*`)",
                  lambda p: RESIDUAL_OPS.index(p.residual_op)),
              Reg("res_x_mult", 7, 32, True, "scaled add: multiplier of `x - res_x_zp`",
                  lambda p: p.res_x_mult, _scaled),
              Reg("res_r_mult", 8, 32, True, "scaled add: multiplier of `r - res_r_zp`",
                  lambda p: p.res_r_mult, _scaled),
              Reg("res_shift", 9, 6, False,
                  "scaled add: right shift of the sum, rounding half to even",
                  lambda p: p.res_shift, _scaled),
              Reg("res_x_zp", 10, 9, True, "scaled add: zero point of x",
                  lambda p: p.res_x_zp, _scaled),
              Reg("res_r_zp", 11, 9, True, "scaled add: zero point of the residual",
                  lambda p: p.res_r_zp, _scaled),
              Reg("res_zp", 12, 9, True, "scaled add: output zero point",
                  lambda p: p.res_zp, _scaled),
              Reg("res_lo", 13, 8, True, "scaled add: lower bound of the output",
                  lambda p: p.res_lo, _scaled),
              Reg("res_hi", 14, 8, True, "scaled add: upper bound of the output",
                  lambda p: p.res_hi, _scaled)),
        reads=(ERead("res", "res", 0, "residual"),), int8_out=True, reference=_residual,
        out_range=_residual_range, latency=7, in_range=_residual_inputs),
)

#: The stage names, in the canonical chain order.
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)
#: Stage name -> its spec.
SPECS: dict[str, StageSpec] = {spec.name: spec for spec in STAGES}
#: Rows of one column block's bias group: the bias vector and the per-channel rows after it.
BIAS_GROUP_ROWS = 1 + max(r.offset for s in STAGES for r in s.reads if r.base == "bias")
#: The kernel operands the stages read from the epilogue scratchpad.
OPERANDS = tuple(dict.fromkeys(r.operand for s in STAGES for r in s.reads))


def spec(name: str) -> StageSpec:
    """The spec of stage ``name``.

    Raises
    ------
    ValueError
        If no stage has that name, naming the known ones.
    """
    try:
        return SPECS[name]
    except KeyError:
        raise ValueError(f"unknown epilogue stage {name!r}; the known stages are "
                         f"{', '.join(STAGE_NAMES)}") from None


def epilogue_latency(chain: tuple[str, ...]) -> int:
    """Cycles a beat takes through the stage registers of ``chain``."""
    return sum(SPECS[name].latency for name in chain)


def epilogue_credits(chain: tuple[str, ...]) -> int:
    """Beats the epilogue of ``chain`` holds at most (in its stage registers and the queue
    after them, :class:`hwgen.gateware.epilogue.EpiloguePipeline`): its registers and one
    more, so that a beat enters in every cycle while none waits (the credit a beat frees
    comes back the cycle after it leaves)."""
    return epilogue_latency(chain) + 1


def check_inputs(stages: tuple[str, ...], params: Any, lo: int = INT32_MIN,
                 hi: int = INT32_MAX) -> None:
    """Refuse a chain in which a stage can get inputs its gateware does not compute exactly.

    Parameters
    ----------
    stages : tuple of str
        The chain, in order.
    params : EpilogueParams
        Its parameters (``params.stage(name)`` is a stage's record).
    lo, hi : int
        The range of the chain's input (any int32 for an accumulator, int8 for an int8
        tensor).

    Raises
    ------
    ValueError
        Naming the stage, the range it can get, the range it takes, and the fix.
    """
    for name in stages:
        if name not in SPECS:
            return  # not a stage: check_stages (hwgen.reference) names it
        s, p = SPECS[name], params.stage(name)
        if s.in_range is not None:
            want_lo, want_hi = s.in_range(p)
            if lo < want_lo or hi > want_hi:
                raise ValueError(
                    f"the {name} stage takes inputs in [{want_lo}, {want_hi}] with these "
                    f"parameters, but the chain ({', '.join(stages)}) can give it "
                    f"[{lo}, {hi}]: requantize to int8 before it")
        lo, hi = s.output_range(lo, hi, p)


def _check() -> None:
    """The records agree with each other and with the config; a new stage that breaks this
    fails at import, naming what to fix."""
    if len(set(STAGE_NAMES)) != len(STAGE_NAMES):
        raise ImportError(f"two stages share a name: {STAGE_NAMES}")
    regs = [r for s in STAGES for r in s.regs]
    reads = [r for s in STAGES for r in s.reads]
    for what, values in (("control registers share a name", [r.name for r in regs]),
                         ("control registers share a number", [r.csr for r in regs]),
                         ("scratchpad reads share a name", [r.name for r in reads])):
        if len(set(values)) != len(values):
            raise ImportError(f"two {what}: {values}")
    for r in reads:
        if r.base not in ("bias", "res"):
            raise ImportError(f"scratchpad read {r.name!r} is relative to {r.base!r}; a beat "
                              f"carries the row pointers 'bias' and 'res'")
    owners: dict[str, str] = {}
    for s in STAGES:
        for f in fields(s.params) if s.params else ():
            if f.name in owners or f.name in SPECS:
                raise ImportError(f"parameter {f.name!r} of stage {s.name!r} is also "
                                  f"{'a stage' if f.name in SPECS else 'of ' + owners[f.name]}; "
                                  f"EpilogueParams needs one name per parameter")
            owners[f.name] = s.name


_check()
