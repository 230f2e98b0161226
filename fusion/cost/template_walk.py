"""The analytical model's walks of the microcode templates (:mod:`fusion.cost.analytical`): each
follows the template's macros over the context it renders, through
:class:`~fusion.cost.machine.Machine`, so that every instruction is counted where the program
has it:

- ``gemm.j2`` (:func:`fusion.kernels.gemm.loops.gemm_context`), per bias window's part
  (:func:`fusion.kernels.gemm.parts.program_parts`): the prologue (a wait for the part before;
  CSR writes, the bias load, the register setup), the first super tile's loads, the nest of hardware
  loops (a counter before each, a branch per iteration) over the super tiles: double
  buffered ``loads(t+1) [wait EPI; load R(t+1)] grid(t) after wait LOAD+FEED``, single
  buffered ``grid(t) after wait FEED [wait EPI; load R(t+1)] loads(t+1) wait LOAD``;
- ``gemm_stream.j2`` (:func:`fusion.kernels.gemm.stream.stream_context`): the prologue, A and
  the first chunks, then per column block its chunks (a counted WAIT, the MATMUL, a counted
  WAIT FEED and the next chunk's load; chunk 0 also the residual tile's, after a WAIT EPI);
- ``epilogue_pass.j2`` (:func:`fusion.kernels.epilogue.pass_context`; unfused stages, pass and
  max kernels): per chunk of tiles, its loads and its grid of EPIPASSes, double buffered when
  two chunks fit;
- the ``grid`` of ``common.j2``: per register that steps, an ``addi`` per inner iteration
  and one per outer iteration where it moves, and the counters and branches of the loops
  (none for a loop of one iteration).

The loads, MATMULs and EPIPASSes are the program's. The programs go through
:func:`fusion.kernels.codegen.drop_redundant_li`, which leaves out an ``li`` that sets a
register to the value it holds; the walk does the same for the load stride ``r3`` of
``gemm.j2`` (the one such ``li`` that does not depend on where the regions are). What it
cannot know are coincidences of addresses: when passes are chained in one program (an unfused
GEMM, a max kernel), the next pass's setup ``li`` of an address the previous pass's pointer
happens to end at, or of the same scratchpad half, is dropped too; the estimate is then up to
three cycles a pass over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fusion.cost.machine import Machine
from fusion.cost.model import Features
from fusion.kernels.codegen import load_row_bytes
from fusion.kernels.epilogue import DT_BYTES, pass_context, reads_bias_region
from fusion.kernels.gemm.parts import program_parts
from fusion.kernels.layout import GemmDims, Region
from hwgen.config import VariantConfig
from hwgen.isa import Dst
from hwgen.reference import EpilogueParams


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


def walk_gemm(m: Machine, dims: GemmDims, f: Features, stages: tuple[str, ...],
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
        if ch["res_load"]:  # the block's residual tile, once the tile before has read its rows
            m.wait(epi=True)
            m.load(ctx["res_words"] * c.port_bytes, load_row_bytes(c, Dst.E8),
                   source="residual")
            m.instrs(1)  # the residual address moves on
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


def walk_pass(m: Machine, dims: GemmDims, stages: tuple[str, ...], src_dt: str, out_dt: str,
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
