"""Build a GEMM kernel's program and memory layout (never from operand values).

Fused, one ``gemm.j2`` program drains every tile through the epilogue stages straight to the
output. Unfused, the GEMM stores int32 tiles (mask 0) into an intermediate, then one
``epilogue_pass.j2`` pass per stage, in chain order, ping-pongs between two intermediates and
the last writes the same output region in the same layout. An intermediate is stored as int8
only where that is exact (:func:`fusion.kernels.epilogue.pass_dtypes`), so the results are
identical. Memory layouts are those of :mod:`fusion.kernels.layout`; super tiles those of
:mod:`fusion.kernels.tiling`. Without an explicit tiling, the best-ranked tiling whose program fits
the instruction memory is used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import numpy as np

from fusion.kernels import layout
from fusion.kernels.bias_window import windows
from fusion.kernels.codegen import ProgramTooLong, assemble_program, render
from fusion.kernels.epilogue import DT_BYTES, pass_context, pass_dtypes, reads_bias_region
from fusion.kernels.gemm.params import GemmParams
from fusion.kernels.gemm.parts import program_parts
from fusion.kernels.gemm.skip import flag_bytes, skip_context, skip_tiling
from fusion.kernels.gemm.sparse import busy_slices, sparse_b_bytes, sparse_context, sparse_tiling
from fusion.kernels.layout import GemmDims, Region
from fusion.kernels.program import figures
from fusion.kernels.protocol import Build
from fusion.kernels.tiling import (
    Tiling,
    bias_blocks,
    default_tiling,
    loop_shape,
    ranked_tilings,
    resolve,
)
from hwgen.config import VariantConfig
from hwgen.reference import output_dtype


def dt_name(dtype: np.dtype) -> str:
    """The templates' name of a lane type: ``i8`` or ``i32``."""
    return "i8" if dtype == np.int8 else "i32"


def gemm_sizes(dims: GemmDims, p: GemmParams) -> dict[str, int]:
    """Region name -> bytes of the kernel, in allocation order: ``a``, ``b``, ``bias`` (when
    the kernel reads a bias region), ``residual``, ``out``, and the int32 intermediates
    ``tmp0``, ``tmp1`` when unfused with stages; zero-skipping (``skip_zp``), ``a_flags`` after
    ``a`` and ``out_flags`` (when stored) last."""
    tiles = dims.Mb * dims.Nb
    sizes = {"a": dims.Mb * dims.a_Kp * dims.R}
    if p.skip:
        sizes["a_flags"] = flag_bytes(dims)
    sizes["b"] = sparse_b_bytes(dims, p.blocks) if p.sparse else dims.Nb * dims.Kp * dims.C
    if reads_bias_region(p.stages, p.epilogue):
        sizes["bias"] = layout.bias_region_bytes(dims, p.epilogue)
    if "residual" in p.stages:
        sizes["residual"] = tiles * dims.tile_bytes(1)
    sizes["out"] = tiles * dims.tile_bytes(DT_BYTES[dt_name(output_dtype(p.stages))])
    if not p.fused and p.stages:  # the int32 GEMM result and the passes' ping-pong
        sizes.update({f"tmp{n}": tiles * dims.tile_bytes(4) for n in range(2)})
    if p.out_flags:
        sizes["out_flags"] = flag_bytes(dims, out=True)
    return sizes


def _passes(dims: GemmDims, p: GemmParams, regions: Mapping[str, Region],
            final_dt: str) -> tuple[list[str], int]:
    """The unfused passes' text (they do not depend on the tiling) and the bytes every store
    of the kernel writes."""
    tiles = dims.Mb * dims.Nb
    out = regions["out"]
    bufs = [regions[f"tmp{n}"] for n in range(2) if f"tmp{n}" in regions]
    if not bufs:
        return [], tiles * dims.tile_bytes(DT_BYTES[final_dt])
    passes, stored, src, src_dt = [], tiles * dims.tile_bytes(4), bufs[0], "i32"
    stages, params = p.stages, p.epilogue
    for n, (stage, dt) in enumerate(zip(stages, pass_dtypes(stages, params, final_dt),
                                        strict=True)):
        dst = out if n == len(stages) - 1 else bufs[(n + 1) % 2]
        passes.append(render("epilogue_pass.j2", **pass_context(
            dims, stages=(stage,), params=params, src=src, src_dt=src_dt, out=dst, out_dt=dt,
            bias=regions["bias"] if reads_bias_region((stage,), params) else None,
            residual=regions.get("residual") if stage == "residual" else None,
            prefix=f"pass{n}_{stage}", halt=n == len(stages) - 1)))
        src, src_dt, stored = dst, dt, stored + tiles * dims.tile_bytes(DT_BYTES[dt])
    return passes, stored


def program_text(dims: GemmDims, tiling: Tiling, stages: tuple[str, ...],
                 regions: Mapping[str, Region], **kw) -> str:
    """The GEMM's program text for ``tiling`` (super tiles or streamed; one part per bias
    window, :func:`fusion.kernels.gemm.parts.program_parts`, whose arguments these are)."""
    return "\n".join(render(template, **context) for template, context
                     in program_parts(dims, tiling, stages, regions, **kw))


def build_program(config: VariantConfig, p: GemmParams, regions: Mapping[str, Region]) -> Build:
    """The program of ``p`` at the placed ``regions`` (those of :func:`gemm_sizes`).

    Without a tiling in ``p``, the tilings are tried best first until a program fits the
    instruction memory; ``chosen["tiling"]`` is the one used.

    Raises
    ------
    ProgramTooLong
        When no candidate tiling gives a program that fits the instruction memory.
    """
    dims = GemmDims(config, p.M, p.K, p.N, kgroup=p.kgroup, kblocks=p.kblocks)
    stages, params = p.stages, p.epilogue
    gemm_stages = stages if p.fused else ()
    final_dt = dt_name(output_dtype(stages))
    passes, stored = _passes(dims, p, regions, final_dt)
    bufs = [regions[f"tmp{n}"] for n in range(2) if f"tmp{n}" in regions]
    what = (f"{'fused' if p.fused else 'unfused'} {p.M}x{p.K}x{p.N}"
            f"{f' grouped (kgroup={p.kgroup})' if p.kgroup else ''} GEMM "
            f"({', '.join(stages) or 'no epilogue'})")
    if p.sparse:
        return _sparse_program(config, dims, p, regions, what)
    if p.skip:
        return _skip_program(config, dims, p, regions, what)
    if p.tiling is not None:
        candidates: Iterable[Tiling] = [resolve(dims, gemm_stages, p.tiling,
                                                per_channel=params.per_channel)]
    else:
        candidates = ranked_tilings(dims, gemm_stages, per_channel=params.per_channel)
    # The program's size depends on the shape of the super-tile loops, not on their trip
    # counts (fusion.kernels.gemm.loops): when a program is too long for the instruction
    # memory, skip the other candidates of its shape; one of another shape (fewer loop
    # levels or ragged edges, single buffering) may fit.
    too_long: set[tuple] = set()
    error: ProgramTooLong | None = None
    for cand in candidates:
        shape = loop_shape(dims, cand)
        if shape in too_long:
            continue
        text = program_text(
            dims, cand, gemm_stages, regions, params=params,
            out=bufs[0] if bufs else regions["out"], out_dt="i32" if bufs else final_dt,
            halt=not bufs, transposed=p.kmajor_out)
        try:
            program = assemble_program(config, "\n".join([text, *passes]), what=what)
        except ProgramTooLong as exc:
            too_long.add(shape)
            error = exc if error is None or exc.length < error.length else error
            continue
        tiling = cand
        break
    else:
        if error is None:  # no candidate at all: let the tiler name what does not fit
            default_tiling(dims, gemm_stages, per_channel=params.per_channel)
        raise error
    rows = len(passes) * dims.Mb * dims.Nb * dims.R
    blocks = bias_blocks(dims, gemm_stages, tiling, per_channel=params.per_channel)
    return figures(config, program, busy=dims.Mb * dims.Nb * dims.Kp + rows, stored=stored,
                   chosen={"tiling": dataclasses.asdict(tiling),
                           "bias_windows": len(windows(dims.Nb, blocks))})


def _sparse_program(config: VariantConfig, dims: GemmDims, p: GemmParams,
                    regions: Mapping[str, Region], what: str) -> Build:
    """The block-sparse program of ``p`` (:mod:`fusion.kernels.gemm.sparse`): fused, one
    part, its tiling the one it records."""
    final_dt = dt_name(output_dtype(p.stages))
    text = render("gemm_sparse.j2", **sparse_context(
        dims, p.blocks, p.stages, regions, params=p.epilogue, out=regions["out"],
        out_dt=final_dt, transposed=p.kmajor_out))
    program = assemble_program(config, text, what=f"block-sparse {what}")
    stored = dims.Mb * dims.Nb * dims.tile_bytes(DT_BYTES[final_dt])
    return figures(config, program, busy=busy_slices(dims, p.blocks), stored=stored,
                   chosen={"tiling": dataclasses.asdict(sparse_tiling(dims)),
                           "bias_windows": 1})


def _skip_program(config: VariantConfig, dims: GemmDims, p: GemmParams,
                  regions: Mapping[str, Region], what: str) -> Build:
    """The zero-skipping program of ``p`` (:mod:`fusion.kernels.gemm.skip`): fused, one part,
    its tiling the block-sparse GEMM's (A resident in groups, a column block at a time)."""
    final_dt = dt_name(output_dtype(p.stages))
    text = render("gemm_skip.j2", **skip_context(
        dims, p.stages, regions, params=p.epilogue, out=regions["out"], out_dt=final_dt,
        a_zp=p.skip_zp, transposed=p.kmajor_out))
    program = assemble_program(config, text, what=f"zero-skipping {what}")
    stored = dims.Mb * dims.Nb * dims.tile_bytes(DT_BYTES[final_dt])
    if p.out_flags:
        stored += flag_bytes(dims, out=True)
    return figures(config, program, busy=dims.Mb * dims.Nb * dims.Kp, stored=stored,
                   chosen={"tiling": dataclasses.asdict(skip_tiling(dims)),
                           "bias_windows": 1})
