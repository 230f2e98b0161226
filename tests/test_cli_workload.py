"""``hwgen run --variants DIR --workload FILE``: the refusals, one line and exit 2, before any
work."""

from __future__ import annotations

import json

import pytest

from hwgen.cli import main


@pytest.fixture
def workload(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"phases": [{"model": "absent.onnx"}]}))
    return path


@pytest.mark.parametrize("argv, message", [
    (["--variants", "LIB"], "give both --variants DIR and --workload FILE"),
    (["--workload", "W"], "give both --variants DIR and --workload FILE"),
    (["--variants", "LIB", "--workload", "W", "--variant", "v"],
     "--variant cannot go with --variants"),
    (["m.onnx", "--variants", "LIB", "--workload", "W"], "MODEL cannot go with --variants"),
    (["--variants", "LIB", "--workload", "W"], "names absent.onnx, but there is no file"),
    (["m.onnx"], "give --variant DIR"),
    (["m.onnx", "--variant", "v", "--policy", "offline"], "--policy is for a workload"),
    (["m.onnx", "--variant", "v", "--swap-cycles", "5"], "--swap-cycles is for a workload"),
    (["--variants", "LIB", "--workload", "W", "--swap-cycles", "-1"],
     "expected a whole number of cycles"),
    # a full ECP5-85F bitstream at 100 MHz is a number of cycles like any other
    (["--variants", "LIB", "--workload", "W", "--swap-cycles", "25169973"],
     "names absent.onnx, but there is no file"),
])
def test_refusals(argv, message, workload, tmp_path, capsys):
    argv = [str(workload) if a == "W" else str(tmp_path / "lib") if a == "LIB" else a
            for a in argv]
    try:
        status = main(["run", *argv])
    except SystemExit as exc:  # argparse's own refusals exit from the parser
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_a_folder_that_is_not_a_library(tmp_path, capsys):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    w = tmp_path / "w.json"
    w.write_text(json.dumps({"phases": [{"model": "m.onnx"}]}))
    assert main(["run", "--variants", str(tmp_path), "--workload", str(w)]) == 2
    err = capsys.readouterr().err
    assert "is not a variant library (no library.json)" in err and err.count("\n") == 1
