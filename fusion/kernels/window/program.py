"""The program of a window-unit kernel: the context ``window.j2`` renders.

One WCFG sets the geometry for the whole kernel. Then, per channel block ``nb`` (the
``cols`` channels a lane each) and per *chunk* (consecutive output tiles of one image whose
input rows fit half the A scratchpad): one LOAD brings the chunk's input pixel blocks (the
input is in tiles, ``[Mb][Nb][R][C]``: ``count`` blocks of ``R`` words, ``Nb*R`` words apart)
into one A half, and one WINDOW per output tile computes it and drains it through the
epilogue to its place in the output tiles.

Double buffering: at the start of each chunk ``wait LOAD+FEED`` (this chunk's pixels and
weights are in, the previous chunk's WINDOWs have read the other half), then the next
chunk's LOAD into the other half (and, when it starts a new channel block, that block's
weights into the other weight region of the epilogue scratchpad: the block before last used
it, and its WINDOWs are done), then this chunk's WINDOWs, which run while it loads.

WINDOW's ``a`` is the A row of the image's pixel (0, 0): ``half - first block * R + n*H*W``
modulo the depth (the ISA takes pixel rows modulo the depth), so that the chunk's pixels,
loaded from row ``half`` on, are where the window unit looks for them.

Registers: r1..r3 the LOAD macro's (ext, spad, stride); r5 pos, r6 a, r7 weight row, r8 out,
r9 bias row (the WINDOW operands); r10..r12 loop counters; r13, r14, r15 the channel block's
weight, input and output word bases. Addresses are relative to them and tiles step by
``addi``, so repeated tiles, chunks and channel blocks fold into hardware loops
(:func:`fusion.kernels.conv.program.compress`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fusion.kernels.codegen import Program, assemble_program, load_context, render
from fusion.kernels.conv.loops import compress, instructions
from fusion.kernels.epilogue import bias_load, csr_writes, reads_bias_region
from fusion.kernels.layout import Region, bias_group, bias_region_bytes, ceil_div
from fusion.kernels.window.params import WEIGHT_ROWS, WindowLayout, WindowParams
from hwgen.config import VariantConfig
from hwgen.isa import Dst, Unit

#: Loop counters, innermost first (tiles, chunks, channel blocks).
LOOP_REGS = ("r12", "r11", "r10")



@dataclass(frozen=True)
class Tile:
    """One WINDOW: output pixels ``first .. first+count-1`` of image ``n`` (image-relative,
    raster order), stored as output tile ``mb``."""

    n: int
    first: int
    count: int
    mb: int


@dataclass(frozen=True)
class Chunk:
    """Consecutive tiles of one image and the input pixel blocks ``[b_lo, b_hi)`` they read."""

    n: int
    tiles: tuple[Tile, ...]
    b_lo: int
    b_hi: int

    @property
    def blocks(self) -> int:
        return self.b_hi - self.b_lo


def image_tiles(lay: WindowLayout, n: int) -> list[Tile]:
    """The output tiles of image ``n`` (a tile never spans two images: the kind refuses a
    batch whose images are not whole tiles)."""
    p, R = lay.params, lay.R  # noqa: N806
    pixels = p.OH * p.OW
    return [Tile(n, t, min(R, pixels - t), (n * pixels + t) // R)
            for t in range(0, pixels, R)]


def sum_tiles(lay: WindowLayout) -> list[Tile]:
    """A sum's output tiles: ``rows`` images each (one output pixel an image), tile ``mb``
    the images from ``mb * rows``; its ``n`` is the first image."""
    N, R = lay.params.N, lay.R  # noqa: N806
    return [Tile(n, 0, min(R, N - n), n // R) for n in range(0, N, R)]


def input_blocks(lay: WindowLayout, tiles: Sequence[Tile]) -> tuple[int, int]:
    """The input pixel blocks ``[lo, hi)`` the ``tiles`` (of one image; a sum's, of their
    images) read."""
    p, R = lay.params, lay.R  # noqa: N806
    if p.mode == "sum":
        plane = p.H * p.W
        return tiles[0].n * plane // R, ceil_div((tiles[-1].n + tiles[-1].count) * plane, R)
    n = tiles[0].n
    oy_first = tiles[0].first // p.OW
    oy_last = (tiles[-1].first + tiles[-1].count - 1) // p.OW
    iy_lo = max(0, oy_first * p.stride - p.pads[0])
    iy_hi = min(p.H - 1, oy_last * p.stride - p.pads[0] + p.kh - 1)
    iy_hi = max(iy_hi, iy_lo)  # a window all in padding still needs a row to point at
    base = n * p.H * p.W
    return (base + iy_lo * p.W) // R, ceil_div(base + (iy_hi + 1) * p.W, R)


def chunk_fits(lay: WindowLayout, size: int) -> bool:
    """Whether every chunk of ``size`` tiles (aligned to multiples of it) has its input
    blocks in half the A scratchpad."""
    tiles = sum_tiles(lay) if lay.params.mode == "sum" else image_tiles(lay, 0)
    return all(_span(lay, tiles[i:i + size]) * lay.R <= lay.a_half
               for i in range(0, len(tiles), size))


def most_tiles(lay: WindowLayout) -> int:
    """The most tiles a chunk can have (:func:`chunk_fits`); 0 if one tile does not fit."""
    tiles = sum_tiles(lay) if lay.params.mode == "sum" else image_tiles(lay, 0)
    return next((size for size in range(len(tiles), 0, -1) if chunk_fits(lay, size)), 0)


def chunk_tiles(lay: WindowLayout) -> int:
    """Tiles per chunk: the params' ``chunk`` when it fits (0 when it does not), else as many
    as fit (:func:`most_tiles`); chunks of one size repeat."""
    size = lay.params.chunk
    if size:
        return size if chunk_fits(lay, size) else 0
    return most_tiles(lay)


def _span(lay: WindowLayout, tiles: Sequence[Tile]) -> int:
    lo, hi = input_blocks(lay, tiles)
    return hi - lo


def chunks(lay: WindowLayout, size: int) -> list[Chunk]:
    """The chunks of every image, ``size`` tiles each (the last of an image fewer); a sum's
    tiles span images, and so do its chunks."""
    if lay.params.mode == "sum":
        tiles = sum_tiles(lay)
        return [Chunk(0, tuple(tiles[i:i + size]), *input_blocks(lay, tiles[i:i + size]))
                for i in range(0, len(tiles), size)]
    out = []
    for n in range(lay.params.N):
        tiles = image_tiles(lay, n)
        for i in range(0, len(tiles), size):
            part = tuple(tiles[i:i + size])
            out.append(Chunk(n, part, *input_blocks(lay, part)))
    return out


def _bias_rows(lay: WindowLayout) -> int:
    p = lay.params
    if not reads_bias_region(p.stages, p.epilogue):
        return 0
    return lay.dims.bias_region_rows(p.epilogue.per_channel)


def e_rows(lay: WindowLayout) -> int:
    """Epilogue scratchpad rows the kernel uses: the bias region and two weight regions."""
    return _bias_rows(lay) + (2 * WEIGHT_ROWS if lay.params.mode == "mac" else 0)


def _pos(lay: WindowLayout, tile: Tile) -> int:
    """WINDOW ``pos`` of ``tile``: its first output pixel, or a sum's first image."""
    if lay.params.mode == "sum":
        return tile.n << 16
    oy, ox = divmod(tile.first, lay.params.OW)
    return oy << 16 | ox


def build_context(lay: WindowLayout, regions: Mapping[str, Region], size: int
                  ) -> dict[str, Any]:
    """The context of ``window.j2`` for the placed ``regions`` (see the module docstring)."""
    c, p, R, Nb = lay.config, lay.params, lay.R, lay.Nb  # noqa: N806
    x, out = regions["x"], regions["out"]
    mac = p.mode == "mac"
    dt = "i8" if p.out_dtype.itemsize == 1 else "i32"
    tw = lay.dims.tile_words(1 if dt == "i8" else 4)
    group = bias_group(p.epilogue.per_channel)
    e_base = _bias_rows(lay)
    mask_bits = sum(c.stage_bit(s) for s in p.stages)
    depth = c.spad_a_depth
    plan = chunks(lay, size)
    g = p.geometry()

    def load_x(ch: Chunk, half: int, nb_delta: int) -> dict:
        off = nb_delta * R + ch.b_lo * Nb * R  # from r14, the current block's input base
        return {"kind": "load", **load_context(
            c, Dst.A, {"base": "r14", "off": off}, half * lay.a_half, ch.blocks, R, Nb * R,
            f"input pixel blocks {ch.b_lo}..{ch.b_hi - 1} of image {ch.n}")}

    w_words = WEIGHT_ROWS * c.cols // c.port_bytes  # a channel block's weights

    def load_w(region: int, nb_delta: int) -> dict:
        return {"kind": "load", **load_context(
            c, Dst.E8, {"base": "r13", "off": nb_delta * w_words}, e_base + region *
            WEIGHT_ROWS, 1, w_words, 0, "weights, a tap a row")}

    order = [(nb, ch) for nb in range(Nb) for ch in plan]
    steps: list[list[dict]] = []
    for k, (nb, ch) in enumerate(order):
        half = k % 2
        step: list[dict] = []
        if k:
            step.append({"kind": "wait", "units": [Unit.LOAD, Unit.FEED],
                         "why": "this chunk's operands in; the last chunk's windows done"})
        if k and ch is plan[0]:  # a new channel block: its bases
            step += [{"kind": "addi", "rd": "r13", "rs": "r13", "imm": w_words},
                     {"kind": "addi", "rd": "r14", "rs": "r14", "imm": R},
                     {"kind": "addi", "rd": "r15", "rs": "r15", "imm": tw},
                     {"kind": "addi", "rd": "r9", "rs": "r9", "imm": group}]
        if k + 1 < len(order):
            nb_next, ch_next = order[k + 1]
            step.append(load_x(ch_next, 1 - half, nb_next - nb))
            if nb_next != nb and mac:
                step.append(load_w(nb_next % 2, 1))
        step.append({"kind": "li", "rd": "r6",
                     "imm": (half * lay.a_half - ch.b_lo * R + ch.n * p.H * p.W) % depth})
        if mac:
            step.append({"kind": "li", "rd": "r7", "imm": e_base + (nb % 2) * WEIGHT_ROWS})
        prev = None
        for t in ch.tiles:
            if prev is None:
                step += [{"kind": "addi", "rd": "r8", "rs": "r15", "imm": t.mb * Nb * tw},
                         {"kind": "li", "rd": "r5", "imm": _pos(lay, t)}]
            else:  # a tile step of its own, the same for every tile: loops fold them
                step = [{"kind": "addi", "rd": "r8", "rs": "r8", "imm": (t.mb - prev.mb) *
                         Nb * tw},
                        {"kind": "addi", "rd": "r5", "rs": "r5",
                         "imm": _pos(lay, t) - _pos(lay, prev)}]
            step.append({"kind": "window", "count": t.count, "ow": p.OW,
                         "mask": f"{mask_bits:#b}", "dt": dt, "tr": p.kmajor_out})
            steps.append(step)
            prev = t
    first = plan[0]
    preamble = [{"kind": "comment", "text": "the first chunk"}]
    if mac:
        preamble.append(load_w(0, 0))
    preamble += [load_x(first, 0, 0),
                 {"kind": "wait", "units": [Unit.LOAD], "why": "the first chunk's operands"}]
    return {
        "what": (f"window unit ({p.mode}) {p.N}x{p.C}x{p.H}x{p.W}, {p.kh}x{p.kw} stride "
                 f"{p.stride} pads {p.pads}; {Nb} channel block(s) of {len(plan)} chunk(s) "
                 f"of up to {size} tiles"),
        "wcfg": {"win": g.win, "hin": g.hin, "fill": g.fill, "kh": g.kh, "kw": g.kw,
                 "pt": g.pt, "pl": g.pl, "stride": g.stride, "mode": g.mode},
        "setup": [("r13", regions["w"].addr if mac else 0), ("r14", x.addr),
                  ("r15", out.addr), ("r9", 0), ("r7", 0)],
        "csrs": csr_writes(p.stages, p.epilogue),
        "bias_load": (bias_load(lay.dims, regions["bias"], p.epilogue.per_channel)
                      if reads_bias_region(p.stages, p.epilogue) else None),
        "body": preamble + compress(steps, "win", counters=LOOP_REGS),
    }


def window_regions(config: VariantConfig, p: WindowParams) -> dict[str, int]:
    """The kernel's regions, name -> bytes: ``x`` (tiles), ``w`` (mac mode: ``[Nb][9][C]``
    int8 taps), ``bias`` when read, ``out``."""
    lay = WindowLayout(config, p)
    sizes = {"x": lay.in_dims.Mb * lay.Nb * lay.dims.tile_bytes(1)}
    if p.mode == "mac":
        sizes["w"] = lay.Nb * WEIGHT_ROWS * config.cols
    if reads_bias_region(p.stages, p.epilogue):
        sizes["bias"] = bias_region_bytes(lay.dims, p.epilogue)
    sizes["out"] = lay.dims.Mb * lay.Nb * lay.dims.tile_bytes(p.out_dtype.itemsize)
    return sizes


def program(config: VariantConfig, p: WindowParams, regions: Mapping[str, Region], *,
            what: str = "window-unit kernel") -> Program:
    """The assembled program of ``p`` at the placed ``regions``."""
    lay = WindowLayout(config, p)
    text = render("window.j2", **build_context(lay, regions, chunk_tiles(lay)))
    return assemble_program(config, text, what=what)


def program_problem(lay: WindowLayout, size: int) -> str | None:
    """Why the program would not fit the instruction memory (None if it does), before any
    placement."""
    dummy = {name: Region(name, 1 << 20, 1) for name in ("x", "w", "bias", "out")}
    ctx = build_context(lay, dummy, size)
    length = instructions(ctx["body"]) + len(ctx["csrs"]) + len(ctx["setup"]) + 8
    if length > lay.config.imem_depth:
        return (f"its program needs about {length} instructions, more than the "
                f"{lay.config.imem_depth} of the instruction memory")
    return None
