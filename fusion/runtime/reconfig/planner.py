r"""Which variant runs each step of a workload: the offline optimum and an online policy.

A workload is a sequence of steps (one model run each: :mod:`fusion.runtime.reconfig.workload`)
and a library of variants. Step ``t`` costs ``cost[t][v]`` cycles on variant ``v`` (``inf``
where ``v`` cannot run it), and loading variant ``v`` while another is configured costs
``swap[v]`` cycles (the bitstream of the board's FPGA: the same for every variant of a
library on one part, but kept per variant). The first configuration is not a swap: every
schedule, a static one included, pays it once, so it is left out of every total.

This is a *metrical task system* (Borodin, Linial and Saks, "An optimal on-line algorithm for
metrical task system", J. ACM 39(4), 1992) on the variants, with the swap costs as the
distances:

- :func:`offline_plan`: the optimal schedule by dynamic programming over (step, variant), in
  ``O(T·V²)``: what a manager that knew the whole workload in advance would do.
- :class:`WorkFunction`: the *work function algorithm*, an online policy that sees only the
  step about to run (its predicted cost on each variant: the cost model prices a model run
  before it runs) and the steps already run. Its total is at most ``(2V - 1)`` times the
  offline optimum's plus one swap (the optimum may start anywhere; the policy picks its start
  from the first step alone): ``(2V - 1)(OPT + D)``. ``2V - 1`` is the best ratio any
  deterministic online policy can guarantee on ``V`` variants with equal swap costs (same
  paper). On two variants at the break-even swap cost (a swap costs exactly what a phase
  saves), that is the classic factor 3: an adversary alternates the better variant just as
  the policy pays for its swap. ``tests/fusion/runtime/reconfig/test_planner.py`` checks the
  bound on random workloads and the factor on that adversary.

The work function ``w_t(x)`` is the least cost of serving the first ``t`` steps and ending in
state ``x``. Before step ``t`` the policy computes ``w_t`` and moves to the state ``x`` that
minimizes ``w_t(x) + d(s, x)`` (``s`` the current state); among the minimizers it takes one
where ``w_t(x) = w_{t-1}(x) + c_t(x)`` (one always exists: that is what makes it
competitive), preferring to stay.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

INF = math.inf


@dataclass(frozen=True)
class Schedule:
    """The variant of each step and what the schedule costs.

    Attributes
    ----------
    variants : tuple of int
        The variant (an index into the library) each step runs on.
    step_cycles : float
        The steps' own cycles, summed.
    swaps : int
        How many times the variant changes.
    swap_cycles : float
        Their cost, summed.
    """

    variants: tuple[int, ...]
    step_cycles: float
    swaps: int
    swap_cycles: float

    @property
    def total(self) -> float:
        """Steps and swaps, in cycles."""
        return self.step_cycles + self.swap_cycles


def _check(costs: Sequence[Sequence[float]], swap: Sequence[float]) -> int:
    """The number of variants; refuse ragged tables, negative costs, and a step no variant
    can run."""
    n = len(swap)
    if n == 0:
        raise ValueError("a reconfiguration plan needs at least one variant")
    if any(not (s >= 0) or s == INF for s in swap):
        raise ValueError(f"swap costs must be finite and at least 0, not {list(swap)}")
    for t, row in enumerate(costs):
        if len(row) != n:
            raise ValueError(f"step {t} has costs for {len(row)} variants, not {n}")
        if any(not (c >= 0) for c in row):
            raise ValueError(f"step {t} has a negative or NaN cost: {list(row)}")
        if all(c == INF for c in row):
            raise ValueError(f"no variant of the library can run step {t}")
    return n


def schedule_of(costs: Sequence[Sequence[float]], swap: Sequence[float],
                variants: Sequence[int]) -> Schedule:
    """What running step ``t`` on ``variants[t]`` costs."""
    step = sum(costs[t][v] for t, v in enumerate(variants))
    moves = [b for a, b in itertools.pairwise(variants) if a != b]
    return Schedule(tuple(variants), step, len(moves), sum(swap[v] for v in moves))


def static_plan(costs: Sequence[Sequence[float]], swap: Sequence[float], v: int) -> Schedule:
    """Every step on variant ``v`` (``inf`` if it cannot run one of them)."""
    return schedule_of(costs, swap, [v] * len(costs))


def offline_plan(costs: Sequence[Sequence[float]], swap: Sequence[float]) -> Schedule:
    """The cheapest schedule (steps plus swaps), by dynamic programming.

    ``best[v]`` is the least cost of the steps so far ending on ``v``; a step moves it to
    ``min(best[v], min_u best[u] + swap[v]) + cost[t][v]``. Ties keep the earlier variant and
    prefer staying, so equal inputs give equal schedules.

    Raises
    ------
    ValueError
        Ragged or negative costs, or a step no variant can run.
    """
    n = _check(costs, swap)
    if not costs:
        return Schedule((), 0, 0, 0)
    best = [c for c in costs[0]]
    back: list[list[int]] = []  # back[t-1][v]: the variant step t-1 ran on, when t runs on v
    for row in costs[1:]:
        u_min = min(range(n), key=lambda u: best[u])
        came, nxt = [], []
        for v in range(n):
            stay, move = best[v], best[u_min] + swap[v]
            prev = v if stay <= move else u_min
            came.append(prev)
            nxt.append(min(stay, move) + row[v])
        back.append(came)
        best = nxt
    v = min(range(n), key=lambda u: best[u])
    path = [v]
    for came in reversed(back):
        v = came[v]
        path.append(v)
    return schedule_of(costs, swap, path[::-1])


def brute_force_plan(costs: Sequence[Sequence[float]], swap: Sequence[float]) -> Schedule:
    """The cheapest schedule by trying every one (``V ** T``: for tests of
    :func:`offline_plan` on small workloads only)."""
    n = _check(costs, swap)
    if n ** len(costs) > 1_000_000:
        raise ValueError(f"{n} variants and {len(costs)} steps are {n ** len(costs):,} "
                         f"schedules: too many to try; use offline_plan")
    plans = (schedule_of(costs, swap, p) for p in itertools.product(range(n), repeat=len(costs)))
    return min(plans, key=lambda s: s.total)


class WorkFunction:
    """The work function algorithm: the online policy (see the module docstring).

    Parameters
    ----------
    swap : sequence of float
        The cycles of loading each variant.
    """

    def __init__(self, swap: Sequence[float]) -> None:
        _check([], swap)
        self.swap = list(swap)
        self.n = len(swap)
        self.work: list[float] | None = None  # w_{t-1}; None before the first step
        self.state: int | None = None

    def _d(self, a: int, b: int) -> float:
        return 0.0 if a == b else self.swap[b]

    def choose(self, cost: Sequence[float]) -> int:
        """The variant to run the next step on, given its cost on each; updates the work
        function. The policy starts on the first step's cheapest variant (the first
        configuration is not a swap).

        Raises
        ------
        ValueError
            A cost row of the wrong length, negative, or with no variant able to run it.
        """
        _check([cost], self.swap)
        n = self.n
        if self.work is None:  # a free start: w_0 = 0, on the first step's cheapest variant
            self.work = [0.0] * n
            self.state = min(range(n), key=lambda v: (cost[v], v))
        prev, s = self.work, self.state
        # w_t(x) = min_y w_{t-1}(y) + c_t(y) + d(y, x): serve in y, then move to x
        w = [min(prev[y] + cost[y] + self._d(y, x) for y in range(n)) for x in range(n)]
        score = [w[x] + self._d(s, x) for x in range(n)]
        low = min(score)
        # among the minimizers, one whose work function grew by its own cost (one always
        # does); stay when the current state is such a one
        fits = [x for x in range(n) if cost[x] != INF and score[x] <= low + 1e-9 * max(1, low)
                and math.isclose(w[x], prev[x] + cost[x], rel_tol=1e-12, abs_tol=1e-9)]
        if not fits:  # float rounding only: the minimizers that can run it
            fits = [x for x in range(n) if cost[x] != INF and score[x] <= low + 1e-6 * max(1, low)]
        self.state = s if s in fits else fits[0]
        self.work = w
        return self.state


def online_plan(costs: Sequence[Sequence[float]], swap: Sequence[float]) -> Schedule:
    """The schedule :class:`WorkFunction` makes, step by step, seeing no step before it
    runs."""
    _check(costs, swap)
    policy = WorkFunction(swap)
    return schedule_of(costs, swap, [policy.choose(row) for row in costs])


def competitive_ratio(n_variants: int) -> int:
    """The factor :class:`WorkFunction` is within of the offline optimum: ``2V - 1``."""
    return 2 * n_variants - 1
