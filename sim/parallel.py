"""Simulator jobs across several simulator processes at once.

:func:`sim.run.run_programs` runs its jobs one after another in one simulator process. Units
of jobs that do not share memory (a model's kernels chained on one memory are one unit; a
directed shadow set, which writes every region it reads, is one of its own) can run in
several processes at once: :func:`run_spread` deals them out by their expected cycles (the
longest first, each to the least loaded process) and joins the results in the units' order.
The threads only wait on the simulator processes, so Python is not in the simulation loop.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hwgen.config import VariantConfig
from sim.run import Job, RunResult, run_programs


def deal(weights: Sequence[float], workers: int) -> list[list[int]]:
    """Job indices per process: the heaviest job first, each to the least loaded process
    (in job order within a process); no empty process."""
    workers = max(1, min(workers, len(weights)))
    loads = [(0.0, w) for w in range(workers)]
    out: list[list[int]] = [[] for _ in range(workers)]
    for i in sorted(range(len(weights)), key=lambda i: -weights[i]):
        load, w = heapq.heappop(loads)
        out[w].append(i)
        heapq.heappush(loads, (load + max(1.0, float(weights[i])), w))
    return [sorted(group) for group in out]


def run_spread(config: VariantConfig, units: Sequence[Sequence[Job]],
               weights: Sequence[float], workers: int, *, build: Any = None
               ) -> list[list[RunResult]]:
    """Run ``units`` of jobs on up to ``workers`` simulator processes at once.

    Parameters
    ----------
    config : VariantConfig
    units : sequence of sequence of Job
        Each unit's jobs run in order in one process (a unit may chain its memory from job
        to job, ``keep_memory``); units share nothing and run in any process, each after
        the units dealt to the same process before it (in unit order).
    weights : sequence of float
        Each unit's expected cycles, to balance the processes.
    workers : int
        Simulator processes at most.
    build : optional
        As for :func:`sim.run.run_programs` (its build, built once before).

    Returns
    -------
    list of list of RunResult
        Each unit's results, in the units' order.

    Raises
    ------
    SimTimeout, SimError
        As :func:`sim.run.run_programs`, from the first process that raised.
    """
    groups = [g for g in deal(weights, workers) if g]
    batches = [[job for u in g for job in units[u]] for g in groups]
    if len(batches) == 1:
        parts = [run_programs(config, batches[0], build=build)]
    else:
        with ThreadPoolExecutor(max_workers=len(batches)) as pool:
            futures = [pool.submit(run_programs, config, b, build=build) for b in batches]
            parts = [f.result() for f in futures]
    out: list[list[RunResult]] = [[] for _ in units]
    for group, part in zip(groups, parts, strict=True):
        results = iter(part)
        for u in group:
            out[u] = [next(results) for _ in units[u]]
    return out
