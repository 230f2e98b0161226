"""The drift monitor: a rolling error per variant and platform that calls for a refit when
the hardware's behaviour changes, and recovers after one."""

import pytest

from fusion.runtime.drift import DriftMonitor


def _run(monitor, n, predicted, measured, key=("v", "p")):
    return [monitor.observe(*key, predicted, measured) for _ in range(n)]


def test_a_steady_model_is_never_refitted():
    m = DriftMonitor(threshold=0.05, window=5)
    assert not any(_run(m, 50, 103.0, 100.0))  # 3% off, under the threshold
    assert m.rolling_error("v", "p") == pytest.approx(0.03)


def test_drift_calls_for_a_refit_once_the_window_is_full_and_recovers_after():
    m = DriftMonitor(threshold=0.05, window=4)
    assert not any(_run(m, 10, 100.0, 100.0))
    # the board heats up: every kernel now takes 10% longer than predicted (9.09% of the
    # measured cycles): the window's mean crosses 5% on the third such run (3 x 9.09% / 4)
    due = _run(m, 3, 100.0, 110.0)
    assert due == [False, False, True]
    assert m.since("v", "p") == 10  # the first run the model got wrong
    m.refitted("v", "p")
    assert m.refits == [13] and m.rolling_error("v", "p") == 0.0
    assert not any(_run(m, 10, 110.0, 110.0))  # the refitted model is right again
    rows = m.timeline()
    assert [r["run"] for r in rows if r["refit"]] == [13]
    assert rows[12]["rolling"] == pytest.approx(3 * (10 / 110) / 4, abs=1e-4)
    assert rows[13]["rolling"] == 0.0 and rows[-1]["rolling"] == 0.0


def test_one_odd_kernel_does_not_trigger_a_refit():
    m = DriftMonitor(threshold=0.05, window=10)
    _run(m, 9, 100.0, 100.0)
    assert not m.observe("v", "p", 100.0, 140.0)  # 40% off once: mean 4%
    assert not any(_run(m, 5, 100.0, 100.0))


def test_variants_and_platforms_are_watched_apart():
    m = DriftMonitor(threshold=0.05, window=3)
    assert _run(m, 3, 100.0, 120.0, ("v", "hot")) == [False, False, True]
    assert not any(_run(m, 3, 100.0, 100.0, ("v", "normal")))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"threshold": 0}, "between 0 and 1"), ({"threshold": 1.5}, "between 0 and 1"),
    ({"window": 0}, "1 or more"), ({"window": True}, "1 or more"),
])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DriftMonitor(**kwargs)


def test_a_run_without_cycles_is_refused():
    with pytest.raises(ValueError, match="positive"):
        DriftMonitor().observe("v", "p", 10.0, 0)
