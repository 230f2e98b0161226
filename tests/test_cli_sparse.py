"""A block-pruned model through ``hwgen compile`` and ``hwgen run``: its GEMMs run the
block-sparse program (and, ``--without sparse_weights``, the dense one), its plan reads back,
and its output matches the exact reference."""

import json

import numpy as np
import onnx
import pytest

from examples.build_pruned_models import mlp, pruned, sample
from examples.build_real_models import quantize
from hwgen.cli import main


@pytest.fixture(scope="module")
def pruned_mlp(tmp_path_factory):
    """The 256-256-256-64 MLP with 75% of its 8x8 weight blocks pruned, quantized by
    onnxruntime (QDQ, per channel)."""
    path = tmp_path_factory.mktemp("pruned") / "mlp_p75.onnx"
    quantize("mlp", pruned(mlp(), 0.75), "qdq", path, sample=lambda seed: sample("mlp", seed))
    return path


def _kernels(plan):
    return [s for s in plan["steps"] if s["kind"] == "kernel"]


def test_pruned_gemms_compile_block_sparse_unless_told_not_to(pruned_mlp, variant_dir,
                                                               tmp_path, capsys):
    assert main(["compile", str(pruned_mlp), "--variant", str(variant_dir), "-o",
                 str(tmp_path / "p"), "--json", "--cache", str(tmp_path / "cache")]) == 0
    plan = json.loads(capsys.readouterr().out)
    kernels = _kernels(plan)
    assert len(kernels) == 3 and all("block-sparse" in k["describe"] for k in kernels)
    assert all("sparse_blocks" in k["params"] for k in kernels)
    assert main(["compile", str(pruned_mlp), "--variant", str(variant_dir), "-o",
                 str(tmp_path / "d"), "--json", "--without", "sparse_weights",
                 "--cache", str(tmp_path / "cache")]) == 0
    dense = json.loads(capsys.readouterr().out)
    assert dense["options"]["sparse_weights"] is False
    assert not any("block-sparse" in k["describe"] for k in _kernels(dense))
    assert plan["predicted_cycles"] < 0.5 * dense["predicted_cycles"]


@pytest.mark.slow
def test_a_pruned_plan_runs_and_matches_the_exact_reference(pruned_mlp, variant_dir, tmp_path,
                                                            capsys):
    from examples.exact_reference import reference_session
    from examples.real_check import lsb_errors, output_scale

    assert main(["compile", str(pruned_mlp), "--variant", str(variant_dir), "-o",
                 str(tmp_path / "p"), "--cache", str(tmp_path / "cache")]) == 0
    x = sample("mlp", 77)
    np.save(tmp_path / "x.npy", x)
    capsys.readouterr()
    assert main(["run", "--plan", str(tmp_path / "p"), "--variant", str(variant_dir),
                 "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy"),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    (want,) = reference_session(pruned_mlp).run(["y"], {"x": x})
    errors = lsb_errors(np.load(tmp_path / "y.npy"), want,
                        output_scale(onnx.load(str(pruned_mlp)), "y"))
    assert np.max(np.abs(errors)) == 0


@pytest.mark.slow
def test_a_workload_replans_at_each_change_of_its_inputs_and_not_within(dense_mlp, variant_dir,
                                                                        tmp_path, capsys):
    """Dense, 24-of-32-rows-zero and dense phases at batch 32: one re-plan into each phase
    after the first (a saving, then live samples the small plan cannot hold), none within a
    phase; the total is below the first plan kept throughout; every output is checked against
    the model as imported on the full batch; hwgen report shows the re-plans."""
    x = np.random.default_rng(5).normal(0, 1, (32, 256)).astype(np.float32)
    np.save(tmp_path / "dense.npy", x)
    z = x.copy()
    z[8:] = 0
    z[3, :] = 0  # padding need not be at the end
    z[30] = x[30]  # 8 live samples: the plan holds no padded one, so the padding's output is
    np.save(tmp_path / "zero.npy", z)  # measured once, in the first zero-row run
    phases = [("dense.npy", 2), ("zero.npy", 3), ("dense.npy", 2)]
    (tmp_path / "w.json").write_text(json.dumps({"phases": [
        {"model": str(dense_mlp), "input": f, "repeat": n} for f, n in phases]}))
    assert main(["run", "--variant", str(variant_dir), "--workload", str(tmp_path / "w.json"),
                 "--batch", "32", "--json", "--cache", str(tmp_path / "cache")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(r["run"], r["reason"]) for r in report["replans"]] == [(2, "saving"),
                                                                   (5, "live samples")]
    runs = report["timeline"]
    assert [r["live_samples"] for r in runs] == [32, 32, 8, 8, 8, 32, 32]
    assert all(r["whole_model"]["ok"] for r in runs)
    assert {r["plan_samples"] for r in runs[2:5]} == {8} == {report["replans"][0][
        "samples_after"]}
    assert [bool(r["pad_cycles"]) for r in runs] == [False, False, True] + [False] * 4
    assert report["total_cycles"] < report["static_plan_cycles"]
    assert runs[3]["cycles"] < 0.4 * runs[0]["cycles"]
    (tmp_path / "run.json").write_text(json.dumps(report))
    assert main(["report", str(tmp_path / "run.json"), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "re-plan: 8 samples" in page and "first plan kept throughout" in page


@pytest.mark.parametrize("argv, message", [
    (["run", "M.onnx", "--variant", "V", "--replan-threshold", "0.2"],
     "--replan-threshold is for a workload on one variant"),
    (["run", "--variant", "V", "--workload", "W", "--replan-threshold", "2"],
     "expected a number from 0 to 1"),
])
def test_replan_options_refused_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) if "2" in argv[-1:] else _nothing():
        code = main(argv)
        assert code == 2
    assert message in capsys.readouterr().err


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
