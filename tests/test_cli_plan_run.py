"""``hwgen run --plan DIR --variant V``: a compiled plan runs without recompiling, and a plan
that does not check out is refused in one line with status 2.

These run once ``hwgen run`` has its ``--plan`` option (wired in ``hwgen/cli/run.py``);
before that they are skipped, naming why.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from bench.bad_input_probe import forge_source, forge_weights
from hwgen.cli import build_parser, main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run_has_plan_option() -> bool:
    try:
        args = build_parser().parse_args(["run", "--plan", "P", "--variant", "V"])
    except SystemExit:
        return False
    return getattr(args, "plan", None) == "P"


pytestmark = pytest.mark.skipif(not _run_has_plan_option(),
                                reason="hwgen run has no --plan option yet")


@pytest.fixture
def plan_dir(variant_dir, tmp_path, capsys):
    out = tmp_path / "plan"
    assert main(["compile", str(EXAMPLES / "qop_mlp.onnx"), "--variant", str(variant_dir),
                 "-o", str(out), "--cache", str(tmp_path / "cache")]) == 0
    capsys.readouterr()
    return out


@pytest.mark.slow
def test_run_from_a_plan_equals_run_from_the_model(variant_dir, plan_dir, tmp_path, capsys):
    model = str(EXAMPLES / "qop_mlp.onnx")
    assert main(["run", model, "--variant", str(variant_dir), "--json", "--output",
                 str(tmp_path / "a.npy"), "--cache", str(tmp_path / "cache")]) == 0
    want = json.loads(capsys.readouterr().out)
    assert main(["run", "--plan", str(plan_dir), "--variant", str(variant_dir), "--json",
                 "--output", str(tmp_path / "b.npy")]) == 0
    got = json.loads(capsys.readouterr().out)
    np.testing.assert_array_equal(np.load(tmp_path / "b.npy"), np.load(tmp_path / "a.npy"))
    assert got["total_cycles"] == want["total_cycles"] > 0
    assert [k["counters"] for k in got["kernels"]] == [k["counters"] for k in want["kernels"]]
    # a model given with the plan must be the one it was compiled from
    assert main(["run", model, "--plan", str(plan_dir), "--variant", str(variant_dir)]) == 0


def _refused(argv, capsys, *words):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("hwgen: error:") and err.count("\n") == 1
    for word in words:
        assert word in err


def test_a_tampered_plan_is_refused_before_it_runs(variant_dir, plan_dir, capsys):
    binary = sorted((plan_dir / "kernels").glob("*.bin"))[0]
    binary.write_bytes(bytes(len(binary.read_bytes())))
    _refused(["run", "--plan", str(plan_dir), "--variant", str(variant_dir)], capsys,
             str(binary), "SHA-256", "hwgen compile")


def test_a_plan_for_another_variant_is_refused(plan_dir, tmp_path, capsys):
    other = tmp_path / "v4x4b"
    assert main(["generate", "--rows", "4", "--cols", "4", "--epilogue", "bias,requant,relu",
                 "-o", str(other)]) == 0
    capsys.readouterr()
    _refused(["run", "--plan", str(plan_dir), "--variant", str(other)], capsys,
             "was compiled for variant")


def test_another_model_with_the_plan_is_refused(variant_dir, plan_dir, capsys):
    _refused(["run", str(EXAMPLES / "qdq_cnn.onnx"), "--plan", str(plan_dir), "--variant",
              str(variant_dir)], capsys, "is not the model")


def test_no_model_and_no_plan_is_refused(variant_dir, capsys):
    assert main(["run", "--variant", str(variant_dir)]) == 2
    assert capsys.readouterr().err.startswith("hwgen: error:")


def test_compile_options_with_a_plan_are_refused(variant_dir, plan_dir, capsys):
    # They would be silently ignored: the plan is already compiled.
    assert main(["run", "--plan", str(plan_dir), "--variant", str(variant_dir),
                 "--no-fusion", "--min-gain", "0.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hwgen: error: --no-fusion, --min-gain cannot change a compiled plan")
    assert "\n" not in err


def test_a_plan_with_other_weights_and_resealed_hashes_is_refused_with_its_model(
        variant_dir, plan_dir, capsys):
    # Every hash in the folder matches the edit (what a determined editor does), so only
    # deriving the graph from MODEL again tells that the plan does not compute the model.
    name = forge_weights(plan_dir)
    _refused(["run", str(EXAMPLES / "qop_mlp.onnx"), "--plan", str(plan_dir), "--variant",
              str(variant_dir)], capsys, "is not what hwgen compile makes of",
             f"initializer {name!r}", "hwgen compile")


def test_a_plan_claiming_another_models_hash_is_refused_with_that_model(variant_dir, plan_dir,
                                                                        capsys):
    other = EXAMPLES / "qdq_cnn.onnx"
    forge_source(plan_dir, other)
    _refused(["run", str(other), "--plan", str(plan_dir), "--variant", str(variant_dir)],
             capsys, "is not the model plan", "hwgen compile")


def test_run_help_says_what_the_plan_hashes_protect_against():
    help_text = " ".join(build_parser()._subparsers._group_actions[0].choices["run"]
                         .format_help().split())
    assert "accidents" in help_text and "not a deliberate edit" in help_text
