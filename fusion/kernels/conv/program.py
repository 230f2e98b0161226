"""The program of a window convolution: the context ``conv.j2`` renders.

Per column chunk (the ``tn`` column blocks whose weights fit the B scratchpad): load the
chunk's weights, the first output row's windows and residual tiles, then one *step* per
output row ``t``:

1. with the residual stage, once the epilogue has drained row ``t - 1`` (``wait EPI``), the
   residual tiles of row ``t + 1`` into the epilogue half row ``t - 1`` used;
2. per block ``j`` of the row: its matmuls (one per column block of the chunk, over all
   ``Kp`` rows of the block's windows), then the window loads of block ``j`` of row
   ``t + 1`` into the other A half (one LOADW per kernel position: ``Cin`` rows, lane ``r``
   at input pixel ``(ix0 + r*sx)``, padding lanes filled with the zero point), so that the
   loads of the next row run while this row's matmuls do;
3. the row bases move on (``r14`` input, ``r15`` output), and ``wait LOAD+FEED``: the next
   row's operands are in, and this row's matmuls have read theirs.

Every address is relative to the row bases, so rows with the same padding pattern have the
same code: consecutive repeats (a period of one or two rows, the halves alternating) become a
hardware loop, and repeats of those (the images of a batch) an outer loop
(:func:`compress`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fusion.kernels.codegen import Program, assemble_program, load_context, render
from fusion.kernels.conv.params import ConvGeometry, ConvParams
from fusion.kernels.epilogue import bias_load, csr_writes, reads_bias_region
from fusion.kernels.layout import GemmDims, Region, bias_group, bias_region_bytes
from hwgen.config import VariantConfig
from hwgen.isa import Dst, Unit
from hwgen.reference import output_dtype

#: Loop counters, innermost first (rows of an image, then images).
LOOP_REGS = ("r12", "r11")



@dataclass(frozen=True)
class Tap:
    """One kernel position's window load for one block: where its rows come from."""

    ext: int | None  # word address (below 0 possible: its lanes are masked); None: all fill
    shift: int
    step: int
    mask: int


def chunks(geo: ConvGeometry, tn: int) -> list[tuple[int, int]]:
    """``(first column block, blocks)`` of each column chunk of at most ``tn`` blocks."""
    return [(nb0, min(tn, geo.Nb - nb0)) for nb0 in range(0, geo.Nb, tn)]


def column_chunk(geo: ConvGeometry, residual: bool) -> int:
    """Column blocks per chunk: as many as the B scratchpad holds, and (with a residual) as
    the epilogue scratchpad's two halves of residual tiles allow; 0 when none fits."""
    c = geo.config
    tn = min(geo.Nb, c.spad_b_depth // geo.Kp)
    if residual:
        free = c.spad_e_depth - _bias_rows(geo)
        tn = min(tn, free // (2 * geo.bpr * geo.R))
    return max(tn, 0)


def _bias_rows(geo: ConvGeometry) -> int:
    p = geo.params
    if not reads_bias_region(p.stages, p.epilogue):
        return 0
    return _dims(geo).bias_region_rows(p.epilogue.per_channel)


def _dims(geo: ConvGeometry) -> GemmDims:
    return GemmDims(geo.config, geo.params.M, geo.params.K, geo.params.Cout)


def tap(geo: ConvGeometry, x: Region, t: int, j: int, ky: int, kx: int) -> Tap:
    """The window load of kernel position ``(ky, kx)`` for block ``j`` of output row ``t``."""
    p, R = geo.params, geo.R  # noqa: N806
    n, oy = divmod(t, p.OH)
    sy, sx = p.stride
    iy = oy * sy + ky - p.pads[0]
    if not 0 <= iy < p.H:  # a padding row: every lane is the fill
        return Tap(None, 0, 1, 0)
    ix0 = j * R * sx + kx - p.pads[1]
    mask = sum(1 << r for r in range(R) if 0 <= ix0 + r * sx < p.W)
    if not mask:
        return Tap(None, 0, 1, 0)
    p0 = (n * p.H + iy) * p.W + ix0  # the input pixel of lane 0
    lo = p0 // R
    return Tap(x.addr + lo * geo.cp, p0 - lo * R, sx, mask)


def _in_base(geo: ConvGeometry, x: Region, t: int) -> int:
    """``r14`` during row ``t``: the word address of the block of the row's first input
    pixel (the relative offsets need not be small, only equal between equal rows)."""
    p = geo.params
    n, oy = divmod(t, p.OH)
    return x.addr + ((n * p.H + oy * p.stride[0]) * p.W // geo.R) * geo.cp


def build_context(geo: ConvGeometry, regions: Mapping[str, Region], tn: int) -> dict[str, Any]:
    """The context of ``conv.j2`` for the placed ``regions`` (see the module docstring)."""
    c, p = geo.config, geo.params
    R, Kp, Nb, T = geo.R, geo.Kp, geo.Nb, geo.rows  # noqa: N806
    x, out = regions["x"], regions["out"]
    residual = "residual" in p.stages
    dt = "i8" if output_dtype(p.stages).itemsize == 1 else "i32"
    out_tw = R * c.cols * (1 if dt == "i8" else 4) // c.port_bytes
    res_tw = R * c.cols // c.port_bytes
    group = bias_group(p.epilogue.per_channel)
    e_base = _bias_rows(geo)
    mask_bits = sum(c.stage_bit(s) for s in p.stages)
    taps = [(ky, kx) for ky in range(p.kh) for kx in range(p.kw)]

    def out_base(t: int, nb0: int) -> int:
        return out.addr + (t * geo.bpr * Nb + nb0) * out_tw

    def loads_of_row(t: int, j: int, half: int, r14: int) -> list[dict]:
        items = []
        for n, (ky, kx) in enumerate(taps):
            w = tap(geo, x, t, j, ky, kx)
            # an all-fill load reads one word a row wherever r14 points
            ext = 0 if w.ext is None else w.ext - r14
            items += [{"kind": "addi", "rd": "r1", "rs": "r14", "imm": ext},
                      {"kind": "li", "rd": "r2", "imm": half * geo.a_half + j * Kp + n * p.Cin},
                      {"kind": "loadw", "count": p.Cin, "shift": w.shift, "step": w.step,
                       "mask": w.mask}]
        return items

    def residual_loads(t: int, half: int, nb0: int, tn_c: int, r15: int) -> list[dict]:
        items = []
        for j in range(geo.bpr):
            ext = regions["residual"].addr + ((t * geo.bpr + j) * Nb + nb0) * res_tw
            items.append({"kind": "load", **load_context(
                c, Dst.E8, {"base": "r15", "off": ext - r15},
                e_base + half * geo.bpr * tn * R + j * tn_c * R, 1, tn_c * res_tw, 0,
                f"residual tiles of block {j}")})
        return items

    body: list[dict] = []
    for nb0, tn_c in chunks(geo, tn):
        what = f"column blocks {nb0}..{nb0 + tn_c - 1}"
        if nb0:
            body.append({"kind": "wait", "units": [Unit.LOAD, Unit.FEED, Unit.EPI],
                         "why": "the last chunk is done with B and the epilogue halves"})
        body.append({"kind": "comment", "text": what})
        body.append({"kind": "load", **load_context(
            c, Dst.B, regions["b"].addr + nb0 * Kp * c.cols // c.port_bytes, 0, 1,
            tn_c * Kp * c.cols // c.port_bytes, 0, f"weights of {what}")})
        r14, r15 = _in_base(geo, x, 0), out_base(0, nb0)
        body += [{"kind": "li", "rd": "r14", "imm": r14}, {"kind": "li", "rd": "r15", "imm": r15}]
        if residual:
            body += residual_loads(0, 0, nb0, tn_c, r15)
        for j in range(geo.bpr):
            body += loads_of_row(0, j, 0, r14)
        body.append({"kind": "wait", "units": [Unit.LOAD], "why": "the first row's operands"})
        steps = []
        for t in range(T):
            half, nxt = t % 2, t + 1 < T
            step: list[dict] = []
            if residual and nxt:
                step.append({"kind": "wait", "units": [Unit.EPI],
                             "why": "the residual half of the row before is drained"})
                step += residual_loads(t + 1, 1 - half, nb0, tn_c, r15)
            for j in range(geo.bpr):
                for nbl in range(tn_c):
                    step += [
                        {"kind": "li", "rd": "r6", "imm": half * geo.a_half + j * Kp},
                        {"kind": "li", "rd": "r7", "imm": nbl * Kp},
                        {"kind": "addi", "rd": "r8", "rs": "r15",
                         "imm": (j * Nb + nbl) * out_tw},
                        {"kind": "li", "rd": "r9", "imm": (nb0 + nbl) * group},
                        {"kind": "li", "rd": "r10",
                         "imm": e_base + half * geo.bpr * tn * R + (j * tn_c + nbl) * R
                         if residual else 0},
                        {"kind": "matmul", "k": Kp, "mask": f"{mask_bits:#b}", "dt": dt,
                         "tr": p.kmajor_out}]
                if nxt:
                    step += loads_of_row(t + 1, j, 1 - half, r14)
            if nxt:
                d14, d15 = _in_base(geo, x, t + 1) - r14, out_base(t + 1, nb0) - r15
                step += [{"kind": "addi", "rd": "r14", "rs": "r14", "imm": d14},
                         {"kind": "addi", "rd": "r15", "rs": "r15", "imm": d15},
                         {"kind": "wait", "units": [Unit.LOAD, Unit.FEED],
                          "why": "next row's operands in; this row's matmuls have read theirs"}]
                r14, r15 = r14 + d14, r15 + d15
            steps.append(step)
        body += compress(steps, f"conv_c{nb0}")
    return {
        "what": (f"window convolution {p.N}x{p.Cin}x{p.H}x{p.W} -> {p.Cout} channels, "
                 f"{p.kh}x{p.kw} stride {p.stride} pads {p.pads}; {T} output rows of "
                 f"{geo.bpr} blocks, {len(chunks(geo, tn))} column chunk(s) of {tn}"),
        "setup": [("r3", 1), ("r4", geo.cp), ("r5", p.fill & 0xFF)],
        "csrs": csr_writes(p.stages, p.epilogue),
        "bias_load": (bias_load(_dims(geo), regions["bias"], p.epilogue.per_channel)
                      if reads_bias_region(p.stages, p.epilogue) else None),
        "body": body,
    }


def compress(steps: Sequence[list[dict]], prefix: str, *,
             counters: Sequence[str] = LOOP_REGS) -> list[dict]:
    """The steps' items, with consecutive repeats folded into hardware loops.

    Level by level (one level per loop counter of ``counters``, innermost first): at each
    position the period (1 to 8 units) covering the most units is taken, and a unit repeated
    at least twice becomes a loop. Units at the first level are steps; at the next, the
    steps and loops the first left.
    """
    units: list[list[dict]] = [list(s) for s in steps]
    for counter in counters:
        out: list[list[dict]] = []
        i = 0
        while i < len(units):
            best = None
            for period in range(1, 9):
                unit = units[i:i + period]
                if len(unit) < period:
                    break
                times = 1
                while units[i + times * period:i + (times + 1) * period] == unit:
                    times += 1
                if times >= 2 and (best is None or times * period > best[0] * best[1]):
                    best = (times, period)
            if best is None:
                out.append(units[i])
                i += 1
                continue
            times, period = best
            body = [it for u in units[i:i + period] for it in u]
            out.append([{"kind": "loop", "counter": counter, "count": times, "body": body}])
            i += times * period
        units = out
    items = [it for u in units for it in u]
    return _labelled(items, prefix, [0])


def _labelled(items: list[dict], prefix: str, counter: list[int]) -> list[dict]:
    """The items with a unique label on every loop (given after folding, so that loops
    differing only by their label fold too)."""
    out = []
    for it in items:
        if it["kind"] == "loop":
            counter[0] += 1
            it = {**it, "label": f"{prefix}_loop{counter[0]}",
                  "body": _labelled(it["body"], prefix, counter)}
        out.append(it)
    return out


def conv_regions(config: VariantConfig, p: ConvParams) -> dict[str, int]:
    """The kernel's regions, name -> bytes: ``x`` (K-major over ``cp`` channels), ``b``,
    ``bias`` and ``residual`` when read, ``out``."""
    geo = ConvGeometry(config, p)
    dims = _dims(geo)
    sizes = {"x": geo.in_blocks * geo.cp * geo.R, "b": dims.Nb * dims.Kp * dims.C}
    if reads_bias_region(p.stages, p.epilogue):
        sizes["bias"] = bias_region_bytes(dims, p.epilogue)
    if "residual" in p.stages:
        sizes["residual"] = dims.Mb * dims.Nb * dims.tile_bytes(1)
    sizes["out"] = dims.Mb * dims.Nb * dims.tile_bytes(output_dtype(p.stages).itemsize)
    return sizes


def program(config: VariantConfig, p: ConvParams, regions: Mapping[str, Region], *,
            what: str = "window convolution") -> Program:
    """The assembled program of ``p`` at the placed ``regions`` (``what`` names it in a
    too-long error)."""
    geo = ConvGeometry(config, p)
    text = render("conv.j2", **build_context(geo, regions, column_chunk(geo, "residual" in
                                                                          p.stages)))
    return assemble_program(config, text, what=what)


def instructions(items: Sequence[dict]) -> int:
    """Instruction words the items assemble to (an upper bound: before redundant ``li``s are
    dropped)."""
    n = 0
    for it in items:
        if it["kind"] == "loop":
            n += 2 + instructions(it["body"])
        elif it["kind"] == "load":
            n += 1 + 2 + (it["count"] > 1)
        elif it["kind"] != "comment":
            n += 1
    return n


def program_problem(geo: ConvGeometry, tn: int) -> str | None:
    """Why the program would not fit the instruction memory (None if it does), before any
    placement: the layout of the loops does not depend on the addresses."""
    dummy = {name: Region(name, 1 << 20, 1) for name in ("x", "b", "bias", "residual", "out")}
    ctx = build_context(geo, dummy, tn)
    length = instructions(ctx["body"]) + len(ctx["csrs"]) + len(ctx["setup"]) + 8
    if length > geo.config.imem_depth:
        return (f"its program needs about {length} instructions, more than the "
                f"{geo.config.imem_depth} of the instruction memory")
    return None

