"""Where a compile's independent tasks run: here, here and on forked local processes, or on
a Dask cluster; and the record of where the compile's time went.

A compile is a graph of stages (import, passes, pricing, placement, placed pricing, builds,
writing the plan) whose wide stages are independent tasks: every chain's pricing
(:mod:`fusion.compiler.parallel_pricing`), every kernel's pricing again at its placement
(:func:`fusion.compiler.placed_choice.ranked`), every kernel's build
(:mod:`fusion.compiler.builds`). (``hwgen calibrate`` plans on its sweep's own executor
instead: :func:`sim.sweep.plan_tasks`.) :func:`run_tasks` runs one stage's tasks as
processes free up, the largest first (a chain of n nodes has n (n + 1) / 2 segments to
price), and hands back their results in the tasks' order, so that what follows never
depends on which process finished first: the plan is the serial compile's, byte for byte
(``tests/fusion/compiler/test_parallel_pricing.py``).

:class:`Workers` says where (``--jobs``, ``--scheduler``); it is frozen and flows through the
compile like the options. Locally, the scheduler profiles a stage as it goes: it runs the
smallest tasks here for :data:`PROBE_SECONDS`, predicts the rest from their sizes, and
forks only when that is worth a fork (:attr:`Workers.fork_above`; a warm compile's placed
pricing and builds take milliseconds). This process then works alongside ``--jobs - 1``
forks, each taking the next task from a pipe they share (:mod:`fusion.compiler.forks`).
Forks inherit what the tasks read (the graph, the settings) instead of receiving a copy of
it; a Dask cluster receives it once (``scatter``, broadcast to its workers), then only task
indices.

:class:`CompileTimes` records each stage's wall seconds and each task's seconds on its worker:
``--explain`` prints it and ``--json`` carries it (never the plan: it would differ run to run).
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fusion.compiler.forks import busy, most_tasks, on_forks

#: Dask clients by scheduler address: connected once per process.
_CLIENTS: dict[str, Any] = {}


@dataclass(frozen=True)
class Workers:
    """Where the independent tasks of a compile run.

    Attributes
    ----------
    jobs : int
        Local processes (1: here, one task after another).
    scheduler : str
        A Dask scheduler's address (``tcp://host:8786``); when given, the tasks run on its
        cluster and ``jobs`` is not used.
    fork_above : float
        Local tasks are forked only when a stage's smallest, run here for
        :data:`PROBE_SECONDS`, predict that those left take longer than this (seconds); 0:
        forked at once. A fork slows both processes while they copy the pages they write
        (MobileNetV1-0.25's pricing: 1.44 to 1.53 s of work on two processes against 1.38
        to 1.48 s on one), so a warm compile's placed pricing and
        builds (a few milliseconds) stay here.
    """

    jobs: int = 1
    scheduler: str = ""
    fork_above: float = 0.1

    @property
    def parallel(self) -> bool:
        return bool(self.scheduler) or self.jobs > 1


#: One process, one task after another (the default).
HERE = Workers()


@dataclass(frozen=True)
class TaskTime:
    """One task's seconds on the worker that ran it."""

    stage: str
    name: str
    seconds: float
    worker: str


@dataclass
class CompileTimes:
    """Wall seconds per stage of a compile (in the order they ran) and seconds per task."""

    stages: dict[str, float] = field(default_factory=dict)
    tasks: list[TaskTime] = field(default_factory=list)
    #: Where each wide stage ran: ``"here"``, ``"on 2 local processes"`` (this one and a
    #: fork), ``"on ADDRESS"``.
    where: dict[str, str] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as stage ``name`` (added to it when it runs twice)."""
        began = time.perf_counter()
        try:
            yield
        finally:
            self.stages[name] = self.stages.get(name, 0.0) + time.perf_counter() - began

    def to_dict(self) -> dict[str, Any]:
        return {"stages": {k: round(v, 4) for k, v in self.stages.items()},
                "where": dict(self.where),
                "tasks": [{"stage": t.stage, "name": t.name, "seconds": round(t.seconds, 4),
                           "worker": t.worker} for t in self.tasks]}

    def lines(self, slowest: int = 5) -> list[str]:
        """What ``--explain`` prints: the stages, each wide stage's workers (their busiest
        one's seconds beside the sum), and the slowest tasks."""
        total = sum(self.stages.values())
        out = [f"compile time: {total:.2f} s"]
        for name, seconds in self.stages.items():
            tasks = [t for t in self.tasks if t.stage == name]
            line = f"  {name:<14} {seconds:7.3f} s"
            if tasks:
                per: dict[str, float] = {}
                for t in tasks:
                    per[t.worker] = per.get(t.worker, 0.0) + t.seconds
                line += (f"  {len(tasks)} tasks {self.where.get(name, '')}: "
                         f"{sum(per.values()):.3f} s of work, {len(per)} worker(s), busiest "
                         f"{max(per.values()):.3f} s")
            out.append(line)
        for t in sorted(self.tasks, key=lambda t: -t.seconds)[:slowest]:
            out.append(f"  slowest: {t.stage} {t.name} {t.seconds:.3f} s on {t.worker}")
        return out


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _timed(fn: Callable[[Any], Any], item: Any) -> tuple[Any, float, str]:
    began = time.perf_counter()
    result = fn(item)
    return result, time.perf_counter() - began, _worker_name()


def _can_fork() -> bool:
    """Whether local tasks may go to forks: not where fork is missing, nor in a process
    connected to a Dask cluster (its client's threads would be forked mid-work; the builds
    of a ``--scheduler`` compile stay here), nor in a task of a stage already on forks
    (:func:`fusion.compiler.forks.busy`)."""
    return not _CLIENTS and hasattr(os, "fork") and not busy()


#: Seconds of a stage's smallest tasks run here first, to predict the rest by their sizes
#: (:attr:`Workers.fork_above`).
PROBE_SECONDS = 0.02


def _here_then_forks(fn: Callable[[Any], Any], items: Sequence[Any], order: Sequence[int],
                     sizes: Sequence[float], workers: Workers, forked: list[int]
                     ) -> Iterator[tuple[int, tuple[Any, float, str]]]:
    """Each task's ``(index, (result, seconds, worker))``: the smallest run here for
    :data:`PROBE_SECONDS`, which predicts the rest by their sizes; the rest here too when
    predicted under ``workers.fork_above``, else on this process and forks
    (:func:`fusion.compiler.forks.on_forks`), whose number goes to ``forked``."""
    began, probed, left = time.perf_counter(), 0.0, len(order)
    while left and workers.fork_above and time.perf_counter() - began < PROBE_SECONDS:
        left -= 1
        probed += sizes[order[left]]
        yield order[left], _timed(fn, items[order[left]])
    rest = order[:left]
    spent = time.perf_counter() - began
    predicted = spent * sum(sizes[i] for i in rest) / probed if probed > 0 else math.inf
    # a stage of more tasks than a pipe holds (hundreds of thousands) stays here too
    if len(rest) < 2 or predicted < workers.fork_above or len(rest) > most_tasks():
        for i in rest:
            yield i, _timed(fn, items[i])
        return
    forked.append(min(workers.jobs, len(rest)))
    yield from on_forks(lambda i: _timed(fn, items[i]), rest, forked[0])


def _on_dask(payload: tuple[Callable[[Any], Any], Sequence[Any]], index: int
             ) -> tuple[Any, float, str]:
    fn, items = payload
    return _timed(fn, items[index])


def client(address: str) -> Any:
    """The Dask client of the scheduler at ``address``, connected once per process.

    Raises
    ------
    ValueError
        If Dask is missing or the scheduler cannot be reached.
    """
    if address in _CLIENTS:
        return _CLIENTS[address]
    try:
        from distributed import Client
    except ImportError as exc:
        raise ValueError(f"--scheduler needs dask[distributed] ({exc}); run 'make setup'") \
            from None
    try:
        found = Client(address, timeout="10s")
    except OSError as exc:
        raise ValueError(f"cannot reach the Dask scheduler at {address} ({exc}); start one "
                         f"(dask scheduler) or leave out --scheduler") from None
    _CLIENTS[address] = found
    return found


def close_clients() -> None:
    """Close every Dask client this process connected (a command's end)."""
    while _CLIENTS:
        _, found = _CLIENTS.popitem()
        found.close()


def run_tasks(fn: Callable[[Any], Any], items: Sequence[Any], *, workers: Workers,
              sizes: Sequence[float], stage: str, names: Sequence[str],
              times: CompileTimes | None = None, local: bool = True,
              progress: bool = False) -> list[Any]:
    """``fn(item)`` of every item, in the items' order, run where ``workers`` says, the
    largest (by ``sizes``, in any unit that is proportional to their work) first; locally,
    the smallest first predict whether the rest are worth forking for (see the module
    docstring). ``fn`` must not depend on what other tasks did: each may run in another
    process. ``local`` False keeps the tasks here (what holds open files or connections
    cannot be forked or sent). Each task's seconds go to ``times`` under
    ``stage`` with its name from ``names``; ``progress``: a line counting them
    (:mod:`fusion.progress`). A task's exception propagates."""
    from fusion.progress import steps

    def counted(it: Any) -> Any:
        return steps(it, stage, show=progress, unit="task", total=n)

    n = len(items)
    order = sorted(range(n), key=lambda i: -sizes[i])
    timed: list[Any] = [None] * n
    where = "here"
    if not local or n == 0 or not workers.parallel or (
            not workers.scheduler and (n == 1 or not _can_fork())):
        for i in counted(range(n)):
            timed[i] = _timed(fn, items[i])
    elif workers.scheduler:
        dask = client(workers.scheduler)
        [payload] = dask.scatter([(fn, list(items))], broadcast=True)
        futures = [dask.submit(_on_dask, payload, i, pure=False) for i in order]
        index = {f.key: i for f, i in zip(futures, order, strict=True)}
        from distributed import as_completed as dask_completed

        for future in counted(dask_completed(futures)):
            timed[index[future.key]] = future.result()
        where = f"on {workers.scheduler}"
    else:
        forked: list[int] = []
        for i, result in counted(_here_then_forks(fn, items, order, sizes, workers, forked)):
            timed[i] = result
        if forked:
            where = f"on {forked[0]} local processes"
    out = []
    for i, (result, seconds, worker) in enumerate(timed):
        out.append(result)
        if times is not None:
            times.tasks.append(TaskTime(stage, names[i], seconds, worker))
    if times is not None:
        times.where[stage] = where
    return out
