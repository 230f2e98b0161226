"""The five plots of ``hwgen report``: what each draws from a run, and the note that replaces
it when the run's JSON lacks its data (never an error, never silently dropped)."""

import pytest

from fusion.runtime.report import figures
from fusion.runtime.report.data import parse_run
from tests.helpers.run_json import single_run, workload_run


def _plots(raw):
    run = parse_run(raw, "run.json")
    colours = figures.variant_colours(run)
    return run, {"fusion": figures.fusion_plot(run),
                 "prediction": figures.prediction_plot(run, colours),
                 "roofline": figures.roofline_plot(run, colours),
                 "timeline": figures.timeline_plot(run, colours),
                 "resources": figures.resources_plot(run, colours)}


def test_a_workload_run_draws_all_five():
    run, plots = _plots(workload_run())
    assert all(p.figure is not None and not p.missing for p in plots.values())
    fusion = plots["fusion"].figure
    # stacked bars, a trace per kernel position and plan, plus the totals above them
    bars = [t for t in fusion.data if t.type == "bar"]
    assert {t.name for t in bars} == {"fused", "unfused"}
    assert sum(len(t.y) for t in bars if t.name == "fused") == 3 + 2
    assert sum(len(t.y) for t in bars if t.name == "unfused") == 6 + 4
    assert "ds_cnn: 25% fewer cycles fused" in plots["fusion"].caption
    prediction = plots["prediction"].figure
    assert prediction.layout.xaxis.type == prediction.layout.yaxis.type == "log"
    assert prediction.data[-1].name == "predicted = measured"
    # ds_cnn ran three times alike on v4x4: its kernels are drawn once
    assert [len(t.x) for t in prediction.data[:-1]] == [3, 2]
    assert "drawn once" in plots["prediction"].caption


def test_the_roofline_is_min_of_the_array_and_the_port():
    run, plots = _plots(workload_run())
    fig = plots["roofline"].figure
    lines = {t.name: t for t in fig.data if t.mode == "lines"}
    v4 = lines["v4x4 roofline (4x4, 4 B/cycle)"]
    for x, y in zip(v4.x, v4.y, strict=True):
        assert y == pytest.approx(min(16, 4 * x))
    assert 16 / 4 in v4.x  # the ridge is a vertex of the line
    points = {t.name: t for t in fig.data if t.mode == "markers"}
    k0 = run.kernels[0]
    assert points["v4x4"].x[0] == pytest.approx(k0.macs / k0.bytes_read)
    assert points["v4x4"].y[0] == pytest.approx(k0.macs / k0.cycles)
    # no kernel above its variant's roofline (the fixture's cycles respect both limits)
    for name, v in run.variants.items():
        for x, y in zip(points[name].x, points[name].y, strict=True):
            assert y <= min(v.peak_macs_per_cycle, v.port_bytes * x) + 1e-9


def test_the_timeline_marks_each_swap_with_its_cost():
    run, plots = _plots(workload_run())
    fig = plots["timeline"].figure
    assert fig.layout.barmode == "overlay"
    swaps = next(t for t in fig.data if t.name == "swap (reconfiguration)")
    assert list(swaps.y) == ["v8x8", "v4x4"]
    assert list(swaps.x) == [60_000, 30_000]
    assert list(swaps.text) == ["swap 60,000", "swap 30,000"]
    # a swap ends where the run it served starts
    starts = [r.start_cycle for r in run.timeline if r.swap_cycles]
    assert [b + x for b, x in zip(swaps.base, swaps.x, strict=True)] == starts
    assert plots["timeline"].caption == "4 model runs; 2 swaps costing 90,000 cycles"


def test_a_single_model_run_draws_its_kernels_and_notes_the_rest():
    _, plots = _plots(single_run())
    assert plots["prediction"].figure is not None
    assert plots["roofline"].figure is not None
    assert "no roofline lines" in plots["roofline"].caption
    for name in ("fusion", "timeline", "resources"):
        assert plots[name].figure is None
        assert "hwgen run --variants DIR --workload FILE --json" in plots[name].missing


def test_missing_synthesis_is_a_note_or_a_caption():
    raw = workload_run()
    raw["variants"]["v8x8"]["resources"] = None
    _, plots = _plots(raw)
    assert [t.name for t in plots["resources"].figure.data] == ["v4x4"]
    assert plots["resources"].caption == "no synthesis figures for v8x8 (synthesis skipped)"
    raw["variants"]["v4x4"]["resources"] = None
    _, plots = _plots(raw)
    assert plots["resources"].figure is None
    assert "built without synthesis" in plots["resources"].missing


def test_kernels_that_cannot_be_placed_are_left_out_with_a_word():
    raw = workload_run()
    for run in raw["timeline"]:
        for k in run["kernels"]:
            k["bytes_read"] = None
    _, plots = _plots(raw)
    assert plots["roofline"].figure is None
    assert "do not say how many bytes they read" in plots["roofline"].missing
    raw = single_run()
    raw["kernels"][0].update(cycles=0, predicted_cycles=0)
    _, plots = _plots(raw)
    assert "1 kernel at 0 cycles left out (log axes)" in plots["prediction"].caption
    assert "1 kernel without MACs, bytes read or cycles left out" in plots["roofline"].caption


def test_an_empty_workload_is_notes_not_errors():
    raw = workload_run()
    raw.update(timeline=[], fusion={})
    _, plots = _plots(raw)
    assert plots["timeline"].figure is None and "timeline is empty" in plots["timeline"].missing
    assert plots["fusion"].figure is None and "\"fusion\" is empty" in plots["fusion"].missing
    assert plots["prediction"].figure is None and "no kernel runs" in plots["prediction"].missing
    assert plots["roofline"].figure is None
    assert plots["resources"].figure is not None  # the library is still there
