"""The chains of a compile priced as independent tasks (:mod:`fusion.compiler.scheduler`).

Pricing every candidate of every chain (:func:`fusion.compiler.engine.decide_chain`) is most of
a compile (MobileNetV1-0.25 on an 8x8: 82%), and the chains do not depend on each other. Each
chain is one task, or chains of the same ops on the same shapes together (:func:`alike`); the
scheduler runs them on the workers ``--jobs``/``--scheduler`` give, the most segments first,
and the parent joins the decisions in chain order.
They are the serial compile's: each chain's is a pure function of the graph, the chain and
the settings (the memo only saves pricing a layer twice, it never changes a price; a
worker keeps its own and sends back what it added, for a later compile of the same graph),
so the plan is the same byte for byte (``tests/fusion/compiler/test_parallel_pricing.py``).

Only the analytical model prices in workers: a measured or learned model holds files and
connections that a fork must not share, so with one the chains are priced here, one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fusion.compiler.scheduler import CompileTimes, Workers, run_tasks


def analytical_only(model: Any) -> bool:
    """Whether ``model`` prices with the analytical model alone (the CLI wraps it in a
    :class:`~fusion.cost.tiered.TieredModel` with no measured tier): the only model whose
    pricing may run in another process (a measured or learned one holds files and
    connections)."""
    from fusion.cost.analytical import AnalyticalModel
    from fusion.cost.tiered import TieredModel

    if type(model) is TieredModel and model.measured is None:
        model = model.model
    return type(model) is AnalyticalModel


def decide_all(graph: Any, config: Any, model: Any, found: Sequence[Any], *, memo: dict,
               workers: Workers, progress: bool, times: CompileTimes | None = None,
               **settings: Any) -> list[Any]:
    """The engine's decision of every chain in ``found`` (``settings``: the keyword
    arguments of :func:`fusion.compiler.engine.decide_chain`), on ``workers`` when the
    analytical model prices (see the module docstring), with a progress line."""
    from fusion.compiler import engine

    def price(group: Sequence[int]) -> tuple[list[Any], dict]:
        known = set(memo)
        decisions = [engine.decide_chain(graph, config, model, found[i], memo=memo, **settings)
                     for i in group]
        return decisions, {k: v for k, v in memo.items() if k not in known}

    local = analytical_only(model)
    groups = alike(graph, found) if local and workers.parallel else [[i] for i in range(len(found))]
    names = [found[g[0]].name + (f" (+{len(g) - 1} alike)" if len(g) > 1 else "") for g in groups]
    # a chain of n nodes has n (n + 1) / 2 segments to price; its alike ones, little more
    sizes = [len(found[g[0]].nodes) * (len(found[g[0]].nodes) + 1) * (1 + 0.1 * (len(g) - 1))
             for g in groups]
    out: list[Any] = [None] * len(found)
    for group, (decisions, priced) in zip(groups, run_tasks(
            price, groups, workers=workers, sizes=sizes, stage="pricing", names=names,
            times=times, local=local, progress=progress), strict=True):
        memo.update(priced)
        for i, decision in zip(group, decisions, strict=True):
            out[i] = decision
    return out


def alike(graph: Any, found: Sequence[Any]) -> list[list[int]]:
    """The chains' indices grouped so that chains of the same ops on the same shapes (a
    network's repeated blocks) are one task: one worker prices their layers once, where
    two would each price them (the memo is a worker's own). A grouping only moves work: the
    decisions are the same whatever it is."""
    def shape(name: str) -> tuple:
        t = graph.tensors.get(name)
        return tuple(t.shape) if t is not None else ()

    groups: dict[tuple, list[int]] = {}
    for i, chain in enumerate(found):
        key = tuple((n.op, tuple(shape(t) for t in (*n.inputs, *n.outputs)))
                    for n in chain.nodes)
        groups.setdefault(key, []).append(i)
    return list(groups.values())
