"""The runtime's feedback loop on a compiled model, with run reports whose cycles the test
chooses (the loop's logic; ``bench/drift.py`` runs it on Verilator with a board turning hot):
runs are recorded, profiles price the next compile, profiles that went stale are dropped at
the drift, and the model's own error is watched apart."""

from pathlib import Path

from fusion.compiler.plan import compile_model
from fusion.cost import AnalyticalModel
from fusion.cost.profiles import ProfileDB
from fusion.frontend import import_onnx
from fusion.kernels.cache import KernelCache
from fusion.runtime.drift import DriftMonitor
from fusion.runtime.online import OnlineLoop
from fusion.runtime.run import KernelRun, RunReport
from hwgen.platform import PlatformConfig
from hwgen.presets import DRAM_TEST

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
DDR3 = PlatformConfig(memory="ddr3")
COUNTERS = {"array_busy": 0, "bytes_read": 0, "bytes_written": 0}


def _report(compiled, slower: float, bias: float = 1.0) -> RunReport:
    """The run as the hardware would report it if each kernel took ``slower`` x its true
    cycles, the true cycles being the analytical model's prediction x ``bias``."""
    truth = {k.name: AnalyticalModel(DDR3).predict(k.spec.kind.features(DRAM_TEST,
                                                                        k.spec.params)) * bias
             for k in compiled.kernels}
    runs = []
    for k in compiled.kernels:
        cycles = round(truth[k.name] * slower)
        runs.append(KernelRun(k.name, list(k.spec.nodes), cycles, k.predicted_cycles,
                              {**COUNTERS, "cycles": cycles}, ""))
    return RunReport({}, runs, 0, 0.0)


def _step(loop, graph, slower, bias=1.0):
    compiled = compile_model(graph, DRAM_TEST, cache=KernelCache(disk=False), platform=DDR3,
                             model=loop.model())
    return compiled, loop.record(compiled, _report(compiled, slower, bias))


def test_profiles_price_the_next_compile_and_stale_ones_are_dropped(tmp_path):
    graph = import_onnx(EXAMPLES / "qdq_mlp_residual.onnx")
    with ProfileDB(tmp_path / "p.db") as db:
        loop = OnlineLoop(db, DDR3, AnalyticalModel(DDR3), DriftMonitor(threshold=0.01,
                                                                         window=2))
        first, refit = _step(loop, graph, 1.0)
        n = len(first.kernels)
        assert len(db) == n and all(k.priced_by == "analytical" for k in first.kernels)
        assert not refit and not db.summary()["model_errors"]  # the model was right
        second, refit = _step(loop, graph, 1.0)
        assert not refit and len(db) == 2 * n  # a kernel run again is a new run
        assert all(k.priced_by == "measured" for k in second.kernels), \
            [k.priced_by for k in second.kernels]
        assert loop.since == 0
        # the board turns hot: every kernel 3% slower; the profiles are now stale
        third, refit = _step(loop, graph, 1.03)
        assert refit and loop.since == 2 * n  # only runs from the drift on are trusted
        # the profiles the next compile sees are the hot runs', which are right again
        hot = _report(third, 1.03)
        for k, r in zip(third.kernels, hot.kernels, strict=True):
            features = k.spec.kind.features(DRAM_TEST, k.spec.params)
            assert loop.model().predict(features) == r.cycles
            assert db.measured(features, DDR3) < r.cycles  # the median with the cold runs
        fourth, refit = _step(loop, graph, 1.03)
        report = _report(fourth, 1.03)
        assert not refit
        assert all(abs(k.predicted_cycles - r.cycles) <= 1
                   for k, r in zip(fourth.kernels, report.kernels, strict=True)
                   if k.priced_by == "measured")


def test_a_refit_callable_rebuilds_the_model_from_the_database(tmp_path):
    graph = import_onnx(EXAMPLES / "qdq_mlp_residual.onnx")
    seen = []

    def refit(rows):
        seen.append(len(rows))
        return AnalyticalModel(DDR3)

    with ProfileDB(tmp_path / "p.db") as db:
        loop = OnlineLoop(db, DDR3, AnalyticalModel(DDR3),
                          DriftMonitor(threshold=0.01, window=2), refit=refit)
        # the model is 7% off: its own monitor calls for a refit from the database's rows
        compiled, refit_made = _step(loop, graph, 1.0, bias=1.07)
        assert refit_made and seen == [len(compiled.kernels)]
        assert db.summary()["model_errors"]


def test_stale_profiles_refit_the_model_from_the_runs_since_the_drift(tmp_path):
    graph = import_onnx(EXAMPLES / "qdq_mlp_residual.onnx")
    seen = []

    def refit(rows):
        seen.append(sorted({r.cycles for r in rows}))
        return AnalyticalModel(DDR3)

    with ProfileDB(tmp_path / "p.db") as db:
        loop = OnlineLoop(db, DDR3, AnalyticalModel(DDR3),
                          DriftMonitor(threshold=0.01, window=2), refit=refit)
        first, _ = _step(loop, graph, 1.0)
        _step(loop, graph, 1.0)
        assert not seen
        third, refit_made = _step(loop, graph, 1.03)  # the board turns hot
        assert refit_made and len(seen) == 1
        # the model is rebuilt from the hot runs only: the cold ones describe gone hardware
        assert seen[0] == sorted({r.cycles for r in _report(third, 1.03).kernels})
