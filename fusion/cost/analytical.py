"""The analytical cost model: cycles from the hardware description, not from measurements.

:func:`estimate` walks a kernel's microcode phases in program order through
:class:`~fusion.cost.machine.Machine`, whose rules are the timing of each unit of the
gateware (see there). The phases are those of the templates:

- ``gemm.j2``: CSR writes, the bias load, the first super tile's loads; then, double
  buffered, per super tile ``loads(t+1) [wait 4; load R(t+1)] matmuls(t) after; wait 3`` (the
  loads of the next super tile overlap this one's matmuls, and a step costs the larger of
  the two plus the exposed instructions), or single buffered
  ``matmuls(t) after; wait 2; [wait 4; load R(t+1)] loads(t+1); wait 1``;
- ``epilogue_pass.j2`` (unfused only): per stage, chunks of tiles loaded into the epilogue
  scratchpad (double buffered when two fit) and streamed through it at the store rate.

The super tiles come from :mod:`fusion.cost.schedule`; the pass chunking from
:func:`fusion.kernels.epilogue.pass_context`. Instruction counts per phase follow the templates
as they are written; a template change that adds instructions on a critical path shows up as
model error in calibration (``sim.calibrate``), and a change in what is loaded shows up in
the test that compares this model's bytes with the program's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fusion.cost.machine import Machine
from fusion.cost.model import CostModel, Features
from fusion.cost.schedule import Step, schedule
from fusion.kernels.epilogue import DT_BYTES, pass_context, reads_bias_region
from fusion.kernels.gemm.loops import gemm_context
from fusion.kernels.layout import GemmDims, Region
from hwgen.config import VariantConfig
from hwgen.reference import EpilogueParams, output_dtype


@dataclass(frozen=True)
class Estimate:
    """A prediction and where its cycles go.

    Attributes
    ----------
    cycles : int
        Predicted ``cycles`` counter.
    k_slices : int
        Slices through the array (the ``array_busy`` counter, exact).
    load_busy : int
        Cycles the load engine is busy, summed over loads.
    bytes_loaded, bytes_stored : int
        Bytes the loads read and the stores write.
    stall_epilogue : int
        Cycles tile-ending slices are held by the one-draining-tile rule.
    gemm_cycles : int
        Cycles until the GEMM's last tile is stored (all of ``cycles`` when fused).
    """

    cycles: int
    k_slices: int
    load_busy: int
    bytes_loaded: int
    bytes_stored: int
    stall_epilogue: int
    gemm_cycles: int


def _grid(tme: int, tne: int, last: bool, stages: tuple[str, ...],
          order: str) -> dict[str, int]:
    """The instructions of one super tile's matmul grid (macro ``grid`` of ``common.j2``):
    the matmul, the ``addi`` of each operand register that steps in the inner loop and a
    branch per inner iteration; a counter, the adjusts and a branch per outer iteration."""
    regs = {"a", "b"}
    if last:
        regs |= {"out"} | {"bias" for s in stages if s == "bias"} | {
            "res" for s in stages if s == "residual"}
    inner = regs & ({"b", "out", "bias", "res"} if order == "mn" else {"a", "out", "res"})
    n_outer, n_inner = (tme, tne) if order == "mn" else (tne, tme)
    return {"n_outer": n_outer, "n_inner": n_inner, "setup": int(n_outer > 1),
            "per_inner": 1 + (len(inner) + 1 if n_inner > 1 else 0),
            "per_outer": int(n_inner > 1) + (len(regs) + 1 if n_outer > 1 else 0)}


def _gemm(m: Machine, dims: GemmDims, f: Features, stages: tuple[str, ...],
          lane_bytes: int) -> None:
    """The phases of ``gemm.j2``: prologue loads, then per super tile (double buffered)
    ``loads(t+1) [wait 4; load R(t+1)] matmuls(t) after wait 3``, or (single buffered)
    ``matmuls(t) after wait 2 [wait 4; load R(t+1)] loads(t+1) wait 1``."""
    c, R, C = dims.config, dims.R, dims.C
    double, residual = f.tiling.double_buffer, "residual" in stages
    per_channel = f.per_channel
    params = EpilogueParams(per_channel=per_channel)
    reads_bias = reads_bias_region(stages, params)
    # The prologue as gemm.j2 writes it, from the same context (the addresses do not matter):
    # the CSR writes, the bias load (two register writes and the load), the register setup.
    dummy = Region("x", 0, 1)
    regions = {"a": dummy, "b": dummy} | ({"bias": dummy} if reads_bias else {}) | (
        {"residual": dummy} if residual else {})
    ctx = gemm_context(dims, f.tiling, stages, regions, params=params, out=dummy,
                       out_dt="i8" if lane_bytes == 1 else "i32", halt=False)
    if ctx["csrs"]:
        m.wait(epi=True)
        m.instrs(len(ctx["csrs"]))
    if ctx["bias_load"]:
        m.load(ctx["bias_load"]["len"] * dims.W, c.e_row_bytes, setup=2)
    m.instrs(len(ctx["setup"]))
    runs, first, last_step = schedule(dims, f.tiling)

    def loads_of(step: Step, first: bool) -> None:
        loads, tme, tne, _, last = step
        for nbytes, row, count in loads:
            m.load(nbytes, row, setup=(not first) + (count > 1))
        if residual and last:
            if not first:
                m.wait(epi=True)  # the rows refilled were read by an earlier super tile
            m.load(tme * tne * R * C, C, setup=1 + (tme > 1))

    def matmuls(step: Step) -> None:
        _, tme, tne, kte, last = step
        m.matmuls(kte, last, lane_bytes, **_grid(tme, tne, last, stages, f.tiling.order))

    def super_tile(step: Step, nxt: Step) -> None:  # every super tile but the last
        if double:
            loads_of(nxt, False)
        matmuls(step)
        swaps = (len(nxt[0]) + (residual and nxt[4])) if double else 0
        # move the operand registers on
        m.instrs(2 + reads_bias + 3 * swaps)
        m.wait(load=double, feed=True)
        if not double:
            loads_of(nxt, False)
            m.wait(load=True)
        m.instrs(1)  # the loop branch

    def outer_iteration(inner: list) -> None:
        for block, reps in inner:
            m.repeat(reps, lambda block=block: [super_tile(*pair) for pair in block])

    loads_of(first, True)
    m.wait(load=True)
    for inner, count in runs:
        m.repeat(count, lambda inner=inner: outer_iteration(inner))
    matmuls(last_step)


def _pass(m: Machine, dims: GemmDims, stages: tuple[str, ...], src_dt: str, out_dt: str,
          params: EpilogueParams) -> None:
    """The phases of ``epilogue_pass.j2`` (memory to memory), with its chunking taken from
    :func:`fusion.kernels.epilogue.pass_context`."""
    c, W = dims.config, dims.W
    dummy = Region("x", 0, 1)
    ctx = pass_context(dims, stages=stages, params=params, src=dummy,
                       src_dt=src_dt, out=dummy, out_dt=out_dt,
                       bias=dummy if reads_bias_region(stages, params) else None,
                       residual=dummy if "residual" in stages else None)
    m.wait(epi=True)
    m.instrs(len(ctx["csrs"]))
    if ctx["bias_load"]:
        m.load(ctx["bias_load"]["len"] * W, c.e_row_bytes, setup=2)
    m.instrs(len(ctx["setup"]))
    in_row = c.e_row_bytes if ctx["in_dst"] == "e32" else c.cols
    double = ctx["double_buffer"]

    def load_chunk() -> None:
        m.load(ctx["in_len"] * W, in_row)
        m.instrs(1)
        if ctx["res_len"]:
            m.load(ctx["res_len"] * W, c.cols, setup=1)
            m.instrs(1)

    g = ctx["grid"]
    regs, inner = len(g["regs"]), sum(1 for r in g["regs"] if r["inner"])
    n_inner = g["n_inner"]
    per = 1 + (inner + 1 if n_inner > 1 else 0)
    per_outer = int(n_inner > 1) + (regs + 1 if g["n_outer"] > 1 else 0)
    after = 2 + bool(ctx["bias_step"]) + (3 if double else 0)  # addresses, swap, branch

    def chunk(prefetch: bool) -> None:
        if double:
            m.wait(load=True, epi=True)
            if prefetch:
                load_chunk()
        else:
            m.wait(epi=True)
            load_chunk()
            m.wait(load=True)
        m.instrs(regs + (g["n_outer"] > 1))

        def row() -> None:
            m.epipasses(n_inner, g["rows"], DT_BYTES[out_dt], per=per)
            m.instrs(per_outer)

        m.repeat(g["n_outer"], row)
        m.instrs(after)

    if double:
        load_chunk()
    m.repeat(ctx["n_outer"] * ctx["n_inner"] - 1, lambda: chunk(True))
    chunk(False)


def estimate(f: Features) -> Estimate:
    """Walk a GEMM kernel's phases through :class:`Machine`; see the module docstring.

    ``f`` is the GEMM's features (:class:`fusion.kernels.gemm.features.GemmFeatures`).
    """
    dims = f.dims
    m = Machine(f.config)
    final_lanes = output_dtype(f.stages).itemsize
    if f.fused or not f.stages:
        _gemm(m, dims, f, f.stages, final_lanes)
        gemm_cycles = m.idle
    else:
        _gemm(m, dims, f, (), 4)
        gemm_cycles = m.idle
        src = "i32"
        params = EpilogueParams(per_channel=f.per_channel)
        for stage, dt in zip(f.stages, f.pass_dtypes, strict=True):
            _pass(m, dims, (stage,), src, dt, params)
            src = dt
    m.wait(load=True, feed=True, epi=True)  # wait 7; halt
    cycles = m.seq + 1  # halt retires after the wait; done the cycle after
    return Estimate(cycles=cycles, k_slices=f.k_slices, load_busy=m.load_busy,
                    bytes_loaded=m.bytes_loaded, bytes_stored=m.bytes_stored,
                    stall_epilogue=m.stall, gemm_cycles=gemm_cycles)


def _dt(dtype: str) -> str:
    return "i8" if dtype in ("int8", "i8") else "i32"


def estimate_pass(config: VariantConfig, M: int, N: int, *, stages: Sequence[str],  # noqa: N803
                  params: EpilogueParams, src_dtype: str, out_dtype: str) -> int:
    """Cycles of a standalone pass kernel (``fusion.kernels.epipass.kind.compiled_pass``)."""
    m = Machine(config)
    _pass(m, GemmDims(config, M, 1, N), tuple(stages), _dt(src_dtype), _dt(out_dtype), params)
    m.wait(load=True, feed=True, epi=True)
    return m.seq + 1


def estimate_max(config: VariantConfig, M: int, N: int, n_inputs: int) -> int:  # noqa: N803
    """Cycles of an element-wise max kernel: ``n_inputs - 1`` chained residual-max passes."""
    m = Machine(config)
    dims = GemmDims(config, M, 1, N)
    params = EpilogueParams(residual_op="max")
    for _ in range(n_inputs - 1):
        _pass(m, dims, ("residual",), "i8", "i8", params)
    m.wait(load=True, feed=True, epi=True)
    return m.seq + 1


class AnalyticalModel(CostModel):
    """Cycles from the hardware description, nothing fitted: each kind's features walk its
    program's phases (:meth:`fusion.cost.model.Features.analytical_cycles`, which calls
    :func:`estimate`, :func:`estimate_pass` or :func:`estimate_max`)."""

    name = "analytical"

    def predict(self, features: Features) -> float:
        return float(features.analytical_cycles())

    def explain(self, features: Features) -> Estimate:
        """A GEMM's prediction with its parts."""
        return estimate(features)
