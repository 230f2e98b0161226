"""Re-planning by the live samples of each run's input (:mod:`fusion.runtime.replan`): the
profile, the plan's size, the gathering and scattering of samples, and when the plan
changes (the hysteresis), without the simulator."""

import numpy as np
import pytest

from fusion.runtime.replan import (
    InputProfile,
    capacity,
    gather,
    input_profile,
    plan_batch,
    replan_reason,
    scatter,
)


def test_a_sample_is_padding_when_every_value_of_every_input_is_zero():
    x = np.random.default_rng(0).normal(0, 1, (6, 4, 3)).astype(np.float32)
    y = np.ones((6, 2), np.float32)
    x[[1, 4]] = 0
    y[[1, 2]] = 0
    assert input_profile({"x": x, "y": y}, 6).live == (0, 2, 3, 4, 5)  # 1 is zero in both
    x[4] = -0.0  # a negative zero is zero
    assert input_profile({"x": x}, 6).live == (0, 2, 3, 5)
    with pytest.raises(ValueError, match="lead with the batch"):
        input_profile({"x": x}, 5)


@pytest.mark.parametrize("live, batch, granule, want", [
    (32, 32, 8, 32),  # nothing padded: the full plan
    (8, 32, 8, 8),  # the live samples, in whole row blocks
    (9, 32, 8, 16),
    (5, 32, 1, 5),
    (31, 32, 8, 32),
    (0, 32, 8, 0),  # all padding: no run, the padding's output alone
])
def test_the_plan_holds_the_live_samples_in_whole_granules(live, batch, granule, want):
    profile = InputProfile(batch, tuple(range(live)))
    b = plan_batch(profile, granule)
    assert b == want and capacity(b, batch) >= live


def test_gathered_samples_scatter_back_to_the_full_batch():
    """A row-wise 'model' run on the gathered samples gives, scattered back, what it gives on
    the full batch: each live sample its own row, each padded one a padded sample's of the
    run, or the padding's output when the run holds none."""
    rng = np.random.default_rng(3)
    x = rng.integers(1, 5, (10, 4)).astype(np.float32)
    x[[0, 3, 4, 8]] = 0
    profile = input_profile({"x": x}, 10)
    pad = {"y": np.zeros((1, 4), np.float32) * 2 + 1}  # the model on one zero sample
    for b in (plan_batch(profile, 1), plan_batch(profile, 4), plan_batch(profile, 8), 10):
        values, rows = gather({"x": x}, profile, b)
        assert values["x"].shape == (b, 4) and ((rows < 0).any() == (b == 6))
        model = {"y": values["x"] * 2 + 1}  # row-wise, and not zero on a zero row
        np.testing.assert_array_equal(scatter(model, rows, pad)["y"], x * 2 + 1)
    _, rows = gather({"x": x}, profile, 6)
    with pytest.raises(ValueError, match="give the padding's output"):
        scatter({"y": x[:6]}, rows)
    none = input_profile({"x": np.zeros((10, 4))}, 10)
    _, rows = gather({"x": np.zeros((10, 4))}, none, plan_batch(none, 4))
    np.testing.assert_array_equal(scatter(pad, rows, pad)["y"], np.ones((10, 4)))


def test_replans_only_past_the_capacity_or_the_threshold():
    """More live samples than the plan holds always re-plan; fewer only when the smaller
    plan is predicted at least the threshold cheaper."""
    cost = {32: 1000.0, 16: 560.0, 24: 950.0}.__getitem__

    def reason(b, live, want):
        return replan_reason(b, want, InputProfile(32, tuple(range(live))), cost, 0.1)

    assert reason(32, 8, 16) == "saving"  # 44% cheaper
    assert reason(32, 20, 24) == ""  # 5% cheaper: within the hysteresis band
    assert reason(16, 16, 16) == ""  # within the plan's capacity
    assert reason(16, 17, 24) == "live samples"
    assert reason(16, 8, 16) == ""
