"""The reconfiguration manager on Verilator: a two-phase workload on two small variants, where
each phase is best on another variant. The manager swaps, every kernel is bit-exact, and the
swaps' cost is in the total. Synthesis is faked (tests/synth/test_flow.py runs the tools);
the simulations are real."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fusion.compiler.plan import compile_model
from fusion.frontend.load import load_model
from fusion.reference import executor
from fusion.runtime.reconfig.library import open_library
from fusion.runtime.reconfig.manager import run_workload
from fusion.runtime.reconfig.workload import read_workload
from hwgen.cli import main
from tests.helpers.fake_synthesis import FakeTools

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STAGES = "bias,requant,relu,clamp,residual"
#: The 4x4 of hwgen.presets.SIM_VARIANTS and the 4x4 window variant the window tests build:
#: their Verilator builds are shared. qdq_cnn is faster on the window variant (its pools run
#: on the window unit), qdq_mlp_residual on the plain one (an 8-byte port).
SPECS = (f"4x4:{STAGES}", f"4x4:{STAGES}+window")


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    root = tmp_path_factory.mktemp("reconfig")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HWGEN_BUILD_DIR", str(root / "synth"))  # the fake figures' cache only
        FakeTools(mp)
        assert main(["variants", "build", "-o", str(root / "lib"), *SPECS, "--quiet"]) == 0
    rng = np.random.default_rng(5)
    np.save(root / "cnn_x.npy", rng.standard_normal((2, 3, 12, 12)).astype(np.float32))
    (root / "w.json").write_text(json.dumps({"phases": [
        {"model": str(EXAMPLES / "qdq_cnn.onnx"), "input": "cnn_x.npy", "repeat": 2},
        {"model": str(EXAMPLES / "qdq_mlp_residual.onnx"), "repeat": 3}]}))
    return root


def compile_for(graph, variant, fusion):
    return compile_model(graph, variant.config, fusion=fusion, platform=variant.platform)


@pytest.mark.slow
def test_two_phases_swap_once_bit_exact_with_the_swap_in_the_total(library):
    variants = open_library(library / "lib")
    workload = read_workload(library / "w.json")
    online = run_workload(workload, variants, compile_for=compile_for, policy="online",
                          swap_cycles=50, shadow_inputs=1)
    data = online.to_dict()
    assert data["swaps"] >= 1 and data["swap_cycles"] == 50 * data["swaps"]
    assert data["total_cycles"] == data["kernel_cycles"] + data["swap_cycles"]
    assert data["kernel_cycles"] == sum(r["cycles"] for r in data["timeline"])
    ran = [r["variant"] for r in data["timeline"]]
    assert ran[0] != ran[-1]  # the phases ended on different variants
    # each run's output is the reference executor's on the same inputs, bit for bit, and the
    # same model gives the same output whichever variant ran it
    for record in online.timeline:
        if record.step.inputs:  # the phase with an input file (the other's are random)
            graph = load_model(record.step.model)
            ((_, path),) = record.step.inputs
            want = executor.run(graph, {graph.inputs[0]: np.load(path)})
            for name, value in want.items():
                assert np.array_equal(record.outputs[name], value)
    by_model: dict[str, list] = {}
    for record in online.timeline:
        by_model.setdefault(record.step.model.stem, []).append(record.outputs)
    for outs in by_model.values():
        for other in outs[1:]:
            assert all(np.array_equal(other[k], outs[0][k]) for k in outs[0])
    # the alternatives were measured: static totals and the optimum over measured cycles
    assert set(data["static_cycles"]) == {v.name for v in variants}
    best_static = min(c for c in data["static_cycles"].values() if c is not None)
    assert data["offline_optimal_cycles"] <= best_static
    assert data["offline_optimal_cycles"] <= data["total_cycles"]
    assert not data["repeat_mismatches"]
    # the offline plan, on the same predictions, swaps where the phases change
    offline = run_workload(workload, variants, compile_for=compile_for, policy="offline",
                           swap_cycles=50, shadow_inputs=0).to_dict()
    assert offline["swaps"] == 1
    assert offline["total_cycles"] <= data["total_cycles"]


@pytest.mark.slow
def test_json_of_the_command_is_the_report_format(library, tmp_path, capsys):
    assert main(["run", "--variants", str(library / "lib"), "--workload",
                 str(library / "w.json"), "--swap-cycles", "50", "--shadow-inputs", "0",
                 "--compare-unfused", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == "hwgen-workload-run" and data["ok"]
    assert all(v["reconfig_cycles"] == 50 for v in data["variants"].values())
    assert set(data["fusion"]) == {"qdq_cnn", "qdq_mlp_residual"}
    run = tmp_path / "run.json"
    run.write_text(json.dumps(data))
    assert main(["report", str(run), "-o", str(tmp_path / "report.html")]) == 0
    assert "5 of 5 plots drawn" in capsys.readouterr().out


@pytest.mark.slow
def test_every_run_is_checked_against_the_model_as_imported(library, capsys, monkeypatch):
    """As ``hwgen run`` does (tests/test_cli_whole_model.py): each run's whole-model
    deviation is in the text and the JSON, and a run beyond the bound stops the workload with
    status 1 naming the run and where the graphs part."""
    argv = ["run", "--variants", str(library / "lib"), "--workload", str(library / "w.json"),
            "--swap-cycles", "50", "--shadow-inputs", "0"]
    assert main(argv) == 0
    assert ("whole model: 5 of 5 runs checked against the imported graph's reference, each "
            "within its bound (largest deviation 0 LSB)") in capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    for record in json.loads(capsys.readouterr().out)["timeline"]:
        check = record["whole_model"]
        assert check["done"] and check["ok"] and check["outputs"][0]["max_lsb"] == 0
    # the product is not changed: the check judges a doctored copy of the compiled graph
    from fusion.runtime import whole_model
    from tests.helpers.doctored_graph import moved_bias_check

    monkeypatch.setattr(whole_model, "check_whole_model",
                        moved_bias_check(whole_model.check_whole_model))
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hwgen: run 1 (qdq_cnn.onnx on ")
    assert "whole-model check failed: y: max " in err[-1] and "first part at tensor" in err[-1]


def test_a_descriptor_that_does_not_cover_its_kernels_is_refused_before_any_run(library,
                                                                                tmp_path):
    """The window variant's descriptor, edited to leave out the window kind: pricing finds
    qdq_cnn's pools placed on the window unit and refuses the descriptor (no simulation)."""
    import shutil

    lib = tmp_path / "lib"
    shutil.copytree(library / "lib", lib)
    path = lib / "4x4_bias_requant_relu_clamp_residual_window" / "variant.json"
    data = json.loads(path.read_text())
    data["capabilities"]["kinds"].remove("window")
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="cannot run window kernels.*rebuild it"):
        run_workload(read_workload(library / "w.json"), open_library(lib),
                     compile_for=compile_for, swap_cycles=50)


def test_a_non_finite_input_is_refused_before_any_run(library, tmp_path):
    """As ``hwgen run`` refuses it (--saturate-nonfinite to saturate instead)."""
    x = np.zeros((2, 3, 12, 12), np.float32)
    x[0, 0, 0, 0] = np.nan
    np.save(tmp_path / "x.npy", x)
    w = tmp_path / "w.json"
    w.write_text(json.dumps({"phases": [{"model": str(EXAMPLES / "qdq_cnn.onnx"),
                                         "input": "x.npy"}]}))
    with pytest.raises(ValueError, match="non-finite"):
        run_workload(read_workload(w), open_library(library / "lib"), compile_for=compile_for,
                     swap_cycles=50)
