"""A compile's independent tasks on several workers (:mod:`fusion.compiler.scheduler`,
:mod:`fusion.compiler.parallel_pricing`, :mod:`fusion.compiler.builds`): the same plan as
one process, byte for byte, on forked local workers and on a Dask cluster; only the
analytical model prices elsewhere; a stage too small to fork for stays here; and the record
of where the time went, per stage and per task."""

import json
import os
import time

import pytest

from fusion.compiler.lower import chains
from fusion.compiler.parallel_pricing import alike, analytical_only
from fusion.compiler.plan import after_passes, compile_model
from fusion.compiler.scheduler import CompileTimes, Workers, close_clients, run_tasks
from fusion.cost.analytical import AnalyticalModel
from fusion.cost.tiered import TieredModel
from fusion.frontend.load import load_model
from fusion.kernels.cache import KernelCache
from hwgen.cli import main
from hwgen.config import VariantConfig

V4 = VariantConfig(rows=4, cols=4, epilogue=("bias", "requant", "relu", "clamp", "residual"))
CNN = "examples/qdq_cnn.onnx"
#: Two local processes, forking for every stage however small (this CNN's stages are).
FORKING = Workers(jobs=2, fork_above=0)


def _plan(workers: Workers) -> str:
    compiled = compile_model(load_model(CNN), V4, workers=workers)
    return json.dumps(compiled.to_dict(), sort_keys=True, default=str)


def test_two_local_workers_give_the_plan_one_process_gives():
    one = _plan(Workers(jobs=1))
    assert _plan(FORKING) == one
    assert _plan(Workers(jobs=2)) == one  # forking where the probe says it is worth it


def test_builds_on_forks_give_the_kernels_and_the_cache_counts_one_process_gives(tmp_path):
    def compiled(workers: Workers, root: str):
        return compile_model(load_model(CNN), V4, workers=workers,
                             cache=KernelCache(tmp_path / root))

    here, forked = compiled(Workers(jobs=1), "a"), compiled(FORKING, "b")
    assert forked.times.where["builds"] == "on 2 local processes"
    assert [k.compiled.program for k in forked.kernels] == \
        [k.compiled.program for k in here.kernels]
    assert forked.cache_stats == here.cache_stats
    assert here.cache_stats["misses"] == here.cache_stats["writes"] > 0
    # the forks' entries are on disk: a second compile reads them all
    again = compiled(FORKING, "b")
    assert again.cache_stats["disk_hits"] == here.cache_stats["misses"]
    assert again.cache_stats["misses"] == 0


@pytest.mark.slow  # starts a Dask cluster of worker processes
def test_a_dask_cluster_gives_the_plan_one_process_gives():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        workers = Workers(scheduler=cluster.scheduler_address)
        compiled = compile_model(load_model(CNN), V4, workers=workers)
        assert json.dumps(compiled.to_dict(), sort_keys=True, default=str) == \
            _plan(Workers(jobs=1))
        assert compiled.times.where["pricing"] == f"on {cluster.scheduler_address}"
        assert all(t.worker.split(":")[-1].isdigit() for t in compiled.times.tasks)
        close_clients()


def test_the_times_name_every_stage_and_every_chain():
    graph = load_model(CNN)
    compiled = compile_model(graph, V4, workers=FORKING)
    times = compiled.times
    assert list(times.stages) == ["passes", "pricing", "placement", "placed pricing", "builds"]
    assert all(s >= 0 for s in times.stages.values())
    found, _ = chains(after_passes(graph, V4))
    priced = [t for t in times.tasks if t.stage == "pricing"]
    # one task per group of alike chains, named by its first chain
    assert len(priced) == len(alike(compiled.graph, found))
    assert {t.name.split(" (+")[0] for t in priced} <= {c.name for c in found}
    assert times.where["pricing"] == "on 2 local processes"
    text = "\n".join(times.lines())
    assert text.startswith("compile time:") and "pricing" in text and "slowest:" in text
    assert json.loads(json.dumps(times.to_dict()))["stages"].keys() == times.stages.keys()


def test_alike_chains_are_one_task_and_every_chain_is_in_one():
    graph = after_passes(load_model("examples/real/mobilenet_v1_025_qdq.onnx"), V4)
    found, _ = chains(graph)
    groups = alike(graph, found)
    assert sorted(i for g in groups for i in g) == list(range(len(found)))
    assert len(groups) < len(found)  # MobileNet repeats its blocks
    for g in groups:
        ops = {tuple(n.op for n in found[i].nodes) for i in g}
        assert len(ops) == 1


def _square(x: int) -> int:
    if x < 0:
        raise ValueError(f"negative {x}")
    return x * x


def test_tasks_come_back_in_their_order_and_their_errors_propagate():
    times = CompileTimes()
    items = [3, 1, 4, 1, 5]
    out = run_tasks(_square, items, workers=FORKING, sizes=items, stage="t",
                    names=[str(i) for i in items], times=times)
    assert out == [9, 1, 16, 1, 25]
    assert [t.name for t in times.tasks] == ["3", "1", "4", "1", "5"]
    assert times.where["t"] == "on 2 local processes"
    with pytest.raises(ValueError, match="negative -2"):
        run_tasks(_square, [1, -2], workers=FORKING, sizes=[1, 1], stage="t",
                  names=["a", "b"])
    # local False keeps them here whatever the workers
    run_tasks(_square, [2, 3], workers=FORKING, sizes=[1, 1], stage="here",
              names=["a", "b"], times=times, local=False)
    assert times.where["here"] == "here"


_PARENT = os.getpid()


def _fails_in_a_fork(x: int) -> int:
    time.sleep(0.05)  # long enough that the fork, started meanwhile, takes some
    if os.getpid() != _PARENT:
        raise ValueError(f"failed in a fork on {x}")
    return x


def test_a_task_failing_in_a_fork_fails_the_stage():
    with pytest.raises(ValueError, match="failed in a fork"):
        run_tasks(_fails_in_a_fork, list(range(12)), workers=FORKING, sizes=[1] * 12,
                  stage="t", names=[str(i) for i in range(12)])


def test_a_stage_predicted_too_small_to_fork_for_stays_here():
    times = CompileTimes()
    items = list(range(40))
    assert run_tasks(_square, items, workers=Workers(jobs=2), sizes=[1] * 40, stage="tiny",
                     names=[str(i) for i in items], times=times) == [i * i for i in items]
    assert times.where["tiny"] == "here"
    # tasks of 20 ms each: the first predicts the rest at 0.78 s, worth forking for
    run_tasks(_sleeps, [0.02] * 40, workers=Workers(jobs=2), sizes=[1] * 40, stage="big",
              names=[str(i) for i in items], times=times)
    assert times.where["big"] == "on 2 local processes"


def _sleeps(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_only_the_analytical_model_prices_elsewhere():
    analytical = AnalyticalModel()
    assert analytical_only(analytical) and analytical_only(TieredModel(analytical, None))
    assert not analytical_only(TieredModel(analytical, lambda f: None))  # a measured tier


def test_compile_reports_its_times_and_refuses_an_unreachable_scheduler(tmp_path, capsys):
    variant = tmp_path / "v"
    assert main(["generate", "--rows", "4", "--cols", "4", "--epilogue",
                 "bias,requant,relu,clamp,residual", "-o", str(variant)]) == 0
    capsys.readouterr()
    assert main(["compile", CNN, "--variant", str(variant), "-o", str(tmp_path / "p"),
                 "--jobs", "2", "--json", "--cache", str(tmp_path / "kc")]) == 0
    times = json.loads(capsys.readouterr().out)["compile_times"]
    assert {"import", "passes", "pricing", "builds", "write"} <= set(times["stages"])
    # forked or not as the stage's first tasks predict the rest (tested above)
    assert times["where"]["pricing"] in ("here", "on 2 local processes") and times["tasks"]
    assert main(["compile", CNN, "--variant", str(variant), "-o", str(tmp_path / "p"),
                 "--explain", "--cache", str(tmp_path / "kc")]) == 0
    assert "compile time:" in capsys.readouterr().out
    assert main(["compile", CNN, "--variant", str(variant), "-o", str(tmp_path / "q"),
                 "--scheduler", "tcp://127.0.0.1:9", "--cache", str(tmp_path / "kc")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach the Dask scheduler" in err
    assert not (tmp_path / "q").exists()
