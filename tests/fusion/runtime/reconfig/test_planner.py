"""The reconfiguration planners: the DP against brute force, the online policy's competitive
ratio on random workloads and on the adversary at the break-even swap cost."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.runtime.reconfig.planner import (
    INF,
    WorkFunction,
    brute_force_plan,
    competitive_ratio,
    offline_plan,
    online_plan,
    schedule_of,
    static_plan,
)

COST = st.sampled_from([0.0, 1.0, 2.0, 3.0, 10.0, 30.0, 100.0, INF])


@st.composite
def workloads(draw):
    """A few steps on two to four variants, some unable to run a step, one swap cost."""
    n = draw(st.integers(2, 4))
    steps = draw(st.integers(1, 6))
    costs = []
    for _ in range(steps):
        row = draw(st.lists(COST, min_size=n, max_size=n))
        if all(c == INF for c in row):
            row[draw(st.integers(0, n - 1))] = draw(st.sampled_from([0.0, 5.0]))
        costs.append(row)
    swap = draw(st.sampled_from([0.0, 1.0, 5.0, 20.0, 200.0]))
    return costs, [swap] * n


@settings(max_examples=300, deadline=None)
@given(workloads())
def test_dp_is_the_brute_force_optimum(case):
    costs, swap = case
    assert offline_plan(costs, swap).total == pytest.approx(brute_force_plan(costs, swap).total)


@settings(max_examples=300, deadline=None)
@given(workloads())
def test_online_within_the_competitive_ratio(case):
    costs, swap = case
    online, best = online_plan(costs, swap), offline_plan(costs, swap)
    assert online.total != INF  # never on a variant that cannot run the step
    assert online.total <= competitive_ratio(len(swap)) * (best.total + max(swap)) + 1e-9
    assert online.total >= best.total - 1e-9


def test_offline_never_worse_than_any_static_variant():
    rnd = random.Random(3)
    for _ in range(200):
        costs = [[rnd.choice([1.0, 5.0, 50.0]) for _ in range(3)] for _ in range(8)]
        swap = [rnd.choice([0.0, 10.0, 100.0])] * 3
        best = offline_plan(costs, swap).total
        assert all(best <= static_plan(costs, swap, v).total for v in range(3))


def test_break_even_adversary_reaches_but_never_passes_three():
    """Two variants, swap cost D: each step costs eps on the variant the policy is on and 0
    on the other. Every swap the policy makes pays D just as the work it avoided reaches D,
    which is the break-even point; the offline optimum pays about a third. The ratio tends to
    2V - 1 = 3, and never exceeds it beyond the additive constant D."""
    swap = [100.0, 100.0]
    for eps in (10.0, 1.0):
        policy, costs = WorkFunction(swap), []
        for _ in range(int(20_000 / eps)):
            row = [0.0, 0.0]
            row[policy.state if policy.state is not None else 0] = eps
            costs.append(row)
            policy.choose(row)
        online, best = online_plan(costs, swap), offline_plan(costs, swap)
        assert online.swaps > 50
        assert online.total <= 3 * best.total + swap[0]
        assert online.total / best.total > 2.9  # the bound is tight: no slack to hide in


def test_break_even_phases():
    """Phases of k steps alternate which variant is cheaper by c a step; a swap costs k*c,
    exactly what a phase saves (break-even): the optimum is indifferent, a static variant is
    optimal, and the online policy stays within 3x."""
    k, c = 10, 7.0
    swap = [k * c, k * c]
    costs = []
    for phase in range(12):
        good = phase % 2
        costs += [[0.0 if v == good else c for v in range(2)] for _ in range(k)]
    best = offline_plan(costs, swap).total
    assert best == pytest.approx(min(static_plan(costs, swap, v).total for v in range(2)))
    assert online_plan(costs, swap).total <= 3 * best + swap[0]
    # below break-even the optimum swaps every phase and beats both static variants
    cheap = [k * c / 4] * 2
    below = offline_plan(costs, cheap)
    assert below.swaps == 11
    assert below.total < min(static_plan(costs, cheap, v).total for v in range(2))
    # the online policy swaps once a phase's lost work reaches two swaps (the price of its
    # guarantee), so each phase costs it about three swaps: it beats the best static
    # variant, which loses half of a phase's saving on average, once 3D < kc/2
    for d in (k * c / 4, k * c / 10):
        online = online_plan(costs, [d, d]).total
        static = min(static_plan(costs, [d, d], v).total for v in range(2))
        assert (online < static) == (3 * d < k * c / 2)


def test_online_follows_long_phases_and_ignores_short_blips():
    swap = [50.0, 50.0]
    costs = [[1.0, 100.0]] * 5 + [[100.0, 1.0]] * 20 + [[1.0, 100.0]] * 5
    s = online_plan(costs, swap)
    assert s.variants[0] == 0 and s.variants[10] == 1 and s.variants[-1] == 0
    blip = [[1.0, 2.0]] * 5 + [[2.0, 1.0]] + [[1.0, 2.0]] * 5
    assert online_plan(blip, swap).swaps == 0


def test_static_plan_of_a_variant_that_cannot_run_a_step_is_infinite():
    costs = [[1.0, INF], [1.0, 1.0]]
    assert math.isinf(static_plan(costs, [5.0, 5.0], 1).total)
    assert online_plan(costs, [5.0, 5.0]).variants == (0, 0)


def test_schedule_counts_swaps_and_their_cost():
    s = schedule_of([[1, 2], [3, 4], [5, 6]], [10, 20], [0, 1, 0])
    assert (s.step_cycles, s.swaps, s.swap_cycles, s.total) == (1 + 4 + 5, 2, 30, 40)


@pytest.mark.parametrize("costs, swap, message", [
    ([[1.0]], [], "at least one variant"),
    ([[1.0, 2.0]], [1.0], "costs for 2 variants, not 1"),
    ([[-1.0, 2.0]], [1.0, 1.0], "negative"),
    ([[INF, INF]], [1.0, 1.0], "no variant of the library can run step 0"),
    ([[1.0, 1.0]], [1.0, -2.0], "swap costs must be finite"),
])
def test_bad_tables_refused(costs, swap, message):
    with pytest.raises(ValueError, match=message):
        offline_plan(costs, swap)


def test_brute_force_refuses_a_huge_search():
    with pytest.raises(ValueError, match="too many to try"):
        brute_force_plan([[1.0] * 4] * 12, [1.0] * 4)
