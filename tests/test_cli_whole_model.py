"""``hwgen run``'s whole-model check: the output's deviation from the imported graph's
reference in the text and ``--json``, what is said without MODEL, and exit status 1 naming the
first tensor where the graphs part (:mod:`fusion.runtime.whole_model`)."""

import json
from pathlib import Path

import pytest

from fusion.runtime import whole_model
from hwgen.cli import main
from tests.helpers.doctored_graph import moved_bias_check

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CNN = str(EXAMPLES / "qdq_cnn.onnx")


@pytest.mark.slow
def test_run_reports_the_whole_model_deviation(variant_dir, capsys):
    assert main(["run", CNN, "--variant", str(variant_dir), "--shadow-inputs", "0"]) == 0
    out = capsys.readouterr().out
    assert ("whole model against the imported graph's reference: y: max 0 LSB, 100.00% exact "
            "(dequantized; bound <= 1 LSB") in out
    assert main(["run", CNN, "--variant", str(variant_dir), "--shadow-inputs", "0",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    check = report["whole_model"]
    assert check["done"] and check["ok"] and check["parted_at"] is None
    (y,) = check["outputs"]
    assert (y["name"], y["kind"], y["max_lsb"], y["share_exact"]) == ("y", "dequantized", 0, 1)


@pytest.mark.slow
def test_a_plan_without_model_says_the_check_is_not_done(variant_dir, tmp_path, capsys,
                                                         monkeypatch):
    plan = tmp_path / "plan"
    assert main(["compile", CNN, "--variant", str(variant_dir), "-o", str(plan)]) == 0
    capsys.readouterr()
    assert main(["run", "--plan", str(plan), "--variant", str(variant_dir),
                 "--shadow-inputs", "0"]) == 0
    assert "whole model: not checked: no MODEL given" in capsys.readouterr().out
    monkeypatch.setenv("HWGEN_KERNEL_CACHE", str(tmp_path / "kc"))  # --plan takes no --cache
    assert main(["run", CNN, "--plan", str(plan), "--variant", str(variant_dir),
                 "--shadow-inputs", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["whole_model"]["done"] is True
    # MODEL imported once, through the import cache beside the kernel cache
    assert len(list((tmp_path / "kc" / "imports").glob("*.json"))) == 1


@pytest.mark.slow
def test_a_compiled_graph_that_means_something_else_exits_1(variant_dir, capsys, monkeypatch):
    # the product is not changed: the check judges a doctored copy of the compiled graph
    monkeypatch.setattr(whole_model, "check_whole_model",
                        moved_bias_check(whole_model.check_whole_model))
    assert main(["run", CNN, "--variant", str(variant_dir), "--shadow-inputs", "0"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hwgen: whole-model check failed: y: max ")
    assert "first part at tensor 'c1_q'" in err[0]
    assert main(["run", CNN, "--variant", str(variant_dir), "--shadow-inputs", "0",
                 "--json"]) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["ok"] is False and report["whole_model"]["parted_at"] == "c1_q"


@pytest.mark.slow
def test_host_float_ops_run_as_the_reference_means(variant_dir, tmp_path, capsys):
    # The batch norm (float Mul, Add) and the 3x3 pool whose border windows count 4 or 6 (exact
    # halves) run on the host: in float64 there, as in the reference, so the run is exact
    from onnx import save

    from tests.fusion.passes.test_bn_pool_concat import bn_pool_concat

    model = tmp_path / "bn_pool_concat.onnx"
    save(bn_pool_concat(0), str(model))
    assert main(["run", str(model), "--variant", str(variant_dir), "--shadow-inputs", "0",
                 "--json"]) == 0
    (y,) = json.loads(capsys.readouterr().out)["whole_model"]["outputs"]
    assert (y["max_lsb"], y["share_exact"]) == (0, 1)
