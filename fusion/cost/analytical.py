"""The analytical cost model: cycles from the hardware description, not from measurements.

:func:`estimate` walks a kernel's program, instruction by instruction in program order,
through :class:`~fusion.cost.machine.Machine`, whose rules are the timing of each unit of the
gateware (see there). The program is not rendered: the walk reads the context the template
renders (the addresses do not matter, so the regions are dummies) and follows the template's
macros over it (:mod:`fusion.cost.template_walk`); a program built otherwise (convolutions,
windows) is walked instruction by instruction (:func:`estimate_program`).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fusion.cost.activations import row_activations
from fusion.cost.machine import Machine
from fusion.cost.memory import MemoryModel
from fusion.cost.model import CostModel, Features, placement_of
from fusion.cost.template_walk import walk_gemm, walk_pass
from fusion.kernels.codegen import load_row_bytes
from fusion.kernels.epilogue import DT_BYTES
from fusion.kernels.layout import GemmDims, Region, place
from hwgen.config import VariantConfig
from hwgen.isa import NUM_REGS, REG_BITS, Dst, Dt, Op, WMode, window_words
from hwgen.platform import PlatformConfig
from hwgen.reference import EpilogueParams, output_dtype
from hwgen.timing import window_columns


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
        Cycles the load engine is busy (loads overlap: counted once).
    bytes_loaded, bytes_stored : int
        Bytes the loads read and the stores write.
    stall_epilogue : int
        Cycles tile-ending slices are held by the one-draining-tile rule.
    gemm_cycles : int
        Cycles until the GEMM's last tile is stored (all of ``cycles`` when fused).
    instret : int
        Instructions the program retires (the ``instret`` counter).
    """

    cycles: int
    k_slices: int
    load_busy: int
    bytes_loaded: int
    bytes_stored: int
    stall_epilogue: int
    gemm_cycles: int
    instret: int


#: The machines made while :func:`walk_totals` records (None: not recording).
_RECORDING: contextvars.ContextVar[list[Machine] | None] = contextvars.ContextVar(
    "hwgen_analytical_recording", default=None)


def _machine(config: VariantConfig, platform: PlatformConfig | None) -> Machine:
    """The machine of ``config`` on ``platform``'s memory (the ideal memory if None)."""
    m = Machine(config, MemoryModel.for_platform(platform, config.port_bytes))
    recording = _RECORDING.get()
    if recording is not None:
        recording.append(m)
    return m


def walk_totals(f: Features, platform: PlatformConfig | None = None,
                ) -> tuple[int, dict[str, int] | None]:
    """A kernel's analytical cycles (``f.analytical_cycles``) and its walk's totals
    (:attr:`Machine.TOTALS`: bytes moved, LOADs, drains, DRAM words by class), for any kind;
    on a DRAM whose addresses the walk knew (a program's), also the rows its reads and its
    writes open (``acts_load``, ``acts_store``: :func:`fusion.cost.activations.
    row_activations`).

    The totals are None when the kind's walk did not run here (kinds that cache their
    cycles by program: the convolution and window kernels, after their first estimate).
    """
    machines: list[Machine] = []
    token = _RECORDING.set(machines)
    try:
        cycles = f.analytical_cycles(platform)
    finally:
        _RECORDING.reset(token)
    if len(machines) != 1:
        return cycles, None
    m = machines[0]
    totals = {name: getattr(m, name) for name in Machine.TOTALS}
    if m.memory is not None and m.accesses:
        totals["acts_load"], totals["acts_store"] = row_activations(
            m.accesses, m.memory.figures, m.memory.refresh_divisor)
    return cycles, totals


def estimate(f: Features, platform: PlatformConfig | None = None) -> Estimate:
    """Walk a GEMM kernel's program through :class:`Machine`; see the module docstring.

    ``f`` is the GEMM's features (:class:`fusion.kernels.gemm.features.GemmFeatures`);
    ``platform`` the memory behind the port (:mod:`fusion.cost.memory`; ideal if None).
    """
    dims = f.dims
    m = _machine(f.config, platform)
    final_lanes = output_dtype(f.stages).itemsize
    if f.fused or not f.stages:
        walk_gemm(m, dims, f, f.stages, final_lanes)
        gemm_cycles = m.idle
    else:
        walk_gemm(m, dims, f, (), 4)
        gemm_cycles = m.idle
        src = "i32"
        params = EpilogueParams(per_channel=f.per_channel, residual_op=f.residual_op)
        for stage, dt in zip(f.stages, f.pass_dtypes, strict=True):
            walk_pass(m, dims, (stage,), src, dt, params)
            src = dt
    m.wait(load=True, feed=True, epi=True)  # wait 7; halt
    cycles = m.done()  # halt retires after the wait; done the cycle after
    return Estimate(cycles=cycles, k_slices=f.k_slices, load_busy=m.load_busy,
                    bytes_loaded=m.bytes_loaded, bytes_stored=m.bytes_stored,
                    stall_epilogue=m.stall, gemm_cycles=gemm_cycles,
                    instret=m.instret + 1)  # and the halt


def _dt(dtype: str) -> str:
    return "i8" if dtype in ("int8", "i8") else "i32"


def estimate_pass(config: VariantConfig, M: int, N: int, *, stages: Sequence[str],  # noqa: N803
                  params: EpilogueParams, src_dtype: str, out_dtype: str,
                  platform: PlatformConfig | None = None) -> int:
    """Cycles of a standalone pass kernel (``fusion.kernels.epipass.kind.compiled_pass``)."""
    m = _machine(config, platform)
    walk_pass(m, GemmDims(config, M, 1, N), tuple(stages), _dt(src_dtype), _dt(out_dtype), params)
    m.wait(load=True, feed=True, epi=True)
    return m.done()


def estimate_max(config: VariantConfig, M: int, N: int, n_inputs: int,  # noqa: N803
                 platform: PlatformConfig | None = None) -> int:
    """Cycles of an element-wise max kernel: ``n_inputs - 1`` chained residual-max passes."""
    m = _machine(config, platform)
    dims = GemmDims(config, M, 1, N)
    params = EpilogueParams(residual_op="max")
    for _ in range(n_inputs - 1):
        walk_pass(m, dims, ("residual",), "i8", "i8", params)
    m.wait(load=True, feed=True, epi=True)
    return m.done()


def estimate_program(config: VariantConfig, instrs: Sequence[Any],
                     platform: PlatformConfig | None = None,
                     flags: Iterable[bool] = ()) -> int:
    """Cycles of a program, by running its instructions one by one through
    :class:`Machine` (registers and loops interpreted, every timing rule the machine's): for
    kernels whose programs are not a fixed nest of phases (the window convolution, whose
    rows differ by their padding). Exact where each instruction's rule is; linear in the
    instructions retired.

    ``flags``: the tile flags the program's flag loads read, in order (a program that skips
    all-zero tiles branches on them: its cycles depend on the data).
    """
    m = _machine(config, platform)
    flag_values = iter(flags)
    queued: list[bool] = []
    geom: dict[str, int] = {}  # the last WCFG
    regs = [0] * NUM_REGS
    pc, mask = 0, (1 << REG_BITS) - 1
    lane = {Dt.I32: DT_BYTES["i32"], Dt.I8: DT_BYTES["i8"]}
    while True:
        ins = instrs[pc]
        op, get = ins.op, ins.get
        pc += 1
        if op is Op.HALT:  # after the program's final wait: done the cycle after
            return m.done()
        if op is Op.WAIT:
            u = get("units")
            m.wait(load=bool(u & 1), feed=bool(u & 2), epi=bool(u & 4), left=get("left"))
        elif op is Op.LOAD and get("dst") == Dst.Z:
            words = get("count") * get("len")
            m.flag_load(words, pattern=(get("count"), get("len"), regs[get("stride")]),
                        addr=regs[get("ext")])
            for _ in range(words):
                value = next(flag_values, None)
                if value is None:
                    raise ValueError("the program loads more tile flags than were given")
                queued.append(bool(value))
        elif op is Op.BZT:
            m.bzt()  # refuses a BZT with no flag loaded
            if queued.pop(0):
                pc = get("target")
        elif op is Op.LOAD:
            m.load(get("count") * get("len") * config.port_bytes,
                   load_row_bytes(config, get("dst")),
                   pattern=(get("count"), get("len"), regs[get("stride")]),
                   addr=regs[get("ext")])
        elif op is Op.LOADW:
            words = window_words(config.rows, get("shift"), get("step"))
            m.load(get("count") * words * config.port_bytes, config.rows, row_words=words,
                   addr=regs[get("ext")], pattern=(get("count"), words, words))
        elif op is Op.MATMUL:
            m.matmul(get("k"), bool(get("last")), lane[get("dt")], bool(get("tr")),
                     out=regs[get("out")], zf=bool(get("zf")))
        elif op is Op.EPIPASS:
            m.epipass(get("rows"), lane[get("dt")], out=regs[get("out")])
        elif op is Op.WINDOW:
            columns = window_columns(
                mode=WMode(geom.get("mode", 0)).name.lower(),
                **{f: geom.get(f, 0) for f in ("kh", "kw", "stride", "hin", "win")},
                pos=regs[get("pos")], count=get("count"), ow=get("ow"))
            m.window(columns, lane[get("dt")], bool(get("tr")), out=regs[get("out")])
        elif op is Op.WCFG:
            geom = dict(ins.args)
            m.instrs(1)
        else:
            m.instrs(1)
            if op is Op.LI:
                regs[get("rd")] = get("imm") & mask
            elif op is Op.ADDI:
                regs[get("rd")] = (regs[get("rs")] + get("imm")) & mask
            elif op is Op.BNZD:
                regs[get("rc")] = (regs[get("rc")] - 1) & mask
                if regs[get("rc")]:
                    pc = get("target")


def program_or_template(config: VariantConfig, platform: PlatformConfig | None,
                        instructions: Callable[[], tuple | None],
                        template: Callable[[], int]) -> int:
    """A kind's analytical cycles: on a DRAM port the walk of its built program
    (``instructions``, :func:`built_instructions` of the kernel at its placement), whose
    addresses say which bank each store and LOAD falls in; the ``template``'s walk on the
    ideal memory (exact there, and cheaper) or when the program cannot be built."""
    if platform is not None and platform.is_dram:
        instrs = instructions()
        if instrs is not None:
            return estimate_program(config, instrs, platform)
    return template()


def built_instructions(features: Features, sizes: Mapping[str, int],
                       build: Callable[[dict[str, Region]], Any]) -> tuple | None:
    """The instructions of the program ``build`` makes (a kind's
    :class:`~fusion.kernels.protocol.Build`) over the kernel's regions (``sizes``: name ->
    bytes), for :func:`estimate_program`: at ``features.placement`` (a plan's placement that
    does not fit the regions is an error, never a fallback), or packed from word 0 for a
    kernel built alone. None when it cannot be built (a program longer than the variant's
    instruction memory: the caller walks the template instead, and building it is refused
    where it would run)."""
    at = placement_of(features)
    placed = place(features.config, sizes, at) if at else None
    try:
        built = build(placed or place(features.config, sizes))
    except ValueError:
        return None
    return tuple(built.program.instrs)


class AnalyticalModel(CostModel):
    """Cycles from the hardware description, nothing fitted: each kind's features walk its
    program's phases (:meth:`fusion.cost.model.Features.analytical_cycles`, which calls
    :func:`estimate`, :func:`estimate_pass` or :func:`estimate_max`).

    Parameters
    ----------
    platform : PlatformConfig, optional
        The memory behind the port: the ideal memory by default (exact), or a DRAM
        platform, whose port loads and stores share (:mod:`fusion.cost.memory`; GEMMs,
        passes and maxes there are priced by the walk of their program where it lies,
        :attr:`fusion.cost.model.Features.placement`).
    """

    name = "analytical"
    platform: PlatformConfig | None = None

    def __init__(self, platform: PlatformConfig | None = None) -> None:
        self.platform = platform

    def predict(self, features: Features) -> float:
        return float(features.analytical_cycles(self.platform))

    def explain(self, features: Features) -> Estimate:
        """A GEMM's template walk with its parts: :meth:`predict` itself on the ideal
        memory; on a DRAM port :meth:`predict` walks the built program instead, so the
        cycles here may differ from it there."""
        return estimate(features, self.platform)
