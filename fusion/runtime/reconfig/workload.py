"""A workload file: the models a board runs, in phases, each repeated.

::

    {"phases": [{"model": "resnet8.onnx", "input": "x.npy", "repeat": 3},
                {"model": "ds_cnn.onnx", "input": {"input_1": "kws.npy"}, "repeat": 2}]}

Paths are relative to the file. ``input`` is one ``.npy`` file for a model with one input, or
an object naming each input's file; left out, the inputs are random (from the run's seed).
``repeat`` is 1 when left out. Reading the file checks everything it names exists before any
work begins, and refuses unknown keys: a misspelt ``repaet`` would otherwise run once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwgen.files import check_regular, read_text

#: The most model runs a workload may expand to (phases times repeats): each is a simulator
#: launch, so more is a typo, not a workload.
MAX_RUNS = 10_000
#: Largest workload file read (bytes).
MAX_FILE_BYTES = 1 << 20

_PHASE_KEYS = {"model", "input", "repeat"}


@dataclass(frozen=True)
class Phase:
    """One phase: ``model`` run ``repeat`` times on ``inputs`` (input name or ``""`` for a
    single-input model, to ``.npy`` path; empty for random inputs)."""

    model: Path
    inputs: tuple[tuple[str, Path], ...]
    repeat: int


@dataclass(frozen=True)
class Step:
    """One model run of the workload, in order."""

    phase: int
    repeat: int
    model: Path
    inputs: tuple[tuple[str, Path], ...]


@dataclass(frozen=True)
class Workload:
    """The phases of a workload file, and the file."""

    path: Path
    phases: tuple[Phase, ...]

    def steps(self) -> list[Step]:
        """Every model run, phase after phase, each phase's repeats back to back."""
        return [Step(i, r, p.model, p.inputs) for i, p in enumerate(self.phases)
                for r in range(p.repeat)]

    def models(self) -> list[Path]:
        """The distinct models, in the order they first run."""
        return list(dict.fromkeys(p.model for p in self.phases))


def _bad(path: Path, where: str, what: str) -> ValueError:
    return ValueError(f"workload {path}: {(where + what).strip()}; see 'hwgen run --help' for "
                      f"the format "
                      f"({{\"phases\": [{{\"model\": ..., \"input\": ..., \"repeat\": N}}]}})")


def _file(path: Path, base: Path, value: Any, where: str) -> Path:
    if not isinstance(value, str) or not value:
        raise _bad(path, where, f" must be a path (a string), not {value!r}")
    found = (base / value).resolve()
    check_regular(found, f"{path}: {where} names {value}, but")
    if not found.is_file():
        raise _bad(path, where, f" names {value}, but there is no file {found}")
    return found


def _phase(path: Path, base: Path, n: int, data: Any) -> Phase:
    where = f"phase {n}"
    if not isinstance(data, dict):
        raise _bad(path, where, f" must be an object, not {type(data).__name__}")
    unknown = sorted(set(data) - _PHASE_KEYS)
    if unknown:
        raise _bad(path, where, f" has unknown key(s) {', '.join(unknown)} (known: "
                                f"{', '.join(sorted(_PHASE_KEYS))})")
    if "model" not in data:
        raise _bad(path, where, " has no model")
    model = _file(path, base, data["model"], f"{where} model")
    repeat = data.get("repeat", 1)
    if not isinstance(repeat, int) or isinstance(repeat, bool) or not 1 <= repeat <= MAX_RUNS:
        raise _bad(path, where, f" repeat must be a whole number from 1 to {MAX_RUNS:,}, "
                                f"not {repeat!r}")
    given = data.get("input")
    if given is None:
        inputs: tuple[tuple[str, Path], ...] = ()
    elif isinstance(given, str):
        inputs = (("", _file(path, base, given, f"{where} input")),)
    elif isinstance(given, dict) and given:
        inputs = tuple((str(k), _file(path, base, v, f"{where} input {k!r}"))
                       for k, v in given.items())
    else:
        raise _bad(path, where, f" input must be a .npy path or an object of input name to "
                                f"path, not {given!r}")
    return Phase(model, inputs, repeat)


def read_workload(path: str | Path) -> Workload:
    """Read and check a workload file.

    Raises
    ------
    ValueError
        A file that is missing, too large, not JSON, not of the format, names a file that
        does not exist, or expands to more than :data:`MAX_RUNS` runs; one line naming it.
    """
    path = Path(path)
    check_regular(path, "workload")
    if not path.is_file():
        raise ValueError(f"no workload file {path}; write one as {{\"phases\": [{{\"model\": "
                         f"\"m.onnx\", \"input\": \"x.npy\", \"repeat\": 2}}]}}")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise _bad(path, "", f" is {path.stat().st_size:,} bytes; a workload file is at most "
                             f"{MAX_FILE_BYTES:,}")
    try:
        data = json.loads(read_text(path, "workload"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _bad(path, "", f" is not JSON ({exc})") from None
    if not isinstance(data, dict) or set(data) != {"phases"}:
        raise _bad(path, "", " must be an object with one key, phases")
    phases = data["phases"]
    if not isinstance(phases, list) or not phases:
        raise _bad(path, "phases", " must be a non-empty list")
    base = path.resolve().parent
    # the repeats are checked against the limit before anything is read or expanded
    total = sum(p.get("repeat", 1) for p in phases if isinstance(p, dict)
                and isinstance(p.get("repeat", 1), int))
    if total > MAX_RUNS:
        raise _bad(path, "", f" asks for {total:,} model runs; at most {MAX_RUNS:,}")
    return Workload(path, tuple(_phase(path, base, n, p) for n, p in enumerate(phases)))
