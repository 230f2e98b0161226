""":func:`compile_model`: graph -> kernels with programs and a memory plan.

The pipeline: prune and legalize the graph (:func:`fusion.passes.driver.optimize`), find the
chains and host steps (:mod:`fusion.compiler.lower`), choose a cover per chain
(:mod:`fusion.compiler.engine`), order the steps, plan the external memory
(:mod:`fusion.compiler.memplan`), then build each kernel's program at its placement through
the kernel cache. A kernel whose program does not fit the instruction memory with the chosen
tiling is built with the next-best one, and the plan says so. The plan folder (write and
read) is :mod:`fusion.compiler.plan_folder`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fusion.compiler import engine
from fusion.compiler.kernels import KernelSpec
from fusion.compiler.lower import CompileError, chains
from fusion.compiler.memplan import MemoryPlan, plan_memory
from fusion.cost.analytical import AnalyticalModel
from fusion.cost.model import CostModel
from fusion.ir.graph import Graph, Node
from fusion.kernels.cache import KernelCache
from fusion.kernels.codegen import ProgramTooLong
from fusion.kernels.program import Kernel
from hwgen.config import VariantConfig

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

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass
class HostStep:
    """A node the runtime runs on the host (layout and model-boundary conversions)."""

    node: Node

    @property
    def name(self) -> str:
        return self.node.name


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

    @property
    def kernels(self) -> list[KernelStep]:
        return [s for s in self.steps if isinstance(s, KernelStep)]

    @property
    def predicted_cycles(self) -> float:
        return sum(k.predicted_cycles for k in self.kernels)

    def explain(self) -> str:
        lines = engine.explain_lines(self.decisions)
        for k in self.kernels:
            if k.note:
                lines.append(f"kernel {k.name}: {k.note}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON types (no program words: those go to files)."""
        steps = []
        for s in self.steps:
            if isinstance(s, HostStep):
                steps.append({"kind": "host", "name": s.name, "op": s.node.op,
                              "inputs": list(s.node.inputs), "outputs": list(s.node.outputs)})
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
                "fusion": self.fusion, "predicted_cycles": round(self.predicted_cycles),
                "peak_memory_bytes": self.memory.peak_bytes, "steps": steps,
                "memory": self.memory.to_dict(), "cache": self.cache_stats}


def _order(graph: Graph, kernels: Sequence[KernelSpec], host: Sequence[Node]
           ) -> list[KernelSpec | Node]:
    index = {n.name: i for i, n in enumerate(graph.topo_order())}
    steps: list[KernelSpec | Node] = [*kernels, *host]
    return sorted(steps, key=lambda s: index[s.nodes[0] if isinstance(s, KernelSpec)
                                             else s.name])


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
    return order, plan_memory(config, order, regions, last_use)


def compile_model(graph: Graph, config: VariantConfig, *, cache: KernelCache | None = None,
                  model: CostModel | None = None, fusion: bool = True,
                  min_gain: float = engine.DEFAULT_MIN_GAIN,
                  optimized: bool = False) -> CompiledModel:
    """Compile ``graph`` for ``config``.

    Parameters
    ----------
    graph : Graph
        As imported (or already through the passes, with ``optimized=True``).
    config : VariantConfig
    cache : KernelCache, optional
        Where kernel programs are looked up and stored.
    model : CostModel, optional
        Prices the candidates; the analytical model by default.
    fusion : bool
        False runs every op as its own kernel (``--no-fusion``).
    min_gain : float
        See :mod:`fusion.compiler.engine`.

    Raises
    ------
    CompileError
        For a node the accelerator cannot run, a chain with no legal kernel, or a model
        that does not fit the variant's memory; the message names what and why.
    """
    from fusion.passes.driver import optimize

    g = graph if optimized else optimize(graph, legalize=True)
    model = model or AnalyticalModel()
    found, host = chains(g)
    memo: dict = {}  # identical layers are priced once
    decisions = [engine.decide_chain(g, config, model, c, fusion=fusion, min_gain=min_gain,
                                     memo=memo) for c in found]
    chosen: dict[str, tuple[KernelSpec, engine.Option, engine.ChainDecision]] = {}
    for d in decisions:
        for option in d.chosen.options:
            chosen[option.spec.name] = (option.spec, option, d)
    order, memory = order_and_place(g, config, [c[0] for c in chosen.values()], host)
    before = cache.stats.to_dict() if cache is not None else {}
    steps: list[KernelStep | HostStep] = []
    for step in order:
        if not isinstance(step, KernelSpec):
            steps.append(HostStep(step))
            continue
        spec, option, decision = chosen[step.name]
        steps.append(_build(config, spec, option, decision, memory.placements[spec.name],
                            cache))
    stats = {}
    if cache is not None:
        after = cache.stats.to_dict()
        stats = {k: after[k] - before.get(k, 0) for k in after if isinstance(after[k], int)}
    return CompiledModel(g, config, steps, memory, decisions, fusion, stats)


def _build(config: VariantConfig, spec: KernelSpec, option: engine.Option,
           decision: engine.ChainDecision, placement: dict[str, int],
           cache: KernelCache | None) -> KernelStep:
    """Build the program; when it is too long for the instruction memory, try the next
    variants (tilings) of the chain's first kernel. Any other error is a bug and propagates."""
    alternatives = [option] + [o for o in decision.variants if o is not option
                               and o.spec.nodes == spec.nodes]
    note, error = "", None
    for alt in alternatives:
        try:
            compiled = alt.spec.compile(config, placement, cache)
        except ProgramTooLong as exc:
            error = exc
            note += (f"{alt.spec.kind.variant_label(alt.spec.params)} does not fit the "
                     f"instruction memory ({exc}); ")
            continue
        if alt is not option:
            note += "built with the next-best variant"
        return KernelStep(alt.spec, compiled, alt.cycles, note)
    raise CompileError(f"kernel {spec.name!r} ({spec.describe()}): no variant gives a program "
                       f"that fits the instruction memory ({error}); generate a variant with "
                       f"a larger --imem-depth")
