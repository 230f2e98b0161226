"""Where a window convolution's windows come from: the output blocks' rows, the window loads
(LOADW) that fill a block's window rows in the A scratchpad, and the step bases they are
relative to. Shared by the program of :mod:`fusion.kernels.conv.program` and its k chunks
over accumulator banks (:mod:`fusion.kernels.conv.banked`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fusion.kernels.conv.params import ConvGeometry
from fusion.kernels.layout import Region


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


@functools.lru_cache(maxsize=4096)
def block_loads(geo: ConvGeometry, x: Region, b: int) -> tuple[tuple[int, int, Tap], ...]:
    """Block ``b``'s window loads in A row order, ``(first window row, rows, Tap)``, every
    group's (:func:`group_loads`). Cached: a schedule's program asks for a block's loads once
    per k chunk and column chunk, and the schedule search builds many programs."""
    p = geo.params
    loads, row = [], 0  # the group's first window row
    for channel, group in geo.groups:
        per = p.Cin if channel is None else 1  # rows a position: its channels, or one
        for m, k, w in group_loads(geo, x, b, group):
            if channel is not None and w.ext is not None:  # the channel's word of a block
                w = dataclasses.replace(w, ext=w.ext + channel)
            loads.append((row + m * per, k * per, w))
        row += len(group) * per
    return tuple(loads)


def window_loads(geo: ConvGeometry, x: Region, b: int, bounds: Sequence[tuple[int, int]],
                 row_of: Callable[[int], int], r14: int, r1: list) -> list[dict]:
    """The items loading block ``b``'s window rows within ``bounds`` (row ranges; a LOADW
    across a bound is cut in two), window row ``r`` into A row ``row_of(r)``, relative to the
    input base ``r14``; ``r1`` holds the offset ``r1 - r14`` last set in this step (None:
    unknown), so that loads from the same word share one ``addi``."""
    row_words = geo.row_words  # r3: a LOADW's rows apart
    items = []
    for first, rows, w in block_loads(geo, x, b):
        for lo, hi in ((max(first, u), min(first + rows, v)) for u, v in bounds):
            if lo >= hi:
                continue
            # an all-fill load reads one word a row wherever r1 points
            ext = ((r1[0] if r1[0] is not None else 0) if w.ext is None
                   else w.ext - r14 + (lo - first) * row_words)
            if ext != r1[0]:
                items.append({"kind": "addi", "rd": "r1", "rs": "r14", "imm": ext})
                r1[0] = ext
            items += [{"kind": "li", "rd": "r2", "imm": row_of(lo)},
                      {"kind": "loadw", "count": hi - lo, "shift": w.shift,
                       "step": w.step, "mask": w.mask, "keep": int(w.keep)}]
    return items


def in_base(geo: ConvGeometry, x: Region, s: int) -> int:
    """``r14`` during step ``s``: the word address of the block of the input pixel of the
    step's first output pixel's window (the relative offsets need not be small, only equal
    between equal steps)."""
    p = geo.params
    t, ox = divmod(geo.step_blocks(s)[0] * geo.R, p.OW)
    n, oy = divmod(t, p.OH)
    return x.addr + (((n * p.H + oy * p.stride[0]) * p.W + ox * p.stride[1]) // geo.R) * geo.cp
