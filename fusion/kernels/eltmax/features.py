"""The cost-model features of an element-wise max, and its analytical estimate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from fusion.cost.analytical import estimate_max
from fusion.cost.model import Features
from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig


@dataclass(frozen=True, kw_only=True)
class MaxFeatures(Features):
    """What a cost model knows about an element-wise max of ``n_inputs`` int8 ``M x N``
    tensors."""

    kind: ClassVar[str] = "max"

    config: VariantConfig
    M: int
    N: int
    n_inputs: int

    @property
    def problem(self) -> tuple:
        return (self.M, self.N, self.n_inputs)

    def analytical_cycles(self, platform: PlatformConfig | None = None) -> int:
        """:func:`fusion.cost.analytical.estimate_max`: ``n_inputs - 1`` chained passes."""
        return estimate_max(self.config, self.M, self.N, self.n_inputs, platform)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "variant": self.config.key(), "config": self.config.to_dict(),
                "m": self.M, "n": self.N, "n_inputs": self.n_inputs}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MaxFeatures:
        """Inverse of :meth:`to_dict`."""
        return cls(config=VariantConfig.from_dict(data["config"]), M=data["m"], N=data["n"],
                   n_inputs=data["n_inputs"])
