"""What ``hwgen run`` reports per kernel and in total: MACs, ideal cycles, utilization, host
time (issue 10, item 7). The figures are arithmetic on the graph and the counters, checked here
without the simulator; tests/test_cli_models.py runs them end to end."""

import pytest

from fusion.ir.synthetic import mlp
from fusion.runtime.run_report import HostRun, KernelRun, RunReport, kernel_macs


def test_a_kernels_macs_are_its_gemms_m_k_n():
    graph = mlp(layers=2, width=24, batch=5)
    gemms = [n.name for n in graph.nodes if n.op == "qmatmul"]
    assert len(gemms) == 2
    assert kernel_macs(graph, gemms[:1]) == 5 * 24 * 24
    assert kernel_macs(graph, [n.name for n in graph.nodes]) == 2 * 5 * 24 * 24
    # stages and layout ops carry no MACs
    assert kernel_macs(graph, [n.name for n in graph.nodes if n.op != "qmatmul"]) == 0


def _run(name, cycles, macs, ideal):
    return KernelRun(name, [name], cycles, float(cycles), {"cycles": cycles}, name, macs, ideal)


def test_totals_and_utilization():
    report = RunReport({}, [_run("a", 200, 6400, 100), _run("b", 50, 0, 0)], 0, 1.0,
                       [HostRun("q", "quantize", 64, 0.25), HostRun("r", "reshape", 64, 0.5)])
    assert report.kernels[0].utilization == pytest.approx(0.5)
    assert report.kernels[1].utilization == 0.0  # no GEMM: nothing to utilize
    assert (report.total_macs, report.ideal_cycles, report.total_cycles) == (6400, 100, 250)
    assert report.utilization == pytest.approx(100 / 250)
    assert report.host_seconds == pytest.approx(0.75)
    d = report.to_dict()
    assert d["host_steps"] == ["q", "r"] and d["host"][1] == {
        "name": "r", "op": "reshape", "elements": 64, "seconds": 0.5, "role": "layout",
        "reason": "", "predicted_seconds": 0.0}
    assert d["host_ops"] == 0  # layout steps are not host ops
    assert (d["macs"], d["ideal_cycles"], d["utilization"]) == (6400, 100, 0.4)


def test_the_bound_takes_each_kernels_larger_floor():
    """A compute-bound kernel (its MACs on every PE: 100 cycles) and a weight-bound one (a
    GEMV whose weights take 400 cycles to stream for 25 of MACs): no plan beats 500 cycles
    for these 125 ideal ones, where the weight roofline alone says 400."""
    kernels = [_run("conv", 200, 6400, 100), _run("fc", 450, 1600, 25)]
    kernels[0].bound_cycles, kernels[1].bound_cycles = 100, 400
    report = RunReport({}, kernels, 0, 1.0, roofline_cycles=400)
    assert report.utilization == pytest.approx(125 / 650)
    assert report.bound_utilization == pytest.approx(125 / 500)
    assert report.to_dict()["bound_utilization"] == 0.25
    assert report.to_dict()["kernels"][1]["bound_cycles"] == 400


def test_host_ops_count_the_compute_steps_only():
    report = RunReport({}, [], 0, 1.0, [
        HostRun("q", "quantize", 64, 0.25),
        HostRun("sm", "Softmax", 10, 0.001, "compute", "no accelerator kernel", 0.0002),
        HostRun("r", "reshape", 64, 0.5)])
    assert [h.name for h in report.host_ops] == ["sm"]
    d = report.to_dict()
    assert d["host_ops"] == 1
    assert d["host"][1]["role"] == "compute" and d["host"][1]["predicted_seconds"] == 0.0002
