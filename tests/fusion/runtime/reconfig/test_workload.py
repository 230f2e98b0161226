"""Workload files: the format, paths relative to the file, and one line for each mistake."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fusion.runtime.reconfig.workload import MAX_RUNS, read_workload

MODEL = Path(__file__).resolve().parents[4] / "examples" / "qdq_mlp_residual.onnx"


def write(tmp_path: Path, data, name: str = "w.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.fixture
def files(tmp_path):
    (tmp_path / "m.onnx").write_bytes(MODEL.read_bytes())
    np.save(tmp_path / "x.npy", np.zeros((1, 4), np.float32))
    return tmp_path


def test_phases_expand_to_steps_with_paths_relative_to_the_file(files):
    sub = files / "sub"
    sub.mkdir()
    path = write(sub, {"phases": [{"model": "../m.onnx", "input": "../x.npy", "repeat": 2},
                                  {"model": "../m.onnx", "input": {"x": "../x.npy"}},
                                  {"model": "../m.onnx"}]})
    w = read_workload(path)
    steps = w.steps()
    assert [(s.phase, s.repeat) for s in steps] == [(0, 0), (0, 1), (1, 0), (2, 0)]
    assert steps[0].model == files / "m.onnx"
    assert steps[0].inputs == (("", files / "x.npy"),)
    assert steps[2].inputs == (("x", files / "x.npy"),)
    assert steps[3].inputs == ()
    assert w.models() == [files / "m.onnx"]


@pytest.mark.parametrize("data, message", [
    ("{", "is not JSON"),
    ([], "must be an object with one key, phases"),
    ({"phases": []}, "phases must be a non-empty list"),
    ({"phases": [3]}, "phase 0 must be an object"),
    ({"phases": [{"input": "x.npy"}]}, "phase 0 has no model"),
    ({"phases": [{"model": "m.onnx", "repaet": 2}]}, "unknown key.*repaet"),
    ({"phases": [{"model": "nope.onnx"}]}, "names nope.onnx, but there is no file"),
    ({"phases": [{"model": "m.onnx", "input": "y.npy"}]}, "input names y.npy"),
    ({"phases": [{"model": "m.onnx", "input": 5}]}, "input must be a .npy path"),
    ({"phases": [{"model": "m.onnx", "repeat": 0}]}, "repeat must be a whole number"),
    ({"phases": [{"model": "m.onnx", "repeat": True}]}, "repeat must be a whole number"),
    ({"phases": [{"model": "m.onnx", "repeat": 6000}] * 2}, "asks for 12,000 model runs"),
])
def test_bad_workloads_refused_in_one_line(files, data, message):
    with pytest.raises(ValueError, match=message) as info:
        read_workload(write(files, data))
    assert "\n" not in str(info.value)


def test_missing_and_oversized_files(files):
    with pytest.raises(ValueError, match="no workload file"):
        read_workload(files / "absent.json")
    big = write(files, " " * (2 << 20) + "{}")
    with pytest.raises(ValueError, match="a workload file is at most"):
        read_workload(big)
    assert MAX_RUNS >= 1000
