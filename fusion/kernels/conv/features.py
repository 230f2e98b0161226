"""The cost-model features of a window convolution, and its analytical estimate."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, ClassVar

from fusion.cost.analytical import estimate_program
from fusion.cost.model import Features
from fusion.kernels import derived
from fusion.kernels.conv.params import ConvParams
from fusion.kernels.conv.program import conv_regions, program
from fusion.kernels.layout import place
from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig
from hwgen.reference import EpilogueParams


@dataclass(frozen=True, kw_only=True)
class ConvFeatures(Features):
    """What a cost model knows about one window convolution on one variant: its params."""

    kind: ClassVar[str] = "conv"

    config: VariantConfig
    params: ConvParams

    @property
    def problem(self) -> tuple:
        p = self.params
        return (p.N, p.Cin, p.H, p.W, p.Cout, p.kh, p.kw, p.stride, p.pads, p.stages)

    @property
    def macs(self) -> int:
        p = self.params
        return p.M * p.K * p.Cout

    def analytical_cycles(self, platform: PlatformConfig | None = None) -> int:
        """The program (built at a dummy placement: addresses do not change its timing) run
        instruction by instruction through the machine model
        (:func:`fusion.cost.analytical.estimate_program`)."""
        return _cycles(self.config, self.params, platform)

    def to_dict(self) -> dict[str, Any]:
        p = dataclasses.asdict(self.params)  # the epilogue params too, as a dict
        return {"kind": self.kind, "variant": self.config.key(),
                "config": self.config.to_dict(), "params": p}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConvFeatures:
        """Inverse of :meth:`to_dict`."""
        p = dict(data["params"])
        p["epilogue"] = EpilogueParams(**p["epilogue"])
        p["stride"], p["pads"] = tuple(p["stride"]), tuple(p["pads"])
        p["stages"] = tuple(p["stages"])
        return cls(config=VariantConfig.from_dict(data["config"]), params=ConvParams(**p))


@functools.lru_cache(maxsize=256)
def _cycles(config: VariantConfig, params: ConvParams,
            platform: PlatformConfig | None = None) -> int:
    def derive() -> int:
        regions = place(config, conv_regions(config, params))
        return int(estimate_program(config, program(config, params, regions).instrs, platform))

    return derived.cycles("conv_cycles", config, params, platform, derive)
