"""The cost-model features of a GEMM kernel, and its analytical estimate.

Features describe one kernel on one variant without its operand values: the variant config,
the GEMM shape, the epilogue stages and whether they are fused, the resolved tiling, the
element type of each unfused pass, and, when the kernel was built, its program size and the
bytes its loads read and its stores write. They serialize to JSON (:meth:`GemmFeatures.to_dict`):
calibration (``sim.calibrate``) records them beside the measured counters, and models learn
from those rows without ever importing the simulator.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fusion.cost.analytical import (
    built_instructions,
    estimate,
    estimate_program,
    program_or_template,
)
from fusion.cost.model import Features
from fusion.kernels.epilogue import pass_dtypes
from fusion.kernels.gemm.build import build_program, dt_name, gemm_sizes
from fusion.kernels.gemm.params import GemmParams
from fusion.kernels.gemm.skip import flags_consumed, skip_tiling, tiles
from fusion.kernels.gemm.sparse import busy_slices, kept_macs, sparse_tiling
from fusion.kernels.layout import GemmDims
from fusion.kernels.tiling import Tiling, default_tiling, resolve
from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig
from hwgen.reference import EpilogueParams, check_stages, output_dtype

#: Version of :meth:`GemmFeatures.to_dict`'s layout.
FEATURES_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class GemmFeatures(Features):
    """What a cost model knows about one GEMM kernel (with its epilogue) on one variant.

    Parameters
    ----------
    config : VariantConfig
        The variant.
    M, K, N : int
        The GEMM shape.
    stages : tuple of str
        Epilogue stages, in the variant's chain order.
    fused : bool
        Stages fused into the GEMM's drain, or run as one memory-to-memory pass each.
    tiling : Tiling
        The resolved tiling (``kt`` set, ``tm``/``tn`` clamped), as the kernel uses it.
    pass_dtypes : tuple of str
        Unfused only: the element type (``"i8"``/``"i32"``) each pass stores, which decides
        the pass's store traffic (it depends on the quantization: see
        :func:`fusion.kernels.epilogue.pass_dtypes`). Empty when fused.
    program_words : int, optional
        Static program size, when the kernel was built.
    bytes_loaded, bytes_stored : int, optional
        What the program's loads read and its stores write, when the kernel was built.
    per_channel : bool
        Per-channel requantize: the bias region holds three-row groups.
    residual_op : str
        The residual stage's mode (:data:`hwgen.stages.RESIDUAL_OPS`): the scaled add writes
        eight more control registers.
    kgroup : int
        0 (dense), or a grouped GEMM's K rows per column block
        (:class:`fusion.kernels.gemm.params.GemmParams`).
    kmajor_out : bool
        The output tiles are stored transposed (the transposer's latency at the end).
    blocks : tuple of tuple of int, optional
        A block-sparse kernel's kept weight blocks per column block
        (:mod:`fusion.kernels.gemm.sparse`); None for the dense programs.
    placement : tuple of (str, int), optional
        Where its regions lie (:attr:`fusion.cost.model.Features.placement`; set by
        :meth:`~fusion.cost.model.Features.at`).
    """

    kind: ClassVar[str] = "gemm"
    placeable: ClassVar[bool] = True

    config: VariantConfig
    M: int
    K: int
    N: int
    stages: tuple[str, ...] = ()
    fused: bool = True
    tiling: Tiling
    pass_dtypes: tuple[str, ...] = ()
    program_words: int | None = None
    bytes_loaded: int | None = None
    bytes_stored: int | None = None
    per_channel: bool = False
    residual_op: str = "add"
    kgroup: int = 0
    kmajor_out: bool = False
    kblocks: int = 1
    blocks: tuple[tuple[int, ...], ...] | None = None
    placement: tuple[tuple[str, int], ...] | None = None
    skip_zp: int | None = None
    out_flags: bool = False
    flags: tuple[tuple[bool, ...], ...] | None = None

    def __post_init__(self) -> None:
        check_stages(self.stages, self.config.epilogue)
        self.dims  # noqa: B018 - GemmDims checks the shape and kgroup
        if self.tiling.kt is None:
            raise ValueError(f"features need a resolved tiling (kt set), not {self.tiling}; "
                             f"use fusion.kernels.tiling.resolve")
        want = len(self.stages) if not self.fused else 0
        if len(self.pass_dtypes) != want:
            raise ValueError(f"an {'un' if not self.fused else ''}fused kernel with "
                             f"{len(self.stages)} stage(s) has {want} pass dtype(s), not "
                             f"{list(self.pass_dtypes)}")

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def for_gemm(
        cls,
        config: VariantConfig,
        M: int,  # noqa: N803
        K: int,  # noqa: N803
        N: int,  # noqa: N803
        *,
        stages: Sequence[str] = (),
        fused: bool = True,
        tiling: Tiling | None = None,
        params: EpilogueParams | None = None,
        kgroup: int = 0,
        kmajor_out: bool = False,
        kblocks: int = 1,
        blocks: tuple[tuple[int, ...], ...] | None = None,
        skip_zp: int | None = None,
        out_flags: bool = False,
        flags: tuple[tuple[bool, ...], ...] | None = None,
    ) -> GemmFeatures:
        """Features of a kernel that has not been built (no program size or byte counts).

        ``tiling`` is resolved against the problem; without one, the default tiler's choice
        (:func:`fusion.kernels.tiling.default_tiling`) is taken. ``kgroup``, ``kblocks`` and
        ``kmajor_out`` as for :class:`fusion.kernels.gemm.params.GemmParams`; ``blocks``
        makes the block-sparse kernel's features (its tiling is the one it records).
        """
        stages = check_stages(stages, config.epilogue)
        dims = GemmDims(config, M, K, N, kgroup=kgroup, kblocks=kblocks)
        gemm_stages = stages if fused else ()
        params = params if params is not None else EpilogueParams()
        pc = params.per_channel
        if blocks is not None:
            tiling = sparse_tiling(dims)
        elif skip_zp is not None:
            tiling = skip_tiling(dims)
        elif tiling is not None:
            tiling = resolve(dims, gemm_stages, tiling, per_channel=pc)
        else:
            tiling = default_tiling(dims, gemm_stages, per_channel=pc)
        dts = () if fused or not stages else tuple(
            pass_dtypes(stages, params, dt_name(output_dtype(stages))))
        return cls(config=config, M=M, K=K, N=N, stages=stages, fused=bool(fused),
                   tiling=tiling, pass_dtypes=dts, per_channel=pc,
                   residual_op=params.residual_op, kgroup=kgroup, kmajor_out=bool(kmajor_out),
                   kblocks=kblocks, blocks=blocks, skip_zp=skip_zp, out_flags=bool(out_flags),
                   flags=flags)

    @classmethod
    def from_kernel(cls, kernel: Any) -> GemmFeatures:
        """Features of a built kernel (a :class:`fusion.kernels.gemm.kind.GemmKernel`)."""
        dims, stages = kernel.dims, tuple(kernel.stages)
        dts = () if kernel.fused or not stages else tuple(
            pass_dtypes(stages, kernel.params, dt_name(output_dtype(stages))))
        return cls(config=kernel.config, M=dims.M, K=dims.K, N=dims.N, stages=stages,
                   fused=bool(kernel.fused), tiling=kernel.tiling, pass_dtypes=dts,
                   program_words=len(kernel.program), bytes_loaded=kernel.bytes_loaded,
                   bytes_stored=kernel.bytes_stored, per_channel=kernel.params.per_channel,
                   residual_op=kernel.params.residual_op, kgroup=dims.kgroup,
                   kmajor_out=bool(kernel.signature.kmajor_out), kblocks=dims.kblocks,
                   blocks=kernel.sparse_blocks, skip_zp=kernel.meta["params"].get("skip_zp"),
                   out_flags=bool(kernel.meta["params"].get("out_flags", False)))

    # -- derived -----------------------------------------------------------------------------

    @property
    def dims(self) -> GemmDims:
        return GemmDims(self.config, self.M, self.K, self.N, kgroup=self.kgroup,
                        kblocks=self.kblocks)

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the unpadded problem (grouped: of its diagonal blocks;
        block-sparse: of the blocks it keeps)."""
        d = self.dims
        if self.blocks is not None:
            return kept_macs(d, self.blocks)
        if not d.grouped:
            return self.M * self.K * self.N
        return self.M * sum((hi - lo) * min(d.C, self.N - nb * d.C)
                            for nb, (lo, hi) in enumerate(map(d.k_rows, range(d.Nb))))

    @property
    def tiles(self) -> int:
        """Output tiles (``rows`` x ``cols`` each) of the padded problem."""
        d = self.dims
        return d.Mb * d.Nb

    @property
    def k_slices(self) -> int:
        """Slices fed through the array: the ``array_busy`` counter, exactly."""
        if self.blocks is not None:
            return busy_slices(self.dims, self.blocks)
        return self.tiles * self.dims.Kp

    @property
    def problem(self) -> tuple:
        """What the kernel computes (shape and stages), whatever the way (fused, tiling)."""
        return (self.M, self.K, self.N, self.stages)

    def analytical_cycles(self, platform: PlatformConfig | None = None) -> int:
        """:func:`fusion.cost.analytical.estimate`: the walk of ``gemm.j2``'s phases. On a
        DRAM port, the walk of the program itself at its :attr:`placement`, or as a kernel
        built alone (:func:`~fusion.cost.analytical.built_instructions`): which bank each store
        and each LOAD falls in decides what they cost each other there, and only the program
        knows it. A block-sparse kernel is always priced by its program's run through the
        machine (:func:`~fusion.cost.analytical.estimate_program`): its shape follows the
        weights."""
        if self.blocks is not None:
            return estimate_program(self.config, _built(self), platform)
        if self.skip_zp is not None:  # its branches follow the flags it is priced for
            mb, kb = tiles(self.dims)
            flags = np.array(self.flags if self.flags is not None else [[False] * kb] * mb)
            return estimate_program(self.config, _built(self), platform,
                                    flags=flags_consumed(self.dims, flags))
        return program_or_template(self.config, platform, lambda: _built(self),
                                   lambda: estimate(self, platform).cycles)

    # -- JSON ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The features as JSON types (the variant config in full, and its key)."""
        return {
            "kind": self.kind, "version": FEATURES_VERSION, "variant": self.config.key(),
            "config": self.config.to_dict(), "m": self.M, "k": self.K, "n": self.N,
            "stages": list(self.stages), "fused": self.fused,
            "tiling": dataclasses.asdict(self.tiling), "pass_dtypes": list(self.pass_dtypes),
            "program_words": self.program_words, "bytes_loaded": self.bytes_loaded,
            "bytes_stored": self.bytes_stored, "per_channel": self.per_channel,
            "residual_op": self.residual_op, "kgroup": self.kgroup,
            "kmajor_out": self.kmajor_out,
            **({"kblocks": self.kblocks} if self.kblocks != 1 else {}),
            **({"blocks": [list(c) for c in self.blocks]} if self.blocks is not None else {}),
            **({"skip_zp": self.skip_zp, "out_flags": self.out_flags,
                "flags": None if self.flags is None else [list(r) for r in self.flags]}
               if self.skip_zp is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GemmFeatures:
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        ValueError
            Another version, or a config whose key does not match the recorded one.
        """
        if data.get("version") != FEATURES_VERSION:
            raise ValueError(f"features version {data.get('version')!r}, this hwgen reads "
                             f"version {FEATURES_VERSION}; re-run the calibration")
        config = VariantConfig.from_dict(data["config"])
        if data.get("variant") not in (None, config.key()):
            raise ValueError(f"features record variant {data['variant']!r} but their config "
                             f"hashes to {config.key()!r}")
        return cls(config=config, M=data["m"], K=data["k"], N=data["n"],
                   stages=tuple(data["stages"]), fused=bool(data["fused"]),
                   tiling=Tiling(**data["tiling"]), pass_dtypes=tuple(data["pass_dtypes"]),
                   program_words=data.get("program_words"),
                   bytes_loaded=data.get("bytes_loaded"), bytes_stored=data.get("bytes_stored"),
                   per_channel=bool(data.get("per_channel", False)),
                   residual_op=str(data.get("residual_op", "add")),
                   kgroup=int(data.get("kgroup", 0)),
                   kmajor_out=bool(data.get("kmajor_out", False)),
                   kblocks=int(data.get("kblocks", 1)),
                   blocks=(tuple(tuple(c) for c in data["blocks"]) if data.get("blocks")
                           is not None else None),
                   skip_zp=data.get("skip_zp"), out_flags=bool(data.get("out_flags", False)),
                   flags=(tuple(tuple(bool(f) for f in r) for r in data["flags"])
                          if data.get("flags") is not None else None))


@functools.lru_cache(maxsize=1024)
def _built(f: GemmFeatures) -> tuple | None:
    """The instructions of ``f``'s kernel at its placement (or built alone: regions packed
    from word 0), or None when it cannot be built (:func:`~fusion.cost.analytical.
    built_instructions`). Cached: the walk is not, so that every pricing records its machine
    (:func:`~fusion.cost.analytical.walk_totals`)."""
    p = GemmParams(M=f.M, K=f.K, N=f.N, stages=f.stages, fused=f.fused, tiling=f.tiling,
                   epilogue=EpilogueParams(per_channel=f.per_channel, residual_op=f.residual_op),
                   kgroup=f.kgroup, kmajor_out=f.kmajor_out, kblocks=f.kblocks,
                   blocks=f.blocks, sparse=f.blocks is not None, skip_zp=f.skip_zp,
                   skip=f.skip_zp is not None, out_flags=f.out_flags)
    return built_instructions(f, gemm_sizes(f.dims, p),
                              lambda regions: build_program(f.config, p, regions))
