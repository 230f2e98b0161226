"""Planning a calibration sweep (:func:`sim.sweep.plan_tasks`) on the sweep's workers: the
compiles of the models and random networks it draws from run as tasks, and the tasks come
out the same as planned in one process. No simulator: ``--dry-run`` stops before any run."""

import json
from concurrent.futures import ProcessPoolExecutor

import pytest

from fusion.cost.profiles import ProfileDB
from hwgen.cli import main
from sim.sweep import plan_tasks


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("variant") / "v"
    assert main(["generate", "--rows", "4", "--cols", "4", "--port-bytes", "16",
                 "--mem-addr-bits", "21", "--epilogue", "bias,requant,relu,clamp,residual",
                 "-o", str(out)]) == 0
    return str(out)


def _plan(folder, executor=None, done=frozenset()):
    return plan_tasks([folder], 3, 5, set(done), ProfileDB.run_key, models=False, networks=1,
                      candidates_of=["examples/qdq_mlp_residual.onnx"], network_candidates=2,
                      executor=executor)


def test_planning_on_workers_gives_the_tasks_planning_here_gives(folder):
    here = _plan(folder)
    with ProcessPoolExecutor(max_workers=2) as pool:
        there = _plan(folder, pool)
    assert here == there
    tasks, skipped = here
    assert skipped == 0
    assert sum(len(t.gemms) for t in tasks) > 3  # the GEMMs, and every candidate drawn
    assert {t.network for t in tasks if not t.gemms} == {5 * 10_007}  # one network, 2 ways
    drawn = {g.workload for t in tasks for g in t.gemms}
    assert {"network 50035", "network 50036"} <= drawn  # both networks' candidates


def test_a_dry_run_plans_and_runs_nothing(folder, tmp_path, capsys):
    db = tmp_path / "p.db"
    capsys.readouterr()
    assert main(["calibrate", "--variant", folder, "--samples", "3", "--no-models",
                 "--network-candidates", "1", "--db", str(db), "--jobs", "2", "--dry-run",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dry_run"] and out["runs"] > 3 and out["skipped"] == 0
    assert out["planning_seconds"] > 0
    with ProfileDB(db) as profiles:
        assert profiles.rows() == []
