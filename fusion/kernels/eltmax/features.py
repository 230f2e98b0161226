"""The cost-model features of an element-wise max, and its analytical estimate."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

from fusion.cost.analytical import built_instructions, estimate_max, program_or_template
from fusion.cost.model import Features
from fusion.kernels.eltmax.build import build_max, max_dims, max_sizes
from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig


@dataclass(frozen=True, kw_only=True)
class MaxFeatures(Features):
    """What a cost model knows about an element-wise max of ``n_inputs`` int8 ``M x N``
    tensors (``placement``: where its regions lie, :attr:`fusion.cost.model.Features.
    placement`)."""

    kind: ClassVar[str] = "max"
    placeable: ClassVar[bool] = True

    config: VariantConfig
    M: int
    N: int
    n_inputs: int
    placement: tuple[tuple[str, int], ...] | None = None

    @property
    def problem(self) -> tuple:
        return (self.M, self.N, self.n_inputs)

    def analytical_cycles(self, platform: PlatformConfig | None = None) -> int:
        """:func:`fusion.cost.analytical.estimate_max`: the walk of ``n_inputs - 1`` chained
        passes; on a DRAM port the walk of the program at its placement or built alone
        (:func:`~fusion.cost.analytical.built_instructions`), whose addresses say which bank
        its stores and loads fall in."""
        return program_or_template(
            self.config, platform, lambda: _built(self),
            lambda: estimate_max(self.config, self.M, self.N, self.n_inputs, platform))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "variant": self.config.key(), "config": self.config.to_dict(),
                "m": self.M, "n": self.N, "n_inputs": self.n_inputs}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MaxFeatures:
        """Inverse of :meth:`to_dict`."""
        return cls(config=VariantConfig.from_dict(data["config"]), M=data["m"], N=data["n"],
                   n_inputs=data["n_inputs"])


@functools.lru_cache(maxsize=1024)
def _built(f: MaxFeatures) -> tuple | None:
    """The instructions of ``f``'s chain at its placement (or built alone: regions packed
    from word 0), or None when it cannot be built; cached (the walk is not: every pricing
    records its machine)."""
    dims = max_dims(f.config, f.M, f.N)
    return built_instructions(f, max_sizes(dims, f.n_inputs), lambda regions: build_max(
        f.config, dims, f.n_inputs, regions, what=f"max of {f.n_inputs} planes {f.M}x{f.N}"))
