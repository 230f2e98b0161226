"""Pricing a workload on a library (fusion.runtime.reconfig.manager.price): each (model,
variant) compile a task; on forks, the plans, predictions and refusals one process gives, and
the compiles' own stages stay on the process that runs them."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from fusion.compiler.plan import compile_model
from fusion.compiler.scheduler import CompileTimes, Workers
from fusion.frontend.load import load_model
from fusion.runtime.reconfig.library import open_library
from fusion.runtime.reconfig.manager import price
from fusion.runtime.reconfig.workload import read_workload
from hwgen.cli import main
from tests.helpers.fake_synthesis import FakeTools

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"
#: the second's memory (1 KiB words of 4 bytes) cannot hold the CNN: a refusal
SPECS = ("2x2:bias,requant,relu,clamp,residual", "4x4:bias,requant,relu",
         "2x2:bias,requant,relu,clamp,residual+port4+addr10")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A library of two variants (yosys and nextpnr faked) and a workload of two models."""
    root = tmp_path_factory.mktemp("price")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HWGEN_BUILD_DIR", str(root / "build"))
        FakeTools(mp)
        assert main(["variants", "build", "-o", str(root / "lib"), *SPECS, "--quiet"]) == 0
    (root / "w.json").write_text(json.dumps({"phases": [
        {"model": str(EXAMPLES / "qdq_cnn.onnx")},
        {"model": str(EXAMPLES / "qdq_mlp_residual.onnx")}]}))
    return root


def compile_for(graph, variant, fusion):
    return compile_model(graph, variant.config, fusion=fusion, platform=variant.platform,
                         workers=Workers(jobs=2, fork_above=0))


def _priced(made: Path, workers: Workers) -> tuple[dict, dict, dict, CompileTimes]:
    times = CompileTimes()
    _, compiled, predicted, refused = price(read_workload(made / "w.json"),
                                            open_library(made / "lib"), compile_for,
                                            workers=workers, times=times)
    plans = {(m, v): json.dumps(p.to_dict(), sort_keys=True, default=str)
             for m, by in compiled.items() for v, p in by.items()}
    wheres = {(m, v): p.times.where for m, by in compiled.items() for v, p in by.items()}
    return plans, predicted, refused, times, wheres


def test_library_compiles_on_forks_give_what_one_process_gives(made):
    plans, predicted, refused, times, wheres = _priced(made, Workers(jobs=1))
    assert len(plans) == 5 and times.where["library compiles"] == "here"
    assert "external memory" in refused["qdq_cnn"]["2x2_bias_requant_relu_clamp_residual_addr10"]
    # here, each compile's own stages forked (the compile's Workers say so)
    assert "on 2 local processes" in {w["pricing"] for w in wheres.values()}
    on_forks = _priced(made, Workers(jobs=2, fork_above=0))
    assert on_forks[:3] == (plans, predicted, refused)
    assert on_forks[3].where["library compiles"] == "on 2 local processes"
    assert len({t.worker for t in on_forks[3].tasks}) == 2
    # a compile that is itself a task on forks does not fork again
    assert all(w["pricing"] == "here" for w in on_forks[4].values())


def test_a_graph_pickles_to_an_equal_graph():
    graph = load_model(EXAMPLES / "qdq_mlp_residual.onnx")
    back = pickle.loads(pickle.dumps(graph))
    assert back == graph and back.name == graph.name
    assert all(not a.flags.writeable for a in back.initializers.values())
