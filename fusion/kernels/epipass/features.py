"""The cost-model features of a standalone epilogue pass, and its analytical estimate."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, ClassVar

from fusion.cost.analytical import (
    built_instructions,
    estimate_pass,
    estimate_program,
    program_or_template,
)
from fusion.cost.model import Features
from fusion.kernels.epipass.build import DTYPES, build_pass, pass_dims, pass_sizes
from fusion.kernels.epipass.columns import needs_columns
from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig
from hwgen.reference import EpilogueParams


@dataclass(frozen=True, kw_only=True)
class PassFeatures(Features):
    """What a cost model knows about one epilogue pass over an ``M x N`` tensor.

    Parameters
    ----------
    config : VariantConfig
    M, N : int
        The tensor's shape.
    stages : tuple of str
    epilogue : EpilogueParams
        The stages' control-register values (per-channel requantize loads a bias region).
    src_dtype, out_dtype : {"int8", "int32"}
        The element types read and stored.
    placement : tuple of (str, int), optional
        Where its regions lie (:attr:`fusion.cost.model.Features.placement`).
    """

    kind: ClassVar[str] = "pass"
    placeable: ClassVar[bool] = True

    config: VariantConfig
    M: int
    N: int
    stages: tuple[str, ...]
    epilogue: EpilogueParams
    src_dtype: str
    out_dtype: str
    placement: tuple[tuple[str, int], ...] | None = None

    @property
    def problem(self) -> tuple:
        return (self.M, self.N, self.stages, self.src_dtype, self.out_dtype)

    def analytical_cycles(self, platform: PlatformConfig | None = None) -> int:
        """:func:`fusion.cost.analytical.estimate_pass`: the walk of ``epilogue_pass.j2``
        (the column form, :mod:`fusion.kernels.epipass.columns`: its program's, by
        :func:`~fusion.cost.analytical.estimate_program`); on a DRAM port the walk of the
        program at its placement or built alone
        (:func:`~fusion.cost.analytical.built_instructions`), whose addresses say which bank
        its stores and loads fall in."""
        if needs_columns(pass_dims(self.config, self.M, self.N), stages=self.stages,
                         params=self.epilogue, src_dt=DTYPES[self.src_dtype]):
            instrs = _built(self)
            if instrs is not None:  # the column form's program, instruction by instruction
                return estimate_program(self.config, instrs, platform)
        return program_or_template(
            self.config, platform, lambda: _built(self),
            lambda: estimate_pass(self.config, self.M, self.N, stages=self.stages,
                                  params=self.epilogue, src_dtype=self.src_dtype,
                                  out_dtype=self.out_dtype, platform=platform))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "variant": self.config.key(), "config": self.config.to_dict(),
                "m": self.M, "n": self.N, "stages": list(self.stages),
                "src_dtype": self.src_dtype,
                "out_dtype": self.out_dtype, "quant": dataclasses.asdict(self.epilogue)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PassFeatures:
        """Inverse of :meth:`to_dict`."""
        return cls(config=VariantConfig.from_dict(data["config"]), M=data["m"], N=data["n"],
                   stages=tuple(data["stages"]), epilogue=EpilogueParams(**data["quant"]),
                   src_dtype=data["src_dtype"], out_dtype=data["out_dtype"])


@functools.lru_cache(maxsize=1024)
def _built(f: PassFeatures) -> tuple | None:
    """The instructions of ``f``'s pass at its placement (or built alone: regions packed
    from word 0), or None when it cannot be built; cached (the walk is not: every pricing
    records its machine)."""
    dims = pass_dims(f.config, f.M, f.N)
    return built_instructions(
        f, pass_sizes(dims, f.stages, f.epilogue, f.src_dtype, f.out_dtype),
        lambda regions: build_pass(f.config, dims, f.stages, f.epilogue, f.src_dtype,
                                   f.out_dtype, regions, what=f"pass {f.M}x{f.N}"))
