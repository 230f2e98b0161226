"""Build a GEMM kernel: memory image, microcode, expected result and cost figures.

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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion.kernels import layout
from fusion.kernels.codegen import ProgramTooLong, assemble_program, load_bytes, render
from fusion.kernels.epilogue import DT_BYTES, pass_context, pass_dtypes, reads_bias_region
from fusion.kernels.gemm.loops import gemm_context
from fusion.kernels.layout import GemmDims, Region
from fusion.kernels.tiling import Tiling, default_tiling, loop_shape, ranked_tilings, resolve
from hwgen.config import VariantConfig
from hwgen.reference import EpilogueParams, check_stages, gemm_epilogue, output_dtype


@dataclass(frozen=True, eq=False)
class GemmKernel:
    """One GEMM kernel, ready to run on a variant.

    Attributes
    ----------
    program : list of int
        The microcode words.
    memory : list of (int, bytes)
        ``(word address, bytes)`` to write into external memory before the run.
    reads : dict
        ``name -> (word address, nbytes)`` of the regions to read back (``"out"``).
    expected : ndarray
        The reference result, M x N, int8 or int32.
    ideal_cycles : int
        A lower bound: ``max(array k-steps + epipass rows, words loaded, words stored)``,
        i.e. every unit at full rate with perfect overlap and no latency.
    bytes_loaded : int
        Bytes the program's loads read (to check the ``bytes_read`` counter against).
    tiling : Tiling
        The super tiles used (resolved).
    """

    config: VariantConfig
    dims: GemmDims
    stages: tuple[str, ...]
    fused: bool
    tiling: Tiling
    params: EpilogueParams
    program: list[int]
    source: str
    memory: list[tuple[int, bytes]]
    regions: dict[str, Region]
    reads: dict[str, tuple[int, int]]
    expected: np.ndarray
    ideal_cycles: int
    bytes_loaded: int
    bytes_stored: int

    @property
    def out_dtype(self) -> np.dtype:
        return output_dtype(self.stages)

    def decode(self, outputs: Mapping[str, Any] | bytes | np.ndarray) -> np.ndarray:
        """The M x N result from the regions read back at :attr:`reads`.

        ``outputs`` maps ``"out"`` to its bytes (bytes, bytearray or a uint8 array), or is
        those bytes itself.
        """
        return layout.unpack_output(self.dims, outputs, self.out_dtype)


def _dt(dtype: np.dtype) -> str:
    return "i8" if dtype == np.int8 else "i32"


def _check_per_channel(stages: tuple[str, ...], params: EpilogueParams) -> None:
    if params.per_channel and "requant" not in stages:
        raise ValueError(f"per-channel requantize (params.per_channel) needs the requant stage, "
                         f"but the stages are ({', '.join(stages) or 'none'}); add requant or "
                         f"use per_channel=False")


def _arrays(dims: GemmDims, stages: tuple[str, ...], a: np.ndarray, b: np.ndarray,
            bias: np.ndarray | None, residual: np.ndarray | None,
            params: EpilogueParams | None = None, mult: np.ndarray | None = None,
            shift: np.ndarray | None = None) -> dict[str, bytes]:
    for name, value in (("bias", bias), ("residual", residual)):
        if value is None and name in stages:
            raise ValueError(f"the {name} stage needs a {name} operand "
                             f"(stages: {', '.join(stages)})")
    per_channel = params is not None and params.per_channel
    if per_channel:
        for name, value in (("mult", mult), ("shift", shift)):
            if value is None:
                raise ValueError(f"per-channel requantize needs a {name} operand: N={dims.N} "
                                 f"int32 values, one per output column")
    data = {"a": layout.pack_a(dims, a), "b": layout.pack_b(dims, b)}
    if per_channel:  # the bias region holds [Nb][3][C] groups: bias, multipliers, shifts
        data["bias"] = layout.pack_bias_group(
            dims, bias if "bias" in stages else None, mult, shift)
    elif "bias" in stages:  # an operand no stage uses is ignored, so callers can share problems
        data["bias"] = layout.pack_bias(dims, bias)
    if "residual" in stages:
        data["residual"] = layout.pack_tiles(dims, residual, np.int8)
    return data


def _regions(dims: GemmDims, stages: tuple[str, ...], fused: bool,
             params: EpilogueParams) -> dict[str, int]:
    _check_per_channel(stages, params)
    tiles = dims.Mb * dims.Nb
    sizes = {"a": dims.Mb * dims.Kp * dims.R, "b": dims.Nb * dims.Kp * dims.C}
    if reads_bias_region(stages, params):
        sizes["bias"] = layout.bias_region_bytes(dims, params)
    if "residual" in stages:
        sizes["residual"] = tiles * dims.tile_bytes(1)
    sizes["out"] = tiles * dims.tile_bytes(DT_BYTES[_dt(output_dtype(stages))])
    if not fused and stages:  # the int32 GEMM result and the passes' ping-pong
        sizes.update({f"tmp{n}": tiles * dims.tile_bytes(4) for n in range(2)})
    return sizes


def gemm_regions(
    config: VariantConfig,
    M: int,  # noqa: N803 - the GEMM's customary names
    K: int,  # noqa: N803
    N: int,  # noqa: N803
    *,
    stages: Sequence[str] = (),
    fused: bool = True,
    params: EpilogueParams | None = None,
) -> dict[str, int]:
    """The memory regions :func:`build_gemm` uses, without building the program.

    A memory planner needs them before it can give the kernel a ``placement``.

    Parameters
    ----------
    config, M, K, N, stages, fused, params
        As for :func:`build_gemm`.

    Returns
    -------
    dict of str to int
        ``name -> bytes`` in allocation order: ``a``, ``b``, ``bias`` (when the kernel has a
        bias region), ``residual`` (when the residual stage runs), ``out``, and ``tmp0``,
        ``tmp1`` (the int32 intermediates, when unfused with stages).

    Raises
    ------
    ValueError
        A stage not in the variant's chain or out of order, or a non-positive dimension.
    """
    stages = check_stages(stages, config.epilogue)
    params = params if params is not None else EpilogueParams()
    return _regions(GemmDims(config, M, K, N), stages, bool(fused), params)


def build_gemm(
    config: VariantConfig,
    M: int,  # noqa: N803 - the GEMM's customary names
    K: int,  # noqa: N803
    N: int,  # noqa: N803
    *,
    stages: Sequence[str] = (),
    fused: bool = True,
    tiling: Tiling | None = None,
    params: EpilogueParams | None = None,
    a: np.ndarray,
    b: np.ndarray,
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    mult: np.ndarray | None = None,
    shift: np.ndarray | None = None,
    placement: Mapping[str, int] | None = None,
) -> GemmKernel:
    """Build ``epilogue(a @ b)`` as a kernel for ``config``.

    Parameters
    ----------
    config : VariantConfig
        The variant to run on.
    M, K, N : int
        The GEMM shape: ``a`` is M x K int8, ``b`` K x N int8.
    stages : sequence of str
        Epilogue stages to apply: an ordered subset of ``config.epilogue``.
    fused : bool
        Fuse the stages into the GEMM's drain, or run them as separate passes.
    tiling : Tiling, optional
        Super tiles; the default is :func:`fusion.kernels.tiling.default_tiling`.
    params : EpilogueParams, optional
        Requantize, clamp and residual CSR values (identity defaults). With
        ``per_channel``, the requantize multipliers and shifts are the ``mult`` and ``shift``
        operands (the fields of the same names are unused; ``zp`` applies to every channel),
        and the requant stage must be one of ``stages``.
    bias : ndarray, optional
        N int32 values; needed when ``"bias"`` is a stage, ignored otherwise.
    residual : ndarray, optional
        M x N int8 values; needed when ``"residual"`` is a stage, ignored otherwise.
    mult, shift : ndarray, optional
        N int32 values each, one per output column: the per-channel requantize multipliers
        (signed 32-bit) and shifts (0..63). Needed when ``params.per_channel``, ignored
        otherwise. They go to the bias region's groups
        (:func:`fusion.kernels.layout.pack_bias_group`).
    placement : mapping of str to int, optional
        The word address of every region of :func:`gemm_regions` (exactly those); by default
        they are allocated first fit from word 0 (:class:`fusion.kernels.layout.Allocator`).

    Returns
    -------
    GemmKernel

    Raises
    ------
    ValueError
        A stage not in the variant's chain or out of order; a missing operand;
        a tiling that does not fit the scratchpads (naming rows needed and available); a
        problem too large for the memory; a placement that misses a region, names an unknown
        one, runs past the memory or overlaps two regions (:func:`fusion.kernels.layout.place`); a
        program longer than the instruction memory.
    """
    stages = check_stages(stages, config.epilogue)
    params = params if params is not None else EpilogueParams()
    dims = GemmDims(config, M, K, N)
    _check_per_channel(stages, params)
    data = _arrays(dims, stages, a, b, bias, residual, params, mult, shift)
    gemm_stages = stages if fused else ()
    final_dt = _dt(output_dtype(stages))
    sizes = _regions(dims, stages, bool(fused), params)
    for name, blob in data.items():
        if len(blob) != sizes.get(name):  # the packing and gemm_regions must agree
            raise RuntimeError(f"internal error: operand {name} packs to {len(blob)} bytes but "
                               f"gemm_regions gives its region {sizes.get(name)}")
    regions = layout.place(config, sizes, placement, what=f"{M}x{K}x{N} GEMM")
    tiles = dims.Mb * dims.Nb
    out = regions["out"]
    bufs = [regions[f"tmp{n}"] for n in range(2) if f"tmp{n}" in regions]
    # The passes do not depend on the tiling: render them once.
    passes, stored, src, src_dt = [], tiles * dims.tile_bytes(4), None, "i32"
    if bufs:
        src = bufs[0]
        for n, (stage, dt) in enumerate(zip(stages, pass_dtypes(stages, params, final_dt),
                                            strict=True)):
            dst = out if n == len(stages) - 1 else bufs[(n + 1) % 2]
            passes.append(render("epilogue_pass.j2", **pass_context(
                dims, stages=(stage,), params=params, src=src, src_dt=src_dt, out=dst,
                out_dt=dt,
                bias=regions["bias"] if reads_bias_region((stage,), params) else None,
                residual=regions.get("residual") if stage == "residual" else None,
                prefix=f"pass{n}_{stage}", halt=n == len(stages) - 1)))
            src, src_dt, stored = dst, dt, stored + tiles * dims.tile_bytes(DT_BYTES[dt])
    else:
        stored = tiles * dims.tile_bytes(DT_BYTES[final_dt])
    what = (f"{'fused' if fused else 'unfused'} {M}x{K}x{N} GEMM "
            f"({', '.join(stages) or 'no epilogue'})")
    if tiling is not None:
        candidates: Iterable[Tiling] = [resolve(dims, gemm_stages, tiling,
                                                per_channel=params.per_channel)]
    else:
        candidates = ranked_tilings(dims, gemm_stages, per_channel=params.per_channel)
    # The program's size depends on the shape of the super-tile loops, not on their trip
    # counts (fusion.gemm_loops): when a program is too long for the instruction memory,
    # skip the other candidates of its shape; one of another shape (fewer loop levels or
    # ragged edges, single buffering) may fit.
    too_long: set[tuple] = set()
    error: ProgramTooLong | None = None
    for cand in candidates:
        shape = loop_shape(dims, cand)
        if shape in too_long:
            continue
        text = render("gemm.j2", **gemm_context(
            dims, cand, gemm_stages, regions, params=params,
            out=bufs[0] if bufs else out, out_dt="i32" if bufs else final_dt, halt=not bufs))
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
    rows = len(passes) * tiles * dims.R
    loaded = load_bytes(config, program.instrs)
    ideal = max(tiles * dims.Kp + rows, -(-loaded // dims.W), -(-stored // dims.W))
    expected = gemm_epilogue(a, b, stages, params, bias=bias if "bias" in stages else None,
                             residual=residual if "residual" in stages else None,
                             mult=mult, shift=shift)
    return GemmKernel(
        config=config, dims=dims, stages=stages, fused=fused, tiling=tiling, params=params,
        program=program.words, source=program.text,
        memory=[(regions[name].addr, blob) for name, blob in data.items()],
        regions=dict(regions), reads={"out": (out.addr, out.nbytes)},
        expected=expected, ideal_cycles=ideal, bytes_loaded=loaded, bytes_stored=stored)
