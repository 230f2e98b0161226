"""``hwgen train``: held-out metrics of three models from recorded rows, and one-line errors."""

import json
import sys
from pathlib import Path

import pytest

from fusion.cost.learned_store import load
from hwgen.cli import main

DATA = Path(__file__).resolve().parent / "data" / "calibration_small.jsonl"
METRICS = {"mape", "spearman", "regret_mean", "regret_max"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, dict]:
    """One ``hwgen train --json --seed 1`` the tests share: a train is about ten seconds of
    cross-validated fits. Tests that change the folder copy it first."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("trained") / "model"
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        assert main(["train", str(DATA), "-o", str(out), "--json", "--seed", "1"]) == 0
    return out, json.loads(text.getvalue())


def copy_of(model: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(model, to)
    return to


def test_json_report_has_the_three_models_and_the_model_is_written(trained):
    out, report = trained
    assert {"n_train", "n_test", "learned", "analytical", "scalesim"} <= set(report)
    assert report["n_train"] + report["n_test"] == 120 and report["n_test"] > 0
    for name in ("learned", "analytical", "scalesim"):
        assert METRICS <= set(report[name]), name
        assert all(isinstance(report[name][k], float) for k in METRICS), name
    assert report["scalesim"]["n"] == report["n_test"]  # every recorded kernel is a GEMM
    assert report["scalesim"]["mape"] > report["analytical"]["mape"]
    assert sorted(p.name for p in out.iterdir()) == ["heads.skops", "model.json", "rows.jsonl"]
    model = load(out)
    assert len(model.rows) == report["n_train"]
    held = set(report["test_workloads"])
    assert not {r.workload for r in model.rows} & held


def test_text_report_and_named_test_workloads(capsys, tmp_path):
    assert main(["train", str(DATA), "-o", str(tmp_path / "m"),
                 "--test-workloads", "gemm64x64x64,gemm33x64x17"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("trained on ")
    assert "held-out workload(s): gemm33x64x17, gemm64x64x64 (the ideal memory)" in out
    for name in ("learned", "analytical", "scalesim"):
        assert f"\n{name} " in out
    assert f"model written to {tmp_path / 'm'}" in out


def one_line_error(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hwgen: error: ")
    return err


def test_bad_inputs_are_one_line_errors(capsys, tmp_path, monkeypatch):
    out = str(tmp_path / "m")
    err = one_line_error(capsys, ["train", str(tmp_path / "none.jsonl"), "-o", out])
    assert "does not exist" in err
    (tmp_path / "empty.jsonl").write_text("")
    assert "holds no calibration rows" in one_line_error(
        capsys, ["train", str(tmp_path / "empty.jsonl"), "-o", out])
    lines = [line for line in DATA.read_text().splitlines()
             if '"workload": "gemm64x64x64"' in line or '"workload": "gemm8x8x256"' in line]
    (tmp_path / "two.jsonl").write_text("\n".join(lines) + "\n")
    assert "at least 3 workloads, not 2" in one_line_error(
        capsys, ["train", str(tmp_path / "two.jsonl"), "-o", out])
    assert "no rows of workload(s) nope" in one_line_error(
        capsys, ["train", str(DATA), "-o", out, "--test-workloads", "nope"])
    (tmp_path / "bad.jsonl").write_text("{}\n")
    assert "bad.jsonl:1: not a calibration row" in one_line_error(
        capsys, ["train", str(tmp_path / "bad.jsonl"), "-o", out])
    (tmp_path / "p.db").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "fusion.cost.profiles", None)  # the module is absent
    assert "cannot read profile databases" in one_line_error(
        capsys, ["train", str(tmp_path / "p.db"), "-o", out])
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("argv", [["train"], ["train", str(DATA)]])
def test_missing_arguments_are_usage_errors(capsys, argv):
    assert one_line_error_exit(capsys, argv)


def one_line_error_exit(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return "hwgen: error:" in capsys.readouterr().err


def test_a_profile_database_trains_like_its_rows(capsys, tmp_path, trained):
    from fusion.cost.profiles import ProfileDB

    db = ProfileDB(tmp_path / "p.sqlite")
    assert db.import_jsonl(DATA) == 120
    db.close()
    assert main(["train", str(tmp_path / "p.sqlite"), "-o", str(tmp_path / "a"), "--json",
                 "--seed", "1"]) == 0
    from_db = json.loads(capsys.readouterr().out)
    from_jsonl = trained[1]
    assert from_db["n_train"] == from_jsonl["n_train"] == 90  # 2 of the 10 workloads held out
    assert from_db["test_workloads"] == from_jsonl["test_workloads"]
    assert from_db["learned"]["mape"] == pytest.approx(from_jsonl["learned"]["mape"])


def test_the_engine_prices_with_the_trained_model_on_a_memory_it_was_trained_on(capsys,
                                                                             tmp_path,
                                                                             trained):
    """``--cost-model``: the learned model prices the candidates (``--explain`` says so);
    a folder on a memory the model has no rows of is refused in one line, not priced by the
    heads of another memory."""
    model = trained[0]
    ideal, ddr3 = tmp_path / "ideal", tmp_path / "ddr3"
    common = ["--rows", "4", "--cols", "4", "--port-bytes", "16", "--mem-addr-bits", "21"]
    assert main(["generate", *common, "-o", str(ideal)]) == 0
    assert main(["generate", *common, "--memory", "ddr3", "-o", str(ddr3)]) == 0
    mlp = Path(__file__).resolve().parents[1] / "examples" / "qdq_mlp_residual.onnx"
    capsys.readouterr()
    assert main(["compile", str(mlp), "--variant", str(ideal), "--cost-model", str(model),
                 "-o", str(tmp_path / "plan"), "--explain"]) == 0
    captured = capsys.readouterr()
    assert "(learned)" in captured.out + captured.err
    err = one_line_error(capsys, ["compile", str(mlp), "--variant", str(ddr3), "--cost-model",
                                  str(model), "-o", str(tmp_path / "plan2")])
    assert "trained on the ideal memory, not ddr3" in err


@pytest.mark.parametrize("files", [
    {"model.json": "my notes\n"},
    {"rows.jsonl": "my rows\n"},
    {"model.json": json.dumps({"format": "something else"}), "rows.jsonl": ""},
    {"notes.txt": "mine\n"},
    {"variant.json": "{}", "hwgen_accel.v": "module m; endmodule\n", "isa.md": "# isa\n"},
])
def test_train_refuses_a_folder_that_is_no_model_and_keeps_it(capsys, tmp_path, files):
    out = tmp_path / "mine"
    out.mkdir()
    for name, text in files.items():
        (out / name).write_text(text)
    err = one_line_error(capsys, ["train", str(DATA), "-o", str(out)])
    assert f"{out} is not empty and is not a learned model folder" in err
    assert "choose a new or empty folder for -o" in err
    assert {p.name: p.read_text() for p in out.iterdir()} == files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_train_refuses_a_file_as_its_folder(capsys, tmp_path):
    (tmp_path / "f").write_text("mine")
    assert "is a file, not a folder" in one_line_error(
        capsys, ["train", str(DATA), "-o", str(tmp_path / "f")])
    assert (tmp_path / "f").read_text() == "mine"


def test_train_replaces_a_model_folder_whole(capsys, tmp_path, trained):
    out = copy_of(trained[0], tmp_path / "m")
    (out / "heads.skops").unlink()  # a model folder without its cache of the fit
    assert main(["train", str(DATA), "-o", str(out), "--seed", "2"]) == 0
    assert json.loads((out / "model.json").read_text())["seed"] == 2
    assert sorted(p.name for p in out.iterdir()) == ["heads.skops", "model.json", "rows.jsonl"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no temporary folder left
    load(out)


KILL_DURING_SAVE = """
import os, signal, sys
import skops.io
from fusion.cost.learned_store import load, save
new = load(sys.argv[1])
def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)  # a kill while the heads are written
skops.io.dump = killed
save(new, sys.argv[2])
"""


def test_a_kill_while_train_replaces_a_model_leaves_the_old_one_usable(capsys, tmp_path,
                                                                        trained):
    import subprocess

    old, new = tmp_path / "old", copy_of(trained[0], tmp_path / "new")
    assert main(["train", str(DATA), "-o", str(old), "--seed", "2",
                 "--test-workloads", "gemm64x64x64"]) == 0
    before = {p.name: p.read_bytes() for p in old.iterdir()}
    proc = subprocess.run([sys.executable, "-c", KILL_DURING_SAVE, str(new), str(old)],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True)
    assert proc.returncode == -9, proc.stderr
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before
    load(old)
    # the next train removes what the killed one left
    assert main(["train", str(DATA), "-o", str(old), "--seed", "3"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "old"]
