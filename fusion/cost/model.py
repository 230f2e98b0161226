"""The cost-model interface, and the features it predicts from.

A :class:`CostModel` maps :class:`KernelFeatures` to predicted cycles. Features describe one
kernel on one variant without its operand values: the variant config, the GEMM shape, the
epilogue stages and whether they are fused, the resolved tiling, the element type of each
unfused pass, and, when the kernel was built, its program size and the bytes its loads read
and its stores write. They serialize to JSON (:meth:`KernelFeatures.to_dict`): calibration
(``sim.calibrate``) records them beside the measured counters, and models learn from those
rows without ever importing the simulator.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion.kernels.epilogue import pass_dtypes
from fusion.kernels.layout import GemmDims
from fusion.kernels.tiling import Tiling, default_tiling, resolve
from hwgen.config import VariantConfig
from hwgen.reference import EpilogueParams, check_stages, output_dtype

#: Version of :meth:`KernelFeatures.to_dict`'s layout.
FEATURES_VERSION = 1


def _dt_name(dtype: np.dtype) -> str:
    return "i8" if np.dtype(dtype) == np.int8 else "i32"


@dataclass(frozen=True, kw_only=True)
class KernelFeatures:
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
    """

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

    def __post_init__(self) -> None:
        check_stages(self.stages, self.config.epilogue)
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
    ) -> KernelFeatures:
        """Features of a kernel that has not been built (no program size or byte counts).

        ``tiling`` is resolved against the problem; without one, the default tiler's choice
        (:func:`fusion.kernels.tiling.default_tiling`) is taken.
        """
        stages = check_stages(stages, config.epilogue)
        dims = GemmDims(config, M, K, N)
        gemm_stages = stages if fused else ()
        params = params if params is not None else EpilogueParams()
        pc = params.per_channel
        tiling = (resolve(dims, gemm_stages, tiling, per_channel=pc) if tiling is not None
                  else default_tiling(dims, gemm_stages, per_channel=pc))
        dts = () if fused or not stages else tuple(
            pass_dtypes(stages, params, _dt_name(output_dtype(stages))))
        return cls(config=config, M=M, K=K, N=N, stages=stages, fused=bool(fused),
                   tiling=tiling, pass_dtypes=dts, per_channel=pc)

    @classmethod
    def from_kernel(cls, kernel: Any) -> KernelFeatures:
        """Features of a built kernel: a :class:`fusion.kernels.gemm.build.GemmKernel`, or a
        :class:`fusion.kernels.program.CompiledGemm` (they share these attributes)."""
        dims, stages = kernel.dims, tuple(kernel.stages)
        dts = () if kernel.fused or not stages else tuple(
            pass_dtypes(stages, kernel.params, _dt_name(output_dtype(stages))))
        return cls(config=kernel.config, M=dims.M, K=dims.K, N=dims.N, stages=stages,
                   fused=bool(kernel.fused), tiling=kernel.tiling, pass_dtypes=dts,
                   program_words=len(kernel.program), bytes_loaded=kernel.bytes_loaded,
                   bytes_stored=kernel.bytes_stored, per_channel=kernel.params.per_channel)

    # -- derived -----------------------------------------------------------------------------

    @property
    def dims(self) -> GemmDims:
        return GemmDims(self.config, self.M, self.K, self.N)

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the unpadded problem."""
        return self.M * self.K * self.N

    @property
    def tiles(self) -> int:
        """Output tiles (``rows`` x ``cols`` each) of the padded problem."""
        d = self.dims
        return d.Mb * d.Nb

    @property
    def k_slices(self) -> int:
        """Slices fed through the array: the ``array_busy`` counter, exactly."""
        return self.tiles * self.dims.Kp

    # -- JSON ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The features as JSON types (the variant config in full, and its key)."""
        return {
            "version": FEATURES_VERSION, "variant": self.config.key(),
            "config": self.config.to_dict(), "m": self.M, "k": self.K, "n": self.N,
            "stages": list(self.stages), "fused": self.fused,
            "tiling": dataclasses.asdict(self.tiling), "pass_dtypes": list(self.pass_dtypes),
            "program_words": self.program_words, "bytes_loaded": self.bytes_loaded,
            "bytes_stored": self.bytes_stored, "per_channel": self.per_channel,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KernelFeatures:
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
                   per_channel=bool(data.get("per_channel", False)))


class CostModel(abc.ABC):
    """Predicts the cycles of a kernel from its features.

    Implementations: :class:`fusion.cost.analytical.AnalyticalModel` (from the hardware
    description), and the learned model of a later issue, behind the same interface so the
    engine does not care which it asks.
    """

    #: Short name for reports.
    name: str = "model"

    @abc.abstractmethod
    def predict(self, features: KernelFeatures) -> float:
        """Predicted ``cycles`` counter (start to done) of the kernel."""

    def predict_many(self, features: Sequence[KernelFeatures]) -> np.ndarray:
        """:meth:`predict` of each, as a float array (models may batch this)."""
        return np.array([self.predict(f) for f in features], dtype=float)

    def predict_pass(self, config: VariantConfig, M: int, N: int, *,  # noqa: N803
                     stages: Sequence[str], params: EpilogueParams, src_dtype: str,
                     out_dtype: str) -> float:
        """Predicted cycles of a standalone epilogue pass over an M x N tensor.

        Models learn GEMM kernels first; passes default to the analytical estimate, which
        calibration puts within a few percent (a learned model may override this).
        """
        from fusion.cost.analytical import estimate_pass

        return float(estimate_pass(config, M, N, stages=stages, params=params,
                                   src_dtype=src_dtype, out_dtype=out_dtype))

    def predict_max(self, config: VariantConfig, M: int, N: int, n_inputs: int) -> float:  # noqa: N803
        """Predicted cycles of an element-wise max of ``n_inputs`` int8 M x N tensors."""
        from fusion.cost.analytical import estimate_max

        return float(estimate_max(config, M, N, n_inputs))
