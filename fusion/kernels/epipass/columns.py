"""A standalone epilogue pass column block by column block, its bias groups streamed.

A pass reads the bias region whole into the epilogue scratchpad before its tiles
(:func:`fusion.kernels.epilogue.pass_context`): ``Nb`` rows, or with per-channel requantize
three rows (bias, multipliers, shifts) per column block. A wide N does not fit: 1024 channels
on an 8-column array are 384 rows, beside the 256 of the default scratchpad, and such a
requantize went to the host (ResNet-50's last two stages, the 1000-class classifiers). Here
the pass walks the tiles a group of ``g`` column blocks at a time instead
(``epilogue_pass_columns.j2``): per column group it loads those blocks' bias groups (one to
three rows each, consecutive in the region) and then their tiles, a chunk of ``k`` row blocks
at a time (one LOAD of ``k`` segments of ``g`` tiles, ``Nb`` tiles apart), so the scratchpad
holds ``g`` groups and one chunk whatever N is. ``g`` is the most column blocks (a divisor of
``Nb``) whose groups fit beside a tile each, ``k`` then the most row blocks (a divisor of
``Mb``) that fit beside them. The arithmetic is the same
epipasses', so the output is the same bit for bit; only the loads are smaller and more.

:func:`fusion.kernels.epipass.build.build_pass` takes this form exactly when the whole-region
form does not fit (:func:`needs_columns`), so every pass that ran before runs the same
program.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fusion.kernels.codegen import FIELD_MAX, check_load, grid_reg
from fusion.kernels.epilogue import (
    DT_BYTES,
    csr_writes,
    pass_fit_problem,
    reads_bias_region,
)
from fusion.kernels.layout import GemmDims, Region, bias_group
from hwgen.isa import Dst
from hwgen.reference import EpilogueParams

#: The template of this form.
TEMPLATE = "epilogue_pass_columns.j2"


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _chunk(dims: GemmDims, stages: Sequence[str], params: EpilogueParams, src_dt: str
           ) -> tuple[int, int, int]:
    """``(group rows, column blocks per column group, row blocks per chunk)``: the most
    column blocks whose groups fit beside one tile each (a divisor of ``Nb``), then the most
    row blocks (a divisor of ``Mb``); ``(group, 0, 0)`` when not one column fits."""
    cfg, R = dims.config, dims.R
    group = bias_group(params.per_channel)
    per_tile = R * (2 if "residual" in stages else 1)
    tw = max(dims.tile_words(DT_BYTES[src_dt]), dims.tile_words(DT_BYTES["i8"]))
    depth = cfg.spad_e_depth
    fits = [g for g in _divisors(dims.Nb, depth // (group + per_tile))
            if g * tw <= FIELD_MAX and g * group * cfg.e_row_bytes // cfg.port_bytes
            <= FIELD_MAX]
    if not fits:
        return group, 0, 0
    g = fits[-1]
    k = _divisors(dims.Mb, min((depth - g * group) // (g * per_tile), FIELD_MAX))[-1]
    return group, g, k


def needs_columns(dims: GemmDims, *, stages: Sequence[str], params: EpilogueParams,
                  src_dt: str) -> bool:
    """Whether a pass over ``dims`` takes this form: it reads the bias region, the region
    does not fit beside one tile, and one group and one tile do."""
    return (reads_bias_region(stages, params)
            and pass_fit_problem(dims, stages=stages, params=params, src_dt=src_dt) is not None
            and _chunk(dims, stages, params, src_dt)[1] >= 1
            and (bias_group(params.per_channel) * dims.config.e_row_bytes)
            % dims.config.port_bytes == 0)


def columns_context(dims: GemmDims, *, stages: Sequence[str], params: EpilogueParams,
                    src: Region, src_dt: str, out: Region, out_dt: str, bias: Region,
                    residual: Region | None = None, prefix: str = "pass",
                    halt: bool = True) -> dict[str, Any]:
    """The context of ``epilogue_pass_columns.j2`` (see the module docstring).

    Raises
    ------
    ValueError
        If the pass does not take this form (:func:`needs_columns`), or a residual region is
        given without the residual stage or missing with it.
    """
    if not needs_columns(dims, stages=stages, params=params, src_dt=src_dt):
        raise ValueError("this pass fits the epilogue scratchpad whole, or not even one group "
                         "and one tile fit: it has no column form")
    if ("residual" in stages) != (residual is not None):
        raise ValueError("a residual region is needed exactly when the residual stage runs")
    cfg, R, Mb, Nb = dims.config, dims.R, dims.Mb, dims.Nb
    group, g, k = _chunk(dims, stages, params, src_dt)
    tw_in, tw_out, tw_res = (dims.tile_words(DT_BYTES[d]) for d in (src_dt, out_dt, "i8"))
    bias_len = g * group * cfg.e_row_bytes // cfg.port_bytes
    check_load(cfg, 1, bias_len, Dst.E32)
    check_load(cfg, k, g * tw_in, Dst.E32 if src_dt == "i32" else Dst.E8)
    res_len = g * tw_res if residual is not None else 0
    if res_len:
        check_load(cfg, k, res_len, Dst.E8)
    mask = sum(cfg.stage_bit(s) for s in stages)
    # a chunk: k row blocks (outer) of g tiles (inner), loaded one after the other
    regs = [grid_reg("r6", 0, R, g * R, g, k, base="r13"),
            grid_reg("r8", 0, tw_out, Nb * tw_out, g, k, base="r4"),
            grid_reg("r9", 0, group, 0, g, k)]
    if residual is not None:
        regs.append(grid_reg("r10", k * g * R, R, g * R, g, k, base="r13"))
    ops = {"src": "r6", "out": "r8", "bias": "r9", "res": "r10" if residual else "r0"}
    grid = {"n_outer": k, "n_inner": g, "regs": regs, "ops": ops, "rows": R,
            "mask": f"{mask:#b}", "dt": out_dt}
    setup = [("r1", src.addr), ("r4", out.addr), ("r7", bias.addr), ("r13", g * group)]
    if k > 1:
        setup.append(("r5", Nb * tw_in))
    if residual is not None:
        setup.append(("r2", residual.addr))
        if k > 1:
            setup.append(("r14", Nb * tw_res))
    column = Mb * Nb  # tiles the pointers pass over in one column group
    return {"prefix": prefix, "halt": halt, "setup": setup, "csrs": csr_writes(stages, params),
            "mask": f"{mask:#b}", "dt": out_dt, "n_groups": Nb // g, "g": g,
            "n_chunks": Mb // k, "k": k, "bias_len": bias_len,
            "in_dst": "e32" if src_dt == "i32" else "e8", "in_len": g * tw_in,
            "in_step": k * Nb * tw_in, "in_next": g * tw_in - column * tw_in,
            "res_len": res_len, "res_offset": k * g * R, "res_step": k * Nb * tw_res,
            "res_next": g * tw_res - column * tw_res, "out_step": k * Nb * tw_out,
            "out_next": g * tw_out - column * tw_out, "grid": grid}
