"""``hwgen calibrate`` on Verilator: a sweep over two platforms' variant folders into a
profile database, on a process pool and on a Dask ``LocalCluster``; an interrupted (or
repeated) sweep resumes without running anything twice."""

import collections
import json
from pathlib import Path

import pytest

from fusion.cost.profiles import ProfileDB
from hwgen.cli import main

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FOLDER = ["--rows", "4", "--cols", "4", "--port-bytes", "16", "--mem-addr-bits", "21",
          "--epilogue", "bias,requant,relu,clamp,residual"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("variants")
    ideal, ddr3 = root / "ideal", root / "ddr3"
    assert main(["generate", *FOLDER, "-o", str(ideal)]) == 0
    assert main(["generate", *FOLDER, "--memory", "ddr3", "-o", str(ddr3)]) == 0
    return str(ideal), str(ddr3)


def _calibrate(capsys, *args) -> dict:
    capsys.readouterr()
    code = main(["calibrate", *args, "--quiet", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out.splitlines()[-1])


def test_a_sweep_on_a_pool_resumes_without_running_anything_twice(folders, tmp_path, capsys):
    db = tmp_path / "profiles.db"
    args = ["--variant", folders[0], "--variant", folders[1], "--samples", "6",
            "--no-models", "--seed", "3", "--db", str(db)]
    first = _calibrate(capsys, *args, "--jobs", "2")
    assert first["runs"] == first["added"] == 12 and first["skipped"] == 0
    with ProfileDB(db) as profiles:
        rows = profiles.rows()
    assert len(rows) == 12 and all(r.ok for r in rows)
    assert {r.platform.memory for r in rows} == {"ideal", "ddr3"}
    again = _calibrate(capsys, *args)
    assert again["runs"] == 0 and again["skipped"] == 12 and again["tasks"] == 0
    # a larger sweep runs only what is new (the first draws are the same)
    more = _calibrate(capsys, *[a if a != "6" else "8" for a in args])
    assert more["skipped"] == 12 and more["added"] == 4


def test_a_sweep_on_a_dask_local_cluster(folders, tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        result = _calibrate(capsys, "--variant", folders[0], "--samples", "4", "--no-models",
                            "--db", str(tmp_path / "dask.db"), "--scheduler",
                            cluster.scheduler_address)
    assert result["runs"] == result["added"] == 4


def test_the_example_models_kernels_are_swept_with_their_kinds(folders, tmp_path, capsys):
    db = tmp_path / "models.db"
    result = _calibrate(capsys, "--variant", folders[0], "--samples", "0", "--db", str(db))
    with ProfileDB(db) as profiles:
        rows = profiles.rows()
    assert result["added"] == len(rows) > 8
    kinds = {r.features.kind for r in rows}
    assert {"gemm", "pass"} <= kinds and len(kinds) >= 3, kinds
    assert all(r.workload.startswith("model ") for r in rows)


def test_random_networks_and_every_candidate_of_a_models_gemms_are_swept(folders, tmp_path,
                                                                         capsys):
    db = tmp_path / "more.db"
    model = EXAMPLES / "qdq_mlp_residual.onnx"
    result = _calibrate(capsys, "--variant", folders[1], "--samples", "0", "--no-models",
                        "--networks", "1", "--candidates-of", str(model), "--db", str(db),
                        "--network-candidates", "1", "--jobs", "2")
    with ProfileDB(db) as profiles:
        rows = profiles.rows()
    assert result["mismatched"] == 0 and result["failed"] == [] and all(r.ok for r in rows)
    assert {r.platform.memory for r in rows} == {"ddr3"}
    network = [r for r in rows if r.workload == "network 0"]
    assert {r.features.kind for r in network} >= {"gemm", "pass"}
    # the network's GEMMs' candidates too, alone and placed, as the network's workload:
    # more than the network's own kernels, and none of them run twice
    network_gemms = [r for r in network if r.features.kind == "gemm"]
    assert len({r.features.tiling for r in network_gemms}) > 2
    assert any(r.features.placement is not None and "kernel" not in r.extra
               for r in network_gemms)
    assert len({(r.features, r.extra["seed"]) for r in network}) == len(network)
    # the model's GEMMs, each with the candidates the engine prices: tilings, loop orders,
    # fused and unfused
    candidates = [r for r in rows if r.workload == "model qdq_mlp_residual"]
    per_problem = collections.Counter(r.features.problem for r in candidates)
    assert len(per_problem) >= 2 and min(per_problem.values()) >= 3
    assert {r.features.fused for r in candidates} == {True, False}
    # each tiling of the fused kernel the model runs also where its memory plan puts it
    placed = [r for r in candidates if r.features.placement is not None]
    alone = {(r.features.problem, r.features.tiling) for r in candidates
             if r.features.placement is None and r.features.fused}
    assert placed and all(r.features.fused for r in placed)
    assert {(r.features.problem, r.features.tiling) for r in placed} <= alone
    assert all(dict(r.features.placement) == r.extra["placement"] for r in placed)
    assert len(rows) == len(network) + len(candidates)


def test_calibrate_refuses_a_model_that_is_not_there(folders, tmp_path, capsys):
    code = main(["calibrate", "--variant", folders[0], "--candidates-of",
                 str(tmp_path / "missing.onnx"), "--db", str(tmp_path / "x.db")])
    err = capsys.readouterr().err
    assert code == 2 and "missing.onnx: no such file" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x.db").exists()
