"""Conditional execution on data through the CLI: ``hwgen run`` of a dense MLP on an input whose
last rows are zero compiles its first GEMM as the zero-skipping program (it knows the input),
runs it exact against the exact reference with tiles skipped, and ``--without zero_skip``
keeps it dense; ``hwgen gemm --zero-tiles`` runs the program alone and refuses what it cannot
run."""

import json

import numpy as np
import onnx
import pytest

from hwgen.cli import main


@pytest.mark.slow
def test_a_zero_row_input_runs_its_first_gemm_zero_skipping_and_exact(dense_mlp, variant_dir,
                                                                      tmp_path, capsys):
    from examples.exact_reference import reference_session
    from examples.real_check import lsb_errors, output_scale

    x = np.random.default_rng(5).normal(0, 1, (8, 256)).astype(np.float32)
    x[2:] = 0  # 6 of 8 samples are padding: rows of zeros
    np.save(tmp_path / "x.npy", x)
    runs = {}
    for label, extra in (("skip", []), ("dense", ["--without", "zero_skip"])):
        assert main(["run", str(dense_mlp), "--variant", str(variant_dir), "--batch", "8",
                     "--input", str(tmp_path / "x.npy"), "--output",
                     str(tmp_path / f"y_{label}.npy"), "--json",
                     "--cache", str(tmp_path / "cache"), *extra]) == 0
        runs[label] = json.loads(capsys.readouterr().out)
    first = runs["skip"]["kernels"][0]
    assert "zero-skipping" in first["describe"]
    assert first["counters"]["tiles_skipped"] > 0
    assert first["cycles"] == first["predicted_cycles"]
    assert not any("zero-skipping" in k["describe"] for k in runs["dense"]["kernels"])
    assert first["cycles"] < runs["dense"]["kernels"][0]["cycles"]
    (want,) = reference_session(dense_mlp).run(["y"], {"x": x})
    scale = output_scale(onnx.load(str(dense_mlp)), "y")
    for label in runs:
        assert np.max(np.abs(lsb_errors(np.load(tmp_path / f"y_{label}.npy"), want,
                                        scale))) == 0, label


@pytest.mark.slow
def test_hwgen_gemm_zero_tiles_runs_the_program_and_checks_its_flags(variant_dir, capsys):
    assert main(["gemm", "--variant", str(variant_dir), "--m", "19", "--k", "40", "--n", "23",
                 "--zero-tiles", "0.5", "--epilogue", "bias,requant,relu", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["counter_violations"] == []


@pytest.mark.parametrize("args, message", [
    (["--zero-tiles", "0.5", "--prune", "0.5"], "--zero-tiles runs the zero-skipping program"),
    (["--zero-tiles", "0.5", "--epilogue", "requant"], "needs the bias stage"),
    (["--zero-tiles", "0.5", "--epilogue", "bias,requant,residual"], "residual"),
])
def test_hwgen_gemm_zero_tiles_refuses_what_it_cannot_run(variant_dir, capsys, args, message):
    assert main(["gemm", "--variant", str(variant_dir), "--m", "8", "--k", "16", "--n", "8",
                 *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
