""":func:`compile_model`: graph -> kernels with programs and a memory plan.

The pipeline: prune and legalize the graph (:func:`fusion.passes.driver.optimize`), find the
chains and host steps (:mod:`fusion.compiler.lower`), choose a cover per chain
(:mod:`fusion.compiler.engine`), order the steps, plan the external memory
(:mod:`fusion.compiler.memplan`), then build each kernel's program at its placement through
the kernel cache. Host steps are planned beside the kernels, each with its role (layout or
compute, :func:`fusion.compiler.lower.host_role`), why it is on the host, and its predicted
cost (:mod:`fusion.cost.host`); ``host_fallback=False`` refuses every compute op on the host
instead, one line per op. A kernel whose program does not fit the instruction memory with the chosen
tiling is built with the next-best one, and the plan says so. The plan folder (write and
read) is :mod:`fusion.compiler.plan_folder`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fusion.compiler import engine, lower, relayout
from fusion.compiler.builds import build_all
from fusion.compiler.data_hints import ZeroHints
from fusion.compiler.kernels import KernelSpec
from fusion.compiler.lower import HOST_BY_DESIGN, chains, host_role, is_fallback
from fusion.compiler.memplan import MemoryPlan, plan_memory
from fusion.compiler.options import DEFAULT, CompileOptions
from fusion.compiler.parallel_pricing import decide_all
from fusion.compiler.placed_choice import Candidate, ranked
from fusion.compiler.repack import Repack, find_repacks
from fusion.compiler.scheduler import HERE, CompileTimes, Workers
from fusion.compiler.store_layout import kmajor_producers, with_kmajor
from fusion.cost.analytical import AnalyticalModel
from fusion.cost.host import HostCostModel
from fusion.cost.model import CostModel
from fusion.ir.graph import Graph, Node
from fusion.kernels.cache import KernelCache
from fusion.kernels.program import Kernel
from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig

#: The ``format`` tag of ``plan.json``.
PLAN_TAG = "hwgen-plan"
#: Version of ``plan.json`` (its ``version``): 2 recorded each kernel's kind and params
#: (``form``, ``params``); 3 makes the folder a deployable artifact
#: (:mod:`fusion.compiler.plan_folder`): the graph after the passes, each kernel's metadata,
#: every file's size and SHA-256, the gateware digest and a digest of ``plan.json`` itself.
PLAN_FORMAT = 3


@dataclass
class KernelStep:
    """A kernel of the plan: what it computes, its program, and its predicted cycles."""

    spec: KernelSpec
    compiled: Kernel
    predicted_cycles: float
    note: str = ""
    #: Which model priced it (:meth:`fusion.cost.model.CostModel.source`; "" when read back
    #: from a plan folder).
    priced_by: str = ""

    @property
    def name(self) -> str:
        return self.spec.name


#: Why a compute op is on the host (:attr:`HostStep.reason`).
NO_KERNEL = "no accelerator kernel"
CHEAPER = "cheaper on the host"
BY_DESIGN = ("left to the host by design: accelerators of this kind have no exponential or "
             "power unit, and this op is small beside the convolutions")


@dataclass
class HostStep:
    """A node the runtime runs on the host with the reference executor.

    Attributes
    ----------
    node : Node
    role : {"layout", "compute"}
        ``layout``: data movement or a boundary conversion; ``compute``: arithmetic the host
        does because the accelerator has no kernel for it or the engine priced the host
        cheaper (:func:`fusion.compiler.lower.host_role`).
    reason : str
        Why a compute op is on the host: :data:`NO_KERNEL`, :data:`BY_DESIGN`
        (:data:`fusion.compiler.lower.HOST_BY_DESIGN`), :data:`CHEAPER`, or the
        accelerator's refusal; empty for layout.
    predicted_seconds : float
        :class:`fusion.cost.host.HostCostModel`'s prediction.
    predicted_cycles : float
        The same in accelerator cycles at the cost model's clock.
    """

    node: Node
    role: str = "layout"
    reason: str = ""
    predicted_seconds: float = 0.0
    predicted_cycles: float = 0.0

    @property
    def name(self) -> str:
        return self.node.name


def host_step(graph: Graph, node: Node, model: HostCostModel, reason: str = "") -> HostStep:
    """The plan's host step for ``node``, priced by ``model``."""
    role = host_role(node)
    seconds = model.seconds(graph, node)
    if not reason and role == "compute":
        reason = BY_DESIGN if node.op in HOST_BY_DESIGN else NO_KERNEL
        if node.op in ("BatchNormalization", "batchnorm"):  # why the pass left it: a channel
            from fusion.passes.batchnorm import why_host

            why = why_host(graph, node)
            reason = f"{NO_KERNEL}: {why}" if why else reason
    return HostStep(node, role, reason, seconds, model.cycles(seconds))


@dataclass
class CompiledModel:
    """A model compiled for one variant."""

    graph: Graph
    config: VariantConfig
    steps: list[KernelStep | HostStep]
    memory: MemoryPlan
    decisions: list[engine.ChainDecision]
    fusion: bool
    cache_stats: dict[str, Any] = field(default_factory=dict)
    #: Inferences per run: the graph's inputs lead with this batch (:mod:`fusion.frontend.batch`).
    batch: int = 1
    #: What the compiler was allowed to use (:mod:`fusion.compiler.options`).
    options: CompileOptions = DEFAULT
    #: The board memory the candidates were priced on (the variant folder's).
    platform: PlatformConfig = field(default_factory=PlatformConfig)
    #: The model that priced them, in words (:meth:`fusion.cost.model.CostModel.describe`).
    priced_by: str = "the analytical model"
    #: What priced the host steps and the repacks.
    host_model: HostCostModel = field(default_factory=HostCostModel)
    #: The copies the compiler inserted into the graph (:mod:`fusion.compiler.relayout`).
    relayouts: list[relayout.Relayout] = field(default_factory=list)
    #: Where the compile's time went (never in the plan: it differs run to run).
    times: CompileTimes = field(default_factory=CompileTimes)

    @property
    def kernels(self) -> list[KernelStep]:
        return [s for s in self.steps if isinstance(s, KernelStep)]

    @property
    def predicted_cycles(self) -> float:
        """The kernels' predicted cycles (host steps are :attr:`predicted_host_seconds`)."""
        return sum(k.predicted_cycles for k in self.kernels)

    @property
    def host(self) -> list[HostStep]:
        return [s for s in self.steps if isinstance(s, HostStep)]

    @property
    def weight_bytes(self) -> int:
        """Bytes of the constant GEMM weights the plan loads: each GEMM kernel's weight
        region (``b``, padded to whole tiles as it sits in memory), once."""
        return sum(k.spec.weight_bytes(self.config) for k in self.kernels)

    @property
    def roofline_cycles(self) -> int:
        """The weight-bandwidth roofline: no plan runs in fewer cycles than streaming its
        weights once through the memory port, ``weight_bytes / port_bytes``. The bound of a
        GEMV-bound model (batch 1 of fully connected layers), where the array idles."""
        return -(-self.weight_bytes // self.config.port_bytes)

    @property
    def host_ops(self) -> list[HostStep]:
        """The compute ops on the host (a fallback or the engine's choice), not the layout
        steps: those every model has, and they compute nothing the accelerator could; the
        ``host_ops`` count is what the accelerator leaves to the host."""
        return [s for s in self.host if s.role == "compute"]

    @property
    def fallbacks(self) -> list[HostStep]:
        """The host ops the host computes in the accelerator's place: all but those on the
        host by design (what ``--no-host-fallback`` refuses)."""
        return [s for s in self.host_ops if is_fallback(s.node)]

    @functools.cached_property
    def repacks(self) -> list[Repack]:
        """The kernel inputs the host rewrites between kernels: an earlier kernel stored the
        tensor, but not in the layout this one reads (:mod:`fusion.compiler.repack`). Layout
        steps on the host that no graph node asks for."""
        return find_repacks(self.graph, self.config, self.kernels,
                            {k.name: self.memory.in_place(k.name) for k in self.kernels},
                            self.host_model)

    @property
    def predicted_host_seconds(self) -> float:
        """The host steps' and the repacks' predicted seconds."""
        return (sum(s.predicted_seconds for s in self.host)
                + sum(r.predicted_seconds for r in self.repacks))

    @property
    def predicted_host_cycles(self) -> float:
        """:attr:`predicted_host_seconds` in accelerator cycles at the host model's clock."""
        return self.host_model.cycles(self.predicted_host_seconds)

    @property
    def predicted_total_cycles(self) -> float:
        """What the plan is predicted to take: the kernels, the host steps and repacks at the
        host model's clock, and the repacks' bytes over the memory port (the host steps'
        operands move in every plan of the model alike)."""
        return (self.predicted_cycles + self.predicted_host_cycles
                + sum(r.link_cycles for r in self.repacks))

    def explain(self) -> str:
        lines = [f"candidates priced by {self.priced_by} on {self.platform.describe()}"]
        lines += engine.explain_lines(self.decisions)
        for k in self.kernels:
            if k.note:
                lines.append(f"kernel {k.name}: {k.note}")
        for h in self.host_ops:
            lines.append(f"host op {h.name} ({h.node.op}): {h.reason}; predicted "
                         f"{h.predicted_seconds * 1e6:,.1f} us on the host "
                         f"({h.predicted_cycles:,.0f} cycles at the assumed "
                         f"{h.predicted_cycles / h.predicted_seconds / 1e6:,.0f} MHz clock)")
        layout = [h for h in self.host if h.role == "layout"]
        if layout:
            lines.append(f"{len(layout)} layout host steps ("
                         f"{', '.join(sorted({h.node.op for h in layout}))}): predicted "
                         f"{sum(h.predicted_seconds for h in layout) * 1e6:,.1f} us")
        for r in self.repacks:
            lines.append(f"repack {r.name}: the host rewrites {r.tensor!r} between kernels, "
                         f"stored by {r.producer} as {r.stored}, read as {r.wanted} "
                         f"({r.read_bytes:,} B read, {r.written_bytes:,} B written; predicted "
                         f"{r.predicted_seconds * 1e6:,.1f} us and {r.link_cycles:,.0f} cycles "
                         f"on the memory port)")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON types (no program words: those go to files)."""
        steps = []
        for s in self.steps:
            if isinstance(s, HostStep):
                steps.append({"kind": "host", "name": s.name, "op": s.node.op,
                              "inputs": list(s.node.inputs), "outputs": list(s.node.outputs),
                              "role": s.role, "reason": s.reason,
                              "predicted_seconds": s.predicted_seconds})
                continue
            sp = s.spec
            steps.append({
                "kind": "kernel", "name": s.name, "form": sp.kind.name, "ops": list(sp.nodes),
                "inputs": list(sp.inputs), "output": sp.output,
                "params": sp.kind.key_params(sp.params),
                "predicted_cycles": round(s.predicted_cycles),
                "placement": self.memory.placements.get(s.name, {}),
                "program_words": len(s.compiled.program), "describe": sp.describe(),
                "note": s.note,
            })
        return {"format": PLAN_TAG, "version": PLAN_FORMAT, "model": self.graph.name,
                "signature": self.graph.signature(), "variant": self.config.key(),
                "fusion": self.fusion, "batch": self.batch,
                "options": self.options.to_dict(), "platform": self.platform.to_dict(),
                "predicted_cycles": round(self.predicted_cycles),
                "host_ops": len(self.host_ops),
                "predicted_host_seconds": self.predicted_host_seconds,
                "repacks": [r.to_dict() for r in self.repacks],
                "relayouts": [r.to_dict() for r in self.relayouts],
                "peak_memory_bytes": self.memory.peak_bytes, "steps": steps,
                "memory": self.memory.to_dict(), "cache": self.cache_stats}


def _order(graph: Graph, kernels: Sequence[KernelSpec], host: Sequence[Node]
           ) -> list[KernelSpec | Node]:
    """Every step in topological order (by each one's first node), less the host steps
    whose outputs no later step and no graph output reads: a layout chain that its reader
    reads through (a GEMM's A through reshapes, :func:`fusion.compiler.kernels._gemm`)."""
    index = {n.name: i for i, n in enumerate(graph.topo_order())}
    steps: list[KernelSpec | Node] = [*kernels, *host]
    steps.sort(key=lambda s: index[s.nodes[0] if isinstance(s, KernelSpec) else s.name])
    needed, kept = set(graph.outputs), []
    for step in reversed(steps):
        if isinstance(step, KernelSpec) or needed.intersection(step.outputs):
            kept.append(step)
            needed.update(step.inputs)
    return kept[::-1]


def order_and_place(graph: Graph, config: VariantConfig, kernels: Sequence[KernelSpec],
                    host: Sequence[Node]) -> tuple[list[KernelSpec | Node], MemoryPlan]:
    """The steps in execution order (topological, by each one's first node) and the memory
    plan of their buffers: what a compile decides after choosing the kernels, and what
    reading a plan folder checks it against.

    Raises
    ------
    CompileError
        If the model does not fit the variant's external memory.
    """
    order = _order(graph, kernels, host)
    last_use: dict[str, int] = {}
    for i, step in enumerate(order):
        for t in step.inputs:
            last_use[t] = i
    for t in graph.outputs:
        last_use[t] = len(order)
    regions = {s.name: s.regions(config) for s in order if isinstance(s, KernelSpec)}
    return order, plan_memory(config, order, regions, last_use, tensor_shapes(graph))


def tensor_shapes(graph: Graph) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape: what the memory planner and the store layouts ask of the graph
    (:func:`fusion.compiler.memplan.aliases`)."""
    return {name: tuple(t.shape) for name, t in graph.tensors.items()}


def after_passes(graph: Graph, config: VariantConfig, options: CompileOptions = DEFAULT, *,
                 optimized: bool = False) -> Graph:
    """The graph :func:`compile_model` compiles: ``graph`` pruned and legalized
    (:func:`fusion.passes.driver.optimize`), then in the variant's own form of global pools,
    and with convolutions whose program fits only in whole blocks of output columns
    computing them for the max pool that reads them (:mod:`fusion.compiler.whole_rows`).

    A plan read with its model derives it again (:mod:`fusion.compiler.plan_reader`): the
    passes only, no pricing.

    Parameters
    ----------
    graph : Graph
        As imported (or already through the passes, with ``optimized=True``).
    config : VariantConfig
    options : CompileOptions
    optimized : bool

    Returns
    -------
    Graph
    """
    from fusion.compiler import whole_rows
    from fusion.passes import global_pool_window
    from fusion.passes.driver import optimize

    g = graph if optimized else optimize(graph, legalize=True)
    if config.window_unit and options.window_unit:  # the target's own form of global pools
        g = global_pool_window.for_variant(g)
    if config.window_loads and options.window_conv:  # window convolutions of whole rows
        g = whole_rows.for_variant(g, config)
    return g


def compile_model(graph: Graph, config: VariantConfig, *, cache: KernelCache | None = None,
                  model: CostModel | None = None, fusion: bool = True,
                  min_gain: float = engine.DEFAULT_MIN_GAIN, optimized: bool = False,
                  host_fallback: bool = True, host_model: HostCostModel | None = None,
                  batch: int = 1, options: CompileOptions = DEFAULT,
                  platform: PlatformConfig | None = None, data: ZeroHints | None = None,
                  progress: bool = False, workers: Workers = HERE,
                  times: CompileTimes | None = None) -> CompiledModel:
    """Compile ``graph`` for ``config``.

    Parameters
    ----------
    graph : Graph
        As imported (or already through the passes, with ``optimized=True``).
    config : VariantConfig
    cache : KernelCache, optional
        Where kernel programs are looked up and stored.
    model : CostModel, optional
        Prices the candidates (by default the analytical model).
    fusion : bool
        False runs every op as its own kernel (``--no-fusion``).
    min_gain : float
        See :mod:`fusion.compiler.engine`.
    host_fallback : bool
        Run ops without a kernel on the host, and let the engine put a segment there when
        cheaper or refused by the accelerator (default). False (``--no-host-fallback``): the
        host runs layout steps only, and a compute op refuses the model, a line per op.
    host_model : HostCostModel, optional
        Prices host steps (:mod:`fusion.cost.host`; by default its constants).
    batch : int
        Inferences per run ``graph`` was imported for (recorded for the reports).
    options : CompileOptions
        The techniques the compiler may use (all by default; :mod:`fusion.compiler.options`).
    platform : PlatformConfig, optional
        The board memory the default model prices on (the ideal memory by default; on a
        DRAM tilings and loop orders differ in row locality, :mod:`fusion.cost.memory`).
    data : ZeroHints, optional
        What is known of the inputs it will run on (:mod:`fusion.compiler.data_hints`).
    progress, workers : bool, Workers
        A progress line while pricing; on ``workers`` (:mod:`fusion.compiler.parallel_pricing`).
    times : CompileTimes, optional
        Where the stages' and tasks' seconds go (the result's ``times``; new when not given).

    Raises
    ------
    CompileError
        For a node neither the accelerator nor the host runs, a chain with no legal kernel, a
        host compute op without ``host_fallback``, or a model that does not fit the memory.
    """
    times = CompileTimes() if times is None else times
    with times.stage("passes"):
        g = after_passes(graph, config, options, optimized=optimized)
    platform = PlatformConfig() if platform is None else platform
    model = model or AnalyticalModel(platform)
    host_model = host_model or HostCostModel()
    memo: dict = {}  # identical layers are priced once, in both plans
    plan = functools.partial(_plan, config=config, cache=cache, model=model, fusion=fusion,
                             min_gain=min_gain, host_fallback=host_fallback,
                             host_model=host_model, batch=batch, options=options,
                             platform=platform, memo=memo, data=data, progress=progress,
                             workers=workers, times=times)
    compiled = plan(g)
    copies = relayout.requests(compiled) if options.relayout and compiled.repacks else []
    if copies:  # the repacked tensors copied on the accelerator: kept when cheaper
        copied = plan(relayout.apply(g, copies), relayouts=copies)
        if copied.predicted_total_cycles < compiled.predicted_total_cycles:
            compiled = copied
    return compiled


def _plan(g: Graph, *, config: VariantConfig, cache: KernelCache | None, model: CostModel,
          fusion: bool, min_gain: float, host_fallback: bool, host_model: HostCostModel,
          batch: int, options: CompileOptions, platform: PlatformConfig, memo: dict,
          relayouts: Sequence[relayout.Relayout] = (), data: ZeroHints | None = None,
          progress: bool, workers: Workers, times: CompileTimes) -> CompiledModel:
    """:func:`compile_model` of the graph after the passes ``g``: choose, order, place and
    build its kernels."""
    found, host = chains(g)
    fallback = [n for n in host if is_fallback(n)]
    if fallback and not host_fallback:
        raise lower.refuse_host_compute(g, fallback, "--no-host-fallback")
    with times.stage("pricing"):
        decisions = decide_all(g, config, model, found, memo=memo, workers=workers,
                               progress=progress, times=times, fusion=fusion,
                               min_gain=min_gain, options=options, data=data,
                               host=host_model if host_fallback else None)
    chosen: dict[str, tuple[KernelSpec, engine.Option, engine.ChainDecision]] = {}
    reasons: dict[str, str] = {}
    for d in decisions:
        for option in d.chosen.options:
            if option.spec is not None:
                chosen[option.spec.name] = (option.spec, option, d)
        for (i, j), option in d.host_segments:
            why = (f"the accelerator refuses it: {option.refused.text}" if option.refused
                   else CHEAPER)
            if (i, j) == (0, len(d.chain.prefix)) and j:  # a convolution's im2col
                why = engine.windows_reason(d, j)
            for n in d.chain.nodes[i:j]:
                host.append(n)
                reasons[n.name] = why
    # GEMMs feeding GEMMs store K-major, so that their readers take the output where it lies
    kmajor = (kmajor_producers(config, [c[0] for c in chosen.values()], tensor_shapes(g))
              if options.kmajor_store else set())
    chosen = {name: (with_kmajor(spec) if name in kmajor else spec, option, d)
              for name, (spec, option, d) in chosen.items()}
    with times.stage("placement"):
        order, memory = order_and_place(g, config, [c[0] for c in chosen.values()], host)
    before = cache.stats.to_dict() if cache is not None else {}
    with times.stage("placed pricing"):
        kernels = [(*chosen[s.name], memory.placements[s.name]) for s in order
                   if isinstance(s, KernelSpec)]
        candidates = ranked(config, kernels, model, platform, workers=workers, times=times)
    with times.stage("builds"):
        built = iter(build_all(config, [k[0] for k in kernels], [k[3] for k in kernels],
                               candidates, cache, workers=workers, times=times))
        steps = [_kernel_step(*next(built)) if isinstance(step, KernelSpec)
                 else host_step(g, step, host_model, reasons.get(step.name, ""))
                 for step in order]
    stats = {}
    if cache is not None:
        after = cache.stats.to_dict()
        stats = {k: after[k] - before.get(k, 0) for k in after if isinstance(after[k], int)}
    return CompiledModel(g, config, steps, memory, decisions, fusion, stats, batch, options,
                         platform, model.describe(), host_model, list(relayouts), times)


def _kernel_step(c: Candidate, compiled: Kernel, note: str) -> KernelStep:
    return KernelStep(c.spec, compiled, c.cycles, note, c.priced_by)
