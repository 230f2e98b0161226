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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fusion.compiler.engine import ChainDecision, Option
from fusion.compiler.kernels import KernelSpec
from fusion.compiler.parallel_pricing import analytical_only
from fusion.compiler.scheduler import HERE, CompileTimes, Workers, run_tasks
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


def ranked(config: VariantConfig,
           chosen: Sequence[tuple[KernelSpec, Option, ChainDecision, Mapping[str, int]]],
           model: CostModel, platform: PlatformConfig, *, workers: Workers = HERE,
           times: CompileTimes | None = None) -> list[list[Candidate]]:
    """For each ``(spec, option, decision, placement)``, the kernels to try building, best
    first: the engine's choice, then the other variants of its nodes; on a DRAM, those with
    its regions ordered by their price at ``placement`` (ties keep the engine's order).

    A kernel stored K-major (chosen after pricing: :mod:`fusion.compiler.store_layout`) is
    priced as it will run, with the same model. The pricing is a task per kernel on
    ``workers`` (:func:`fusion.compiler.scheduler.run_tasks`; the analytical model only, as
    in :mod:`fusion.compiler.parallel_pricing`), which sends back numbers, not specs."""
    alternatives = [_alternatives(spec, option, decision) for spec, option, decision, _ in chosen]
    again = [platform.is_dram or _kmajor(spec) for spec, *_ in chosen]

    def price(i: int) -> list[tuple[float, str, bool]]:
        return _prices(config, chosen[i][0], alternatives[i], chosen[i][3], model, platform)

    sizes = [len(alts) if a else 0 for alts, a in zip(alternatives, again, strict=True)]
    # nothing to price again (the ideal memory, no K-major store) is no work to send
    priced = run_tasks(price, range(len(chosen)), workers=workers, sizes=sizes,
                       stage="placed pricing", names=[c[0].name for c in chosen], times=times,
                       local=analytical_only(model) and any(again))
    return [_ordered(alts, p) for alts, p in zip(alternatives, priced, strict=True)]


def _kmajor(spec: KernelSpec) -> bool:
    return bool(getattr(spec.params, "kmajor_out", False))


def _alternatives(spec: KernelSpec, option: Option, decision: ChainDecision
                  ) -> list[tuple[KernelSpec, Option]]:
    """The engine's choice, then the other variants of its nodes, each as built (K-major
    when ``spec`` is), with the option that priced it."""
    alternatives = [option] + [o for o in decision.variants
                               if o is not option and o.spec.nodes == spec.nodes]
    return [(with_kmajor(alt.spec) if _kmajor(spec) else alt.spec, alt) for alt in alternatives]


def _prices(config: VariantConfig, spec: KernelSpec,
            alternatives: Sequence[tuple[KernelSpec, Option]], placement: Mapping[str, int],
            model: CostModel, platform: PlatformConfig) -> list[tuple[float, str, bool]]:
    """Each alternative's (cycles, what priced it, priced at ``placement``)."""
    regions = spec.regions(config)
    out = []
    for alt_spec, alt in alternatives:
        features = alt_spec.kind.features(config, alt_spec.params)
        placed = (platform.is_dram and features.placeable
                  and alt_spec.regions(config) == regions)
        if placed:
            features = features.at(placement)
        if placed or _kmajor(spec):
            out.append((float(model.predict(features)), model.source(features), placed))
        else:
            out.append((alt.cycles, alt.priced_by, False))
    return out


def _ordered(alternatives: Sequence[tuple[KernelSpec, Option]],
             priced: Sequence[tuple[float, str, bool]]) -> list[Candidate]:
    out = [Candidate(alt_spec, cycles, by, placed)
           for (alt_spec, _), (cycles, by, placed) in zip(alternatives, priced, strict=True)]
    # sorted is stable: the engine's order breaks ties, and the unplaced stay behind
    return sorted(out, key=lambda c: (not c.placed, c.cycles if c.placed else 0.0))
