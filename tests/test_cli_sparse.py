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
