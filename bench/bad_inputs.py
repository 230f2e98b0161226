"""The bad-input campaign: every command and artifact given something wrong, through the CLI.

``python -m bench.bad_inputs`` runs each case through ``hwgen.cli.main`` (in this process, its
output captured; in a child process where a process matters: a rebuild, a hang) and sorts the
outcome:

- ``clean``: exit status 2 and exactly one stderr line, ``hwgen: error: ...`` (matching the
  case's pattern, when it has one);
- ``healed``: a corrupt cache the tool rebuilds by itself, exit 0 (the right answer there);
- ``answered``: a valid input at the edge (a 20,000-node chain), exit 0 within the timeout
  (the right answer there);
- ``traceback``: an exception escaped;
- ``accepted``: exit 0 for a bad input (silently accepted);
- ``wrong``: anything else (status 1, several lines, the wrong message, a hang).

It prints a table and the two counts issue 9 asks for, tracebacks and silently accepted, and
exits 1 if either is not zero or any case is ``wrong``. ``--only SUBSTRING`` runs a subset.
The variant is one small folder (2x2) generated once; the few cases that need the simulator
use the shared Verilator build, except those that corrupt a build, which copy it to a private
``HWGEN_BUILD_DIR``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.bad_input_cases import Case, Workspace, cases
from bench.bad_input_probe import probe_cases
from bench.bad_input_stores import store_cases
from bench.bad_input_workloads import workload_cases


@dataclass
class Outcome:
    case: Case
    status: int | None
    kind: str
    line: str
    seconds: float


# -- running and sorting ---------------------------------------------------------------------

def classify(case: Case, status: int | None, stderr: str, raised: str) -> tuple[str, str]:
    lines = [line for line in stderr.splitlines() if line.strip()]
    if raised or "Traceback (most recent call last)" in stderr:
        return "traceback", (raised or stderr).strip().splitlines()[-1]
    first = lines[0] if lines else ""
    if status == 0:
        return ("healed" if case.heal else "answered" if case.answer else "accepted"), first
    if case.heal:  # a cache that does not heal itself leaves the user to delete it by hand
        return "wrong", f"status {status} (expected a rebuild): {first}"
    if status is None:
        return "wrong", "timed out"
    if status == 2 and len(lines) == 1 and first.startswith("hwgen: error:"):
        if case.match and not re.search(case.match, first):
            return "wrong", f"(expected /{case.match}/) {first}"
        return "clean", first
    return "wrong", f"status {status}, {len(lines)} lines: {first}"


def run_case(ws: Workspace, case: Case, folder: Path) -> Outcome:
    from hwgen.cli import main

    folder.mkdir(parents=True)
    began = time.perf_counter()
    argv = case.argv(ws, folder)
    if case.process:
        env = {**os.environ, **case.env}
        try:
            proc = subprocess.run([sys.executable, "-m", "hwgen.cli", *argv], env=env,
                                  capture_output=True, text=True, timeout=120, cwd=folder)
            status, stderr = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired:
            status, stderr = None, ""
        kind, line = classify(case, status, stderr, "")
        return Outcome(case, status, kind, line, time.perf_counter() - began)
    out, err, raised, status = io.StringIO(), io.StringIO(), "", None
    saved = {k: os.environ.get(k) for k in case.env}
    os.environ.update(case.env)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(argv)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - what escapes is the finding
        raised = traceback.format_exc()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    kind, line = classify(case, status, err.getvalue(), raised)
    return Outcome(case, status, kind, line, time.perf_counter() - began)


def campaign(only: str = "", select: Callable[[Case], bool] | None = None) -> list[Outcome]:
    """Run every case whose name contains ``only`` (and that ``select`` takes) in a scratch
    folder."""
    with tempfile.TemporaryDirectory(prefix="hwgen-bad-") as tmp:
        ws = Workspace(Path(tmp))
        return [run_case(ws, case, Path(tmp) / "cases" / f"{i:03d}")
                for i, case in enumerate(cases() + workload_cases() + store_cases() + probe_cases())
                if only in case.name and (select is None or select(case))]


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    only = args[1] if len(args) > 1 and args[0] == "--only" else ""
    began = time.perf_counter()
    outcomes = campaign(only)
    width = max(len(o.case.name) for o in outcomes)
    for o in outcomes:
        print(f"{o.case.name:<{width}}  {o.kind:<9}  {o.seconds:5.2f} s  {o.line[:150]}")
    counts = Counter(o.kind for o in outcomes)
    print(f"\n{len(outcomes)} cases in {time.perf_counter() - began:.0f} s: "
          + ", ".join(f"{counts[k]} {k}" for k in ("clean", "healed", "answered", "traceback",
                                                   "accepted", "wrong")))
    print(f"tracebacks: {counts['traceback']}; silently accepted: {counts['accepted']}")
    return 1 if counts["traceback"] or counts["accepted"] or counts["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
