"""Candidates per chain, their predicted cycles, and the cheapest cover of each chain.

A chain of ``n`` items (an anchor and epilogue ops, :mod:`fusion.compiler.lower`) is covered by
cutting it into consecutive segments; each segment is one kernel (:func:`spec_for`). A
segment starting at the anchor is the anchor's kind (a GEMM or max kernel) with the
segment's ops as fused epilogue stages; any other segment is a standalone epilogue pass. The
candidates of a segment are its kind's variants (a GEMM's tilings: super-tile sizes, k tile,
loop order, double buffering), each priced by the cost model from the kind's features.
Legality and profitability are kept apart:

- *legality*: may this segment run on this variant at all? A stage the variant's chain lacks
  or orders differently, scratchpads too small for any tiling, a maxpool without the residual
  stage. Only the legality checks refuse, and a refusal is the structured record they
  return (:class:`fusion.kernels.protocol.Refusal`), shown by ``--explain``; an exception
  while pricing is a bug and propagates.
- *profitability*: among legal covers, the one with the fewest predicted cycles wins. A fused
  cover must beat the all-unfused one by ``min_gain`` (a fraction of the unfused cycles), or
  the unfused one is kept: a prediction within the model's error is not worth the extra
  program.

The host is one more engine for the segments it can run (no GEMM in them:
:data:`fusion.compiler.lower.HOST_ALTERNATIVES`). Given a host cost model
(:class:`fusion.cost.host.HostCostModel`), each such segment also gets a host option priced in
accelerator cycles at the model's clock, plus moving its operands over the memory port, and
covers compare it like any kernel: the host wins
a segment only when its predicted cycles are fewer, or when the accelerator refuses the
segment (a stage the variant lacks). ``--explain`` shows both prices and the choice. Without
a host model (``--no-host-fallback``) the accelerator runs every chain, as before.

What a kind chooses by design shows in ``--explain`` too: the GEMM microcode reads B
pre-packed in the array's tile order (``[Nb][Kp][C]``, :mod:`fusion.kernels.layout`), packed
once at compile time, and the row-major alternative is listed and refused with the reason
(:data:`fusion.kernels.gemm.kind.ROW_MAJOR_REFUSAL`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fusion.compiler import memplan
from fusion.compiler.data_hints import ZeroHints
from fusion.compiler.kernels import KernelSpec, spec_for
from fusion.compiler.lower import HOST_ALTERNATIVES, HOST_OPS, Chain, CompileError
from fusion.compiler.options import DEFAULT, CompileOptions
from fusion.cost.host import HostCostModel
from fusion.cost.model import CostModel
from fusion.ir.graph import Graph
from fusion.kernels.protocol import Refusal
from hwgen.config import VariantConfig

#: Fused covers must save at least this fraction of the unfused cover's predicted cycles.
DEFAULT_MIN_GAIN = 0.02


@dataclass
class Option:
    """One priced (or refused) kernel for a segment, or the host running it.

    A host option has no ``spec``; ``host_seconds`` is its predicted host time, ``cycles``
    the same in accelerator cycles plus ``link_cycles`` moving its operands, and ``refused``
    what the accelerator said of the segment (None when it can run it too).
    """

    spec: KernelSpec | None
    cycles: float | None
    refused: Refusal | None = None
    host_seconds: float | None = None
    #: Which model priced it (:meth:`fusion.cost.model.CostModel.source`).
    priced_by: str = ""
    link_cycles: float = 0.0

    @property
    def on_host(self) -> bool:
        return self.host_seconds is not None


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
        return " | ".join("+".join(names[i:j]) + (" [host]" if o.on_host else "")
                          for (i, j), o in zip(self.cuts, self.options, strict=True))


@dataclass
class ChainDecision:
    """The engine's choice for one chain, with every candidate it weighed."""

    chain: Chain
    chosen: Cover
    covers: list[Cover]
    variants: list[Option] = field(default_factory=list)  # of the chosen first segment
    note: str = ""

    segments: dict[tuple[int, int], list[Option]] = field(default_factory=dict)

    @property
    def kernels(self) -> list[KernelSpec]:
        return [o.spec for o in self.chosen.options if o.spec is not None]

    @property
    def host_segments(self) -> list[tuple[tuple[int, int], Option]]:
        """The chosen cover's segments that run on the host, with their options."""
        return [(cut, o) for cut, o in zip(self.chosen.cuts, self.chosen.options, strict=True)
                if o.on_host]


def _segment_options(graph: Graph, config: VariantConfig, model: CostModel, chain: Chain,
                     start: int, stop: int, memo: dict | None = None,
                     options: CompileOptions = DEFAULT,
                     data: ZeroHints | None = None) -> list[Option]:
    """Every priced candidate of one segment, best first, or the one refusal.

    Only the legality checks refuse (the lowering's, :func:`spec_for`, and the kind's): a
    refusal is the record they return. Anything raised while pricing is a bug and propagates.
    ``memo`` maps a segment's kind and params to its refusal or its priced variants, so
    identical layers are checked and priced once per compile.
    """
    base = spec_for(graph, config, chain, start, stop, options, data)
    if isinstance(base, Refusal):
        return [Option(None, None, base)]
    kind = base.kind
    key = (kind.name, base.params)
    if memo is not None and key in memo:
        known = memo[key]
        if isinstance(known, Refusal):
            return [Option(None, None, known)]
        return [Option(base.with_params(p), cycles, priced_by=by) for p, cycles, by in known]
    refusal = kind.legality(config, base.params)
    if refusal is not None:
        if memo is not None:
            memo[key] = refusal
        return [Option(None, None, refusal)]
    variants = kind.variants(config, base.params)
    features = [kind.features(config, p) for p in variants]
    # one call for the segment's candidates: a learned model prices them as one batch
    cycles = model.predict_many(features)
    options = [Option(base.with_params(p), float(c), priced_by=model.source(f))
               for p, f, c in zip(variants, features, cycles, strict=True)]
    options.sort(key=lambda o: o.cycles)
    if memo is not None:
        memo[key] = [(o.spec.params, o.cycles, o.priced_by) for o in options]
    return options


def _host_option(graph: Graph, config: VariantConfig, chain: Chain, start: int, stop: int,
                 host: HostCostModel, accelerator: list[Option]) -> Option | None:
    """The host running segment ``start:stop``, or None when it holds a GEMM: its compute,
    and moving its operands to and from the accelerator's memory
    (:meth:`~fusion.cost.host.HostCostModel.link_cycles`)."""
    nodes = chain.nodes[start:stop]
    if any(n.op not in HOST_ALTERNATIVES for n in nodes):
        return None
    seconds = sum(host.seconds(graph, n) for n in nodes)
    link = sum(host.link_cycles(graph, n, config.port_bytes) for n in nodes)
    refused = accelerator[0].refused if accelerator and accelerator[0].spec is None else None
    return Option(None, host.cycles(seconds) + link, refused, seconds, link_cycles=link)


def decide_chain(graph: Graph, config: VariantConfig, model: CostModel, chain: Chain, *,
                 fusion: bool = True, min_gain: float = DEFAULT_MIN_GAIN,
                 memo: dict | None = None, host: HostCostModel | None = None,
                 options: CompileOptions = DEFAULT,
                 data: ZeroHints | None = None) -> ChainDecision:
    """Price every cover of ``chain`` and choose one (see the module docstring).

    ``host`` prices the host as one more engine for the segments without a GEMM; None keeps
    every segment on the accelerator. ``options``: what the compiler may use. ``data``: what
    is known of the inputs it will run on (:mod:`fusion.compiler.data_hints`).

    Raises
    ------
    CompileError
        If no cover is legal (naming the chain and each refusal), or with ``fusion=False``
        if the unfused cover is not.
    """
    n = len(chain.nodes)
    _check_sizes(graph, config, chain, options)
    seg: dict[tuple[int, int], list[Option]] = {}

    def priced(i: int, j: int) -> list[Option]:
        if (i, j) not in seg:
            found = _segment_options(graph, config, model, chain, i, j, memo, options, data)
            # layout steps (a convolution's im2col) run on the host even without fallback
            layout = all(n.op in HOST_OPS for n in chain.nodes[i:j])
            on_host = (_host_option(graph, config, chain, i, j, host or HostCostModel(),
                                     found)
                       if host or layout else None)
            if on_host is not None:  # refused kernels price nothing: the host stands alone
                found = sorted([o for o in found if o.spec is not None] + [on_host],
                               key=lambda o: o.cycles)
            seg[(i, j)] = found
        return seg[(i, j)]

    covers = []
    # Every composition of n items: at most 2**(n-1) = 16 for the longest chain of five.
    for mask in range(1 << (n - 1)):
        bounds = [0] + [k + 1 for k in range(n - 1) if mask >> k & 1] + [n]
        cuts = tuple(zip(bounds, bounds[1:], strict=False))
        best = [priced(i, j)[0] for i, j in cuts]
        refused = next((f"{_seg_name(chain, i, j)}: {o.refused.text}" for (i, j), o in
                        zip(cuts, best, strict=True) if o.spec is None and not o.on_host), "")
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
        # The minimum gain keeps a chain unfused when fusing pays too little to trust the
        # prediction; it never moves compute to the host (an unfused cover with more host
        # steps than the fused one): that trades a predicted saving for a host round trip.
        more_host = _host_steps(unfused) > _host_steps(chosen)
        if unfused.cycles is not None and chosen is not unfused and not more_host:
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
    first = chosen.options[0].spec
    variants = ([o for o in seg[chosen.cuts[0]] if o.spec is not None]
                if first is not None and first.kind.variants_label else [])
    return ChainDecision(chain, chosen, covers, variants, note, seg)


def _host_steps(cover: Cover) -> int:
    """The chain's nodes that ``cover`` runs on the host."""
    return sum(j - i for (i, j), o in zip(cover.cuts, cover.options, strict=True) if o.on_host)


def _check_sizes(graph: Graph, config: VariantConfig, chain: Chain,
                 options: CompileOptions = DEFAULT) -> None:
    """Refuse a chain that cannot fit the external memory before any candidate is priced
    (pricing a kernel of a huge batch is bounded, but wasted): every cover's first kernel
    starts at the chain's head, so the smallest of those kernels' floors bounds them all
    (:func:`fusion.compiler.memplan.check_floor`)."""
    heads = [s for stop in range(1, len(chain.nodes) + 1)
             if not isinstance(s := spec_for(graph, config, chain, 0, stop, options), Refusal)]
    if not heads:
        return  # refused by legality, with the reasons
    roles = {s.name: {r: s.region_role(r) for r in s.regions(config)} for s in heads}
    least = min(heads, key=lambda s: memplan.floor_bytes(s.regions(config), roles[s.name]))
    memplan.check_floor(config, least.describe(), least.regions(config), roles[least.name])


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
        # what the chosen kernels do beyond their tiling (e.g. weights split along K)
        lines += [f"  note: {o.spec.note}" for o in d.chosen.options if o.spec and o.spec.note]
        lines += _engine_lines(d)
        if d.variants:
            first = d.chosen.options[0].spec
            lines.append(f"  {first.kind.variants_label} of the first kernel:")
            top = d.variants[0].cycles
            for o in d.variants:
                tag = ("chosen" if o is d.chosen.options[0] else
                       "tied with the chosen one, which the tiler ranks first"
                       if o.cycles == top else f"lost: +{o.cycles - top:,.0f}")
                lines.append(f"    {first.kind.variant_label(o.spec.params)}: "
                             f"{o.cycles:,.0f} cycles ({o.priced_by})  {tag}")
            lines += [f"    {note}" for note in first.kind.explain_notes(first.params)]
    return lines


def _engine_lines(d: ChainDecision) -> list[str]:
    """Host or accelerator, for each segment of the chosen cover the host could run: both
    prices and the choice."""
    lines = []
    for (i, j), chosen in zip(d.chosen.cuts, d.chosen.options, strict=True):
        opts = d.segments.get((i, j), [])
        on_host = next((o for o in opts if o.on_host), None)
        if on_host is None:
            continue
        kernel = next((o for o in opts if o.spec is not None), None)
        name = _seg_name(d.chain, i, j)
        host = (f"host {on_host.cycles:,.0f} cycles ({on_host.host_seconds * 1e6:,.1f} us "
                f"predicted, and {on_host.link_cycles:,.0f} cycles moving its operands)")
        if kernel is None:
            why = on_host.refused.text if on_host.refused else "no kernel"
            lines.append(f"  engine for {name}: {host}; accelerator refused ({why}): host")
        else:
            pick = "host" if chosen.on_host else "accelerator"
            lines.append(f"  engine for {name}: accelerator {kernel.cycles:,.0f} cycles, "
                         f"{host}: {pick}")
    return lines


def total_predicted(decisions: list[ChainDecision]) -> float:
    """Predicted cycles of every chosen cover (host segments at their price in cycles)."""
    return math.fsum(d.chosen.cycles for d in decisions)


def windows_reason(decision: ChainDecision, prefix: int) -> str:
    """Why a convolution's windows are gathered on the host: the window convolution kernel
    (or, for a depthwise convolution, the window unit's: the prefix with its GEMM) was
    refused, or priced dearer than the host's im2col and the GEMM."""
    conv = decision.segments.get((0, prefix + 1), [])
    refused = next((o.refused for o in conv if o.refused is not None and o.spec is None), None)
    if refused is not None:
        what = ("the depthwise convolution on the window unit" if refused.kind == "window"
                else "the window convolution")
        return f"{what} is refused: {refused.text}"
    return "gathering the windows on the host and running the GEMM is predicted cheaper"
