"""The cost-model features of a channel join, and its analytical estimate."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

from fusion.cost.analytical import built_instructions, estimate_program
from fusion.cost.model import Features
from fusion.kernels.concat.build import build_concat, sizes
from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig
from hwgen.reference import EpilogueParams


@dataclass(frozen=True, kw_only=True)
class ConcatFeatures(Features):
    """What a cost model knows about a join of int8 ``M x widths[i]`` tensors (``rescaled``:
    which inputs run the rescale stages; ``placement``: where its regions lie)."""

    kind: ClassVar[str] = "concat"
    placeable: ClassVar[bool] = True

    config: VariantConfig
    M: int
    widths: tuple[int, ...]
    rescaled: tuple[bool, ...]
    placement: tuple[tuple[str, int], ...] | None = None

    @property
    def problem(self) -> tuple:
        return (self.M, self.widths, self.rescaled)

    def instructions(self) -> tuple | None:
        """The program's instructions (at its placement, or built alone), None when it
        cannot be built (longer than the instruction memory: the kind refuses it)."""
        return _built(self)

    def analytical_cycles(self, platform: PlatformConfig | None = None) -> int:
        """:func:`fusion.cost.analytical.estimate_program`: the walk of the program,
        instruction by instruction.

        Raises
        ------
        ValueError
            The program cannot be built: the kind refuses such params before any pricing.
        """
        instrs = _built(self)
        if instrs is None:
            raise ValueError(f"the concat {self.M}x{list(self.widths)} program cannot be "
                             f"built on variant {self.config.key()}; its kind refuses it")
        return estimate_program(self.config, instrs, platform)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "variant": self.config.key(), "config": self.config.to_dict(),
                "m": self.M, "widths": list(self.widths), "rescaled": list(self.rescaled)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConcatFeatures:
        """Inverse of :meth:`to_dict`."""
        return cls(config=VariantConfig.from_dict(data["config"]), M=data["m"],
                   widths=tuple(data["widths"]), rescaled=tuple(data["rescaled"]))


@functools.lru_cache(maxsize=1024)
def _built(f: ConcatFeatures) -> tuple | None:
    """The instructions of ``f``'s program (the timing does not depend on the rescales'
    values: any stand for them), or None when it cannot be built."""
    stand_in = EpilogueParams(mult=1 << 30, shift=30, round_even=True)
    return built_instructions(f, sizes(f.config, f.M, f.widths, f.rescaled), lambda regions:
                              build_concat(f.config, f.M, f.widths,
                                           [stand_in if r else None for r in f.rescaled],
                                           regions, what=f"concat {f.M}x{list(f.widths)}"))
