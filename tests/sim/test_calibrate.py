"""A small calibration on Verilator, and the analytical model judged against it.

Bound: over the default sweep (120 kernels on the three test variants: shapes from 1x128x64
to 200x24x8, every stage set fused and unfused, five tilings) the analytical model measured
MAPE 0.26% and a worst kernel of 1.8%; its residual error is the instruction counts it
approximates. A MAPE of 2% (seven times that, above the worst single kernel) and any kernel
within 5% leave room for template tweaks but catch a missed latency or a broken overlap
rule, each of which costs 10% or more on the kernels it affects.
"""

import pytest

from fusion.cost import AnalyticalModel, evaluate, read_rows
from hwgen.platform import PlatformConfig
from sim.calibrate import calibrate, compare

pytestmark = pytest.mark.slow


def test_calibration_rows_and_the_analytical_model(v4x4, tmp_path):
    out = tmp_path / "cal.jsonl"
    result = calibrate([v4x4], out, samples=12, seed=1)
    rows = read_rows(out)
    assert rows == result.rows and len(rows) == 12
    assert all(r.ok for r in rows), [r.features for r in rows if not r.ok]
    for r in rows:  # the features describe the program that ran
        assert r.counters["bytes_read"] == r.features.bytes_loaded
        assert r.counters["bytes_written"] == r.features.bytes_stored
        assert r.counters["array_busy"] == r.features.k_slices
        # one workload per shape, so that held-out splits keep a shape's runs together
        assert r.workload == f"gemm{r.features.M}x{r.features.K}x{r.features.N}"
        assert r.platform == PlatformConfig()
    ev = evaluate(AnalyticalModel(), rows)
    assert ev == result.evaluation == result.per_variant[v4x4.key()]
    worst_row, worst_prediction = compare(rows)[0]
    assert ev.mape < 2.0, ev.summary()
    assert ev.worst < 5.0, (ev.summary(), worst_row.features, worst_prediction)
    assert ev.spearman > 0.99, ev.summary()
    # fused and unfused variants of one problem appear, and fusion shows in the counters
    assert {r.features.fused for r in rows if r.features.stages} == {True, False}
