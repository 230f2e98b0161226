"""The program of a window convolution: the context ``conv.j2`` renders.

The output's blocks of ``R`` pixels go in *steps* (:class:`~fusion.kernels.conv.params.
ConvGeometry`): an output row's blocks, or, when output rows are not whole blocks, a few
consecutive blocks. Per column chunk (the ``tn`` column blocks whose weights fit the B
scratchpad): load the chunk's weights, the first step's windows and residual tiles, then
per step ``t``:

1. with the residual stage, once the epilogue has drained step ``t - 1`` (``wait EPI``), the
   residual tiles of step ``t + 1`` into the epilogue half step ``t - 1`` used;
2. per block ``j`` of the step: its matmuls (one per column block of the chunk, over all
   ``Kp`` rows of the block's windows), then the window loads of block ``j`` of step
   ``t + 1`` into the other A half (per kernel position, one LOADW per output row the block
   spans: ``Cin`` rows, lane ``r`` at input pixel ``(ix0 + r*sx)``, padding lanes filled
   with the zero point by the first, the later ones merging their lanes in with ``keep``),
   so that the loads of the next step run while this step's matmuls do;
3. the step bases move on (``r14`` input, ``r15`` output), and ``wait LOAD+FEED``: the next
   step's operands are in, and this step's matmuls have read theirs.

When a step's windows fit the A scratchpad but not half of it (a 3x3 convolution of 128
channels is 1,152 rows a block), the step is single buffered (:attr:`~fusion.kernels.conv.
params.ConvGeometry.single_buffered`): its matmuls, then ``wait FEED`` (they have read their
windows), then the next step's window loads into the same rows. Where the rows the windows
leave free allow (:attr:`~fusion.kernels.conv.params.ConvGeometry.split_rows`: 896 of those
1,152 in a 2,048-row scratchpad), a block's window rows are split in two parts: the first
part is double buffered (two halves) and loads while the step before computes, as in a
double-buffered step, and only the second, in rows every step shares, loads after the
``wait FEED``; each tile is then two matmuls, the first accumulating (``last`` = 0).

Every address is relative to the step bases, so steps with the same padding pattern have
the same code: consecutive repeats (a period of up to 8 steps, the halves alternating)
become a hardware loop, and repeats of those (the images of a batch) an outer loop
(:func:`compress`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fusion.kernels.codegen import (
    Program,
    assemble_program,
    drop_redundant_li,
    load_context,
    render,
)
from fusion.kernels.conv.params import ConvGeometry, ConvParams
from fusion.kernels.epilogue import bias_load, csr_writes, reads_bias_region
from fusion.kernels.layout import GemmDims, Region, bias_group, bias_region_bytes
from hwgen.asm import assemble_instrs
from hwgen.config import VariantConfig
from hwgen.isa import Dst, Unit
from hwgen.reference import output_dtype

#: Loop counters, innermost first (rows of an image, then images).
LOOP_REGS = ("r12", "r11")



@dataclass(frozen=True)
class Tap:
    """One window load of a kernel position for one block: where its rows come from."""

    ext: int | None  # word address (below 0 possible: its lanes are masked); None: all fill
    shift: int
    step: int
    mask: int
    keep: bool = False  # lanes outside the mask keep what the block's first load wrote


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
        tn = min(tn, free // (2 * geo.bps * geo.R))
    return max(tn, 0)


def _bias_rows(geo: ConvGeometry) -> int:
    p = geo.params
    if not reads_bias_region(p.stages, p.epilogue):
        return 0
    return _dims(geo).bias_region_rows(p.epilogue.per_channel)


def _dims(geo: ConvGeometry) -> GemmDims:
    return GemmDims(geo.config, geo.params.M, geo.params.K, geo.params.Cout)


def segments(geo: ConvGeometry, b: int) -> list[tuple[int, int, int, int]]:
    """The output rows block ``b`` spans: ``(t, r0, r1, ox0)`` for its lanes ``r0 <= r <
    r1`` in output row ``t`` (of all ``N*OH``) from column ``ox0`` on; lanes past the last
    pixel are in none."""
    p, R = geo.params, geo.R  # noqa: N806
    out, r = [], 0
    while r < R and b * R + r < p.M:
        t, ox0 = divmod(b * R + r, p.OW)
        r1 = min(R, r + p.OW - ox0, p.M - b * R)
        out.append((t, r, r1, ox0))
        r = r1
    return out


def group_loads(geo: ConvGeometry, x: Region, b: int, group: list[tuple[int, int]]
                ) -> list[tuple[int, int, Tap]]:
    """The window loads that fill one group of kernel positions (:attr:`ConvGeometry.
    groups`: one column ``kx``, rows ``ky`` of one class) for block ``b``, as ``(first
    position of the group, positions, Tap)``.

    Per output row the block spans (its lanes' segment), the group's positions whose input
    row lies inside the input are a consecutive run. The first segment's run is loaded
    without ``keep``, filling the lanes outside its mask, and the positions outside that run
    are filled by all-fill loads; the other segments' runs merge their lanes in with ``keep``
    (their positions outside the input keep the fill). A block lying in one output row
    loads each position once, as without keep."""
    p, R = geo.params, geo.R  # noqa: N806
    sy, sx = p.stride
    kx = group[0][1]
    runs = []
    for t, r0, r1, ox0 in segments(geo, b):
        n, oy = divmod(t, p.OH)
        inside = [m for m, (ky, _) in enumerate(group) if 0 <= oy * sy + ky - p.pads[0] < p.H]
        ix0 = (ox0 - r0) * sx + kx - p.pads[1]  # lane 0's input column (a virtual one if r0)
        mask = sum(1 << r for r in range(r0, r1) if 0 <= ix0 + r * sx < p.W)
        if not inside or not mask:
            continue
        iy = oy * sy + group[inside[0]][0] - p.pads[0]
        p0 = (n * p.H + iy) * p.W + ix0  # the input pixel of lane 0 of the run's first row
        lo = p0 // R
        runs.append((inside[0], len(inside), Tap(x.addr + lo * geo.cp, p0 - lo * R, sx, mask)))
    fill = Tap(None, 0, 1, 0)
    if not runs:
        return [(0, len(group), fill)]
    (m0, n0, first), rest = runs[0], runs[1:]
    loads = [(m0, n0, first)]
    if m0:
        loads.append((0, m0, fill))
    if m0 + n0 < len(group):
        loads.append((m0 + n0, len(group) - m0 - n0, fill))
    return loads + [(m, k, dataclasses.replace(w, keep=True)) for m, k, w in rest]


def _in_base(geo: ConvGeometry, x: Region, s: int) -> int:
    """``r14`` during step ``s``: the word address of the block of the input pixel of the
    step's first output pixel's window (the relative offsets need not be small, only equal
    between equal steps)."""
    p = geo.params
    t, ox = divmod(geo.step_blocks(s)[0] * geo.R, p.OW)
    n, oy = divmod(t, p.OH)
    return x.addr + (((n * p.H + oy * p.stride[0]) * p.W + ox * p.stride[1]) // geo.R) * geo.cp


def build_context(geo: ConvGeometry, regions: Mapping[str, Region], tn: int) -> dict[str, Any]:
    """The context of ``conv.j2`` for the placed ``regions`` (see the module docstring)."""
    c, p = geo.config, geo.params
    R, Kp, Nb, T, G = geo.R, geo.Kp, geo.Nb, geo.steps, geo.bps  # noqa: N806
    x, out = regions["x"], regions["out"]
    residual = "residual" in p.stages
    dt = "i8" if output_dtype(p.stages).itemsize == 1 else "i32"
    out_tw = R * c.cols * (1 if dt == "i8" else 4) // c.port_bytes
    res_tw = R * c.cols // c.port_bytes
    group = bias_group(p.epilogue.per_channel)
    e_base = _bias_rows(geo)
    mask_bits = sum(c.stage_bit(s) for s in p.stages)

    def out_base(s: int, nb0: int) -> int:
        return out.addr + (s * G * Nb + nb0) * out_tw

    split = geo.split_rows  # the window rows of a block that load while the step before runs
    row_words = 1 if p.Cin > 1 else geo.class_words  # r3: a LOADW's rows apart

    def spad_row(half: int, j: int, r: int) -> int:
        """The A row of window row ``r`` of block ``j`` of a step in ``half``: the step's
        blocks one after the other; split, rows below ``split`` in the half's part and the
        rest in the part after both halves, which every step shares."""
        if not split:
            return half * geo.a_half + j * Kp + r
        if r < split:
            return (half * G + j) * split + r
        return 2 * G * split + j * (Kp - split) + r - split

    def loads_of_block(s: int, j: int, half: int, r14: int, r1: list, lo: int = 0,
                       hi: int = Kp) -> list[dict]:
        """The block's window loads of rows ``lo <= r < hi`` (a LOADW across a bound is cut
        in two); ``r1`` holds the offset ``r1 - r14`` last set in this step (None: unknown),
        so that loads from the same word share one ``addi``."""
        items, pos = [], 0
        # the two parts' rows lie apart: a load never writes across the split
        bounds = [(lo, min(hi, split)), (max(lo, split), hi)] if split else [(lo, hi)]
        for group in geo.groups:
            for m, k, w in group_loads(geo, x, s * G + j, group):
                first = (pos + m) * p.Cin
                for a, b in ((max(first, u), min(first + k * p.Cin, v)) for u, v in bounds):
                    if a >= b:
                        continue
                    # an all-fill load reads one word a row wherever r1 points
                    ext = ((r1[0] if r1[0] is not None else 0) if w.ext is None
                           else w.ext - r14 + (a - first) * row_words)
                    if ext != r1[0]:
                        items.append({"kind": "addi", "rd": "r1", "rs": "r14", "imm": ext})
                        r1[0] = ext
                    items += [{"kind": "li", "rd": "r2", "imm": spad_row(half, j, a)},
                              {"kind": "loadw", "count": b - a, "shift": w.shift,
                               "step": w.step, "mask": w.mask, "keep": int(w.keep)}]
            pos += len(group)
        return items

    def matmuls(half: int, j: int, nbl: int, tn_c: int, nb0: int, rhalf: int) -> list[dict]:
        """Block ``j``'s matmul for column block ``nbl``: over all ``Kp`` window rows, or
        split, over the two parts (the first accumulates, the second ends the tile)."""
        parts = [(0, Kp)] if not split else [(0, split), (split, Kp)]
        items = []
        for lo, hi in parts:
            last = hi == Kp
            items += [{"kind": "li", "rd": "r6", "imm": spad_row(half, j, lo)},
                      {"kind": "li", "rd": "r7", "imm": nbl * Kp + lo}]
            if last:
                items += [
                    {"kind": "addi", "rd": "r8", "rs": "r15", "imm": (j * Nb + nbl) * out_tw},
                    {"kind": "li", "rd": "r9", "imm": (nb0 + nbl) * group},
                    {"kind": "li", "rd": "r10",
                     "imm": e_base + rhalf * G * tn * R + (j * tn_c + nbl) * R
                     if residual else 0}]
            items.append({"kind": "matmul", "k": hi - lo, "mask": f"{mask_bits:#b}", "dt": dt,
                          "tr": p.kmajor_out, "last": int(last)})
        return items

    def residual_loads(s: int, half: int, nb0: int, tn_c: int, r15: int) -> list[dict]:
        items = []
        for j, b in enumerate(geo.step_blocks(s)):
            ext = regions["residual"].addr + (b * Nb + nb0) * res_tw
            items.append({"kind": "load", **load_context(
                c, Dst.E8, {"base": "r15", "off": ext - r15},
                e_base + half * G * tn * R + j * tn_c * R, 1, tn_c * res_tw, 0,
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
        r1: list = [None]
        for j in range(len(geo.step_blocks(0))):
            body += loads_of_block(0, j, 0, r14, r1)
        body.append({"kind": "wait", "units": [Unit.LOAD], "why": "the first step's operands"})
        steps = []
        single = geo.single_buffered
        for t in range(T):
            # split, the parts below ``split`` alternate halves like double-buffered steps
            half, nxt = (0 if single and not split else t % 2), t + 1 < T
            other = 0 if single and not split else 1 - half
            rhalf = t % 2  # the residual tiles' epilogue half alternates either way
            step: list[dict] = []
            r1 = [None]  # a step may be a loop's body: r1 is unknown at its start
            if residual and nxt:
                step.append({"kind": "wait", "units": [Unit.EPI],
                             "why": "the residual half of the step before is drained"})
                step += residual_loads(t + 1, 1 - rhalf, nb0, tn_c, r15)
            following = len(geo.step_blocks(t + 1)) if nxt else 0
            for j in range(len(geo.step_blocks(t))):
                for nbl in range(tn_c):
                    step += matmuls(half, j, nbl, tn_c, nb0, rhalf)
                if j < following and (split or not single):
                    step += loads_of_block(t + 1, j, other, r14, r1, hi=split or Kp)
            if single and following:
                step.append({"kind": "wait", "units": [Unit.FEED],
                             "why": "this step's matmuls have read the windows the next "
                                    "step's loads overwrite"})
                for j in range(following):
                    step += loads_of_block(t + 1, j, other, r14, r1, lo=split)
            if nxt:
                d14, d15 = _in_base(geo, x, t + 1) - r14, out_base(t + 1, nb0) - r15
                step += [{"kind": "addi", "rd": "r14", "rs": "r14", "imm": d14},
                         {"kind": "addi", "rd": "r15", "rs": "r15", "imm": d15},
                         {"kind": "wait", "units": [Unit.LOAD, Unit.FEED],
                          "why": "next step's operands in; this step's matmuls have read theirs"}]
                r14, r15 = r14 + d14, r15 + d15
            steps.append(step)
        body += compress(steps, f"conv_c{nb0}")
    return {
        "what": (f"window convolution {p.N}x{p.Cin}x{p.H}x{p.W} -> {p.Cout} channels, "
                 f"{p.kh}x{p.kw} stride {p.stride} pads {p.pads}; {T} steps of "
                 f"{G} blocks, {len(chunks(geo, tn))} column chunk(s) of {tn}"),
        # r3: rows one word apart (channels), or with one channel a row class apart
        "setup": [("r3", 1 if p.Cin > 1 else geo.class_words), ("r4", geo.cp),
                  ("r5", p.fill & 0xFF)],
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
    geo = geometry(config, p)
    dims = _dims(geo)
    sizes = {"x": geo.in_blocks * geo.cp * geo.R, "b": dims.Nb * dims.Kp * dims.C}
    if reads_bias_region(p.stages, p.epilogue):
        sizes["bias"] = bias_region_bytes(dims, p.epilogue)
    if "residual" in p.stages:
        sizes["residual"] = dims.Mb * dims.Nb * dims.tile_bytes(1)
    sizes["out"] = dims.Mb * dims.Nb * dims.tile_bytes(output_dtype(p.stages).itemsize)
    return sizes


def program(config: VariantConfig, p: ConvParams, regions: Mapping[str, Region], *,
            what: str = "window convolution", step: int | None = None) -> Program:
    """The assembled program of ``p`` at the placed ``regions`` (``what`` names it in a
    too-long error), in steps of ``step`` blocks when output rows are not whole blocks
    (None: :func:`geometry`'s choice)."""
    geo = geometry(config, p) if step is None else ConvGeometry(config, p, step)
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
    placement: the program at a dummy placement, assembled (its length does not depend on
    the addresses: every address is set by ``addi`` from a base, or once by ``li``)."""
    dummy = {name: Region(name, 1 << 20, 1) for name in ("x", "b", "bias", "residual", "out")}
    text = drop_redundant_li(render("conv.j2", **build_context(geo, dummy, tn)))
    length = len(assemble_instrs(text))
    if length > geo.config.imem_depth:
        return (f"its program needs {length} instructions, more than the "
                f"{geo.config.imem_depth} of the instruction memory")
    return None


def geometry(config: VariantConfig, p: ConvParams) -> ConvGeometry:
    """``p`` on ``config``, in steps of :func:`fastest_step` blocks when output rows are not
    whole blocks (a small step starts the array sooner, a large one waits for loads less
    often)."""
    whole = ConvGeometry(config, p).whole_rows
    return ConvGeometry(config, p, None if whole else fastest_step(config, p))


@functools.lru_cache(maxsize=256)
def fastest_step(config: VariantConfig, p: ConvParams) -> int:
    """The step size (blocks) of the fastest program, by the analytical model
    (:func:`fusion.cost.analytical.estimate_program`, at a dummy placement: addresses do not
    change the timing), among :attr:`ConvGeometry.step_choices` whose program fits the
    instruction memory and whose residual tiles fit the epilogue scratchpad; the smallest
    when none does (the kind then refuses it with the reason)."""
    from fusion.cost.analytical import estimate_program  # the cost model reads kernels

    best: tuple[int, int] | None = None
    residual = "residual" in p.stages
    for bps in ConvGeometry(config, p).step_choices:
        geo = ConvGeometry(config, p, bps)
        tn = column_chunk(geo, residual)
        if tn < 1 or program_problem(geo, tn) is not None:
            continue
        regions = {name: Region(name, 1 << 20, 1)
                   for name in ("x", "b", "bias", "residual", "out")}
        cycles = estimate_program(config, program(config, p, regions, step=bps).instrs)
        if best is None or cycles < best[0]:
            best = (cycles, bps)
    return 1 if best is None else best[1]
