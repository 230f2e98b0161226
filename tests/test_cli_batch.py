"""``--batch B``: one plan for B inferences; bad batches refused in one line, before any work."""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from examples.build_real_models import sample_input
from hwgen.cli import main
from tests.fusion.references import check_within_one_lsb, lsb_errors, output_scale, session
from tests.helpers.cli import one_error_line

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
AUTOENCODER = EXAMPLES / "real" / "fc_autoencoder_qdq.onnx"


@pytest.mark.parametrize("command", ["run", "compile"])
@pytest.mark.parametrize("value", ["0", "-3", "two"])
def test_a_batch_that_is_no_count_is_refused(variant_dir, tmp_path, capsys, command, value):
    argv = [command, str(AUTOENCODER), "--variant", str(variant_dir), f"--batch={value}"]
    with pytest.raises(SystemExit) as exc:
        main(argv + (["-o", str(tmp_path / "p")] if command == "compile" else []))
    assert exc.value.code == 2
    assert f"argument --batch: expected a whole number of at least 1, not '{value}'" in \
        one_error_line(capsys)


def test_a_model_without_a_batch_axis_is_refused(variant_dir, tmp_path, capsys):
    # qop_mlp's input is (8, 64): eight rows, not a batch of one
    assert main(["compile", str(EXAMPLES / "qop_mlp.onnx"), "--variant", str(variant_dir),
                 "--batch", "2", "-o", str(tmp_path / "p")]) == 2
    line = one_error_line(capsys)
    assert "graph input 'x' has shape (8, 64), which does not lead with a batch axis of 1" in line
    assert not (tmp_path / "p").exists()


def test_a_batch_the_memory_cannot_hold_is_refused_before_the_work(variant_dir, tmp_path,
                                                                    monkeypatch, capsys):
    monkeypatch.setenv("HWGEN_BUILD_DIR", str(tmp_path / "sim"))
    assert main(["run", str(AUTOENCODER), "--variant", str(variant_dir), "--batch", "5000",
                 "--cache", str(tmp_path / "cache")]) == 2
    line = one_error_line(capsys)
    assert "--batch 5000: the model needs at least" in line and "external memory" in line
    assert "3,200,000 elements" in line and "--mem-addr-bits" in line
    assert not (tmp_path / "sim").exists() and not (tmp_path / "cache").exists()


def test_an_input_file_with_another_batch_names_the_batch_to_give(variant_dir, tmp_path,
                                                                  monkeypatch, capsys):
    monkeypatch.setenv("HWGEN_BUILD_DIR", str(tmp_path / "sim"))
    np.save(tmp_path / "x.npy", np.zeros((3, 640), np.float32))
    assert main(["run", str(AUTOENCODER), "--variant", str(variant_dir), "--input",
                 str(tmp_path / "x.npy"), "--cache", str(tmp_path / "cache")]) == 2
    line = one_error_line(capsys)
    assert "has shape (3, 640), but input 'x' of the plan (batch 1) has shape (1, 640)" in line
    assert "run with --batch 3" in line
    assert not (tmp_path / "sim").exists()


def test_a_plan_records_its_batch(variant_dir, tmp_path, capsys):
    from fusion.compiler.plan_reader import read_plan
    from hwgen.gateware.folder import read_variant

    plan = tmp_path / "p"
    assert main(["compile", str(AUTOENCODER), "--variant", str(variant_dir), "--batch", "3",
                 "-o", str(plan), "--cache", str(tmp_path / "cache"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["batch"] == 3
    compiled = read_plan(plan, read_variant(variant_dir))
    assert compiled.batch == 3 and compiled.graph.tensors["x"].shape == (3, 640)
    # every kernel's M is the batch (one row of each input): the GEMMs', their weights
    # loaded as K x N, and the standalone pass's (the 640-channel output's per-channel
    # bias and requantize, too wide for the 4x4's epilogue scratchpad beside a GEMM's tiles)
    shapes = [k.spec.kind.key_params(k.spec.params)["shape"] for k in compiled.kernels]
    gemms = [s for s in shapes if len(s) == 3]
    assert gemms and all(s[0] == 3 for s in shapes)
    assert compiled.weight_bytes >= sum(k * n for _, k, n in gemms)
    # a compiled plan's batch is fixed
    assert main(["run", "--plan", str(plan), "--variant", str(variant_dir), "--batch", "2"]) == 2
    assert "--batch cannot change a compiled plan" in one_error_line(capsys)


@pytest.mark.slow
def test_run_at_batch_4_matches_onnxruntime_and_reports_throughput(variant_dir, tmp_path,
                                                                   capsys):
    xs = [sample_input("fc_autoencoder", seed) for seed in range(2001, 2005)]
    np.save(tmp_path / "x.npy", np.concatenate(xs))
    out = tmp_path / "y.npy"
    assert main(["run", str(AUTOENCODER), "--variant", str(variant_dir), "--batch", "4",
                 "--input", str(tmp_path / "x.npy"), "--output", str(out), "--json",
                 "--cache", str(tmp_path / "cache")]) == 0  # every kernel shadow-checked
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["batch"] == 4
    cycles = report["total_cycles"]
    assert report["inferences_per_mcycle"] == round(4e6 / cycles, 3)
    # the weights: ten layers of int8 K x N (each a multiple of the 4x4 array), loaded once
    assert report["weight_bytes"] == 2 * 640 * 128 + 6 * 128 * 128 + 2 * 128 * 8
    assert report["roofline_cycles"] == report["weight_bytes"] // 8  # 8-byte port
    assert 0 < report["roofline_fraction"] == round(report["roofline_cycles"] / cycles, 4) <= 1
    assert [k["macs"] for k in report["kernels"]][:2] == [4 * 640 * 128, 4 * 128 * 128]
    # the judge: onnxruntime on each input alone
    ort = session(AUTOENCODER)
    want = np.concatenate([ort.run(["y"], {"x": x})[0] for x in xs])
    got = np.load(out)
    assert got.shape == want.shape == (4, 640)
    check_within_one_lsb(lsb_errors(got, want, output_scale(onnx.load(str(AUTOENCODER)), "y")),
                         "hwgen run --batch 4 vs onnxruntime one by one",
                         integer=want.dtype.kind in "iu")
