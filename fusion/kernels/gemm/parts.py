"""A GEMM's program as parts, one per bias window (:mod:`fusion.kernels.bias_window`): the
template and context of each, for the program builder and the cost model's walk alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fusion.kernels.bias_window import window_dims, window_regions, windows
from fusion.kernels.epilogue import DT_BYTES
from fusion.kernels.gemm.loops import gemm_context
from fusion.kernels.gemm.stream import stream_context
from fusion.kernels.layout import GemmDims, Region
from fusion.kernels.tiling import Tiling, bias_blocks
from hwgen.reference import EpilogueParams


def program_parts(dims: GemmDims, tiling: Tiling, stages: tuple[str, ...],
                  regions: Mapping[str, Region], *, params: EpilogueParams, out: Region,
                  out_dt: str, prefix: str = "gemm", halt: bool = True,
                  transposed: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """``(template, context)`` of each part of the GEMM's program, in order (arguments as for
    :func:`fusion.kernels.gemm.loops.gemm_context`; ``tiling`` resolved).

    One part when the bias region fits the epilogue scratchpad; else one per bias window,
    each the column slice's kernel with the window's bias load, after a wait for the previous
    part's jobs (``refill``). Only the first part writes the CSRs and loads A for a streamed
    GEMM (the parts read the same A rows); only the last halts.
    """
    blocks = bias_blocks(dims, stages, tiling, per_channel=params.per_channel)
    if blocks == 0:
        raise ValueError(f"tiling {tiling}: the bias rows of a super tile do not fit the "
                         f"epilogue scratchpad (fusion.kernels.tiling.fit_problems)")
    if dims.a_direct and dims.kblocks > 1:
        # A is K-major as the producer stored it: a part per group, each a dense GEMM over
        # the group's rows (a super tile's A moves by a group's rows only between parts)
        blocks = min(blocks, dims.kblocks)
    parts = windows(dims.Nb, blocks)
    template = "gemm_stream.j2" if tiling.stream else "gemm.j2"
    out_tw = dims.tile_words(DT_BYTES[out_dt])
    result = []
    for n, (first, count) in enumerate(parts):
        last = n == len(parts) - 1
        kw = {"params": params, "out_dt": out_dt, "halt": halt and last,
              "transposed": transposed}
        if len(parts) == 1:
            sub, sub_regions, sub_out = dims, regions, out
            kw["prefix"] = prefix
        else:
            sub = window_dims(dims, first, count)
            sub_regions, sub_out = window_regions(dims, regions, out, first,
                                                  out_tile_words=out_tw,
                                                  per_channel=params.per_channel)
            kw["prefix"] = f"{prefix}_w{n}"
        if tiling.stream:
            ctx = stream_context(sub, tiling, stages, sub_regions, out=sub_out, **kw)
            ctx["load_a"] = n == 0
        else:
            ctx = gemm_context(sub, tiling, stages, sub_regions, out=sub_out, pitch=dims.Nb,
                               a_pitch=dims.a_Kp, **kw)
        if n:
            ctx["csrs"], ctx["refill"] = [], True
        if len(parts) > 1:
            ctx["window"] = (f"bias window {n + 1} of {len(parts)}: column blocks "
                             f"{first}..{first + count - 1}")
        result.append((template, ctx))
    return result
