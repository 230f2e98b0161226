"""Edge cases of the stages: gemm_check's random problems reach every one the chain can
reach, where plain random operands miss some (no simulator needed)."""

import math

import numpy as np
import pytest

from fusion.runtime.edge_cases import EVENTS, coverage, solve_row, tie_values
from hwgen.reference import EpilogueParams, gemm
from sim.gemm_check import random_problem

ALL = ("bias", "requant", "relu", "clamp", "residual")


def plain_random(M, K, N, stages, seed):  # noqa: N803
    """gemm_check's random problem before edge cases were planted: uniform operands and a
    full-precision multiplier mapping three standard deviations onto int8."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    spread = math.sqrt(K) * 5500.0 + 1.0
    bias = rng.integers(-int(spread), int(spread) + 1, N).astype(np.int32)
    residual = rng.integers(-128, 128, (M, N), dtype=np.int8)
    lo = int(rng.integers(-120, -20))
    params = EpilogueParams.from_scale(127.0 / (3.0 * spread), zp=int(rng.integers(-10, 11)),
                                       clamp_lo=lo, clamp_hi=int(rng.integers(lo + 1, 121)))
    return a, b, bias, residual, params


def missed(a, b, stages, params, bias, residual):
    cov = coverage(gemm(a, b), stages, params, bias=bias, residual=residual)
    return {k for k, v in cov.items() if not v}


#: Per stage: a chain and a shape where plain random operands miss one of its edge cases.
#: Bias sums of both signs are common; the others are single values or narrow ranges.
MISSED_BY_RANDOM = [
    (("requant",), (32, 64, 32), "requant: tie, x < 0"),  # a 31-bit multiplier has no ties
    (("requant", "relu"), (4, 32, 8), "relu: x = -1"),
    (("requant", "clamp"), (8, 8, 8), "clamp: x = hi"),
    (("requant", "residual"), (4, 16, 4), "residual: x + r = 127"),
]


@pytest.mark.parametrize("stages, shape, event", MISSED_BY_RANDOM)
def test_plain_random_operands_miss_an_edge_case_that_planted_ones_reach(stages, shape, event):
    for seed in range(3):
        a, b, bias, residual, params = plain_random(*shape, stages, seed)
        assert event in missed(a, b, stages, params, bias, residual)  # the old generator
        p = random_problem(*shape, stages, seed)
        assert event not in missed(p.a, p.b, stages, p.params, p.bias, p.residual)


#: Edge cases no input can reach in a chain: after a ReLU the clamp and the residual stage never
#: see a negative x, so the clamp's (negative) lower bound and a sum below -128 are out of reach.
UNREACHABLE_AFTER_RELU = {"residual: x + r < -128", "clamp: x < lo", "clamp: x = lo"}


@pytest.mark.parametrize("stages", [ALL, ("bias", "requant", "relu"), ("requant", "clamp"),
                                    ("bias", "requant", "clamp", "residual"), ("bias", "relu"),
                                    ("requant", "residual")])
@pytest.mark.parametrize("shape", [(19, 40, 23), (32, 96, 40), (16, 8, 16), (64, 256, 64)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_problems_reach_every_reachable_edge_case(stages, shape, seed):
    p = random_problem(*shape, stages, seed)
    cov = coverage(gemm(p.a, p.b), stages, p.params, bias=p.bias, residual=p.residual)
    assert set(cov) == {f"{s}: {e}" for s in stages for e in EVENTS[s]}
    unreachable = UNREACHABLE_AFTER_RELU if "relu" in stages else set()
    assert {k for k, v in cov.items() if not v} == unreachable & set(cov)


def test_residual_max_events_are_counted():
    x = np.array([[5, -3, 7]])
    cov = coverage(x, ("residual",), EpilogueParams(residual_op="max"),
                   residual=np.array([[1, 4, 7]], np.int8))
    assert cov == {"residual max: x > r": 1, "residual max: x < r": 1, "residual max: x = r": 1}


@pytest.mark.parametrize("mult, shift", [(97 << 24, 37), (3, 5), (-(65 << 24), 30),
                                         (1 << 30, 31), (12, 4)])
def test_tie_values_are_exact_halves(mult, shift):
    pos, neg = tie_values(mult, shift)
    assert pos > 0 > neg
    for v in (pos, neg):
        assert (v * mult) % (1 << shift) == 1 << (shift - 1)
    # and the smallest: no tie strictly between them
    between = np.arange(neg + 1, pos)
    assert not np.any((between * mult) % (1 << shift) == 1 << (shift - 1))


def test_no_ties_without_a_shift_or_with_an_even_multiplier_too_big():
    assert tie_values(5, 0) is None
    assert tie_values(1 << 10, 4) is None  # x * 2**10 is a multiple of 2**4: never a half


def test_solve_row_hits_the_interval_when_b_allows():
    rng = np.random.default_rng(3)
    b = rng.integers(-128, 128, 40).astype(np.int8)
    b[7] = 1
    for target in (-200_000, -1, 0, 12_345, 200_000):
        a = rng.integers(-128, 128, 40).astype(np.int8)
        assert solve_row(a, b, target, target)
        assert int(a.astype(np.int64) @ b.astype(np.int64)) == target
    a = np.zeros(4, np.int8)
    assert not solve_row(a, np.array([2, 4, 6, 8]), 3, 3)  # even weights, odd target


def _relu_lets_minus_one(x, p, ops):
    return np.where(x < -1, 0, x)


def _ties_down(x, p, ops):
    prod = x * p.mult
    return np.clip(((prod + (1 << (p.shift - 1)) - 1) >> p.shift) + p.zp, -128, 127)


def _clamp_hi_plus_one(x, p, ops):
    low = np.maximum(x, p.clamp_lo)
    return np.where(low > p.clamp_hi + 1, p.clamp_hi, low)


#: numpy models of three of ``make mutate``'s faults, each wrong only at one edge case.
NUMPY_MUTANTS = {"relu": _relu_lets_minus_one, "requant": _ties_down,
                 "clamp": _clamp_hi_plus_one}


def _output(a, b, stages, params, bias, residual, mutant=None):
    from hwgen.reference import apply_stage

    x = gemm(a, b).astype(np.int64)
    for stage in stages:
        if stage == mutant:
            x = NUMPY_MUTANTS[stage](x, params, None)
        else:
            x = apply_stage(x, stage, params, bias=bias, residual=residual)
    return x


@pytest.mark.parametrize("mutant", sorted(NUMPY_MUTANTS))
@pytest.mark.parametrize("shape", [(19, 40, 23), (32, 96, 40)])
def test_the_planted_cases_show_at_the_output_of_the_whole_chain(mutant, shape):
    """Planted is not enough: the case must reach the output through the stages after it (a
    clamp above a ReLU would hide its -1). Default `hwgen gemm` runs the variant's whole
    chain; a fault wrong only at one edge case changes its output, for every seed."""
    for seed in range(4):
        p = random_problem(*shape, ALL, seed)
        args = (p.a, p.b, ALL, p.params, p.bias, p.residual)
        assert not np.array_equal(_output(*args), _output(*args, mutant=mutant)), seed


def test_plain_random_operands_never_show_the_rounding_fault():
    """What the planted ties fix: with a full-precision multiplier no accumulator is an exact
    half, so the old problems could not tell half-up from half-down rounding."""
    for seed in range(4):
        a, b, bias, residual, params = plain_random(32, 96, 40, ALL, seed)
        args = (a, b, ALL, params, bias, residual)
        assert np.array_equal(_output(*args), _output(*args, mutant="requant"))
