"""``hwgen compile`` and ``hwgen run``: the plan folder, JSON keys, outputs and errors."""

import json
from pathlib import Path

import numpy as np
import pytest

from hwgen.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ALL = "bias,requant,relu,clamp,residual"


def test_compile_writes_plan_listings_and_binaries(variant_dir, tmp_path, capsys):
    plan_dir = tmp_path / "plan"
    assert main(["compile", str(EXAMPLES / "qdq_cnn.onnx"), "--variant", str(variant_dir),
                 "-o", str(plan_dir), "--cache", str(tmp_path / "cache"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    plan = json.loads((plan_dir / "plan.json").read_text())
    assert printed["signature"] == plan["signature"]
    kernels = [s for s in plan["steps"] if s["kind"] == "kernel"]
    assert [k["ops"][0] for k in kernels] == ["conv1/qconv2d/qmatmul", "pool/maxpool",
                                              "conv2/qconv2d/qmatmul", "fc/qmatmul"]
    for k in kernels:
        words = (plan_dir / k["binary"]).read_bytes()
        assert len(words) == 8 * k["program_words"]
        assert "halt" in (plan_dir / k["listing"]).read_text()
        assert k["predicted_cycles"] > 0 and k["placement"]
    assert plan["peak_memory_bytes"] <= plan["memory"]["unshared_bytes"]
    assert {s["op"] for s in plan["steps"] if s["kind"] == "host"} >= {"quantize", "im2col",
                                                                       "dequantize"}


def test_compile_explain_shows_candidates_and_reasons(variant_dir, tmp_path, capsys):
    assert main(["compile", str(EXAMPLES / "qdq_mlp_residual.onnx"), "--variant",
                 str(variant_dir), "-o", str(tmp_path / "p"), "--explain",
                 "--cache", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert "qmatmul+bias_add+requant+relu" in out and "chosen" in out
    assert "lost: +" in out and "refused:" in out
    assert "kernel cache: 0 hits" in out


def test_no_fusion_plan_has_a_kernel_per_op(variant_dir, tmp_path, capsys):
    assert main(["compile", str(EXAMPLES / "qdq_mlp_residual.onnx"), "--variant",
                 str(variant_dir), "-o", str(tmp_path / "p"), "--no-fusion", "--json",
                 "--cache", str(tmp_path / "cache")]) == 0
    plan = json.loads(capsys.readouterr().out)
    kernels = [s for s in plan["steps"] if s["kind"] == "kernel"]
    assert len(kernels) == 9 and all(len(k["ops"]) == 1 for k in kernels)


@pytest.mark.parametrize(("argv", "message"), [
    (["compile", "nosuch.onnx", "--variant", "V", "-o", "x"], "no ONNX model at nosuch.onnx"),
    (["compile", "model.txt", "--variant", "V", "-o", "x"], "neither an ONNX model"),
    (["run", "M.onnx", "--variant", "/nonexistent"], "no variant descriptor"),
    (["run", "M.onnx", "--variant", "V", "--input", "nosuch=x.npy"],
     "--input nosuch: the model's inputs are"),
])
def test_user_errors_are_one_line_with_status_2(argv, message, variant_dir, capsys):
    argv = [str(variant_dir) if a == "V" else str(EXAMPLES / "qop_mlp.onnx") if a == "M.onnx"
            else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("hwgen: error:") and message in err


def test_a_misnamed_output_is_refused_before_the_simulator_runs(variant_dir, tmp_path,
                                                               monkeypatch, capsys):
    monkeypatch.setenv("HWGEN_BUILD_DIR", str(tmp_path / "sim"))
    assert main(["run", str(EXAMPLES / "qop_mlp.onnx"), "--variant", str(variant_dir),
                 "--output", f"nosuch={tmp_path / 'y.npy'}",
                 "--cache", str(tmp_path / "cache")]) == 2
    assert "--output nosuch: the model's outputs are y" in capsys.readouterr().err
    assert not (tmp_path / "sim").exists()  # nothing was built or run


def test_a_model_that_does_not_fit_says_what_is_too_big(tmp_path, capsys):
    small = tmp_path / "small"
    assert main(["generate", "--rows", "4", "--cols", "4", "--epilogue", ALL,
                 "--mem-addr-bits", "8", "-o", str(small)]) == 0
    capsys.readouterr()
    assert main(["compile", str(EXAMPLES / "qdq_cnn.onnx"), "--variant", str(small),
                 "-o", str(tmp_path / "p"), "--cache", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert "bytes of external memory" in err and "--mem-addr-bits" in err


@pytest.mark.slow
def test_run_json_has_the_promised_keys_and_writes_the_output(variant_dir, tmp_path, capsys):
    out = tmp_path / "y.npy"
    assert main(["run", str(EXAMPLES / "qdq_mlp_residual.onnx"), "--variant", str(variant_dir),
                 "--json", "--output", str(out), "--cache", str(tmp_path / "cache")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    assert report["total_cycles"] == sum(k["cycles"] for k in report["kernels"])
    assert report["peak_memory_bytes"] > 0
    for k in report["kernels"]:
        assert set(k) >= {"name", "ops", "cycles", "predicted_cycles", "macs", "ideal_cycles",
                          "utilization"}
    # two 8x32x32 GEMMs (the MLP's matmuls): MACs, and the ideal on the variant's array
    assert [k["macs"] for k in report["kernels"] if k["macs"]] == [8 * 32 * 32] * 2
    assert report["macs"] == 2 * 8 * 32 * 32
    assert report["ideal_cycles"] == sum(k["ideal_cycles"] for k in report["kernels"])
    assert 0 < report["utilization"] == round(report["ideal_cycles"] / report["total_cycles"], 4)
    assert {h["op"] for h in report["host"]} >= {"Reshape", "quantize"}
    assert report["host_seconds"] == pytest.approx(sum(h["seconds"] for h in report["host"]),
                                                   abs=1e-5)
    y = np.load(out)
    assert y.dtype == np.float32 and y.shape == (8, 32)  # dequantized, as the ONNX output


@pytest.mark.slow
def test_run_takes_an_input_file(variant_dir, tmp_path, capsys):
    x = np.random.default_rng(5).normal(0, 1, (8, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "y.npy"
    assert main(["run", str(EXAMPLES / "qop_mlp.onnx"), "--variant", str(variant_dir),
                 "--input", str(tmp_path / "x.npy"), "--output", f"y={out}",
                 "--cache", str(tmp_path / "cache")]) == 0
    assert "bit-exact" in capsys.readouterr().out
    from fusion.frontend.load import load_model
    from fusion.reference import executor

    want = executor.run(load_model(EXAMPLES / "qop_mlp.onnx"), {"x": x})["y"]
    np.testing.assert_array_equal(np.load(out), want)


@pytest.mark.slow
def test_run_profile_data_reports_every_tensor_of_every_kernel(variant_dir, tmp_path, capsys):
    assert main(["run", str(EXAMPLES / "qdq_mlp_residual.onnx"), "--variant", str(variant_dir),
                 "--json", "--profile-data", "--cache", str(tmp_path / "cache")]) == 0
    report = json.loads(capsys.readouterr().out)
    profiles = report["data_profiles"]
    assert len({p["tensor"] for p in profiles}) == len(profiles)
    assert sum(p["role"] == "weight" for p in profiles) == 2  # the MLP's two weights
    for p in profiles:
        assert sum(p["histogram"]) == int(np.prod(p["shape"]))
        assert 0 <= p["zero_tiles"] <= 1 and 0 <= p["zero_share"] <= 1


def test_run_profile_data_is_for_one_model(variant_dir, tmp_path, capsys):
    assert main(["run", "--variants", str(tmp_path), "--workload", str(tmp_path / "w.json"),
                 "--profile-data"]) == 2
    assert "--profile-data profiles one model's run" in capsys.readouterr().err


@pytest.mark.slow
def test_run_profile_data_with_db_stores_the_profiles_for_hwgen_profile(variant_dir, tmp_path,
                                                                        capsys):
    """Two inputs and one of them again: two runs' profiles, stored with the model and the
    variant; hwgen profile shows them."""
    db = tmp_path / "p.db"
    for run_seed in (0, 1, 0):
        assert main(["run", str(EXAMPLES / "qdq_mlp_residual.onnx"), "--variant",
                     str(variant_dir), "--profile-data", "--db", str(db), "--seed",
                     str(run_seed), "--cache", str(tmp_path / "cache")]) == 0
    capsys.readouterr()
    assert main(["profile", str(db), "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["data_profiles"]
    assert entry["model"] == "qdq_mlp_residual" and entry["runs"] == 2
    assert entry["weight_zero_share"] is not None and entry["activation_zero_share"] > 0
    assert main(["profile", str(db)]) == 0
    assert "data profiles (mean share of zeros / of all-zero tiles)" in capsys.readouterr().out
