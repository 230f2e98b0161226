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
from typing import Any

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
    return _ordered(_alternatives(spec, option, decision),
                    prices(config, spec, option, decision, placement, model, platform))


def _alternatives(spec: KernelSpec, option: Option, decision: ChainDecision
                  ) -> list[tuple[KernelSpec, Option]]:
    kmajor = bool(getattr(spec.params, "kmajor_out", False))
    alternatives = [option] + [o for o in decision.variants
                               if o is not option and o.spec.nodes == spec.nodes]
    return [(with_kmajor(alt.spec) if kmajor else alt.spec, alt) for alt in alternatives]


def prices(config: VariantConfig, spec: KernelSpec, option: Option, decision: ChainDecision,
           placement: Mapping[str, int], model: CostModel, platform: PlatformConfig
           ) -> list[tuple[float, str, bool]]:
    """Each alternative's (cycles, what priced it, priced at ``placement``), in
    :func:`ranked`'s order of alternatives: the work of :func:`ranked`, as plain values (a
    task's result, :func:`fusion.compiler.plan`'s placed pricing on workers)."""
    kmajor = bool(getattr(spec.params, "kmajor_out", False))
    regions = spec.regions(config)
    out = []
    for alt_spec, alt in _alternatives(spec, option, decision):
        features = alt_spec.kind.features(config, alt_spec.params)
        placed = (platform.is_dram and features.placeable
                  and alt_spec.regions(config) == regions)
        if placed:
            features = features.at(placement)
        if placed or kmajor:
            out.append((float(model.predict(features)), model.source(features), placed))
        else:
            out.append((alt.cycles, alt.priced_by, False))
    return out


def _ordered(alternatives: list[tuple[KernelSpec, Option]],
             priced: list[tuple[float, str, bool]]) -> list[Candidate]:
    out = [Candidate(alt_spec, cycles, by, placed)
           for (alt_spec, _), (cycles, by, placed) in zip(alternatives, priced, strict=True)]
    # sorted is stable: the engine's order breaks ties, and the unplaced stay behind
    return sorted(out, key=lambda c: (not c.placed, c.cycles if c.placed else 0.0))


def ranked_all(config: VariantConfig, chosen: list[tuple[KernelSpec, Option, ChainDecision,
                                                          Mapping[str, int]]],
               model: CostModel, platform: PlatformConfig, *, workers: Any,
               times: Any) -> list[list[Candidate]]:
    """:func:`ranked` of each ``(spec, option, decision, placement)``, the pricing on
    ``workers`` (:func:`fusion.compiler.scheduler.run_tasks`; the analytical model only, as
    :mod:`fusion.compiler.parallel_pricing`), in their order."""
    from fusion.compiler.parallel_pricing import _analytical
    from fusion.compiler.scheduler import run_tasks

    def price(item: tuple) -> list[tuple[float, str, bool]]:
        return prices(config, *item, model, platform)

    def repriced(item: tuple) -> int:  # the alternatives priced again: a task's size
        spec, option, decision, _ = item
        again = platform.is_dram or bool(getattr(spec.params, "kmajor_out", False))
        return len(_alternatives(spec, option, decision)) if again else 0

    sizes = [repriced(c) for c in chosen]
    # a task with nothing to price again is no work to send
    local = _analytical(model) and sum(sizes) > 0
    priced = run_tasks(price, chosen, workers=workers, sizes=sizes, stage="placed pricing",
                       names=[c[0].name for c in chosen], times=times, local=local)
    return [_ordered(_alternatives(spec, option, decision), p)
            for (spec, option, decision, _), p in zip(chosen, priced, strict=True)]
