"""The analytical cost model: cycles from the hardware description, not from measurements.

:func:`estimate` walks a kernel's program, instruction by instruction in program order,
through :class:`~fusion.cost.machine.Machine`, whose rules are the timing of each unit of the
gateware (see there). The program is not rendered: the walk reads the context the template
renders (the addresses do not matter, so the regions are dummies) and follows the template's
macros over it:

- ``gemm.j2`` (:func:`fusion.kernels.gemm.loops.gemm_context`), per bias window's part
  (:func:`fusion.kernels.gemm.parts.program_parts`): the prologue (a wait for the part before;
  CSR writes, the bias load, the register setup), the first super tile's loads, the nest of hardware
  loops (a counter before each, a branch per iteration) over the super tiles: double
  buffered ``loads(t+1) [wait EPI; load R(t+1)] grid(t) after wait LOAD+FEED``, single
  buffered ``grid(t) after wait FEED [wait EPI; load R(t+1)] loads(t+1) wait LOAD``;
- ``epilogue_pass.j2`` (:func:`fusion.kernels.epilogue.pass_context`; unfused stages, pass and
  max kernels): per chunk of tiles, its loads and its grid of EPIPASSes, double buffered when
  two chunks fit;
- the ``grid`` of ``common.j2``: per register that steps, an ``addi`` per inner iteration
  and one per outer iteration where it moves, and the counters and branches of the loops
  (none for a loop of one iteration).

So every instruction is counted where the program has it, and the loads, MATMULs and
EPIPASSes are the program's. The programs go through
:func:`fusion.kernels.codegen.drop_redundant_li`, which leaves out an ``li`` that sets a
register to the value it holds; the walk does the same for the load stride ``r3`` of
``gemm.j2`` (the one such ``li`` that does not depend on where the regions are). What it
cannot know are coincidences of addresses: when passes are chained in one program (an unfused
GEMM, a max kernel), the next pass's setup ``li`` of an address the previous pass's pointer
happens to end at, or of the same scratchpad half, is dropped too; the estimate is then up to
three cycles a pass over.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fusion.cost.activations import row_activations
from fusion.cost.machine import Machine
from fusion.cost.memory import MemoryModel
from fusion.cost.model import CostModel, Features, placement_of
from fusion.kernels.codegen import load_row_bytes
from fusion.kernels.epilogue import DT_BYTES, pass_context, reads_bias_region
from fusion.kernels.gemm.parts import program_parts
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


def _load(m: Machine, c: VariantConfig, load: dict[str, Any], setup: int) -> None:
    """One LOAD of a context (``count`` segments of ``len`` words into ``dst``'s rows), after
    ``setup`` register instructions."""
    m.load(load["count"] * load["len"] * c.port_bytes,
           load_row_bytes(c, Dst[load["dst"].upper()]), setup=setup,
           pattern=(load["count"], load["len"], load.get("stride", load["len"])),
           source=(load["dst"], load.get("ext")))


def _grid(m: Machine, g: dict[str, Any], job: Callable[[], None]) -> None:
    """Macro ``grid`` of ``common.j2``: a register set per register not kept and the outer
    counter; per outer iteration the inner counter, the inner loop (the job, the registers
    that step and the branch) and the registers that adjust and the branch."""
    n_outer, n_inner, regs, looped = g["n_outer"], g["n_inner"], g["regs"], not g.get("banked")
    inner, outer = n_inner > 1 and looped, n_outer > 1 and looped  # banked: unrolled_grid
    m.grid(job, n_outer=n_outer, n_inner=n_inner,
           setup=sum(not r["keep"] for r in regs) + outer, head=int(inner),
           per_inner=sum(bool(r["inner"]) for r in regs) + inner,
           per_outer=sum(bool(r["adjust"]) for r in regs) + outer)


def _prologue(m: Machine, c: VariantConfig, ctx: dict[str, Any], waited: bool) -> None:
    """Macro ``prologue`` of ``common.j2``: CSR writes, the bias load (its two address
    registers set first), the register setup."""
    if ctx.get("refill"):
        m.wait(feed=True, epi=True)  # the previous bias window's jobs are stored
    elif ctx["csrs"] and not waited:
        m.wait(epi=True)
    m.instrs(len(ctx["csrs"]))
    if ctx["bias_load"]:
        _load(m, c, ctx["bias_load"], setup=2 + (ctx["bias_load"]["count"] > 1))
    m.instrs(len(ctx["setup"]))


def _gemm(m: Machine, dims: GemmDims, f: Features, stages: tuple[str, ...],
          lane_bytes: int) -> None:
    """``gemm.j2`` (or ``gemm_stream.j2``), walked over its parts' contexts (one per bias
    window; the addresses do not matter)."""
    c = dims.config
    params = EpilogueParams(per_channel=f.per_channel, residual_op=f.residual_op)
    dummy = Region("x", 0, 1)
    regions = {"a": dummy, "b": dummy} | (
        {"bias": dummy} if reads_bias_region(stages, params) else {}) | (
        {"residual": dummy} if "residual" in stages else {})
    kw = {"params": params, "out": dummy, "out_dt": "i8" if lane_bytes == 1 else "i32",
          "halt": False, "transposed": getattr(f, "kmajor_out", False)}
    for template, ctx in program_parts(dims, f.tiling, stages, regions, **kw):
        if template == "gemm_stream.j2":
            _stream(m, c, ctx, lane_bytes)
        else:
            _nest(m, c, ctx)


def _nest(m: Machine, c: VariantConfig, ctx: dict[str, Any]) -> None:
    """One part of ``gemm.j2``: its prologue, first loads and loop nest of super tiles."""
    double = ctx["double_buffer"]
    # The segment stride r3 holds at this point of the text: its li is left out of the
    # program when r3 holds it already (codegen.drop_redundant_li, which forgets every value
    # at a label, where a branch may arrive).
    stride: list[int | None] = [None]

    def label() -> None:
        stride[0] = None

    def load(ld: dict[str, Any], waited: bool) -> None:  # macro load of gemm.j2
        if ld["dst"] == "e8" and not waited:
            m.wait(epi=True)  # the residual rows refilled were read by an earlier super tile
        set_stride = ld["count"] > 1 and ld["stride"] != stride[0]
        if set_stride:
            stride[0] = ld["stride"]
        _load(m, c, ld, setup=bool(ld["set_ext"]) + set_stride)

    def grid(g: dict[str, Any]) -> None:
        if (g["n_outer"] > 1 or g["n_inner"] > 1) and not g.get("banked"):
            label()
        _grid(m, g, lambda: m.matmul(g["k"], bool(g["last"]), DT_BYTES[g["dt"]], bool(g["tr"])))

    def step(s: dict[str, Any]) -> None:  # macro step of gemm.j2
        if double:
            for ld in s["loads"]:
                load(ld, False)
        grid(s["grid"])
        m.instrs(len(s["after"]))
        if s["final"]:
            return
        if double:
            m.wait(load=True, feed=True)
        else:
            m.wait(feed=True)
            for ld in s["loads"]:
                load(ld, False)
            if s["loads"]:
                m.wait(load=True)

    def nest(nodes: list[dict[str, Any]]) -> None:  # macro nest of gemm.j2
        for node in nodes:
            if node["kind"] == "loop":
                m.instrs(1)  # the counter, then the label, the body and the branch
                m.repeat(node["count"],
                         lambda node=node: (label(), nest(node["body"]), m.instrs(1)))
            else:
                step(node)

    _prologue(m, c, ctx, waited=False)
    for ld in ctx["prologue_loads"]:
        load(ld, True)
    m.wait(load=True)
    nest(ctx["supertiles"])


def _stream(m: Machine, c: VariantConfig, ctx: dict[str, Any], lane_bytes: int) -> None:
    """``gemm_stream.j2``, walked over its context: the prologue, A and the first q-1 chunks,
    the column blocks' loop of unrolled chunks, and the peeled last block."""
    chunk_bytes = ctx["chunk_words"] * c.port_bytes
    b_row = load_row_bytes(c, Dst.B)

    def chunk(ch: dict[str, Any], more: bool) -> None:  # macro chunk
        m.instrs(1)  # the li of the chunk's row
        m.wait(load=True, left=ch["left"])
        m.matmul(ctx["kc"], ch["last"], lane_bytes, bool(ch["last"] and ctx["tr"]))
        if ch["load"] is not None:
            m.wait(feed=True, left=1)
            m.load(chunk_bytes, b_row, setup=1, source="b")  # its slot's li
            m.instrs(1)  # the B address moves on
        if ch["last"] and more:
            m.instrs(1 + ctx["has_bias"])

    def block(chunks: list[dict[str, Any]], more: bool) -> None:
        for ch in chunks:
            chunk(ch, more)

    _prologue(m, c, ctx, waited=False)
    if ctx["load_a"]:
        m.load(ctx["a_words"] * c.port_bytes, load_row_bytes(c, Dst.A), source="a")
    for _ in ctx["prologue_slots"]:
        m.load(chunk_bytes, b_row, setup=1, source="b")
        m.instrs(1)
    blocks = ctx["blocks"]
    if blocks > 2:
        m.instrs(1)  # the counter
        m.repeat(blocks - 1, lambda: (block(ctx["body"], True), m.instrs(1)))
    elif blocks == 2:
        block(ctx["body"], True)
    block(ctx["final"], False)


def _pass(m: Machine, dims: GemmDims, stages: tuple[str, ...], src_dt: str, out_dt: str,
          params: EpilogueParams) -> None:
    """``epilogue_pass.j2`` (memory to memory), walked over the context it renders."""
    c = dims.config
    dummy = Region("x", 0, 1)
    ctx = pass_context(dims, stages=stages, params=params, src=dummy,
                       src_dt=src_dt, out=dummy, out_dt=out_dt,
                       bias=dummy if reads_bias_region(stages, params) else None,
                       residual=dummy if "residual" in stages else None)
    double, g = ctx["double_buffer"], ctx["grid"]
    in_load = {"dst": ctx["in_dst"], "count": 1, "len": ctx["in_len"]}
    res_load = {"dst": "e8", "count": 1, "len": ctx["res_len"]}

    def load_chunk() -> None:  # the input, then its address moves on; the same for residual
        _load(m, c, in_load, setup=0)
        m.instrs(1)
        if ctx["res_len"]:
            _load(m, c, res_load, setup=1)  # its scratchpad row set first
            m.instrs(1)

    def chunk(prefetch: bool) -> None:
        if double:
            m.wait(load=True, epi=True)
            if prefetch:
                load_chunk()
        else:
            m.wait(epi=True)
            load_chunk()
            m.wait(load=True)
        _grid(m, g, lambda: m.epipass(g["rows"], DT_BYTES[g["dt"]]))
        if prefetch or not double:  # output and bias addresses move on; halves swap
            m.instrs(1 + bool(ctx["bias_step"]) + 3 * double)

    def rows(count: int) -> None:  # macro rows: a loop of chunks (none of one)
        m.instrs(count > 1)
        m.repeat(count, lambda: (chunk(True), m.instrs(count > 1)))

    looped = ctx["n_outer"] > 1  # a loop over rows of chunks (the bias rows restart)

    def outer(count: int) -> None:
        m.instrs(looped)
        m.repeat(count, lambda: (rows(ctx["n_inner"]),
                                 m.instrs((bool(ctx["bias_adjust"]) + 1) * looped)))

    m.wait(epi=True)  # the input was written by earlier jobs
    _prologue(m, c, ctx, waited=True)
    if not double:
        outer(ctx["n_outer"])
        return
    load_chunk()
    if looped:
        outer(ctx["n_outer"] - 1)
    if ctx["n_inner"] > 1:
        rows(ctx["n_inner"] - 1)
    chunk(False)


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
        _gemm(m, dims, f, f.stages, final_lanes)
        gemm_cycles = m.idle
    else:
        _gemm(m, dims, f, (), 4)
        gemm_cycles = m.idle
        src = "i32"
        params = EpilogueParams(per_channel=f.per_channel, residual_op=f.residual_op)
        for stage, dt in zip(f.stages, f.pass_dtypes, strict=True):
            _pass(m, dims, (stage,), src, dt, params)
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
    _pass(m, GemmDims(config, M, 1, N), tuple(stages), _dt(src_dtype), _dt(out_dtype), params)
    m.wait(load=True, feed=True, epi=True)
    return m.done()


def estimate_max(config: VariantConfig, M: int, N: int, n_inputs: int,  # noqa: N803
                 platform: PlatformConfig | None = None) -> int:
    """Cycles of an element-wise max kernel: ``n_inputs - 1`` chained residual-max passes."""
    m = _machine(config, platform)
    dims = GemmDims(config, M, 1, N)
    params = EpilogueParams(residual_op="max")
    for _ in range(n_inputs - 1):
        _pass(m, dims, ("residual",), "i8", "i8", params)
    m.wait(load=True, feed=True, epi=True)
    return m.done()


def estimate_program(config: VariantConfig, instrs: Sequence[Any],
                     platform: PlatformConfig | None = None) -> int:
    """Cycles of a program, by running its instructions one by one through
    :class:`Machine` (registers and loops interpreted, every timing rule the machine's): for
    kernels whose programs are not a fixed nest of phases (the window convolution, whose
    rows differ by their padding). Exact where each instruction's rule is; linear in the
    instructions retired."""
    m = _machine(config, platform)
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
                     out=regs[get("out")])
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
