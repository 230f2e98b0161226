"""The bad-input campaign's cases for a workload on a variant library (``hwgen run --variants
--workload``) and for ``hwgen report``: each refused in one line before any simulation."""

from __future__ import annotations

import json
from pathlib import Path

from bench.bad_input_cases import Case, Workspace, write


def _workload(data: object) -> object:
    """``hwgen run --variants`` of a workload file holding ``data`` (a string is written as
    it is; ``MODEL`` stands for a real model) on a folder that is no library (the file is
    read first)."""
    def argv(ws: Workspace, d: Path) -> list[str]:
        text = data if isinstance(data, str) else json.dumps(data)
        text = text.replace("MODEL", str(ws.onnx))
        return ["run", "--variants", str(d), "--workload", write(d / "w.json", text)]
    return argv


def _report(data: str | None, out: str = "r.html") -> object:
    def argv(ws: Workspace, d: Path) -> list[str]:
        run = str(d / "run.json") if data is None else write(d / "run.json", data)
        return ["report", run, "-o", str(d / out)]
    return argv


def workload_cases() -> list[Case]:
    """The cases (names start with ``workload`` or ``report``)."""
    model = {"model": "MODEL"}
    return [
        Case("workload not JSON", _workload("{"), "is not JSON"),
        Case("workload without phases", _workload({"steps": []}), "one key, phases"),
        Case("workload unknown key", _workload({"phases": [{**model, "repaet": 2}]}),
             "unknown key"),
        Case("workload missing model", _workload({"phases": [{"model": "m.onnx"}]}),
             "names m.onnx, but there is no file"),
        Case("workload repeat 0", _workload({"phases": [{**model, "repeat": 0}]}),
             "repeat must be a whole number"),
        Case("workload too many runs", _workload({"phases": [{**model, "repeat": 9000}] * 2}),
             "model runs"),
        Case("workload on a folder that is no library", lambda ws, d: [
            "run", "--variants", str(d), "--workload", write(d / "w.json", json.dumps(
                {"phases": [{"model": str(ws.onnx)}]}))], "not a variant library"),
        Case("workload negative --swap-cycles", lambda ws, d: [
            "run", "--variants", str(d), "--workload", str(d / "w.json"), "--swap-cycles",
            "-5"], "whole number of cycles"),
        Case("report missing file", _report(None), "no file"),
        Case("report not JSON", _report("{"), "JSON"),
        Case("report of another format", _report(json.dumps({"format": "x"})), "format"),
        Case("report failed run", _report(json.dumps({"ok": False, "kernel": "k"})), ""),
        Case("report into a folder", _report(json.dumps({"format": "x"}), out="."), ""),
    ]
