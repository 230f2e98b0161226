"""``hwgen compile -o DIR``: the plan folder is replaced whole, and never written over a folder
that is not a plan."""

import json
from pathlib import Path

import pytest

from fusion.compiler.plan_reader import read_plan
from hwgen.cli import main
from hwgen.gateware.folder import read_variant

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _compile(model: str, variant_dir: Path, out: Path, tmp_path: Path) -> int:
    return main(["compile", str(EXAMPLES / model), "--variant", str(variant_dir), "-o",
                 str(out), "--cache", str(tmp_path / "cache"), "--json"])


def test_a_second_model_replaces_the_first_plan_whole(variant_dir, tmp_path, capsys):
    out = tmp_path / "plan"
    assert _compile("qdq_cnn.onnx", variant_dir, out, tmp_path) == 0
    assert _compile("qop_mlp.onnx", variant_dir, out, tmp_path) == 0
    capsys.readouterr()
    plan = json.loads((out / "plan.json").read_text())
    listed = {f for s in plan["steps"] if s["kind"] == "kernel"
              for f in (s["binary"], s["listing"])}
    on_disk = {p.relative_to(out).as_posix() for p in (out / "kernels").iterdir()}
    assert on_disk == listed  # the CNN's four kernels are gone
    compiled = read_plan(out, read_variant(str(variant_dir)), model=EXAMPLES / "qop_mlp.onnx")
    assert [k.name for k in compiled.kernels] == ["h_q/qmatmul", "y/qmatmul"]


def test_a_folder_that_is_not_a_plan_is_refused_and_left_alone(variant_dir, tmp_path, capsys):
    out = tmp_path / "work"
    out.mkdir()
    (out / "model.onnx").write_bytes(b"mine")
    assert _compile("qop_mlp.onnx", variant_dir, out, tmp_path) == 2
    err = capsys.readouterr().err
    assert err.startswith("hwgen: error:") and err.count("\n") == 1
    assert "not an hwgen plan" in err and "choose a new or empty folder for -o" in err
    assert [p.name for p in out.iterdir()] == ["model.onnx"]
    assert (out / "model.onnx").read_bytes() == b"mine"


def test_a_file_is_refused_as_the_plan_folder(variant_dir, tmp_path, capsys):
    out = tmp_path / "plan"
    out.write_text("x")
    assert _compile("qop_mlp.onnx", variant_dir, out, tmp_path) == 2
    err = capsys.readouterr().err
    assert err.startswith("hwgen: error:") and "is a file, not a plan folder" in err
    assert out.read_text() == "x"


def test_a_tampered_kernel_is_noticed(variant_dir, tmp_path, capsys):
    out = tmp_path / "plan"
    assert _compile("qop_mlp.onnx", variant_dir, out, tmp_path) == 0
    binary = sorted((out / "kernels").glob("*.bin"))[0]
    data = bytearray(binary.read_bytes())
    data[0] ^= 1
    binary.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=f"{binary} does not match its SHA-256"):
        read_plan(out, read_variant(str(variant_dir)))
