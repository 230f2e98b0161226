"""Bias windows: a GEMM whose bias region does not fit the epilogue scratchpad loads it in
windows of column blocks.

The fused epilogue reads each output tile's bias row (with per-channel requantize, its group
of three rows: bias, multipliers, shifts) from the epilogue scratchpad. Loaded whole, the bias
region takes ``3 * Nb`` rows, so a per-channel GEMM wider than ``spad_e_depth / 3`` column
blocks (680 channels on an 8-column array with 256 rows: ResNet-50's 1,024 and 2,048-channel
layers, the 1,000-way classifiers) could not fuse its epilogue at all.

With windows, the GEMM runs as one program of *parts*, one per window of ``w`` consecutive
column blocks: each part is the same kernel (super-tile nest or streamed GEMM) on the column
slice ``[j0, j0 + w)``, with its own prologue, which first waits until the previous part's
jobs are stored (they read the rows the window's bias load overwrites, and the operand rows
the part's first loads overwrite) and then loads the window's bias rows from row 0. Only
the addresses differ between parts: B, the bias groups, the output and the residual start
``j0`` column blocks further on, and the output and residual keep the whole tensor's block
pitch (``Nb`` tiles a block row). ``w`` is the most column blocks whose rows fit beside the
residual rows, a multiple of the super tile's ``tn`` (a super tile never straddles two
windows) whose rows are whole memory words (so every window starts on a word).

One window (every GEMM whose bias fits, so every GEMM before windows existed) is the program
it always was. Each further window costs a pipeline drain and refill, a few hundred cycles:
the cost model walks the parts as it walks one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Protocol

from fusion.kernels.layout import GemmDims, Region, bias_group, ceil_div


class Tiling(Protocol):
    """What the windows read of a :class:`fusion.kernels.tiling.Tiling` (that module
    imports this one)."""

    tm: int
    tn: int
    double_buffer: bool
    stream: int


def window_blocks(dims: GemmDims, free_rows: int, per_channel: bool, tn: int = 1) -> int:
    """Column blocks whose bias rows are loaded at once, in ``free_rows`` epilogue rows.

    ``dims.Nb`` when the whole region fits; else the most blocks, a multiple of ``tn``, whose
    rows fill whole memory words; 0 when not even ``tn`` blocks fit.
    """
    if dims.bias_region_rows(per_channel) <= free_rows:
        return dims.Nb
    step, row, word = bias_group(per_channel), dims.config.e_row_bytes, dims.W
    blocks = free_rows // step // tn * tn
    while blocks > 0 and blocks * step * row % word:
        blocks -= tn
    return blocks


def windows(nb: int, blocks: int) -> list[tuple[int, int]]:
    """``(first column block, blocks)`` of each window over ``nb`` column blocks."""
    if blocks < 1:
        raise ValueError(f"a bias window has at least one column block, not {blocks}")
    return [(j0, min(blocks, nb - j0)) for j0 in range(0, nb, blocks)]


def window_dims(dims: GemmDims, first: int, blocks: int) -> GemmDims:
    """The column slice ``[first, first + blocks)`` of ``dims`` as a GEMM of its own.

    Grouped (windows of whole groups), the slice reduces over its groups' rows of K: grouped
    again when it holds two groups or more; one group is a dense GEMM over ``kgroup`` rows
    (every column block of the group reads the same rows, so the first block's slice of A
    serves them all, or, A K-major as it is (:attr:`fusion.kernels.layout.GemmDims.
    a_direct`), the group's own rows; rows past K are the layout's zero padding).
    """
    n = min(blocks * dims.C, dims.N - first * dims.C)
    if not dims.grouped:
        return dataclasses.replace(dims, N=n)
    g0, groups = first // dims.kblocks, ceil_div(blocks, dims.kblocks)
    if groups == 1:
        return dataclasses.replace(dims, K=dims.kgroup, N=n, kgroup=0, kblocks=1)
    k = min(dims.K, (g0 + groups) * dims.kgroup) - g0 * dims.kgroup
    return dataclasses.replace(dims, K=k, N=n)


def window_regions(dims: GemmDims, regions: Mapping[str, Region], out: Region, first: int,
                   *, out_tile_words: int, per_channel: bool) -> tuple[dict[str, Region],
                                                                       Region]:
    """The regions of the window starting at column block ``first``, and its output: B, the
    bias groups, the residual and the output moved on by ``first`` column blocks (and A,
    grouped, to the first block's rows: :meth:`fusion.kernels.layout.GemmDims.a_rows_at`;
    dense, A is shared)."""
    # bytes per column block (a window's first block always starts on a word)
    step = {"b": dims.Kp * dims.C, "residual": dims.tile_bytes(1),
            "bias": bias_group(per_channel) * dims.config.e_row_bytes}
    moved = {name: _moved(region, first * step[name] // dims.W) if name in step else region
             for name, region in regions.items()}
    if dims.grouped and "a" in regions:  # A's rows of the window's first column block
        moved["a"] = _moved(regions["a"], dims.a_rows_at(first) * dims.R // dims.W)
    return moved, _moved(out, first * out_tile_words)


def _moved(region: Region, words: int) -> Region:
    return dataclasses.replace(region, addr=region.addr + words)


def residual_rows(dims: GemmDims, stages: tuple[str, ...], tm: int, tn: int,
                  halves: int) -> int:
    """Epilogue scratchpad rows a fused residual's tiles take (0 without the stage)."""
    return halves * tm * tn * dims.R if "residual" in stages else 0


def bias_blocks(dims: GemmDims, stages: tuple[str, ...], tiling: Tiling, *,
                per_channel: bool = False) -> int:
    """Column blocks of each bias window of the GEMM (:mod:`fusion.kernels.bias_window`) for
    ``tiling`` (resolved): ``Nb`` when its bias region fits the epilogue scratchpad beside
    the residual tiles, or it reads none; 0 when not even one super tile's column blocks fit
    (grouped: a window holds whole groups)."""
    # the bias region is loaded for the bias stage, and for per-channel requantize
    if not ("bias" in stages or (per_channel and "requant" in stages)):
        return dims.Nb
    if tiling.stream:  # one residual tile at a time (fusion.kernels.gemm.stream)
        free, tn = dims.config.spad_e_depth - residual_rows(dims, stages, 1, 1, 1), 1
    else:
        halves = 2 if tiling.double_buffer else 1
        tn = tiling.tn
        free = dims.config.spad_e_depth - residual_rows(dims, stages, tiling.tm, tn, halves)
    if dims.grouped:  # a window holds whole groups
        tn = math.lcm(tn, dims.kblocks)
    return window_blocks(dims, free, per_channel, tn)


def bias_problem(dims: GemmDims, stages: tuple[str, ...], tiling: Tiling,
                  per_channel: bool) -> str | None:
    """Why the bias windows of ``tiling`` cannot be: the residual tiles alone overflow the
    epilogue scratchpad, or not one super tile's bias rows fit beside them."""
    cfg = dims.config
    halves = 1 if tiling.stream or not tiling.double_buffer else 2
    # streamed: one residual tile at a time (the next loads once the epilogue is idle)
    res = residual_rows(dims, stages, 1, 1, 1) if tiling.stream else \
        residual_rows(dims, stages, tiling.tm, tiling.tn, halves)
    buffering = " or no double buffering" if halves == 2 else ""
    if res > cfg.spad_e_depth:
        return (f"the epilogue scratchpad needs {res} rows for residual tiles but has "
                f"{cfg.spad_e_depth}; use smaller tm, tn{buffering}")
    if bias_blocks(dims, stages, tiling, per_channel=per_channel):
        return None
    what = "bias group" if per_channel else "bias"
    tn = 1 if tiling.stream else tiling.tn
    tn = math.lcm(tn, dims.kblocks) if dims.grouped else tn
    need = bias_group(per_channel) * tn
    unit = "a group" if dims.grouped and dims.kblocks > 1 else "a super tile"
    return (f"the epilogue scratchpad needs {need + res} rows ({need} {what} rows for the "
            f"{tn} column block(s) of {unit}"
            + (f" and {res} for residual tiles" if res else "")
            + f") but has {cfg.spad_e_depth}; use smaller tm, tn{buffering}")
