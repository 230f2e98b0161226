"""The chains of a compile priced on several cores.

Pricing every candidate of every chain (:func:`fusion.compiler.engine.decide_chain`) is most of
a compile (MobileNetV1-0.25 on an 8x8: 82%), and the chains do not depend on each other. With
``jobs`` > 1, :func:`decide_chains` deals them out to forked worker processes (the chain with
the most nodes first, each to the least loaded worker), which inherit the graph and the
settings and send back their decisions; the parent joins them in chain order. The decisions
are the serial compile's: each chain's is a pure function of the graph, the chain and the
settings (the serial compile's memo only saves pricing a layer twice, it never changes a
price), so the plan is the same byte for byte (``tests/fusion/compiler/test_parallel_pricing.py``).

Only the analytical model prices in workers: a measured or learned model holds files and
connections that a fork must not share, so with one the chains are priced here, one by one.
"""

from __future__ import annotations

import heapq
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

#: What the forked workers price with: set in the parent just before the fork.
_WORK: dict[str, Any] = {}


def _decide(indices: Sequence[int]) -> tuple[list[tuple[int, Any]], dict]:
    """In a worker: the decisions of its chains, and what it priced (the parent's memo
    grows by it, for a later compile of the same graph)."""
    decide, chains = _WORK["decide"], _WORK["chains"]
    memo = dict(_WORK["memo"])  # the parent's, inherited: identical layers priced once
    known = set(memo)
    out = [(i, decide(chains[i], memo)) for i in indices]
    return out, {k: v for k, v in memo.items() if k not in known}


def _deal(sizes: Sequence[int], workers: int) -> list[list[int]]:
    """Chain indices per worker, the largest chain first to the least loaded worker."""
    loads = [(0, w) for w in range(workers)]
    out: list[list[int]] = [[] for _ in range(workers)]
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        load, w = heapq.heappop(loads)
        out[w].append(i)
        heapq.heappush(loads, (load + sizes[i], w))
    return [sorted(g) for g in out if g]


def decide_chains(chains: Sequence[Any], decide: Callable[[Any, dict], Any], *, jobs: int,
                  memo: dict, sizes: Sequence[int]) -> list[Any]:
    """``decide(chain, memo)`` of every chain, in chain order: here when ``jobs`` is 1 (with
    the compile's ``memo``), else on up to ``jobs`` forked workers (``sizes``: each chain's
    expected work, to balance them)."""
    if jobs <= 1 or len(chains) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [decide(c, memo) for c in chains]
    groups = _deal(sizes, min(jobs, len(chains)))
    _WORK.update(decide=decide, chains=list(chains), memo=memo)
    try:
        with ProcessPoolExecutor(max_workers=len(groups),
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            parts = list(pool.map(_decide, groups))
    finally:
        _WORK.clear()
    out: list[Any] = [None] * len(chains)
    for part, priced in parts:
        memo.update(priced)
        for i, decision in part:
            out[i] = decision
    return out


def _analytical(model: Any) -> bool:
    """Whether ``model`` prices with the analytical model alone (the CLI wraps it in a
    :class:`~fusion.cost.tiered.TieredModel` with no measured tier)."""
    from fusion.cost.analytical import AnalyticalModel
    from fusion.cost.tiered import TieredModel

    if type(model) is TieredModel and model.measured is None:
        model = model.model
    return type(model) is AnalyticalModel


def decide_all(graph: Any, config: Any, model: Any, found: Sequence[Any], *, memo: dict,
               jobs: int, progress: bool, **settings: Any) -> list[Any]:
    """The engine's decision of every chain in ``found`` (``settings``: the keyword
    arguments of :func:`fusion.compiler.engine.decide_chain`), on ``jobs`` cores when the
    analytical model prices (see the module docstring), with a progress line when serial."""
    from fusion.compiler import engine
    from fusion.progress import steps

    def decide(chain: Any, memo: dict) -> Any:
        return engine.decide_chain(graph, config, model, chain, memo=memo, **settings)

    if jobs > 1 and _analytical(model):
        # a chain of n nodes has n (n + 1) / 2 segments to price
        return decide_chains(found, decide, jobs=jobs, memo=memo,
                             sizes=[len(c.nodes) * (len(c.nodes) + 1) for c in found])
    return [decide(c, memo) for c in steps(found, "pricing", show=progress, unit="chain")]
