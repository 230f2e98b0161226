"""The cost-model features of a window-unit kernel, and its analytical estimate."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, ClassVar

from fusion.cost.analytical import estimate_program
from fusion.cost.model import Features
from fusion.kernels import derived
from fusion.kernels.layout import place
from fusion.kernels.window.params import WindowParams
from fusion.kernels.window.program import program, window_regions
from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig
from hwgen.reference import EpilogueParams


@dataclass(frozen=True, kw_only=True)
class WindowFeatures(Features):
    """What a cost model knows about one window-unit kernel on one variant: its params."""

    kind: ClassVar[str] = "window"

    config: VariantConfig
    params: WindowParams

    @property
    def problem(self) -> tuple:
        p = self.params
        return (p.N, p.C, p.H, p.W, p.kh, p.kw, p.stride, p.pads, p.mode, p.stages)

    @property
    def macs(self) -> int:
        p = self.params
        return p.M * p.taps * p.C

    def analytical_cycles(self, platform: PlatformConfig | None = None) -> int:
        """The program (built at a dummy placement: addresses do not change its timing) run
        instruction by instruction through the machine model
        (:func:`fusion.cost.analytical.estimate_program`)."""
        return _cycles(self.config, self.params, platform)

    def to_dict(self) -> dict[str, Any]:
        p = dataclasses.asdict(self.params)
        return {"kind": self.kind, "variant": self.config.key(),
                "config": self.config.to_dict(), "params": p}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WindowFeatures:
        """Inverse of :meth:`to_dict`."""
        p = dict(data["params"])
        p["epilogue"] = EpilogueParams(**p["epilogue"])
        p["pads"], p["stages"] = tuple(p["pads"]), tuple(p["stages"])
        return cls(config=VariantConfig.from_dict(data["config"]), params=WindowParams(**p))


@functools.lru_cache(maxsize=256)
def _cycles(config: VariantConfig, params: WindowParams,
            platform: PlatformConfig | None = None) -> int:
    def derive() -> int:
        regions = place(config, window_regions(config, params))
        return int(estimate_program(config, program(config, params, regions).instrs, platform))

    return derived.cycles("window_cycles", config, params, platform, derive)
