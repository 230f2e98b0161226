"""The chosen kernel's variants priced again where the memory plan put it.

The engine prices candidates before there is a memory plan (the plan needs the kernels'
regions, which the choice decides), so on a DRAM a kernel's tilings are priced at the
placement of a kernel built alone. Where the plan puts its regions decides which banks its
loads and stores share (:mod:`fusion.cost.shared_port`), and that moves a tiling's cycles by
a few percent, enough to change which is fastest: in MobileNet v1 0.25 a 576x16x32 GEMM's
tilings measured 7,728 to 8,973 cycles on DDR3 depending on where they ran.

Once the plan is made, :func:`ranked` prices the chosen kernel's variants (its kind's
tilings for the same nodes) at that placement, with the same model, and orders them by that
price. The variants have the chosen one's regions (a tiling changes no region's size), so
the plan holds whichever is built. A variant whose regions differ is kept last, at its
unplaced price, for the fallback when a program is too long. On the ideal memory a
placement changes nothing and the engine's order stands.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fusion.compiler.engine import ChainDecision, Option
from fusion.compiler.kernels import KernelSpec
from fusion.compiler.store_layout import with_kmajor
from fusion.cost.model import CostModel
from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig


@dataclass(frozen=True)
class Candidate:
    """A kernel to build, its predicted cycles, and what priced it (and where)."""

    spec: KernelSpec
    cycles: float
    priced_by: str
    #: Priced at the memory plan's placement (else where the engine priced it).
    placed: bool = False


def ranked(config: VariantConfig, spec: KernelSpec, option: Option, decision: ChainDecision,
           placement: Mapping[str, int], model: CostModel,
           platform: PlatformConfig) -> list[Candidate]:
    """The kernels to try building for ``spec``, best first: the engine's choice, then the
    other variants of its nodes; on a DRAM, those with its regions ordered by their price at
    ``placement`` (ties keep the engine's order).

    A kernel stored K-major (chosen after pricing: :mod:`fusion.compiler.store_layout`) is
    priced as it will run, with the same model."""
    kmajor = bool(getattr(spec.params, "kmajor_out", False))
    alternatives = [option] + [o for o in decision.variants
                               if o is not option and o.spec.nodes == spec.nodes]
    regions = spec.regions(config)
    out = []
    for alt in alternatives:
        alt_spec = with_kmajor(alt.spec) if kmajor else alt.spec
        features = alt_spec.kind.features(config, alt_spec.params)
        placed = (platform.is_dram and features.placeable
                  and alt_spec.regions(config) == regions)
        if placed:
            features = features.at(placement)
        if placed or kmajor:
            out.append(Candidate(alt_spec, model.predict(features), model.source(features),
                                 placed))
        else:
            out.append(Candidate(alt_spec, alt.cycles, alt.priced_by))
    # sorted is stable: the engine's order breaks ties, and the unplaced stay behind
    return sorted(out, key=lambda c: (not c.placed, c.cycles if c.placed else 0.0))
