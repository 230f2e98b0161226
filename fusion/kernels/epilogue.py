"""Standalone epilogue passes: the unfused form of the epilogue, memory to memory.

A pass streams a tile-blocked ``[Mb][Nb][R][C]`` tensor (int32 via ``e32``, or int8 via
``e8``) through the epilogue scratchpad and one or more stages, and stores it in the same
layout as int32 or int8. Chunks of consecutive tiles are double buffered in the epilogue
scratchpad when two of them fit next to the bias rows. A chunk never crosses a block row
when the bias stage runs, because each tile's epipass reads the bias row of its column block.
The epilogue scratchpad holds, from row 0: the bias rows (``GemmDims.bias_region_rows``,
when the pass reads them), then per buffer half the chunk's input rows followed by its residual
rows. With per-channel requantize the bias region holds a group of three rows per column block
(bias, multipliers, shifts: :func:`fusion.kernels.layout.pack_bias_group`); the bias pass and the
requantize pass of an unfused chain both load it and step the bias row by 3.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fusion.kernels import layout
from fusion.kernels.codegen import FIELD_MAX, check_load, grid_reg, load_context, render
from fusion.kernels.layout import GemmDims, Region, bias_group
from fusion.kernels.protocol import Operand
from hwgen.isa import Dst
from hwgen.reference import INT8_MAX, INT8_MIN, INT32_MAX, INT32_MIN, EpilogueParams
from hwgen.stages import STAGES, spec

DT_BYTES = {"i32": 4, "i8": 1}


def epilogue_operands(stages: Sequence[str], params: EpilogueParams, M: int,  # noqa: N803
                      N: int) -> dict[str, Operand]:  # noqa: N803
    """The operands the epilogue of an ``M x N`` result reads: ``bias`` (``N`` int32) with the
    bias stage, ``residual`` (``M x N`` int8) with the residual stage, ``mult`` and ``shift``
    (``N`` int32 each) with per-channel requantize: the same for every kind that drains tiles
    through the epilogue."""
    ops = {}
    if "bias" in stages:
        ops["bias"] = Operand("int32", (N,))
    if "residual" in stages:
        ops["residual"] = Operand("int8", (M, N))
    if params.per_channel:
        ops["mult"] = ops["shift"] = Operand("int32", (N,))
    return ops


def pack_epilogue(dims: GemmDims, stages: Sequence[str], params: EpilogueParams,
                  values: Any) -> dict[str, bytes]:
    """The bias region (the ``[Nb][C]`` bias, or with per-channel requantize the
    ``[Nb][3][C]`` groups, zeros for a missing bias) and the residual tiles, packed for the
    regions of :func:`epilogue_operands`."""
    data = {}
    if params.per_channel:
        data["bias"] = layout.pack_bias_group(dims, values.get("bias"), values["mult"],
                                              values["shift"])
    elif "bias" in stages:
        data["bias"] = layout.pack_bias(dims, values["bias"])
    if "residual" in stages:
        data["residual"] = layout.pack_tiles(dims, values["residual"], np.int8)
    return data


def reads_bias_region(stages: Sequence[str], params: EpilogueParams) -> bool:
    """Whether ``stages`` read the bias region: a stage reading a row at the job's bias row
    (the bias stage; per-channel requantize, whose multipliers and shifts are rows of the bias
    groups), as the stage specs declare."""
    return any(read.base == "bias" for s in stages
               for read in spec(s).reads_used(params.stage(s)))


def csr_writes(stages: Sequence[str], params: EpilogueParams) -> list[tuple[str, int]]:
    """The CSR writes the ``stages`` need, as (csr name, value) pairs: each stage's registers
    as its spec computes them from ``params``, in the chain's canonical order.

    The mode registers (``req_mode``, ``res_mode``) are written whenever their stage runs,
    also with the reset value 0: the design resets every CSR to 0 between jobs (``rst``), but
    within one program a kernel may follow another that set a mode (the passes of an unfused
    chain, or kernels concatenated by a model compiler), so a kernel never relies on it.
    """
    return [write for s in STAGES if s.name in stages
            for write in s.csr_writes(params.stage(s.name))]


def bias_load(dims: GemmDims, bias: Region, per_channel: bool = False) -> dict[str, Any]:
    """Load the bias region into epilogue scratchpad rows from 0: ``[Nb][C]`` int32, or per
    channel the ``[Nb][3][C]`` groups (``GemmDims.bias_region_rows`` rows either way)."""
    cfg = dims.config
    words = dims.bias_region_rows(per_channel) * cfg.e_row_bytes // dims.W
    what = ("bias groups (bias, multipliers, shifts), three rows per column block"
            if per_channel else "bias, one row per column block")
    return load_context(cfg, Dst.E32, bias.addr, 0, 1, words, "r0", what)


def pass_dtypes(stages: Sequence[str], params: EpilogueParams, final_dt: str) -> list[str]:
    """The element type each pass of an unfused chain stores.

    The last pass stores ``final_dt``. An earlier pass stores int8 only when every value it
    can produce fits int8 (after requant or residual, and relu or clamp on such values: each
    stage spec's output range): storing the low byte is then exact, so the chain of passes
    gives the fused result bit for bit. Otherwise it stores int32 (e.g. a bias stage after
    requant).
    """
    lo, hi, dts = INT32_MIN, INT32_MAX, []
    for n, stage in enumerate(stages):
        lo, hi = spec(stage).output_range(lo, hi, params.stage(stage))
        fits = INT8_MIN <= lo and hi <= INT8_MAX
        dts.append(final_dt if n == len(stages) - 1 else ("i8" if fits else "i32"))
    return dts


def _divisor_at_most(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def _chunk_rows(dims: GemmDims, stages: Sequence[str], params: EpilogueParams,
                src_dt: str) -> tuple[int, int, bool, int]:
    """``(bias rows, rows per tile, double buffered, most tiles per chunk)`` of a pass; the
    last is below 1 when not one tile fits the epilogue scratchpad."""
    cfg, R = dims.config, dims.R
    e_base = dims.bias_region_rows(params.per_channel) if reads_bias_region(stages, params) \
        else 0
    per_tile = R * (2 if "residual" in stages else 1)
    avail = cfg.spad_e_depth - e_base
    double = avail // (2 * per_tile) >= 1
    tw_in, tw_res = (dims.tile_words(DT_BYTES[d]) for d in (src_dt, "i8"))
    # Tiles per chunk: what one half holds, within the 16-bit load len and epipass rows.
    cap = min(avail // ((2 if double else 1) * per_tile), FIELD_MAX // R,
              FIELD_MAX // tw_in, FIELD_MAX // tw_res)
    return e_base, per_tile, double, cap


def pass_fit_problem(dims: GemmDims, *, stages: Sequence[str], params: EpilogueParams,
                     src_dt: str = "i32") -> str | None:
    """Why not one tile of a pass over ``dims`` fits the epilogue scratchpad (what
    :func:`pass_context` raises, and a kernel kind's legality check reports), or None."""
    e_base, per_tile, _, cap = _chunk_rows(dims, stages, params, src_dt)
    if cap >= 1:
        return None
    group = bias_group(params.per_channel)
    return (f"an epilogue pass needs {e_base + per_tile} epilogue scratchpad rows for one tile "
            f"({e_base} bias{' group' if group > 1 else ''} rows + {per_tile}) but the "
            f"variant has {dims.config.spad_e_depth}; use a variant with a deeper epilogue "
            f"scratchpad (spad_e_depth) or a smaller N")


def pass_context(
    dims: GemmDims,
    *,
    stages: Sequence[str],
    params: EpilogueParams,
    src: Region,
    src_dt: str,
    out: Region,
    out_dt: str,
    bias: Region | None = None,
    residual: Region | None = None,
    prefix: str = "pass",
    halt: bool = True,
    out_pitch: int | None = None,
) -> dict[str, Any]:
    """The context of ``epilogue_pass.j2`` for one pass over a tile-blocked tensor.

    Chunks all have the same number of tiles, so that hardware loops can run them: a divisor
    of the tile count, or when the pass reads the bias region either whole block rows or a
    divisor of ``Nb`` (each tile's epipass needs the bias row, or per channel the bias group,
    of its column block, which must step linearly).

    ``out_pitch`` is the tiles of a block row of the output, when they are more than
    ``Nb``: the pass then writes its tensor's column blocks into some of the output's
    (a slice of a wider tensor, :mod:`fusion.kernels.concat`), and its chunks never cross a
    block row.

    ``bias`` is the bias region, needed exactly when the pass reads it
    (:func:`reads_bias_region`): for the bias stage, and with ``params.per_channel`` for the
    requant stage. Its layout follows ``params.per_channel``: ``[Nb][C]`` rows, or
    ``[Nb][3][C]`` groups.

    Raises
    ------
    ValueError
        If a stage needs a region that is missing (or one is given that no stage reads), or
        not one tile fits the epilogue scratchpad (naming the rows needed and available).
    """
    cfg, R, Mb, Nb = dims.config, dims.R, dims.Mb, dims.Nb
    if reads_bias_region(stages, params) != (bias is not None):
        raise ValueError(
            "a bias region is needed exactly when the pass reads it: for the bias stage, and "
            "for the requant stage with per-channel requantize (its multipliers and shifts); "
            f"stages {list(stages)}, per_channel={params.per_channel}, bias region "
            f"{'given' if bias is not None else 'missing'}")
    if ("residual" in stages) != (residual is not None):
        raise ValueError("a residual region is needed exactly when the residual stage runs")
    problem = pass_fit_problem(dims, stages=stages, params=params, src_dt=src_dt)
    if problem is not None:
        raise ValueError(problem)
    group = bias_group(params.per_channel)
    e_base, per_tile, double, cap = _chunk_rows(dims, stages, params, src_dt)
    tw_in, tw_out, tw_res = (dims.tile_words(DT_BYTES[d]) for d in (src_dt, out_dt, "i8"))
    pitch = Nb if out_pitch is None else out_pitch
    if pitch < Nb:
        raise ValueError(f"an output block row of {pitch} tiles cannot hold the pass's {Nb}")
    out_adjust, whole_rows = 0, False
    if bias is None and pitch == Nb:  # any run of tiles; one epipass a chunk
        n = _divisor_at_most(Mb * Nb, cap)
        n_outer, n_inner, bias_step, bias_adjust = 1, Mb * Nb // n, 0, 0
        g_outer, g_inner, per = 1, 1, n
    elif Nb <= cap:  # whole block rows: the bias rows restart at 0 in every chunk
        k = _divisor_at_most(Mb, cap // Nb)
        n, n_outer, n_inner, bias_step, bias_adjust = k * Nb, 1, Mb // k, 0, 0
        g_outer, g_inner, per, whole_rows = k, Nb, 1, True
    else:  # n tiles of a block row; rows of Nb // n chunks
        n = _divisor_at_most(Nb, cap)
        n_outer, n_inner = Mb, Nb // n
        bias_step, bias_adjust = (n * group, -Nb * group) if bias is not None else (0, 0)
        g_outer, g_inner, per = 1, n, 1
        out_adjust = (pitch - Nb) * tw_out  # from the end of a block row to the next's start
    # operand -> (register, base register, offset, step per tile within a grid row)
    res_offset = n * R
    spec = {"src": ("r6", "r13", 0), "out": ("r8", "r4", 0), "bias": ("r9", "r7", 0),
            "res": ("r10", "r13", res_offset)}
    step = {"src": R * per, "out": tw_out * per, "bias": group if per == 1 else 0,
            "res": R * per}
    used = {"src", "out"} | ({"bias"} if bias is not None else set()) | (
        {"res"} if residual is not None else set())
    regs = []
    for name, (reg, base, init) in spec.items():
        if name in used:
            # The outer grid step is a whole row of g_inner tiles, except that the bias row
            # goes back to the first column block.
            outer = step[name] * g_inner if name != "bias" else 0
            if name == "out" and whole_rows:
                outer = tw_out * pitch
            regs.append(grid_reg(reg, init, step[name], outer, g_inner, g_outer, base=base))
    ops = {name: (spec[name][0] if name in used else "r0") for name in spec}
    mask = sum(cfg.stage_bit(s) for s in stages)
    grid = {"n_outer": g_outer, "n_inner": g_inner, "regs": regs, "ops": ops, "rows": R * per,
            "mask": f"{mask:#b}", "dt": out_dt}
    half = n * per_tile
    setup = [("r1", src.addr), ("r4", out.addr), ("r13", e_base)]
    if double:
        setup.append(("r14", e_base + half))
    if residual is not None:
        setup.append(("r2", residual.addr))
    if bias is not None:
        setup.append(("r7", 0))
    for dst, words in ((Dst.E32 if src_dt == "i32" else Dst.E8, n * tw_in), (Dst.E8, n * tw_res)):
        check_load(cfg, 1, words, dst)
    return {"prefix": prefix, "halt": halt, "setup": setup, "csrs": csr_writes(stages, params),
            "bias_load": bias_load(dims, bias, params.per_channel) if bias is not None else None,
            "mask": f"{mask:#b}", "dt": out_dt, "double_buffer": double,
            "in_dst": "e32" if src_dt == "i32" else "e8", "in_len": n * tw_in,
            "res_len": n * tw_res if residual is not None else 0, "res_offset": res_offset,
            "chunk_tiles": n, "n_outer": n_outer, "n_inner": n_inner,
            "out_step": (n // Nb * pitch if whole_rows else n) * tw_out,
            "bias_step": bias_step, "bias_adjust": bias_adjust, "out_adjust": out_adjust,
            "grid": grid}


def render_pass(dims: GemmDims, **kwargs: Any) -> str:
    """Render ``epilogue_pass.j2`` with :func:`pass_context` (same keyword arguments)."""
    return render("epilogue_pass.j2", **pass_context(dims, **kwargs))
