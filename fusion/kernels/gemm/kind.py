"""The GEMM kernel kind: ``epilogue(a @ b)``, its epilogue fused into the drain or run after
it as passes (program: :mod:`fusion.kernels.gemm.build`; super-tile loops:
:mod:`fusion.kernels.gemm.loops`; features: :mod:`fusion.kernels.gemm.features`).

Operands: ``a`` (``M x K`` int8), ``b`` (``K x N`` int8, pre-packed in the array's tile
order), ``bias`` (``N`` int32, with the bias stage), ``residual`` (``M x N`` int8, with the
residual stage), ``mult`` and ``shift`` (``N`` int32 each, with per-channel requantize: they
go with the bias into the bias region's groups, :func:`fusion.kernels.layout.pack_bias_group`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion.kernels import layout
from fusion.kernels.cache import KernelCache
from fusion.kernels.epilogue import (
    epilogue_operands,
    pack_epilogue,
    pass_dtypes,
    pass_fit_problem,
)
from fusion.kernels.gemm.build import build_program, dt_name, gemm_sizes
from fusion.kernels.gemm.features import GemmFeatures
from fusion.kernels.gemm.params import GemmParams
from fusion.kernels.gemm.skip import (
    pack_flags,
    skip_problems,
    skip_tiling,
    tile_flags,
    tiles,
    unfolded_bias,
)
from fusion.kernels.gemm.sparse import pack_sparse_b, sparse_problems, sparse_tiling
from fusion.kernels.layout import GemmDims, Region, kgroup_problem
from fusion.kernels.program import Kernel, compile_kernel, key_parts, regions_of
from fusion.kernels.protocol import Build, KernelKind, Operand, Refusal, stage_refusal
from fusion.kernels.tiling import Tiling, ranked_tilings, stream_tilings, tiling_problem
from hwgen.config import VariantConfig
from hwgen.reference import EpilogueParams, gemm_epilogue, output_dtype

#: Tilings priced per GEMM: the tiler's best few, plus the best of each loop order.
TILINGS_PRICED = 4
ROW_MAJOR_REFUSAL = ("weights row-major in memory: gemm.j2 loads B as pre-packed [Nb][Kp][C] "
                     "tiles in one load per super tile; row-major B needs a strided load per "
                     "column block and k slice, which the microcode does not emit")


@dataclass(frozen=True, eq=False)
class GemmKernel(Kernel):
    """A compiled GEMM: its program, and what is needed to run it on given operands."""

    @property
    def fused(self) -> bool:
        return bool(self.signature.fused)

    @property
    def dims(self) -> GemmDims:
        """The padded problem, grouped when the params were (``kgroup``)."""
        m, k, n = self.meta["dims"]
        return GemmDims(self.config, m, k, n, kgroup=self.meta["params"].get("kgroup", 0),
                        kblocks=self.meta["params"].get("kblocks", 1))

    @property
    def sparse_blocks(self) -> tuple[tuple[int, ...], ...] | None:
        """A block-sparse kernel's kept weight blocks per column block; None if dense."""
        blocks = self.meta["params"].get("sparse_blocks")
        return None if blocks is None else tuple(tuple(c) for c in blocks)

    @property
    def tiling(self) -> Tiling:
        """The super tiles the program uses (resolved)."""
        return Tiling(**self.meta["chosen"]["tiling"])

    def memory(self, a: np.ndarray | None = None, b: np.ndarray | None = None,
               **values: np.ndarray | None) -> list[tuple[int, bytes]]:
        """``(word address, bytes)`` writes that put the operands where the program reads.

        ``mult`` and ``shift`` are the per-channel requantize vectors (needed when
        ``params.per_channel``). Operands no stage uses are ignored.
        """
        return self.write({"a": a, "b": b, **values})

    def expected(self, a: np.ndarray | None = None, b: np.ndarray | None = None,
                 **values: np.ndarray | None) -> np.ndarray:
        """The reference result for these operands (numpy, no hardware), ``M x N``."""
        return self.result_of({"a": a, "b": b, **values})


class GemmKind(KernelKind):
    """``epilogue(a @ b)`` (see the module docstring)."""

    name = "gemm"
    template = "gemm.j2"
    params_type = GemmParams
    kernel_type = GemmKernel
    features_type = GemmFeatures
    const_regions = frozenset({"b", "bias"})
    variants_label = "tilings"

    def legality(self, config: VariantConfig, params: GemmParams) -> Refusal | None:
        p = params
        refusal = stage_refusal(self.name, p.stages, config.epilogue)
        if refusal is not None:
            return refusal
        problem = kgroup_problem(config, p.K, p.N, p.kgroup, p.kblocks)
        if problem is not None:
            return Refusal(self.name, "kgroup", problem, kgroup=p.kgroup)
        dims = gemm_dims(config, p)
        per_channel = p.epilogue.per_channel
        if p.skip:
            problems = skip_problems(dims, p.stages, fused=p.fused, per_channel=per_channel,
                                     a_zp=p.skip_zp, out_flags=p.out_flags)
            if p.kmajor_out:
                problem = kmajor_problem(config, p)
                if problem is not None:
                    problems.append(problem)
            if problems:
                return Refusal(self.name, "skip", "zero-skipping GEMM: " + "; ".join(problems))
            return None
        if p.sparse:
            problems = sparse_problems(dims, p.blocks, p.stages, fused=p.fused,
                                       per_channel=per_channel)
            if problems:
                return Refusal(self.name, "sparse", "block-sparse GEMM: " + "; ".join(problems))
            if p.kmajor_out:
                problem = kmajor_problem(config, p)
                if problem is not None:
                    return Refusal(self.name, "kmajor_out", problem)
            return None
        problem = tiling_problem(dims, p.stages if p.fused else (), p.tiling,
                                 per_channel=per_channel)
        if problem is not None:
            if p.tiling is not None:
                return Refusal(self.name, "tiling", problem, tiling=p.tiling)
            return Refusal(self.name, "no_tiling", f"no tiling fits: {problem}")
        if p.kmajor_out:
            problem = kmajor_problem(config, p)
            if problem is not None:
                return Refusal(self.name, "kmajor_out", problem)
        if not p.fused and p.stages:
            src = "i32"
            for stage, dt in zip(p.stages, pass_dtypes(p.stages, p.epilogue,
                                                       dt_name(output_dtype(p.stages))),
                                 strict=True):
                problem = pass_fit_problem(dims, stages=(stage,), params=p.epilogue, src_dt=src)
                if problem is not None:
                    return Refusal(self.name, "pass_does_not_fit", problem, stage=stage)
                src = dt
        return None

    def dims(self, params: GemmParams) -> tuple[int, int, int]:
        return params.M, params.K, params.N

    def stages(self, params: GemmParams) -> tuple[str, ...]:
        return params.stages

    def epilogue(self, params: GemmParams) -> EpilogueParams:
        return params.epilogue

    def operands(self, config: VariantConfig, params: GemmParams) -> dict[str, Operand]:
        p = params
        return {"a": Operand("int8", (p.M, p.K)), "b": Operand("int8", (p.K, p.N)),
                **epilogue_operands(p.stages, p.epilogue, p.M, p.N)}

    def output(self, params: GemmParams) -> Operand:
        return Operand(output_dtype(params.stages).name, (params.M, params.N))

    def regions(self, config: VariantConfig, params: GemmParams) -> dict[str, int]:
        return gemm_sizes(gemm_dims(config, params), params)

    def key_params(self, params: GemmParams) -> dict[str, Any]:
        p = params
        key = {"shape": [p.M, p.K, p.N], "stages": list(p.stages), "fused": p.fused,
               "quant": dataclasses.asdict(p.epilogue),
               "tiling": dataclasses.asdict(p.tiling) if p.tiling is not None else None}
        if p.kgroup:  # only when grouped: dense kernels keep the cache keys they had
            key["kgroup"] = p.kgroup
            if p.kblocks != 1:
                key["kblocks"] = p.kblocks
        if p.kmajor_out:  # likewise
            key["kmajor_out"] = True
        if p.sparse:  # likewise: the program is made for these blocks
            key["sparse_blocks"] = [list(col) for col in p.blocks]
        if p.skip:  # likewise (the program never depends on the flags)
            key["skip_zp"] = p.skip_zp
            if p.out_flags:
                key["out_flags"] = True
        return key

    def build(self, config: VariantConfig, params: GemmParams,
              regions: Mapping[str, Region]) -> Build:
        return build_program(config, params, regions)

    def pack(self, config: VariantConfig, params: GemmParams,
             values: Mapping[str, np.ndarray]) -> dict[str, bytes]:
        p = params
        dims = gemm_dims(config, p)
        b = (pack_sparse_b(dims, p.blocks, values["b"]) if p.sparse
             else layout.pack_b(dims, values["b"]))
        if p.skip:  # the zero point subtracted at the array's edge: its share leaves the bias
            values = {**values, "bias": unfolded_bias(values["bias"], values["b"], p.skip_zp)}
        packed = {"a": layout.pack_a(dims, values["a"]), "b": b,
                  **pack_epilogue(dims, p.stages, p.epilogue, values)}
        if p.skip:  # A's tile flags, as its producer (here the host) writes them
            packed["a_flags"] = pack_flags(dims, tile_flags(dims, values["a"], p.skip_zp))
        return packed

    def reference(self, params: GemmParams, values: Mapping[str, np.ndarray]) -> np.ndarray:
        extra = {k: v for k, v in values.items() if k not in ("a", "b")}
        return gemm_epilogue(values["a"], values["b"], params.stages, params.epilogue, **extra)

    def features(self, config: VariantConfig, params: GemmParams) -> GemmFeatures:
        p = params
        return GemmFeatures.for_gemm(config, p.M, p.K, p.N, stages=p.stages, fused=p.fused,
                                     tiling=p.tiling, params=p.epilogue, kgroup=p.kgroup,
                                     kmajor_out=p.kmajor_out, kblocks=p.kblocks,
                                     blocks=p.blocks if p.sparse else None,
                                     skip_zp=p.skip_zp if p.skip else None,
                                     out_flags=p.out_flags, flags=p.flags)

    def variants(self, config: VariantConfig, params: GemmParams) -> list[GemmParams]:
        """The tiler's best :data:`TILINGS_PRICED` tilings and the best of each loop order
        (given a tiling, just that)."""
        p = params
        if p.tiling is not None or p.sparse or p.skip:
            return [p]
        dims = gemm_dims(config, p)
        stages, pc = p.stages if p.fused else (), p.epilogue.per_channel
        tilings = list(itertools.islice(ranked_tilings(dims, stages, per_channel=pc),
                                        TILINGS_PRICED))
        for order in ("mn", "nm"):
            best = next(iter(ranked_tilings(dims, stages, order=order, per_channel=pc)), None)
            if best is not None and best not in tilings:
                tilings.append(best)
        # one row block: streamed B too (bound by the weights' stream, which the tiler's
        # rough estimate does not rank; the cost model prices them)
        tilings += stream_tilings(dims, stages, per_channel=pc)
        dense = [dataclasses.replace(p, tiling=t) for t in tilings]
        # weights with all-zero blocks: the program that skips them too, priced beside
        if p.blocks is not None and not sparse_problems(dims, p.blocks, p.stages, fused=p.fused,
                                                        per_channel=pc):
            dense.append(dataclasses.replace(p, sparse=True, tiling=sparse_tiling(dims)))
        # a data profile with all-zero-point A tiles: the program that skips them at run time
        if p.flags is not None and p.skip_zp is not None and any(map(any, p.flags)) and \
                not skip_problems(dims, p.stages, fused=p.fused, per_channel=pc,
                                  a_zp=p.skip_zp, out_flags=False):
            dense.append(dataclasses.replace(p, skip=True, tiling=skip_tiling(dims)))
        return dense

    def data_variants(self, config: VariantConfig, params: GemmParams) -> list[GemmParams]:
        """The variants a data profile may have chosen (:meth:`variants` offers them only
        with one): the zero-skipping program, for a plan read back without its data."""
        p = params
        if p.skip or p.sparse or p.skip_zp is None:
            return []
        dims = gemm_dims(config, p)
        if skip_problems(dims, p.stages, fused=p.fused, per_channel=p.epilogue.per_channel,
                         a_zp=p.skip_zp, out_flags=False):
            return []
        return [dataclasses.replace(p, skip=True, tiling=skip_tiling(dims))]

    def fastest_params(self, config: VariantConfig, params: GemmParams) -> GemmParams:
        """``params`` priced at their fastest on any data: a zero-skipping GEMM with every
        tile of A flagged (the floor a run's cycles cannot go below)."""
        if not params.skip:
            return params
        mb, kb = tiles(gemm_dims(config, params))
        return dataclasses.replace(params, flags=((True,) * kb,) * mb)

    def variant_label(self, params: GemmParams) -> str:
        t = params.tiling
        if params.sparse:
            return f"block-sparse, {_kept(params)} weight blocks kept"
        if params.skip:
            return "zero-skipping (all-zero-point A tiles jumped over)"
        if t.stream:
            return f"streamed B, {t.stream} chunks a column block"
        return (f"tm={t.tm} tn={t.tn} kt={t.kt} order={t.order} "
                f"double_buffer={t.double_buffer}")

    def explain_notes(self, params: GemmParams) -> list[str]:
        return ["weight layout pre-packed (tile order): chosen",
                f"weight layout row-major: refused: {ROW_MAJOR_REFUSAL}"]

    def describe(self, params: GemmParams, ops: str = "") -> str:
        p, t = params, params.tiling
        tiles = "" if t is None else (
            f", B streamed in {t.stream} chunks" if t.stream else
            f", tiles {t.tm}x{t.tn} kt={t.kt} {t.order}"
            f"{'' if t.double_buffer else ' single-buffered'}")
        grouped = f" grouped kgroup={p.kgroup}" if p.kgroup else ""
        if p.kgroup and p.kblocks != 1:
            grouped += f" of {p.kblocks} column blocks"
        kmajor = ", stored K-major" if p.kmajor_out else ""
        if p.sparse:
            tiles = f", block-sparse ({_kept(p)} weight blocks)"
        if p.skip:
            tiles = f", zero-skipping (A zero point {p.skip_zp})"
        return (f"{self.name} {p.M}x{p.K}x{p.N}{grouped}{f' [{ops}]' if ops else ''} "
                f"stages={','.join(p.stages) or '-'}{tiles}{kmajor}")

    def region_layout(self, config: VariantConfig, params: GemmParams, region: str) -> str:
        """``a`` is K-major (``kmajor/Kp``; grouped, its own ``grouped`` slices), ``out`` is
        ``kmajor/(Nb*C)`` when stored transposed, the rest tile-blocked."""
        dims = gemm_dims(config, params)
        if region == "a":
            return layout.layout_name("grouped" if dims.grouped and not dims.a_direct
                                      else "kmajor", dims.a_Kp)
        if region == "out" and params.kmajor_out:
            return layout.layout_name("kmajor", dims.Nb * dims.C)
        return "tiles"

    def inputs_in_place(self, params: GemmParams) -> dict[str, int]:
        """``a`` (graph input 0) and the residual (input 1) may be a producer's output where
        it lies, when the layouts agree (:meth:`region_layout`)."""
        return {"a": 0, **({"residual": 1} if "residual" in params.stages else {})}

    def host_operands(self, config: VariantConfig, params: GemmParams,
                      inputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        ops = {"a": np.asarray(inputs[0]).reshape(params.M, params.K)}
        if "residual" in params.stages:
            ops["residual"] = np.asarray(inputs[1]).reshape(params.M, params.N)
        return ops


GEMM = GemmKind()


def _kept(p: GemmParams) -> int:
    """How many weight blocks a block-sparse GEMM's params keep."""
    return sum(map(len, p.blocks))


def kmajor_problem(config: VariantConfig, params: GemmParams) -> str | None:
    """Why ``params`` cannot store its output K-major (``kmajor_out``); None if it can."""
    if config.rows != config.cols:
        return (f"a K-major (transposed) store needs a square array, not {config.rows} x "
                f"{config.cols}")
    if not params.fused and params.stages:
        return "a K-major store is the fused drain's: unfused, the last pass stores the output"
    if output_dtype(params.stages) != np.int8:
        return "a K-major store holds int8 tiles; this output is int32"
    return None


def gemm_dims(config: VariantConfig, params: GemmParams) -> GemmDims:
    """The padded problem of ``params`` on ``config`` (grouped when ``params.kgroup``)."""
    return GemmDims(config, params.M, params.K, params.N, kgroup=params.kgroup,
                    kblocks=params.kblocks)


def gemm_params(M: int, K: int, N: int, *, stages: Sequence[str] = (),  # noqa: N803
                fused: bool = True, tiling: Tiling | None = None,
                params: EpilogueParams | None = None, kgroup: int = 0,
                kmajor_out: bool = False, kblocks: int = 1) -> GemmParams:
    """:class:`GemmParams` from the builder's customary arguments."""
    return GemmParams(M=M, K=K, N=N, stages=stages, fused=fused,
                      epilogue=params if params is not None else EpilogueParams(),
                      tiling=tiling, kgroup=kgroup, kmajor_out=kmajor_out, kblocks=kblocks)


def compiled_gemm(
    config: VariantConfig,
    M: int,  # noqa: N803 - the GEMM's customary names
    K: int,  # noqa: N803
    N: int,  # noqa: N803
    *,
    stages: Sequence[str] = (),
    fused: bool = True,
    tiling: Tiling | None = None,
    params: EpilogueParams | None = None,
    placement: Mapping[str, int] | None = None,
    cache: KernelCache | None = None,
    kgroup: int = 0,
    kmajor_out: bool = False,
    kblocks: int = 1,
) -> GemmKernel:
    """The program of ``epilogue(a @ b)`` on ``config``, from ``cache`` when it has it.

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
        Super tiles; the default is the best-ranked tiling whose program fits.
    params : EpilogueParams, optional
        Requantize, clamp and residual CSR values (see :class:`GemmParams`).
    placement, cache
        As for :func:`fusion.kernels.program.compile_kernel` (the regions are those of
        :func:`gemm_regions`).
    kgroup : int
        0 (dense), or the K rows each column block reads of a block-diagonal ``b``
        (:class:`GemmParams`).
    kmajor_out : bool
        Store the output transposed, tile by tile (:class:`GemmParams`).
    kblocks : int
        Grouped only: column blocks per group (:class:`GemmParams`).

    Returns
    -------
    GemmKernel

    Raises
    ------
    KernelRefused
        A stage not in the variant's chain or out of order; a tiling that does not fit the
        scratchpads (naming rows needed and available), or none that does.
    ValueError
        Per-channel requantize without the requant stage; a problem too large for the
        memory; a placement that misses a region, names an unknown one, runs past the memory
        or overlaps two regions (:func:`fusion.kernels.layout.place`); a program longer than
        the instruction memory.
    """
    p = gemm_params(M, K, N, stages=stages, fused=fused, tiling=tiling, params=params,
                    kgroup=kgroup, kmajor_out=kmajor_out, kblocks=kblocks)
    return compile_kernel(GEMM, config, p, placement=placement, cache=cache)


def gemm_regions(config: VariantConfig, M: int, K: int, N: int, *,  # noqa: N803
                 stages: Sequence[str] = (), fused: bool = True,
                 params: EpilogueParams | None = None, kgroup: int = 0,
                 kblocks: int = 1) -> dict[str, int]:
    """The memory regions :func:`compiled_gemm` uses, without building the program.

    A memory planner needs them before it can give the kernel a ``placement``.

    Returns
    -------
    dict of str to int
        ``name -> bytes`` in allocation order: ``a``, ``b``, ``bias`` (when the kernel has a
        bias region), ``residual`` (when the residual stage runs), ``out``, and ``tmp0``,
        ``tmp1`` (the int32 intermediates, when unfused with stages).

    Raises
    ------
    ValueError
        As :func:`compiled_gemm` does before building.
    """
    p = gemm_params(M, K, N, stages=stages, fused=fused, params=params, kgroup=kgroup,
                    kblocks=kblocks)
    return regions_of(GEMM, config, p)


def gemm_key_parts(config: VariantConfig, M: int, K: int, N: int, *,  # noqa: N803
                   stages: Sequence[str] = (), fused: bool = True,
                   tiling: Tiling | None = None, params: EpilogueParams | None = None,
                   placement: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The cache key parts of a GEMM kernel's program (:func:`fusion.kernels.program.key_parts`)."""
    p = gemm_params(M, K, N, stages=stages, fused=fused, tiling=tiling, params=params)
    return key_parts(GEMM, config, p, placement)
