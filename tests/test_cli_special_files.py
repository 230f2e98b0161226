"""Files that are not regular files, and arrays that are not one array: every reader of a
user's file refuses a FIFO (which would block it forever), a device or a folder in one line
before it opens it, and ``--input`` refuses an ``.npz`` archive (issue 29's probe)."""

import contextlib
import errno
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from hwgen.cli import main
from tests.helpers.cli import one_error_line

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FIFO = "is a FIFO (named pipe), not a regular file"


@contextlib.contextmanager
def unblocked_after(path: Path, seconds: float = 5.0):
    """Make ``path`` a FIFO; if a reader still waits on it after ``seconds``, open it for
    writing and close it (the reader sees an empty file and goes on), and record that it had
    to: a test fails then, instead of hanging forever."""
    os.mkfifo(path)
    done, fired = threading.Event(), []

    def watchdog():
        end = time.monotonic() + seconds
        while not done.wait(0.05):
            if time.monotonic() < end:
                continue
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                fired.append(path)
            except OSError as exc:  # ENXIO: nobody reads it
                if exc.errno != errno.ENXIO:
                    raise

    thread = threading.Thread(target=watchdog, daemon=True)
    thread.start()
    try:
        yield fired
    finally:
        done.set()
        thread.join()


def _refused(capsys, argv, fifo, what=FIFO):
    capsys.readouterr()
    with unblocked_after(fifo) as fired:
        status = main([str(a) for a in argv])
    assert not fired, f"hwgen blocked on the FIFO {fifo}"
    assert status == 2
    line = one_error_line(capsys)
    assert what in line and str(fifo) in line
    return line


@pytest.fixture
def plan_dir(variant_dir, tmp_path, capsys):
    out = tmp_path / "plan"
    assert main(["compile", str(EXAMPLES / "qop_mlp.onnx"), "--variant", str(variant_dir),
                 "-o", str(out)]) == 0
    return out


def test_a_fifo_as_a_plans_plan_json(capsys, variant_dir, plan_dir):
    (plan_dir / "plan.json").unlink()
    _refused(capsys, ["run", "--plan", plan_dir, "--variant", variant_dir],
             plan_dir / "plan.json")


def test_a_fifo_as_a_plans_kernel_file(capsys, variant_dir, plan_dir):
    kernel = sorted((plan_dir / "kernels").glob("*.bin"))[0]
    kernel.unlink()
    _refused(capsys, ["run", "--plan", plan_dir, "--variant", variant_dir], kernel)


def test_a_fifo_as_the_model_of_a_plan(capsys, variant_dir, plan_dir, tmp_path):
    _refused(capsys, ["run", tmp_path / "m.onnx", "--plan", plan_dir, "--variant", variant_dir],
             tmp_path / "m.onnx")


def test_a_fifo_as_reports_input(capsys, tmp_path):
    _refused(capsys, ["report", tmp_path / "run.json", "-o", tmp_path / "r.html"],
             tmp_path / "run.json")
    assert not (tmp_path / "r.html").exists()


def test_a_fifo_as_an_input(capsys, variant_dir, tmp_path):
    _refused(capsys, ["run", EXAMPLES / "qop_mlp.onnx", "--variant", variant_dir,
                      "--input", tmp_path / "x.npy"], tmp_path / "x.npy")


def test_a_fifo_as_a_generate_config(capsys, tmp_path):
    _refused(capsys, ["generate", "--config", tmp_path / "c.json", "-o", tmp_path / "v"],
             tmp_path / "c.json")


def test_a_fifo_as_a_variants_descriptor(capsys, variant_dir, tmp_path):
    folder = tmp_path / "v"
    shutil.copytree(variant_dir, folder)
    (folder / "variant.json").unlink()
    _refused(capsys, ["gemm", "--variant", folder, "--m", "4", "--k", "8", "--n", "4"],
             folder / "variant.json")


def test_a_fifo_in_the_folder_generate_would_replace(capsys, variant_dir, tmp_path):
    folder = tmp_path / "v"
    shutil.copytree(variant_dir, folder)
    (folder / "variant.json").unlink()
    (folder / "notes.txt").write_text("mine")  # not only what generate writes
    _refused(capsys, ["generate", "--rows", "2", "--cols", "2", "--port-bytes", "4", "-o", folder],
             folder / "variant.json")
    assert (folder / "notes.txt").read_text() == "mine"


def test_a_fifo_as_trains_rows(capsys, tmp_path):
    _refused(capsys, ["train", tmp_path / "rows.jsonl", "-o", tmp_path / "m"],
             tmp_path / "rows.jsonl")


def test_a_fifo_as_a_cost_models_model_json(capsys, variant_dir, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "rows.jsonl").write_text("")
    _refused(capsys, ["compile", EXAMPLES / "qop_mlp.onnx", "--variant", variant_dir,
                      "--cost-model", model, "-o", tmp_path / "p"], model / "model.json")


def test_a_fifo_as_a_model(capsys, tmp_path):
    _refused(capsys, ["inspect", tmp_path / "m.onnx"], tmp_path / "m.onnx")


def test_a_fifo_as_a_workload(capsys, tmp_path):
    _refused(capsys, ["run", "--variants", tmp_path, "--workload", tmp_path / "w.json"],
             tmp_path / "w.json")


def test_a_folder_as_reports_input_names_it(capsys, tmp_path):
    assert main(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 2
    assert f"{tmp_path} is a folder, not a regular file" in one_error_line(capsys)


@pytest.mark.parametrize("arrays", [{"x": np.zeros((8, 64), np.float32)},
                                    {"a": np.zeros(3), "b": np.ones(2)}])
def test_an_npz_input_is_refused_in_one_line(capsys, variant_dir, tmp_path, arrays):
    path = tmp_path / "x.npz"
    np.savez(path, **arrays)
    capsys.readouterr()
    assert main(["run", str(EXAMPLES / "qop_mlp.onnx"), "--variant", str(variant_dir),
                 "--input", str(path)]) == 2
    line = one_error_line(capsys)
    assert f"--input {path} is an .npz archive (of {', '.join(arrays)}), not one array" in line
    assert "np.save" in line


def test_a_fifo_as_compiles_profiles(capsys, variant_dir, tmp_path):
    _refused(capsys, ["compile", EXAMPLES / "qop_mlp.onnx", "--variant", variant_dir,
                      "--profiles", tmp_path / "p.db", "-o", tmp_path / "plan"],
             tmp_path / "p.db")


def test_a_fifo_as_calibrates_candidates_of(capsys, variant_dir, tmp_path):
    _refused(capsys, ["calibrate", "--variant", variant_dir, "--candidates-of",
                      tmp_path / "m.onnx", "--db", tmp_path / "p.db"], tmp_path / "m.onnx")
    assert not (tmp_path / "p.db").exists()
