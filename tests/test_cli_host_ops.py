"""``hwgen compile`` and ``hwgen run`` with ops only the host runs: listed in the plan, the
explanation and the run report (``host_ops``), and refused by ``--no-host-fallback``."""

import json

import numpy as np
import onnx
import pytest

from hwgen.cli import main
from tests.fusion.compiler.host_op_models import mlp_sigmoid_softmax, sample
from tests.fusion.frontend.qlinear_pool_cases import exact_run


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "mlp_sigmoid_softmax.onnx"
    onnx.save(mlp_sigmoid_softmax(), path)
    return path


def test_compile_lists_the_host_ops(model, variant_dir, tmp_path, capsys):
    assert main(["compile", str(model), "--variant", str(variant_dir), "-o",
                 str(tmp_path / "p"), "--explain", "--cache", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert "host op sig (QLinearSigmoid): no accelerator kernel; predicted" in out
    assert "host op softmax (Softmax, left to the host by design: " in out
    assert "2 kernels, 2 host ops, 2 layout host steps, 0 repacks between kernels;" in out
    plan = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert plan["host_ops"] == 2


def test_compile_explain_shows_the_engines_choice(variant_dir, tmp_path, capsys):
    """qdq_cnn's int8 maxpool: both engines can run it; the accelerator is cheaper."""
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "examples" / "qdq_cnn.onnx"
    assert main(["compile", str(example), "--variant", str(variant_dir), "-o",
                 str(tmp_path / "p"), "--explain", "--cache", str(tmp_path / "cache")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines()
                if "engine for" in x and "maxpool" in x)
    assert "maxpool: accelerator" in line and "cycles, host" in line
    assert line.endswith(": accelerator")


@pytest.mark.parametrize("command", ["compile", "run"])
def test_no_host_fallback_refuses_naming_each_op(command, model, variant_dir, tmp_path,
                                                 capsys):
    extra = ["-o", str(tmp_path / "p")] if command == "compile" else []
    assert main([command, str(model), "--variant", str(variant_dir), "--no-host-fallback",
                 "--cache", str(tmp_path / "cache"), *extra]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("hwgen: error: 1 op(s) have no accelerator kernel and "
                             "--no-host-fallback keeps them off the host")
    assert err[1].startswith("  node 'sig' (QLinearSigmoid: ")
    assert len(err) == 2  # the Softmax is on the host by design, not as a fallback


def test_run_of_a_plan_with_host_ops_refuses_no_host_fallback(model, variant_dir, tmp_path,
                                                               capsys):
    assert main(["compile", str(model), "--variant", str(variant_dir), "-o",
                 str(tmp_path / "p"), "--cache", str(tmp_path / "cache")]) == 0
    capsys.readouterr()
    assert main(["run", "--plan", str(tmp_path / "p"), "--variant", str(variant_dir),
                 "--no-host-fallback"]) == 2
    assert "node 'sig' (QLinearSigmoid" in capsys.readouterr().err


@pytest.mark.slow
def test_run_reports_each_host_op_and_matches_the_exact_reference(model, variant_dir, tmp_path,
                                                          capsys):
    x = sample()
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "y.npy"
    assert main(["run", str(model), "--variant", str(variant_dir), "--json", "--input",
                 str(tmp_path / "x.npy"), "--output", str(out),
                 "--cache", str(tmp_path / "cache")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["host_ops"] == 2
    ops = {h["name"]: h for h in report["host"] if h["role"] == "compute"}
    assert sorted(ops) == ["sig", "softmax"]
    assert ops["sig"]["elements"] == 4 * 16 and ops["softmax"]["elements"] == 4 * 10
    assert all(h["seconds"] > 0 and h["predicted_seconds"] > 0 for h in ops.values())
    assert len(report["kernels"]) == 2
    want = exact_run(mlp_sigmoid_softmax(), {"x": x})
    got = np.load(out)
    bound = np.float32(np.exp(0.04) - 1)  # one LSB of the int8 logits
    assert np.all(np.abs(got - want) <= bound * np.maximum(got, want) + 1e-6)
    # the text report names them too
    assert main(["run", str(model), "--variant", str(variant_dir), "--input",
                 str(tmp_path / "x.npy"), "--cache", str(tmp_path / "cache")]) == 0
    text = capsys.readouterr().out
    assert "host op sig (QLinearSigmoid, no accelerator kernel): 64 elements in" in text
    assert "2 host ops in" in text
