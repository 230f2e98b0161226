"""Time from cycles: the clock a variant runs at is the lower of its routed Fmax and the
platform's clock (:mod:`fusion.runtime.clock`)."""

from fractions import Fraction

import pytest

from fusion.runtime.clock import Clock


def test_without_a_routed_fmax_the_platforms_clock_is_used_and_said():
    clock = Clock.of({"key": "x"}, 100_000_000)
    f = clock.figures(12_345, batch=2)
    assert (f["clock_mhz"], f["clock"], f["fmax_mhz"]) == (100.0, "platform (no routed Fmax)",
                                                           None)
    assert f["latency_us"] == float(Fraction(12_345, 100))
    assert f["inferences_per_second"] == round(float(Fraction(2 * 10**8, 12_345)), 1)
    assert "no routed Fmax" in clock.summary(12_345, 2)


def test_a_routed_fmax_below_the_platform_clock_sets_the_time():
    clock = Clock.of({"synthesis": {"fmax_mhz": 39.24}}, 100_000_000)
    f = clock.figures(39_240)
    assert (f["clock_mhz"], f["clock"], f["latency_us"]) == (39.24, "fmax", 1000.0)
    assert "below the platform's 100 MHz clock" in clock.summary(39_240)


def test_a_routed_fmax_above_the_platform_clock_does_not_speed_it_up():
    f = Clock.of({"synthesis": {"fmax_mhz": 120.5}}, 100_000_000).figures(1_000)
    assert (f["clock_mhz"], f["clock"], f["fmax_mhz"], f["latency_us"]) == (
        100.0, "platform", 120.5, 10.0)


@pytest.mark.parametrize("fmax", [0, -3.0, "fast", True, float("nan"), float("inf")])
def test_a_descriptor_with_a_nonsense_fmax_is_refused(fmax):
    with pytest.raises(ValueError, match=r"records an Fmax of .* not a positive number; "
                                         r"rebuild it with 'hwgen variants build'"):
        Clock.of({"synthesis": {"fmax_mhz": fmax}}, 100_000_000)
