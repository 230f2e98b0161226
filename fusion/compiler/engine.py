"""Candidates per chain, their predicted cycles, and the cheapest cover of each chain.

A chain of ``n`` items (an anchor and epilogue ops, :mod:`fusion.compiler.lower`) is covered by
cutting it into consecutive segments; each segment is one kernel. A segment starting at the
anchor is a GEMM (or qadd, or max) kernel with the segment's ops as fused epilogue stages;
any other segment is a standalone epilogue pass. For each segment the candidates are its
tilings (super-tile sizes, k tile, loop order, double buffering), each priced by the cost
model. Legality and profitability are kept apart:

- *legality*: may this segment run on this variant at all? A stage the variant's chain lacks
  or orders differently, scratchpads too small for any tiling, a maxpool without the residual
  stage. A refused candidate records why.
- *profitability*: among legal covers, dynamic programming over the cut points finds the one
  with the fewest predicted cycles. A fused cover must beat the all-unfused one by
  ``min_gain`` (a fraction of the unfused cycles), or the unfused one is kept: a prediction
  within the model's error is not worth the extra program.

Weight layout: the GEMM microcode reads B pre-packed in the array's tile order
(``[Nb][Kp][C]``, :mod:`fusion.kernels.layout`), packed once at compile time. The row-major
alternative is listed and refused with the reason (see :data:`ROW_MAJOR_REFUSAL`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from fusion.compiler.kernels import KernelSpec, spec_for
from fusion.compiler.lower import Chain, CompileError
from fusion.cost.model import CostModel, KernelFeatures
from fusion.ir.graph import Graph
from fusion.kernels.layout import GemmDims
from fusion.kernels.tiling import default_tiling, ranked_tilings
from hwgen.config import VariantConfig
from hwgen.reference import check_stages

#: Fused covers must save at least this fraction of the unfused cover's predicted cycles.
DEFAULT_MIN_GAIN = 0.02
#: Tilings priced per GEMM segment: the tiler's best few, plus the best of each loop order.
TILINGS_PER_SEGMENT = 4
ROW_MAJOR_REFUSAL = ("weights row-major in memory: gemm.j2 loads B as pre-packed [Nb][Kp][C] "
                     "tiles in one load per super tile; row-major B needs a strided load per "
                     "column block and k slice, which the microcode does not emit")


@dataclass
class Option:
    """One priced (or refused) kernel for a segment."""

    spec: KernelSpec | None
    cycles: float | None
    refused: str = ""


@dataclass
class Cover:
    """A way to cut one chain into kernels."""

    cuts: tuple[tuple[int, int], ...]
    options: list[Option]
    cycles: float | None
    refused: str = ""
    status: str = ""  # chosen / lost / refused

    def describe(self, chain: Chain) -> str:
        names = [n.name.rsplit("/", 1)[-1] for n in chain.nodes]
        return " | ".join("+".join(names[i:j]) for i, j in self.cuts)


@dataclass
class ChainDecision:
    """The engine's choice for one chain, with every candidate it weighed."""

    chain: Chain
    chosen: Cover
    covers: list[Cover]
    tilings: list[Option] = field(default_factory=list)  # of the chosen GEMM segment
    note: str = ""

    @property
    def kernels(self) -> list[KernelSpec]:
        return [o.spec for o in self.chosen.options]


def _segment_options(graph: Graph, config: VariantConfig, model: CostModel, chain: Chain,
                     start: int, stop: int, memo: dict | None = None) -> list[Option]:
    """Every priced candidate of one segment, best first (refusals last).

    ``memo`` maps a segment's shape (form, sizes, stages, params, dtypes) to its priced
    tilings, so identical layers are priced once per compile.
    """
    try:
        base = spec_for(graph, config, chain, start, stop)
        check_stages(base.stages, config.epilogue)
    except (CompileError, ValueError) as exc:
        return [Option(None, None, _why(exc, config))]
    key = (base.form, base.M, base.K, base.N, base.stages, base.params, base.src_dtype,
           base.out_dtype, base.n_inputs)
    if memo is not None and key in memo:
        return [Option(None, None, o.refused) if o.spec is None else
                Option(spec_for(graph, config, chain, start, stop, tiling=o.spec.tiling),
                       o.cycles) for o in memo[key]]
    options = _price(graph, config, model, chain, start, stop, base)
    if memo is not None:
        memo[key] = options
    return options


def _price(graph: Graph, config: VariantConfig, model: CostModel, chain: Chain, start: int,
           stop: int, base: KernelSpec) -> list[Option]:
    if base.form == "pass":
        try:
            cycles = model.predict_pass(config, base.M, base.N, stages=base.stages,
                                        params=base.params, src_dtype=base.src_dtype,
                                        out_dtype=base.out_dtype)
        except ValueError as exc:
            return [Option(None, None, str(exc))]
        return [Option(base, cycles)]
    if base.form == "max":
        if "residual" not in config.epilogue:
            return [Option(None, None, "max pooling runs on the residual stage (max mode); the "
                                       "variant has none: generate it with residual in "
                                       "--epilogue")]
        return [Option(base, model.predict_max(config, base.M, base.N, base.n_inputs))]
    dims = GemmDims(config, base.M, base.K, base.N)
    pc = base.params.per_channel
    tilings = list(itertools.islice(ranked_tilings(dims, base.stages, per_channel=pc),
                                    TILINGS_PER_SEGMENT))
    for order in ("mn", "nm"):
        best = next(iter(ranked_tilings(dims, base.stages, order=order, per_channel=pc)), None)
        if best is not None and best not in tilings:
            tilings.append(best)
    if not tilings:
        try:
            default_tiling(dims, base.stages, per_channel=pc)  # raises, naming what is short
        except ValueError as exc:
            return [Option(None, None, f"no tiling fits: {exc}")]
        return [Option(None, None, "no tiling fits the scratchpads")]
    options = []
    for t in tilings:
        spec = spec_for(graph, config, chain, start, stop, tiling=t)
        try:
            features = KernelFeatures.for_gemm(config, spec.M, spec.K, spec.N,
                                               stages=spec.stages, fused=True, tiling=t,
                                               params=spec.params)
            options.append(Option(spec, float(model.predict(features))))
        except ValueError as exc:
            options.append(Option(None, None, str(exc)))
    options.sort(key=lambda o: (o.cycles is None, o.cycles or 0))
    return options


def _why(exc: Exception, config: VariantConfig) -> str:
    text = str(exc)
    if "not in" in text or "order" in text:
        return (f"{text} (the variant's epilogue chain is "
                f"{','.join(config.epilogue) or 'empty'})")
    return text


def decide_chain(graph: Graph, config: VariantConfig, model: CostModel, chain: Chain, *,
                 fusion: bool = True, min_gain: float = DEFAULT_MIN_GAIN,
                 memo: dict | None = None) -> ChainDecision:
    """Price every cover of ``chain`` and choose one (see the module docstring).

    Raises
    ------
    CompileError
        If no cover is legal (naming the chain and each refusal), or with ``fusion=False``
        if the unfused cover is not.
    """
    n = len(chain.nodes)
    seg: dict[tuple[int, int], list[Option]] = {}

    def options(i: int, j: int) -> list[Option]:
        if (i, j) not in seg:
            if chain.kind == "maxpool" and (i, j) != (0, 1):
                seg[(i, j)] = [Option(None, None, "maxpool fuses nothing")]
            else:
                seg[(i, j)] = _segment_options(graph, config, model, chain, i, j, memo)
        return seg[(i, j)]

    covers = []
    # Every composition of n items: at most 2**(n-1) = 16 for the longest chain of five.
    for mask in range(1 << (n - 1)):
        bounds = [0] + [k + 1 for k in range(n - 1) if mask >> k & 1] + [n]
        cuts = tuple(zip(bounds, bounds[1:], strict=False))
        if chain.anchor is not None and chain.anchor.op == "qadd" and cuts[0] != (0, cuts[0][1]):
            continue
        best = [options(i, j)[0] for i, j in cuts]
        refused = next((f"{_seg_name(chain, i, j)}: {o.refused}" for (i, j), o in
                        zip(cuts, best, strict=True) if o.spec is None), "")
        cycles = None if refused else sum(o.cycles for o in best)
        covers.append(Cover(cuts, best, cycles, refused))
    legal = [c for c in covers if c.cycles is not None]
    unfused = next(c for c in covers if len(c.cuts) == n)
    if not fusion:
        if unfused.cycles is None:
            raise CompileError(f"chain {chain.name!r} cannot run unfused: {unfused.refused}")
        chosen, note = unfused, "fusion disabled (--no-fusion)"
    else:
        if not legal:
            raise CompileError(f"chain {chain.name!r} ({' -> '.join(x.op for x in chain.nodes)})"
                               f" has no legal kernel on this variant: "
                               + "; ".join(sorted({c.refused for c in covers})))
        chosen = min(legal, key=lambda c: (c.cycles, len(c.cuts)))
        note = ""
        if unfused.cycles is not None and chosen is not unfused:
            gain = (unfused.cycles - chosen.cycles) / unfused.cycles
            if gain < min_gain:
                note = (f"fusing saves {gain:.1%} of {unfused.cycles:,.0f} predicted cycles, "
                        f"under the minimum gain {min_gain:.0%}: kept unfused")
                chosen = unfused
    for c in covers:
        if c is chosen:
            c.status = "chosen"
        elif c.cycles is None:
            c.status = "refused"
        else:
            c.status = "lost"
    tilings = []
    first = chosen.cuts[0]
    if chain.anchor is not None and chain.anchor.op != "maxpool":
        tilings = seg[first]
    return ChainDecision(chain, chosen, covers, tilings, note)


def _seg_name(chain: Chain, i: int, j: int) -> str:
    return "+".join(n.name.rsplit("/", 1)[-1] for n in chain.nodes[i:j])


def explain_lines(decisions: list[ChainDecision]) -> list[str]:
    """The candidates of every chain, their predicted cycles, and why the losers lost."""
    lines = []
    for d in decisions:
        ops = " -> ".join(f"{n.name} ({n.op})" for n in d.chain.nodes)
        lines.append(f"chain {d.chain.name}: {ops}")
        best = d.chosen.cycles
        for c in sorted(d.covers, key=lambda c: (c.cycles is None, c.cycles or 0)):
            what = c.describe(d.chain)
            if c.status == "chosen":
                lines.append(f"  * {what:<48} {c.cycles:>12,.0f} cycles  chosen")
            elif c.status == "lost":
                extra = c.cycles - best
                why = (f"+{extra:,.0f} cycles ({extra / best:+.1%})" if extra >= 0 else
                       f"{extra:,.0f} cycles, but under the minimum gain")
                lines.append(f"    {what:<48} {c.cycles:>12,.0f} cycles  lost: {why}")
            else:
                lines.append(f"    {what:<48} {'-':>12}         refused: {c.refused}")
        if d.note:
            lines.append(f"  note: {d.note}")
        if d.tilings:
            lines.append("  tilings of the first kernel:")
            top = next((o.cycles for o in d.tilings if o.cycles is not None), None)
            for o in d.tilings:
                if o.spec is None:
                    lines.append(f"    refused: {o.refused}")
                    continue
                t = o.spec.tiling
                tag = ("chosen" if o is d.chosen.options[0] else
                       "tied with the chosen one, which the tiler ranks first"
                       if o.cycles == top else f"lost: +{o.cycles - top:,.0f}")
                lines.append(f"    tm={t.tm} tn={t.tn} kt={t.kt} order={t.order} "
                             f"double_buffer={t.double_buffer}: {o.cycles:,.0f} cycles  {tag}")
            lines.append("    weight layout pre-packed (tile order): chosen")
            lines.append(f"    weight layout row-major: refused: {ROW_MAJOR_REFUSAL}")
    return lines


def total_predicted(decisions: list[ChainDecision]) -> float:
    return math.fsum(d.chosen.cycles for d in decisions)
