"""``hwgen run`` kept warm: a model compiled before reads its plan from the plan cache, a
kernel program that passed its directed shadow sets on this build is not put through them
again (``--rerun-shadow-sets`` does), the sets spread over simulator processes give what one
process gives, and a damaged cached plan is compiled again."""

import json
from pathlib import Path

import pytest

from hwgen.cli import main

pytestmark = pytest.mark.slow

MODEL = str(Path(__file__).parent.parent / "examples" / "qdq_mlp_residual.onnx")


def _run(variant_dir, cache, capsys, *extra):
    assert main(["run", MODEL, "--variant", str(variant_dir), "--cache", str(cache), "--json",
                 *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_warm_run_reads_its_plan_and_skips_passed_directed_sets(variant_dir, tmp_path,
                                                                   capsys):
    cache = tmp_path / "cache"
    first = _run(variant_dir, cache, capsys, "--jobs", "2")
    kernels = len(first["kernels"])
    assert first["shadow_sets"] == {"run": 2 * kernels, "cached": 0}
    (plan,) = (cache / "plans").iterdir()
    second = _run(variant_dir, cache, capsys, "--jobs", "2")
    assert second["shadow_sets"] == {"run": 0, "cached": 2 * kernels}
    assert second["total_cycles"] == first["total_cycles"]
    assert [k["cycles"] for k in second["kernels"]] == [k["cycles"] for k in first["kernels"]]
    again = _run(variant_dir, cache, capsys, "--rerun-shadow-sets", "--jobs", "1")
    assert again["shadow_sets"] == {"run": 2 * kernels, "cached": 0}
    assert again["sim_processes"] == 1 and first["sim_processes"] == 2
    assert again["total_cycles"] == first["total_cycles"]
    (plan / "plan.json").write_text("{damaged")
    healed = _run(variant_dir, cache, capsys)
    assert healed["total_cycles"] == first["total_cycles"]
    assert json.loads((plan / "plan.json").read_text())["format"]
